"""The pacer's waker: it fires at (not before) the instant asked, polling or sleeping."""

from __future__ import annotations

import asyncio

from tailwise.clock import make_waker, now_ns


def _fire_times(lead_ns: list[int]) -> list[int]:
    """For each lead, how late the waker fired after ``now + lead`` (ns, >= 0 if on time)."""

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        lateness: list[int] = []
        for lead in lead_ns:
            fired = loop.create_future()
            waker = make_waker(loop, lambda f=fired: f.done() or f.set_result(now_ns()))
            clock = now_ns()
            at = clock + lead
            waker.arm(at, clock)
            lateness.append(await asyncio.wait_for(fired, 2.0) - at)
            waker.close()
        return lateness

    return asyncio.run(main())


def test_waker_never_fires_early() -> None:
    """Polled (close) and timer (far) instants alike: at or after the instant asked."""
    late = _fire_times([20_000, 100_000, 400_000, 2_000_000])
    assert all(x >= 0 for x in late)
