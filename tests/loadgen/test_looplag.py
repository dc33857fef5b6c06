"""The receive-lag probe on a real event loop: a long loop turn is seen by every read in it."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from tailwise.clock import now_ns
from tailwise.loadgen.execute.looplag import LoopLag

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


async def _pause_then_work() -> tuple[LoopLag, int, int, int, int, int]:
    busy = [False]
    probe = LoopLag(1_000 * MS)
    t0 = now_ns()
    probe.start(t0, busy=lambda: busy[0])
    for _ in range(200):  # the first probe finds nothing in flight: it pauses
        if probe.paused:
            break
        await asyncio.sleep(0.005)
    paused_at, paused_samples = now_ns() - t0, probe.samples
    await asyncio.sleep(0.05)  # 50 ms idle: no wake-ups, and no lateness booked for them
    idle_samples = probe.samples
    busy[0] = True
    resumed_at = now_ns() - t0
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
    return probe, paused_samples, idle_samples, paused_at, resumed_at, start


def test_the_probe_sleeps_while_nothing_is_in_flight_and_resumes_whole() -> None:
    probe, paused_samples, idle_samples, paused_at, resumed_at, start = asyncio.run(
        _pause_then_work()
    )
    assert probe.pauses >= 1 and 1 <= paused_samples <= 3
    assert idle_samples == paused_samples  # not one wake-up in 50 ms of idleness
    series = probe.series()
    # Nothing is booked for the idle span (the resumed probe counts from its resumption;
    # one that kept its old due instant booked the whole pause as one late read)...
    bucket = series.bucket_ns
    idle = series.bucket_max_ns[-(-paused_at // bucket) : resumed_at // bucket]
    assert len(idle) >= 5 and idle.max() == 0
    # ...and the 30 ms turn after the resumption is seen whole.
    assert series.at(np.array([start + 15 * MS], dtype=np.int64))[0] >= 25 * MS
