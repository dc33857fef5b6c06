"""One direction of a proxied connection: bytes released at chosen instants, in order, bounded.

A piece of data pushed with a "not before" instant is written to the other side
at the latest of: that instant, the release of the piece before it (order is
kept), the instant the link has carried it (``--bandwidth``, in slices of
:data:`SLICE_BYTES` so pacing is smooth), and the end of any stall it falls in.
With no fault in play a piece is written at once, on the path it arrived on.

Memory is bounded: while more than :data:`HIGH_WATER` bytes wait here, or the
destination's own write buffer is full, the source stops reading (TCP flow
control then slows the sender), and it reads again below :data:`LOW_WATER`.

Each piece may carry actions run when it is written: the connection uses them
for its ground truth (first and last byte out), to end a response, and to
close the connection after a truncated response.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from tailwise.clock import now_ns
from tailwise.proxy.faults import Faults

HIGH_WATER = 1 << 20
LOW_WATER = 256 << 10
SLICE_BYTES = 16 << 10

Action = Callable[[int], None]  # called with the proxy-relative instant the piece was written


class Pipe:
    def __init__(self, faults: Faults, origin_ns: int, source: Any) -> None:
        self.faults = faults
        self.origin_ns = origin_ns
        self.source = source  # the transport bytes come from (paused when full)
        self.dest: Any = None  # set once the other side is connected
        # (release instant, bytes, action on write of the first slice, on write of the last)
        self.queue: deque[tuple[int, bytes, Action | None, Action | None]] = deque()
        self.queued_bytes = 0
        self.last_release_ns = 0
        self.link_free_ns = 0
        self.dest_blocked = False
        self.held = False  # the source's bytes wait unparsed upstream of this pipe
        self.closed = False
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None

    def now(self) -> int:
        return now_ns() - self.origin_ns

    def push(
        self,
        data: bytes,
        not_before_ns: int,
        on_first: Action | None = None,
        on_last: Action | None = None,
    ) -> tuple[int, int]:
        """Queue ``data`` (may be empty, for the actions alone).

        ``on_first`` runs when its first slice is written, ``on_last`` when its last
        is. Returns how long a stall held it and how long the bandwidth limit did
        (ns), for the ground truth.
        """
        if self.closed:
            return 0, 0
        bps = self.faults.bandwidth_bps
        pieces = [data]
        if bps and len(data) > SLICE_BYTES:
            pieces = [data[i : i + SLICE_BYTES] for i in range(0, len(data), SLICE_BYTES)]
        stalled_ns = shaped_ns = 0
        for k, piece in enumerate(pieces):
            release = max(not_before_ns, self.last_release_ns)
            if bps:
                start = max(release, self.link_free_ns)
                shaped = start + int(len(piece) * 1e9 / bps)
                shaped_ns += shaped - release
                release = shaped
            unstalled = release
            release = self.faults.stall_end(release)
            stalled_ns += release - unstalled
            self.link_free_ns = self.last_release_ns = release
            first = on_first if k == 0 else None
            last = on_last if k == len(pieces) - 1 else None
            self.queue.append((release, piece, first, last))
            self.queued_bytes += len(piece)
        self._flush()
        return stalled_ns, shaped_ns

    def _flush(self) -> None:
        """Write every piece that is due (if the destination is there); re-arm for the next."""
        if self.dest is None or self.closed:
            self._flow()
            return
        now = self.now()
        queue = self.queue
        while queue and queue[0][0] <= now:
            _, data, first, last = queue.popleft()
            self.queued_bytes -= len(data)
            if data:
                self.dest.write(data)
            for action in (first, last):
                if action is not None:
                    action(now)
            if self.closed:
                return
        self._arm()
        self._flow()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.queue:
            loop = asyncio.get_running_loop()
            wait_s = max(self.queue[0][0] - self.now(), 0) / 1e9
            self._timer = loop.call_later(wait_s, self._flush)

    def _flow(self) -> None:
        """Pause the source while this pipe (or its destination) holds too much."""
        if self.source is None:
            return
        if self.source.is_closing():
            return
        blocked = self.dest_blocked or self.held
        if not self._paused and (self.queued_bytes > HIGH_WATER or blocked):
            self._paused = True
            self.source.pause_reading()
        elif self._paused and self.queued_bytes < LOW_WATER and not blocked:
            self._paused = False
            self.source.resume_reading()

    def attach(self, dest: Any) -> None:
        """The destination is connected: what waited for it goes now (when due)."""
        self.dest = dest
        self._flush()

    def set_blocked(self, blocked: bool) -> None:
        """The destination's write buffer filled (or drained)."""
        self.dest_blocked = blocked
        self._flow()

    def hold(self, held: bool) -> None:
        """Bytes of the source wait before this pipe (unparsed): don't read more meanwhile."""
        self.held = held
        self._flow()

    def close(self) -> None:
        """Drop whatever waits; nothing more is written."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.queue.clear()
        self.queued_bytes = 0
