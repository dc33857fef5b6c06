"""The receive-lag probe on a real event loop: a long loop turn is seen by every read in it."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from tailwise.clock import now_ns
from tailwise.loadgen.looplag import LoopLag

MS = 1_000_000


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # the loop can neither poll nor read meanwhile
        pass


async def _probe_a_30ms_turn() -> tuple[LoopLag, int]:
    probe = LoopLag(1_000 * MS)
    t0 = now_ns()
    probe.start(t0)
    await asyncio.sleep(0.02)
    start = now_ns() - t0
    _busy(0.03)  # one callback holds the loop for 30 ms
    await asyncio.sleep(0.03)
    probe.stop()
    return probe, start


def test_a_read_in_the_middle_of_a_long_turn_is_bounded_by_that_turn() -> None:
    probe, start = asyncio.run(_probe_a_30ms_turn())
    series = probe.series()
    assert probe.samples > 20
    # A response read 15 ms into the 30 ms turn may have waited ~15 ms or more: its
    # bound must say so (the probe used to book the turn at its end only, and a read
    # in the middle got one probe period: 1 ms).
    middle = np.array([start + 15 * MS], dtype=np.int64)
    assert series.at(middle)[0] >= 25 * MS
    covered = series.bucket_max_ns[
        (start + 5 * MS) // series.bucket_ns : (start + 25 * MS) // series.bucket_ns
    ]
    assert len(covered) >= 3 and (covered >= 25 * MS).all()
