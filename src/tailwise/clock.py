"""The engine's clock: monotonic integer nanoseconds, and precise wake-ups.

Event loops (asyncio's selector loop and uvloop/libuv alike) schedule timers in
whole milliseconds, so a request due at t can be sent up to ~1 ms late, which
is the same order as the send-lag bound a valid run must meet. On Linux,
:class:`TimerfdWaker` arms a ``timerfd`` at the absolute nanosecond instant and
registers it as a reader on the loop: epoll then wakes exactly when the kernel's
high-resolution timer fires, without spinning. Elsewhere :class:`SpinWaker`
sleeps on the loop's timer until ~1 ms before the instant and then yields to
the loop in a tight ``call_soon`` cycle (correct, but burns CPU near deadlines).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Protocol

now_ns = time.monotonic_ns

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1


class Waker(Protocol):
    """Calls ``callback`` once, soon after the monotonic instant ``at_ns``.

    ``clock_ns`` is the caller's latest clock reading (the pacer has just read the
    clock: one read fewer per request).
    """

    def arm(self, at_ns: int, clock_ns: int) -> None: ...
    def close(self) -> None: ...


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


# Below this, polling the loop (~0.7 us an iteration) is cheaper than arming a kernel timer.
SPIN_NS = 150_000


class TimerfdWaker:
    """Linux timerfd on CLOCK_MONOTONIC (the clock of ``time.monotonic_ns``).

    Arming a timerfd is a syscall that reprograms a kernel timer (several
    microseconds in a VM), so instants closer than :data:`SPIN_NS` are reached
    by re-queueing a ``call_soon`` poll instead: every loop iteration in between
    still processes I/O, and at high rates this is what keeps the cost per
    request low.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        libc = _libc()
        self._settime = libc.timerfd_settime
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._fd: int = fd
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._loop = loop
        self._callback = callback
        self._at_ns = 0
        self._polling = False
        loop.add_reader(fd, self._on_ready)

    def _on_ready(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # disarmed or re-armed between the wake-up and the read
            return
        self._callback()

    def _poll(self) -> None:
        if now_ns() >= self._at_ns:
            self._polling = False
            self._callback()
        else:
            self._loop.call_soon(self._poll)

    def arm(self, at_ns: int, clock_ns: int) -> None:
        if at_ns - clock_ns < SPIN_NS:
            self._at_ns = at_ns
            if not self._polling:
                self._polling = True
                self._loop.call_soon(self._poll)
            return
        at_ns = max(at_ns, 1)  # zero would disarm the timer
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(at_ns, 1_000_000_000)
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1


class SpinWaker:
    """Portable fallback: a coarse loop timer, then ``call_soon`` polling to the instant."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._at_ns = 0
        self._handle: asyncio.Handle | None = None

    def arm(self, at_ns: int, clock_ns: int) -> None:
        self._at_ns = at_ns
        self._cancel()
        self._poll()

    def _poll(self) -> None:
        wait_ns = self._at_ns - now_ns()
        if wait_ns <= 0:
            self._handle = None
            self._callback()
        elif wait_ns > 2_000_000:
            self._handle = self._loop.call_later((wait_ns - 1_500_000) / 1e9, self._poll)
        else:
            self._handle = self._loop.call_soon(self._poll)

    def _cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self) -> None:
        self._cancel()


@functools.cache
def _libc() -> ctypes.CDLL:
    """libc, with ``timerfd_settime``'s argument types (find_library runs a subprocess: once)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.timerfd_settime.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(_Itimerspec),
        ctypes.c_void_p,
    ]
    return libc


def open_periodic_timerfd(first_ns: int, period_ns: int) -> int:
    """A non-blocking timerfd on CLOCK_MONOTONIC that first fires at the absolute instant
    ``first_ns`` and then every ``period_ns``; reading it gives the expirations since the
    last read (8 bytes). Raises OSError where timerfd is unavailable (not Linux)."""
    if not sys.platform.startswith("linux"):
        raise OSError("timerfd needs Linux")
    fd = int(_libc().timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "timerfd_create failed")
    try:
        set_periodic_timerfd(fd, first_ns, period_ns)
    except OSError:
        os.close(fd)
        raise
    return fd


def set_periodic_timerfd(fd: int, first_ns: int | None, period_ns: int) -> None:
    """Re-arm a timerfd of :func:`open_periodic_timerfd` (first at the absolute instant
    ``first_ns``, then every ``period_ns``), or disarm it (``first_ns`` None): a disarmed
    timer never fires, and what it had not yet read is dropped."""
    spec = _Itimerspec()  # all zero: disarmed
    if first_ns is not None:
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(max(first_ns, 1), 1_000_000_000)
        spec.it_interval.tv_sec, spec.it_interval.tv_nsec = divmod(period_ns, 1_000_000_000)
    if _libc().timerfd_settime(fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
        raise OSError(ctypes.get_errno(), "timerfd_settime failed")


def make_waker(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> Waker:
    """The most precise waker this platform offers."""
    if sys.platform.startswith("linux"):
        try:
            return TimerfdWaker(loop, callback)
        except (OSError, AttributeError):
            pass
    return SpinWaker(loop, callback)
