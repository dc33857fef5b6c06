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


async def _pause_then_work() -> tuple[LoopLag, int, int, int]:
    busy = [False]
    probe = LoopLag(1_000 * MS)
    t0 = now_ns()
    probe.start(t0, busy=lambda: busy[0])
    await asyncio.sleep(0.01)  # the first probe finds nothing in flight: it pauses
    paused_samples = probe.samples
    await asyncio.sleep(0.05)  # 50 ms idle: no wake-ups, and no lateness booked for them
    idle_samples = probe.samples
    busy[0] = True
    probe.resume()  # a request went out
    await asyncio.sleep(0.01)
    start = now_ns() - t0
    _busy(0.03)  # in flight now: a long turn is seen as before
    await asyncio.sleep(0.02)
    probe.stop()
    busy[0] = False
    await asyncio.sleep(0.01)
    ended = probe.samples
    probe.resume()  # after the end: nothing
    await asyncio.sleep(0.01)
    assert probe.samples == ended
    return probe, paused_samples, idle_samples, start


def test_the_probe_sleeps_while_nothing_is_in_flight_and_resumes_whole() -> None:
    probe, paused_samples, idle_samples, start = asyncio.run(_pause_then_work())
    assert probe.pauses >= 1 and paused_samples <= 2
    assert idle_samples == paused_samples  # not one wake-up in 50 ms of idleness
    series = probe.series()
    # The idle span booked nothing (the resumed probe counts from its resumption)...
    idle = series.bucket_max_ns[: start // series.bucket_ns - 1]
    assert len(idle) >= 10 and idle.max() < 5 * MS
    # ...and the 30 ms turn after the resumption is seen whole.
    assert series.at(np.array([start + 15 * MS], dtype=np.int64))[0] >= 25 * MS
