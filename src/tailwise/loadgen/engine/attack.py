"""The engines: open-loop (the honest one) and closed-loop (for comparison only).

Open loop: every request has an intended instant from the schedule. The pacer
wakes at that instant (see :mod:`tailwise.clock`), stamps ``sent_ns`` and hands
the request to the transport, whatever the target is doing. If ``max_in_flight``
requests are already outstanding, the request waits in a FIFO in the client;
that wait is part of its latency (measured from the intended instant) and the
row is flagged ``capped`` so the generator's own lateness can be told apart.

Closed loop: ``concurrency`` users each send, wait for the answer, think, and
send again. The load then depends on the server's speed, which hides stalls
(coordinated omission): outputs label it, and it exists to show that error.

Both engines account for every request exactly once: completed by the
transport, or marked ``not_sent:<cause>`` / ``cancelled`` when the run ends.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Generator, Iterator

import numpy as np

from tailwise.clock import Waker, make_waker, now_ns
from tailwise.loadgen.transport import Transport
from tailwise.records import BLOCK_ROWS, RecordBlock, block_steps, error_code

MAX_SENDS_PER_TICK = 256
NEVER_NS = 1 << 62


class Engine:
    """Shared bookkeeping: blocks of records, completion log, in-flight count, stop."""

    mode = "open"

    def __init__(self, transport: Transport, max_in_flight: int) -> None:
        self.transport = transport
        self.max_in_flight = max_in_flight
        self.blocks: list[RecordBlock] = []
        self.completed: list[int] = []  # seqs in completion order, for the writer
        self.in_flight = 0
        self.sent = 0
        self.t0 = 0
        self.stopping = False
        self.finished_sending = asyncio.Event()
        self.idle = asyncio.Event()
        self.cap_queue: deque[tuple[RecordBlock, int]] = deque()
        # Run-relative instant of the next send, while the pacer is waiting for it;
        # NEVER_NS while it runs, is behind schedule, or has finished.
        self.next_due_ns = NEVER_NS
        # Run-relative instant stop() closed the plan (None: it ran to its end). The
        # window ends here, not where the loop next got round to noticing: on a busy
        # machine that came 0.2 s later, and the rows due in between were never booked.
        self.stopped_rel_ns: int | None = None
        # Called when a request goes out with none in flight before it (the receive-lag
        # probe, paused while nothing was in flight, resumes: tailwise.loadgen.execute.looplag).
        self.on_busy: Callable[[], None] | None = None

    def on_done(self, block: RecordBlock, j: int) -> None:
        self.in_flight -= 1
        self.completed.append(block.base + j)
        if self.cap_queue and not self.stopping:
            b, k = self.cap_queue.popleft()
            self._send(b, k)
        elif self.in_flight == 0 and self.finished_sending.is_set():
            self.idle.set()
        # Completions arrive in bursts (hundreds in one pass of the event loop after
        # the server or the VM paused), and the pacer's wake-up waits behind the
        # whole burst: measured 2-3 ms of send lag at 70k req/s. A completion that
        # finds a send due runs the pacer first (done_ns is this completion's clock).
        if block.done_ns[j] >= self.next_due_ns:
            self._tick()

    def _tick(self) -> None:
        """Send what has come due (the open loop's pacer)."""

    def _send(self, block: RecordBlock, j: int) -> None:
        self.in_flight += 1
        if self.in_flight == 1 and self.on_busy is not None:
            self.on_busy()
        self.sent += 1
        block.sent_ns[j] = now_ns() - self.t0
        self.transport.send(block, j)

    def prepare(self) -> None:
        """Work that must not happen on the clock (first blocks, lazy imports)."""

    def begin(self, t0_ns: int) -> None:
        """Start sending, with ``t0_ns`` (monotonic) as the run's time zero."""
        raise NotImplementedError

    def give_up_queue(self, kind: str) -> int:
        """Requests still waiting for the cap become ``kind`` (a not_sent cause)."""
        code, t, n = error_code(kind), now_ns() - self.t0, len(self.cap_queue)
        while self.cap_queue:
            block, j = self.cap_queue.popleft()
            block.done_ns[j] = t
            block.error[j] = code
            self.completed.append(block.base + j)
        return n

    def _mark_stopped(self) -> int:
        """The run-relative instant sending stopped (0 before the clock started), set once."""
        if self.stopped_rel_ns is None and not self.finished_sending.is_set():
            self.stopped_rel_ns = now_ns() - self.t0 if self.t0 else 0
        return self.stopped_rel_ns or 0

    def stop(self) -> None:
        """Stop sending now (interruption). Requests not yet due are not part of the run."""
        self._mark_stopped()
        self.stopping = True
        self.give_up_queue("not_sent:interrupted")
        self.finished_sending.set()
        if self.in_flight == 0:
            self.idle.set()

    def end(self, kind_unsent: str) -> None:
        """Close the books: queued requests are not sent, in-flight ones are cancelled."""
        self.stopping = True
        self.give_up_queue(kind_unsent)
        self.transport.abort_all("cancelled")


class OpenLoop(Engine):
    """Sends each scheduled request at its intended instant."""

    def __init__(
        self, transport: Transport, schedule_blocks: Iterator[np.ndarray], max_in_flight: int
    ) -> None:
        super().__init__(transport, max_in_flight)
        self._source = schedule_blocks
        self._block: RecordBlock | None = None
        self._due: list[int] = []
        self._j = 0
        self._next_base = 0
        self._pending = np.zeros(0, dtype=np.int64)  # schedule offsets not yet in a block
        self._primed = False
        self._waker: Waker | None = None
        # The next block, built ahead a step per loop turn: in progress, or done (a
        # 1-tuple whose item is None when the plan has no more blocks).
        self._building: Generator[None, None, tuple[RecordBlock, list[int]] | None] | None = None
        self._ahead: tuple[tuple[RecordBlock, list[int]] | None] | None = None

    def _build_steps(self) -> Generator[None, None, tuple[RecordBlock, list[int]] | None]:
        """The next block of the plan and its due offsets, in small steps (None: plan over)."""
        if len(self._pending) == 0:
            nxt = next(self._source, None)  # a NumPy schedule chunk: ~0.1 ms
            if nxt is None or len(nxt) == 0:
                return None
            self._pending = nxt
            yield
        offsets, self._pending = self._pending[:BLOCK_ROWS], self._pending[BLOCK_ROWS:]
        block = yield from block_steps(self._next_base, len(offsets))
        np.frombuffer(block.scheduled_ns, dtype=np.int64)[:] = offsets
        yield
        self._next_base += len(offsets)
        return block, offsets.tolist()

    def _prefetch_step(self) -> None:
        """One step of building the next block, between sends (see :func:`block_steps`)."""
        steps = self._building
        if steps is None:
            return  # taken over by _next_block, or the run is over
        try:
            next(steps)
        except StopIteration as built:
            self._building = None
            self._ahead = (built.value,)
            return
        asyncio.get_running_loop().call_soon(self._prefetch_step)

    def _next_block(self) -> bool:
        if self._ahead is not None:
            made, self._ahead = self._ahead[0], None
        else:  # not built ahead yet (the plan's first block, or a burst): finish it now
            steps, self._building = self._building or self._build_steps(), None
            try:
                while True:
                    next(steps)
            except StopIteration as built:
                made = built.value
        if made is None:
            return False
        block, self._due = made
        self.blocks.append(block)
        self._block, self._j = block, 0
        if not self.stopping:
            self._building = self._build_steps()
            asyncio.get_running_loop().call_soon(self._prefetch_step)
        return True

    def prepare(self) -> None:
        # The first schedule block (and NumPy's lazily imported random module) took
        # ~100 ms: done here, before the clock starts, instead of in begin().
        self._primed = self._next_block()

    def begin(self, t0_ns: int) -> None:
        self.t0 = t0_ns
        loop = asyncio.get_running_loop()
        self._waker = make_waker(loop, self._tick)
        if not self._primed:
            self._finish()
            return
        self._waker.arm(t0_ns + self._due[0], now_ns())

    def _tick(self) -> None:
        self.next_due_ns = NEVER_NS  # not re-entered from a completion while it sends
        if self.stopping:
            return
        t0, block, due, j = self.t0, self._block, self._due, self._j
        send = self.transport.send
        assert block is not None
        sent_ns, n = block.sent_ns, len(due)
        now = now_ns() - t0
        budget = MAX_SENDS_PER_TICK
        while True:
            if j >= n:
                if not self._next_block():
                    self._j = j
                    self._finish()
                    return
                block, due, j = self._block, self._due, 0
                assert block is not None
                sent_ns, n = block.sent_ns, len(due)
            if due[j] > now:
                now = now_ns() - t0
                if due[j] > now:
                    break
            # Dispatch inlined (cap check, stamp, send): this runs once per request.
            if self.in_flight < self.max_in_flight:
                self.in_flight += 1
                if self.in_flight == 1 and self.on_busy is not None:
                    self.on_busy()
                self.sent += 1
                sent_ns[j] = now_ns() - t0
                send(block, j)
            else:
                block.capped[j] = 1
                self.cap_queue.append((block, j))
            j += 1
            budget -= 1
            if budget == 0:  # behind schedule: let responses, timers and signals in
                self._j = j
                asyncio.get_running_loop().call_soon(self._tick)
                return
        self._j = j
        self.next_due_ns = due[j]
        assert self._waker is not None
        self._waker.arm(t0 + due[j], t0 + now)

    def _close_plan(self, now_rel: int) -> None:
        code = error_code("not_sent:interrupted")
        while self._block is not None:
            block, due, j = self._block, self._due, self._j
            while j < len(due) and due[j] <= now_rel:
                block.done_ns[j] = now_rel
                block.error[j] = code
                self.completed.append(block.base + j)
                j += 1
            if j < len(due):
                block.rows = j
                return
            if not self._next_block():
                return

    def _finish(self) -> None:
        self._building = None
        self.finished_sending.set()
        if self.in_flight == 0 and not self.cap_queue:
            self.idle.set()
        if self._waker is not None:
            self._waker.close()
            self._waker = None

    def stop(self) -> None:
        """Interrupted: rows already due but not sent become ``not_sent:interrupted``;
        rows not yet due are dropped from the plan (they were never due)."""
        if self._block is not None and not self.finished_sending.is_set():
            # Before the clock started (t0 unset) nothing was due: close nothing.
            at = self._mark_stopped()
            self._close_plan(at if self.t0 else -1)
        self._building = None
        super().stop()
        if self._waker is not None:
            self._waker.close()
            self._waker = None


class ClosedLoop(Engine):
    """``concurrency`` users: send, wait for the response, think, repeat."""

    mode = "closed"

    def __init__(
        self,
        transport: Transport,
        concurrency: int,
        think_ns: int,
        horizon_ns: int | None,
        max_count: int | None,
    ) -> None:
        super().__init__(transport, concurrency)
        self.concurrency = concurrency
        self.think_ns = think_ns
        self.horizon_ns = horizon_ns
        self.max_count = max_count
        self._issued = 0
        self._block: RecordBlock | None = None
        self._thinking = 0

    def _more(self, t_rel: int) -> bool:
        """Whether the run still issues requests at run time ``t_rel``."""
        if self.max_count is not None and self._issued >= self.max_count:
            return False
        return self.horizon_ns is None or t_rel < self.horizon_ns

    def _allocate(self) -> None:
        block = RecordBlock(self._issued, BLOCK_ROWS)
        block.rows = 0
        self.blocks.append(block)
        self._block = block

    def _new_row(self) -> tuple[RecordBlock, int] | None:
        t = now_ns() - self.t0
        if not self._more(t):
            return None
        block = self._block
        if block is None or self._issued - block.base >= BLOCK_ROWS:
            self._allocate()
            block = self._block
            assert block is not None
        j = self._issued - block.base
        block.rows = j + 1
        block.scheduled_ns[j] = t
        self._issued += 1
        return block, j

    def _user_ready(self) -> None:
        early_ns = self.t0 - now_ns()
        if early_ns > 0:  # the loop's timers are coarser than the clock: never start before t0
            asyncio.get_running_loop().call_later(early_ns / 1e9, self._user_ready)
            return
        self._thinking -= 1
        if self.stopping:
            self._maybe_finish()
            return
        row = self._new_row()
        if row is None:
            self.finished_sending.set()
            self._maybe_finish()
            return
        self._send(*row)

    def _maybe_finish(self) -> None:
        if self.in_flight == 0 and self._thinking == 0:
            self.finished_sending.set()
            self.idle.set()

    def begin(self, t0_ns: int) -> None:
        self.t0 = t0_ns
        self._allocate()  # 65k rows of arrays: not on the clock
        loop = asyncio.get_running_loop()
        for _ in range(self.concurrency):
            self._thinking += 1
            loop.call_at(loop.time() + max(t0_ns - now_ns(), 0) / 1e9, self._user_ready)

    def on_done(self, block: RecordBlock, j: int) -> None:
        self.in_flight -= 1
        self.completed.append(block.base + j)
        if self.stopping or not self._more(now_ns() - self.t0 + self.think_ns):
            self.finished_sending.set()  # this user is done: no think time past the end
            self._maybe_finish()
            return
        self._thinking += 1
        loop = asyncio.get_running_loop()
        if self.think_ns:
            loop.call_later(self.think_ns / 1e9, self._user_ready)
        else:
            loop.call_soon(self._user_ready)
