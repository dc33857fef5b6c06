"""A small deterministic event kernel (SimPy's shape): a heap of (time, priority, seq).

Times are int64 nanoseconds. Ties break by priority, then by the order the
events were scheduled, so a run is a pure function of its inputs and seed.

*Daemon* events (a replica's failure clock, an autoscaler's tick) keep
happening for ever; the run ends when only daemons are left, as SimPy's
``env.run()`` would if those processes were the only ones alive.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

Action = Callable[..., None]


class Kernel:
    __slots__ = ("_daemons", "_heap", "_seq", "events", "now")

    def __init__(self) -> None:
        self.now = 0
        self._heap: list[tuple[int, int, int, Action, tuple[Any, ...]]] = []
        self._seq = 0
        self._daemons = 0
        self.events = 0

    def at(self, t_ns: int, action: Action, *args: Any, priority: int = 0) -> None:
        """Run ``action(*args)`` at ``t_ns`` (never before now)."""
        self._seq += 1
        heapq.heappush(self._heap, (max(t_ns, self.now), priority, self._seq, action, args))

    def daemon(self, t_ns: int, action: Action, *args: Any) -> None:
        """Like :meth:`at`, but this event alone does not keep the run going."""
        self._daemons += 1
        self.at(t_ns, self._run_daemon, action, args, priority=1)

    def _run_daemon(self, action: Action, args: tuple[Any, ...]) -> None:
        self._daemons -= 1
        action(*args)

    def run(self) -> None:
        heap, pop = self._heap, heapq.heappop
        while len(heap) > self._daemons:
            t, _, _, action, args = pop(heap)
            self.now = t
            self.events += 1
            action(*args)
