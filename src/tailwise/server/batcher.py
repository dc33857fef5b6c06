"""Dynamic batching for the demo embedding target (seed 000, section 3).

One worker runs batches back to back. A batch of ``B`` inputs takes
``base_s + per_item_s * B`` (it really sleeps that long). When the worker is
free it waits for the first input, then for up to ``max_wait_s`` more or
until ``max_batch`` inputs are queued, whichever comes first; inputs that
arrived while a batch ran are taken at once. A request with several inputs is
answered when its last input's batch completes.

So throughput at batch size B is ``B / (base_s + per_item_s * B)``, at most
``max_batch / (base_s + per_item_s * max_batch)`` (docs/demo-server.md).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from tailwise.server import Background

CATCH_UP_S = 0.002


class BatchQueueFull(Exception):
    """More than ``max_waiting`` inputs queued: answer 429."""


@dataclass(frozen=True)
class BatchConfig:
    max_batch: int = 32
    max_wait_s: float = 0.005
    base_s: float = 0.004  # c0 in the seed
    per_item_s: float = 0.0009  # c1 in the seed
    max_waiting: int = 4096

    def batch_s(self, size: int) -> float:
        return self.base_s + self.per_item_s * size


@dataclass
class BatchStats:
    batches: int = 0
    items: int = 0
    rejected: int = 0
    batch_size_counts: dict[int, int] = field(default_factory=dict)
    busy_s: float = 0.0


class Batcher(Background):
    def __init__(self, config: BatchConfig) -> None:
        self.config = config
        self.queue: deque[tuple[float, asyncio.Future[None]]] = deque()
        self.stats = BatchStats()
        self.running_batch = 0
        self._arrived = asyncio.Event()
        self._last_end_s = 0.0

    def submit(self, n_inputs: int) -> list[asyncio.Future[None]]:
        """Queue ``n_inputs`` items; each future resolves when its batch is done."""
        if len(self.queue) + n_inputs > self.config.max_waiting:
            self.stats.rejected += 1
            raise BatchQueueFull
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        futures = [loop.create_future() for _ in range(n_inputs)]
        self.queue.extend((now, f) for f in futures)
        self._arrived.set()
        return futures

    async def _loop(self) -> None:
        cfg = self.config
        while True:
            while not self.queue:
                self._arrived.clear()
                await self._arrived.wait()
            # Wait for a full batch, but never longer than max_wait after the
            # oldest input arrived (it may have arrived while the last batch ran).
            fill_by = self.queue[0][0] + cfg.max_wait_s
            while len(self.queue) < cfg.max_batch and time.monotonic() < fill_by:
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), fill_by - time.monotonic())
                except TimeoutError:
                    break
            batch = [self.queue.popleft() for _ in range(min(cfg.max_batch, len(self.queue)))]
            await self._run(batch)

    async def _run(self, batch: list[tuple[float, asyncio.Future[None]]]) -> None:
        size = len(batch)
        cost_s = self.config.batch_s(size)
        self.running_batch = size
        # A batch that follows the last one at once starts where it ended, not
        # when this coroutine woke: timer lateness (uvloop ticks in ms) must not
        # add to every batch's modelled cost. Only real idleness or a CPU
        # shortage (behind by more than CATCH_UP_S) moves the start later.
        now = time.monotonic()
        start = self._last_end_s if now - self._last_end_s <= CATCH_UP_S else now
        self._last_end_s = start + cost_s
        await asyncio.sleep(max(self._last_end_s - time.monotonic(), 0.0))
        self.running_batch = 0
        st = self.stats
        st.batches += 1
        st.items += size
        st.busy_s += cost_s
        st.batch_size_counts[size] = st.batch_size_counts.get(size, 0) + 1
        for _, fut in batch:
            if not fut.done():  # a cancelled request's items still cost batch time
                fut.set_result(None)
