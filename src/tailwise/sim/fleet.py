"""The serving model's moving parts: legs, replicas and stages, as the event loop sees them.

A :class:`Leg` is one attempt of a request at one stage at a time; a
:class:`Replica` holds a FCFS queue and ``servers`` servers and moves through
the states below (only ``UP`` replicas take new legs; ``DRAINING`` ones finish
what they hold); a :class:`Tier` is one stage at run time: its replicas, its
service draws and the bookkeeping its statistics and its autoscaler read
(time integrals of legs in the stage, of waiting legs, of ready and billed
replicas). Times are integer nanoseconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailwise.sim.system_spec import StageSpec

# Replica states; only UP replicas take new legs, DRAINING ones finish what they hold.
UP, STARTING, DOWN, DRAINING, OFF = 0, 1, 2, 3, 4
BILLED = (UP, STARTING, DOWN, DRAINING)  # a replica you pay for
DRAW_CHUNK = 4096


@dataclass(eq=False)
class Leg:
    request: int
    sent: int
    work: int  # ns of service if run alone (batches use their own cost)
    stage: int = 0
    replica: int = -1
    start: int = -1  # first service start (any stage)
    done: int = -1
    status: int = -1
    token: int = 0  # bumped on cancel or crash so a stale completion is ignored
    queued: int = 0  # when it joined its current stage
    end: int = -1  # planned end of its current service
    group: int = -1  # which service (a batch shares one) it is in
    tries: int = 0
    orphan: bool = False  # its request was decided, but it runs on (cancel modes)


@dataclass(eq=False)
class Replica:
    index: int
    slow: float
    state: int = UP
    queue: deque[Leg] = field(default_factory=deque)
    busy: int = 0
    running: set[Leg] = field(default_factory=set)
    timer_at: int = -1  # dynamic batching: the pending fill deadline
    epoch: int = 0  # bumped on a crash: completions from before it are void


class Draws:
    """Service times for one stage: a buffer refilled from the stage's own stream."""

    def __init__(self, spec: StageSpec, rng: np.random.Generator, first: list[int]) -> None:
        self.spec, self.rng, self.buf, self.pos = spec, rng, first, 0

    def next(self) -> int:
        if self.pos >= len(self.buf):
            self.buf, self.pos = draw_work(self.spec, self.rng, DRAW_CHUNK), 0
        self.pos += 1
        return self.buf[self.pos - 1]


def draw_work(spec: StageSpec, rng: np.random.Generator, count: int) -> list[int]:
    """``count`` service times (ns), a ``straggler_p`` share of them k times longer."""
    work = spec.service.sample(rng, count).astype(np.float64)
    if spec.straggler_p > 0:
        slow = rng.random(count) < spec.straggler_p
        work[slow] *= spec.straggler_factor
    draws: list[int] = np.rint(work).astype(np.int64).tolist()
    return draws


