"""The seam between the engine and the wire, owned by its consumer (the engine).

A transport sends the request of record ``(block, j)``, fills in that row's
response columns (``first_byte_ns``, ``done_ns``, ``status``, ``error``,
``bytes_in``) as offsets from the run start ``t0_ns``, then calls the
``on_done(block, j)`` callback exactly once. It never completes a request
synchronously inside :meth:`Transport.send`.

:class:`FakeTransport` ships in the package for tests of anything above the
wire: it answers each request after a latency given by a Python function.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from tailwise.clock import now_ns
from tailwise.records import RecordBlock, error_code

OnDone = Callable[[RecordBlock, int], None]


class Transport(Protocol):
    async def start(self, on_done: OnDone) -> None:
        """Prepare (e.g. pre-open connections) before the clock starts."""

    def set_origin(self, t0_ns: int) -> None:
        """The run's clock origin: every time written is ``now_ns() - t0_ns``."""

    def send(self, block: RecordBlock, j: int) -> None:
        """Start sending request ``(block, j)``; ``block.sent_ns[j]`` is already set."""

    def abort_all(self, kind: str) -> int:
        """Complete every in-flight request with error ``kind`` now; returns how many."""

    async def close(self) -> None:
        """Release sockets and timers."""


class FakeTransport:
    """Completes request ``seq`` after ``law(seq)`` = ``(latency_ns, status, error_kind)``."""

    def __init__(self, law: Callable[[int], tuple[int, int, str]]) -> None:
        self._law = law
        self._pending: dict[tuple[int, int], tuple[asyncio.TimerHandle, RecordBlock]] = {}
        self._t0 = 0
        self._on_done: OnDone | None = None

    async def start(self, on_done: OnDone) -> None:
        self._on_done = on_done

    def set_origin(self, t0_ns: int) -> None:
        self._t0 = t0_ns

    def send(self, block: RecordBlock, j: int) -> None:
        latency_ns, status, kind = self._law(block.base + j)
        loop = asyncio.get_running_loop()
        handle = loop.call_later(latency_ns / 1e9, self._finish, block, j, status, kind)
        self._pending[(block.base, j)] = (handle, block)

    def _finish(self, block: RecordBlock, j: int, status: int, kind: str) -> None:
        del self._pending[(block.base, j)]
        t = now_ns() - self._t0
        block.first_byte_ns[j] = t
        block.done_ns[j] = t
        block.status[j] = status
        block.error[j] = error_code(kind)
        assert self._on_done is not None
        self._on_done(block, j)

    def abort_all(self, kind: str) -> int:
        items = list(self._pending.items())
        self._pending.clear()
        t = now_ns() - self._t0
        for (_, j), (handle, block) in items:
            handle.cancel()
            block.done_ns[j] = t
            block.error[j] = error_code(kind)
            assert self._on_done is not None
            self._on_done(block, j)
        return len(items)

    async def close(self) -> None:
        self.abort_all("cancelled")
