"""How late the client's event loop reads: a periodic kernel timer on the loop (receive lag).

Send lag is measured per request (``sent - scheduled``); receive lag cannot be,
because the moment a response reached the socket is not visible to the loop.
So the loop is probed: a timer with period :data:`PERIOD_NS` (a Linux
``timerfd`` on CLOCK_MONOTONIC, the clock of every record) becomes readable at
known instants, and the loop reads it like any socket. When the loop gets to
it, its first unread expiration was due at a known instant; the time since
then is how long a readable descriptor waited for the loop just then.

A response that became readable while the loop was busy was read no more than
that lateness plus one period after it arrived. The maximum lateness seen in
each :data:`BUCKET_NS` slice of run time is kept (a preallocated array: one
integer store per probe, never per request), and a request read at ``t`` gets
the maximum over the slices around ``t`` plus one period as the bound on its
receive lag (:class:`tailwise.metrics.client.LagSeries`). The probe costs about
1,000 wake-ups a second, a few microseconds each.

Where there is no ``timerfd`` (not Linux), the loop's own timer is used: its
millisecond rounding makes each sample up to 1 ms larger, which only widens
the bound.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import sys

import numpy as np

from tailwise.clock import now_ns
from tailwise.metrics.client import LagSeries

PERIOD_NS = 1_000_000
BUCKET_NS = 5_000_000
_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class LoopLag:
    """Samples the loop's lateness from ``start(t0_ns)`` until ``stop()``.

    ``span_ns`` sizes the array up front (the run's planned length); a longer
    run grows it by doubling, off the common path.
    """

    def __init__(self, span_ns: int) -> None:
        self.bucket_max_ns = np.zeros(max(span_ns // BUCKET_NS + 64, 256), dtype=np.int64)
        self.samples = 0
        self._t0 = 0
        self._first_due_ns = 0
        self._expired = 0  # expirations read so far
        self._fd = -1
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, t0_ns: int) -> None:
        """Probe from now on; lateness is booked by run time (``now - t0_ns``)."""
        self._loop = asyncio.get_running_loop()
        self._t0 = t0_ns
        self._first_due_ns = now_ns() + PERIOD_NS
        if sys.platform.startswith("linux") and self._start_timerfd():
            return
        self._handle = self._loop.call_later(PERIOD_NS / 1e9, self._on_timer)

    def _start_timerfd(self) -> bool:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            fd = int(libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))
        except (OSError, AttributeError):
            return False
        if fd < 0:
            return False
        spec = _Itimerspec()
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(self._first_due_ns, 1_000_000_000)
        spec.it_interval.tv_sec, spec.it_interval.tv_nsec = divmod(PERIOD_NS, 1_000_000_000)
        if libc.timerfd_settime(fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            os.close(fd)
            return False
        self._fd = fd
        assert self._loop is not None
        self._loop.add_reader(fd, self._on_timerfd)
        return True

    def _on_timerfd(self) -> None:
        now = now_ns()
        try:
            n = int.from_bytes(os.read(self._fd, 8), sys.byteorder)
        except BlockingIOError:
            return
        # The oldest unread expiration is the one the loop kept waiting longest.
        due = self._first_due_ns + self._expired * PERIOD_NS
        self._expired += n
        self._book(now, now - due)

    def _on_timer(self) -> None:
        now = now_ns()
        due = self._first_due_ns
        self._book(now, now - due)
        self._first_due_ns = now + PERIOD_NS
        assert self._loop is not None
        self._handle = self._loop.call_later(PERIOD_NS / 1e9, self._on_timer)

    def _book(self, now: int, late_ns: int) -> None:
        self.samples += 1
        b = (now - self._t0) // BUCKET_NS
        if b < 0:
            return
        arr = self.bucket_max_ns
        if b >= len(arr):
            arr = self.bucket_max_ns = np.concatenate([arr, np.zeros(max(len(arr), b), np.int64)])
        if late_ns > arr[b]:
            arr[b] = late_ns

    def stop(self) -> None:
        if self._fd >= 0:
            if self._loop is not None:
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def series(self) -> LagSeries:
        """What was seen, for the summary (trailing empty slices trimmed)."""
        used = np.flatnonzero(self.bucket_max_ns)
        end = int(used[-1]) + 1 if len(used) else 0
        # Whole microseconds, rounded up (a bound stays a bound): what client.json keeps.
        kept = -(-self.bucket_max_ns[:end] // 1000) * 1000
        return LagSeries(BUCKET_NS, PERIOD_NS, kept, self.samples)