class Uniforms:
    """Uniform [0, 1) draws in blocks (one NumPy call per 4096 routing decisions)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.buf: list[float] = []
        self.pos = 0

    def next(self) -> float:
        if self.pos >= len(self.buf):
            self.buf, self.pos = self.rng.random(DRAW_CHUNK).tolist(), 0
        self.pos += 1
        return self.buf[self.pos - 1]


@dataclass(eq=False)
class Tier:
    spec: StageSpec
    index: int
    reps: list[Replica]
    draws: Draws | None = None
    live: list[int] = field(default_factory=list)  # UP replicas, ascending
    pending: deque[Leg] = field(default_factory=deque)  # waiting for a replica to start
    rr: int = 0
    tie: int = 0  # jsq and least_outstanding: where the round-robin tie break resumes
    started: int = 0  # legs whose service started here
    completed: int = 0
    wait_ns: int = 0
    service_ns: int = 0
    busy_ns: int = 0  # server time used (a batch counts once)
    crashes: int = 0
    retries: int = 0
    recent_ns: list[int] = field(default_factory=list)  # latencies since the last tick
    recs: deque[tuple[int, int]] = field(default_factory=deque)  # (t, desired) recommendations
    timeline: list[tuple[int, int, int]] = field(default_factory=list)  # (t, ready, billed)
    ready_area: float = 0.0  # integral of ready replicas over time (ns)
    # Autoscaling reads time averages over its interval, as a metrics pipeline would:
    # legs in the stage (waiting or in service) and waiting, integrated over time.
    track: bool = False
    inflight: int = 0
    waiting: int = 0
    sys_area: float = 0.0
    wait_area: float = 0.0
    flow_t: int = 0
    tick_areas: tuple[float, float] = (0.0, 0.0)
    billed_area: float = 0.0
    last_t: int = 0

    def count(self, *states: int) -> int:
        return sum(1 for r in self.reps if r.state in states)

    def flow(self, now: int, d_inflight: int, d_waiting: int) -> None:
        """Integrate legs in the stage and waiting up to ``now``, then apply the changes."""
        self.sys_area += self.inflight * (now - self.flow_t)
        self.wait_area += self.waiting * (now - self.flow_t)
        self.flow_t = now
        self.inflight += d_inflight
        self.waiting += d_waiting

    def mark(self, now: int) -> None:
        """Integrate the replica counts up to now, and log a change in the timeline."""
        ready = self.count(UP)
        billed = self.count(*BILLED)
        if self.timeline:
            t0, r0, b0 = self.timeline[-1]
            self.ready_area += r0 * (now - self.last_t)
            self.billed_area += b0 * (now - self.last_t)
            self.last_t = now
            if (r0, b0) == (ready, billed):
                return
            if t0 == now:  # several changes at one instant: keep the last
                self.timeline.pop()
                if self.timeline and self.timeline[-1][1:] == (ready, billed):
                    return
        self.last_t = now
        self.timeline.append((now, ready, billed))

    def bring_up(self, rep: Replica, now: int) -> deque[Leg]:
        """``rep`` takes legs from ``now`` on; returns the legs parked for want of a
        replica, to be sent again first."""
        rep.state = UP
        self.live.append(rep.index)
        self.live.sort()
        self.mark(now)
        parked, self.pending = self.pending, deque()
        if self.track:
            self.flow(now, -len(parked), -len(parked))
        return parked

    def retire_if_drained(self, rep: Replica, now: int) -> None:
        """A draining replica with nothing left to finish goes off."""
        if rep.state == DRAINING and not rep.queue and not rep.running:
            rep.state = OFF
            rep.epoch += 1
            self.mark(now)

    def stats(self, span_ns: int) -> dict[str, Any]:
        """The stage's line in the run's summary (``span_ns``: the run's length)."""
        spec = self.spec
        out: dict[str, Any] = {
            "name": spec.name,
            "legs_started": self.started,
            "legs_completed": self.completed,
            "mean_wait_ms": round(self.wait_ns / self.started / 1e6, 4) if self.started else None,
            "mean_service_ms": round(self.service_ns / self.started / 1e6, 4)
            if self.started
            else None,
            "utilization": round(self.busy_ns / (spec.servers * self.ready_area), 4)
            if self.ready_area > 0
            else None,
        }
        if spec.failures is not None:
            out["crashes"] = self.crashes
            out["retries"] = self.retries
            up_share = self.ready_area / self.billed_area if self.billed_area else None
            out["availability"] = round(up_share, 5) if up_share is not None else None
        if spec.autoscale is not None or spec.failures is not None:
            out["mean_ready_replicas"] = round(self.ready_area / span_ns, 3)
            out["replica_seconds"] = round(self.billed_area / 1e9, 3)
            out["timeline"] = [
                {"t_s": round(t / 1e9, 3), "ready": r, "billed": b} for t, r, b in self.timeline
            ]
        return out
