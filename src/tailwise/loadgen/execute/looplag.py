"""How late the client's event loop reads: a periodic kernel timer on the loop (receive lag).

Send lag is measured per request (``sent - scheduled``); receive lag cannot be,
because the moment a response reached the socket is not visible to the loop.
So the loop is probed: a timer with period :data:`PERIOD_NS` (a Linux
``timerfd`` on CLOCK_MONOTONIC, the clock of every record) becomes readable at
known instants, and the loop reads it like any socket. When the loop gets to
it, its first unread expiration was due at a known instant; the time since
then is how long a readable descriptor waited for the loop just then.

A response that became readable while the loop was busy was read no more than
that lateness plus one period after it arrived. The lateness is booked in every
:data:`BUCKET_NS` slice of run time the wait spanned, keeping the maximum per
slice (a preallocated array: one integer store per probe in the common case,
never per request), and a request read at ``t`` gets the maximum over the
slices around ``t`` plus one period as the bound on its receive lag
(:class:`tailwise.metrics.client.LagSeries`). The probe costs about 1,000
wake-ups a second: a few microseconds each while the loop is busy anyway (at
1,000 streams a 10 ms period changed the client's CPU per chunk by nothing
measurable), but a wake-up of an idle loop costs far more on a virtual machine
(about 40 us on the 2-core VM of docs/benchmarks.md, 4% of a core for an idle run).
So the probe pauses when it finds nothing in flight (``busy`` says so): with no request
waiting for an answer there is no receive to be late, and the engine calls
:meth:`LoopLag.resume` when its next request goes out.

Where there is no ``timerfd`` (not Linux), the loop's own timer is used: its
millisecond rounding makes each sample up to 1 ms larger, which only widens
the bound.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable

import numpy as np

from tailwise.clock import now_ns, open_periodic_timerfd, set_periodic_timerfd
from tailwise.metrics.client import LagSeries

PERIOD_NS = 1_000_000
BUCKET_NS = 5_000_000
INITIAL_SPAN_NS = 600_000_000_000  # the array grows by doubling past ten minutes


class LoopLag:
    """Samples the loop's lateness from ``start(t0_ns)`` until ``stop()``.

    ``span_ns`` sizes the array up front (the run's planned length); a longer
    run grows it by doubling, off the common path.
    """

    def __init__(self, span_ns: int) -> None:
        slices = min(span_ns, INITIAL_SPAN_NS) // BUCKET_NS + 64
        self.bucket_max_ns = np.zeros(max(slices, 256), dtype=np.int64)
        self.samples = 0
        self._t0 = 0
        self._first_due_ns = 0
        self._expired = 0  # expirations read so far
        self._fd = -1
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._busy: Callable[[], bool] | None = None
        self.paused = False  # found nothing in flight: no wake-ups until resume()
        self.pauses = 0

    def start(self, t0_ns: int, busy: Callable[[], bool] | None = None) -> None:
        """Probe from now on; lateness is booked by run time (``now - t0_ns``). With
        ``busy``, a probe that finds it false pauses until :meth:`resume`."""
        self._loop = asyncio.get_running_loop()
        self._t0 = t0_ns
        self._busy = busy
        self._first_due_ns = now_ns() + PERIOD_NS
        try:
            self._fd = open_periodic_timerfd(self._first_due_ns, PERIOD_NS)
        except OSError:
            self._handle = self._loop.call_later(PERIOD_NS / 1e9, self._on_timer)
            return
        self._loop.add_reader(self._fd, self._on_timerfd)

    def _on_timerfd(self) -> None:
        now = now_ns()
        try:
            n = int.from_bytes(os.read(self._fd, 8), sys.byteorder)
        except BlockingIOError:
            return
        # The oldest unread expiration is the one the loop kept waiting longest.
        due = self._first_due_ns + self._expired * PERIOD_NS
        self._expired += n
        self._book(due, now)
        if self._busy is not None and not self._busy():
            set_periodic_timerfd(self._fd, None, PERIOD_NS)
            self.paused = True
            self.pauses += 1

    def resume(self) -> None:
        """Probe again (a request went out), from one period from now."""
        if not self.paused:
            return
        self.paused = False
        self._first_due_ns = now_ns() + PERIOD_NS
        self._expired = 0
        if self._fd >= 0:
            set_periodic_timerfd(self._fd, self._first_due_ns, PERIOD_NS)
        elif self._loop is not None and self._handle is None:
            self._handle = self._loop.call_later(PERIOD_NS / 1e9, self._on_timer)

    def _on_timer(self) -> None:
        now = now_ns()
        self._book(self._first_due_ns, now)
        self._handle = None
        if self._busy is not None and not self._busy():
            self.paused = True
            self.pauses += 1
            return
        self._first_due_ns = now + PERIOD_NS
        assert self._loop is not None
        self._handle = self._loop.call_later(PERIOD_NS / 1e9, self._on_timer)

    def _book(self, due: int, now: int) -> None:
        """The loop was unavailable from ``due`` to ``now``: every slice of that span
        gets the lateness, so a read anywhere inside a long loop turn sees it."""
        late = now - due
        first, last = (due - self._t0) // BUCKET_NS, (now - self._t0) // BUCKET_NS
        if last < 0:
            return  # before the clock started
        self.samples += 1
        first = max(first, 0)
        arr = self.bucket_max_ns
        if last >= len(arr):
            grown = np.zeros(max(2 * len(arr), last + 1), np.int64)
            grown[: len(arr)] = arr
            arr = self.bucket_max_ns = grown
        if first == last:  # the common case: one store
            if late > arr[last]:
                arr[last] = late
        else:
            np.maximum(arr[first : last + 1], late, out=arr[first : last + 1])

    def stop(self) -> None:
        self.paused = False  # a resume() after the end does nothing
        self._busy = None
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
