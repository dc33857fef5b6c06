"""The event-driven serving model: tiers of replicas with routing, batching, stragglers,
hedging, fan-out, failures, autoscaling and pipelines.

A *request* is what a client sees; it sends one or more *legs* (a fan-out of
``n``, or a hedge after ``hedge_after``) to replicas chosen by the router.
Each replica has ``servers`` FCFS servers and a queue, optionally bounded
(a leg that finds it full is rejected at once). A server serves one leg at a
time, with a time drawn from the service distribution, or a batch: ``static``
waits for exactly ``batch_size`` legs, ``dynamic`` takes up to ``batch_size``
once the oldest has waited ``max_wait``; a batch of B costs ``c0 + c1 B``.

Stragglers: a replica may be ``slow`` (every service on it is k times longer),
and a fraction of legs may be k times slower wherever they run.

A request finishes when ``k`` of its ``n`` legs succeeded (hedged: the first);
its other legs are cancelled at that instant: removed from their queue, or cut
short in service, freeing the server. Cancelled legs count as extra load in
:attr:`SimResult.legs`.

**Pipelines**: with several stages a leg that finishes stage ``s`` is sent on
to stage ``s + 1`` (its own replicas, router, batching, service law); the
request is done when the last stage is. **Failures**: each replica of a stage
with ``failures`` alternates up and down times drawn from MTBF and MTTR laws;
a crash fails the legs on it (error ``reset``) or re-sends them elsewhere
(``retry``, at most ``max_retries`` times each); with no replica up a leg is
refused (``unavailable``). **Autoscaling** looks every ``interval`` at the
stage's concurrency, queue or p99 and sets the replica count the way the
Kubernetes HPA does (``ceil(current x value / target)``, a 10% tolerance, the
highest recommendation over a stabilisation window before scaling down); a new
replica takes ``cold_start`` to become ready, and a removed one drains first.

Random choices (routing, tie breaks, failure clocks) come from their own
streams, spawned from the run's generator after the first stage's service
draws, so adding a router never changes the service times.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailwise.distributions import Distribution
from tailwise.sim.kernel import Kernel

ROUTING = ("round_robin", "random", "jsq", "least_outstanding", "power_of_d")
AUTOSCALE_METRICS = ("concurrency", "queue", "p99")
# Leg and request outcomes.
OK, REJECTED, CANCELLED, FAILED, UNAVAILABLE = 0, 1, 2, 3, 4
# Replica states; only UP replicas take new legs, DRAINING ones finish what they hold.
UP, STARTING, DOWN, DRAINING, OFF = 0, 1, 2, 3, 4
_BILLED = (UP, STARTING, DOWN, DRAINING)  # a replica you pay for
_DRAW_CHUNK = 4096
HEDGE_WINDOW = 2048  # answers a percentile hedge delay is taken over


@dataclass(frozen=True)
class Batching:
    mode: str  # "static" | "dynamic"
    size: int
    max_wait_ns: int = 0
    base_ns: int = 0
    per_item_ns: int = 0


@dataclass(frozen=True)
class Failures:
    mtbf: Distribution  # time a replica stays up
    mttr: Distribution  # time it stays down
    retry: bool = False  # re-send the legs it held (else they fail)
    max_retries: int = 2


@dataclass(frozen=True)
class Autoscale:
    metric: str  # "concurrency" (legs per replica) | "queue" (waiting per replica) | "p99"
    target: float  # legs per replica, or ns for p99
    min_replicas: int
    max_replicas: int
    interval_ns: int
    cold_start_ns: int
    tolerance: float = 0.1
    stabilization_ns: int = 0  # scale down to the highest recommendation in this window


@dataclass(frozen=True)
class StageSpec:
    service: Distribution
    name: str = "server"
    replicas: int = 1
    servers: int = 1
    queue_limit: int | None = None  # legs waiting per replica; beyond: rejected
    routing: str = "round_robin"
    power_d: int = 2
    batching: Batching | None = None
    slow_replicas: tuple[int, ...] = ()
    slow_factor: float = 1.0
    straggler_p: float = 0.0
    straggler_factor: float = 1.0
    failures: Failures | None = None
    autoscale: Autoscale | None = None


@dataclass(frozen=True)
class SystemSpec:
    """One stage (the fields below) or a pipeline (``stages``), plus fan-out or hedging."""

    service: Distribution
    replicas: int = 1
    servers: int = 1
    queue_limit: int | None = None
    routing: str = "round_robin"
    power_d: int = 2
    batching: Batching | None = None
    slow_replicas: tuple[int, ...] = ()
    slow_factor: float = 1.0
    straggler_p: float = 0.0
    straggler_factor: float = 1.0
    fanout: int = 1
    fanout_k: int | None = None  # None: wait for all n
    hedge_after_ns: int | None = None
    # Hedge after this quantile of recent answers (The Tail at Scale's "p95"); the
    # delay starts at hedge_after_ns and follows the last answers from then on.
    hedge_quantile: float | None = None
    failures: Failures | None = None
    autoscale: Autoscale | None = None
    stages: tuple[StageSpec, ...] = ()

    def tiers(self) -> tuple[StageSpec, ...]:
        if self.stages:
            return self.stages
        return (
            StageSpec(
                self.service,
                "server",
                self.replicas,
                self.servers,
                self.queue_limit,
                self.routing,
                self.power_d,
                self.batching,
                self.slow_replicas,
                self.slow_factor,
                self.straggler_p,
                self.straggler_factor,
                self.failures,
                self.autoscale,
            ),
        )


@dataclass
class SimResult:
    """Per request (client view) and per leg (server view); times in ns, -1 absent."""

    done_ns: np.ndarray
    status: np.ndarray  # OK, REJECTED, FAILED or UNAVAILABLE
    replica: np.ndarray
    leg_parent: np.ndarray
    leg_sent_ns: np.ndarray
    leg_start_ns: np.ndarray
    leg_done_ns: np.ndarray
    leg_status: np.ndarray  # OK, REJECTED, CANCELLED, FAILED or UNAVAILABLE
    leg_replica: np.ndarray
    events: int
    stages: list[dict[str, Any]] = field(default_factory=list)
    hedge_delay_ns: int | None = None  # the hedge delay in force at the end


@dataclass(eq=False)
class _Leg:
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


@dataclass(eq=False)
class _Replica:
    index: int
    slow: float
    state: int = UP
    queue: deque[_Leg] = field(default_factory=deque)
    busy: int = 0
    running: set[_Leg] = field(default_factory=set)
    timer_at: int = -1  # dynamic batching: the pending fill deadline
    epoch: int = 0  # bumped on a crash: completions from before it are void


class _Draws:
    """Service times for one stage: a buffer refilled from the stage's own stream."""

    def __init__(self, spec: StageSpec, rng: np.random.Generator, first: list[int]) -> None:
        self.spec, self.rng, self.buf, self.pos = spec, rng, first, 0

    def next(self) -> int:
        if self.pos >= len(self.buf):
            self.buf, self.pos = draw_work(self.spec, self.rng, _DRAW_CHUNK), 0
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


class _Uniforms:
    """Uniform [0, 1) draws in blocks (one NumPy call per 4096 routing decisions)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.buf: list[float] = []
        self.pos = 0

    def next(self) -> float:
        if self.pos >= len(self.buf):
            self.buf, self.pos = self.rng.random(_DRAW_CHUNK).tolist(), 0
        self.pos += 1
        return self.buf[self.pos - 1]


@dataclass(eq=False)
class _Tier:
    spec: StageSpec
    index: int
    reps: list[_Replica]
    draws: _Draws | None = None
    live: list[int] = field(default_factory=list)  # UP replicas, ascending
    pending: deque[_Leg] = field(default_factory=deque)  # waiting for a replica to start
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


class System:
    def __init__(self, spec: SystemSpec, rng: np.random.Generator) -> None:
        tiers = spec.tiers()
        for t in tiers:
            if t.routing not in ROUTING:
                raise ValueError(f"routing must be one of {ROUTING}")
        if len(tiers) > 1 and (spec.fanout > 1 or spec.hedge_after_ns is not None):
            raise ValueError("fan-out and hedging apply to single-stage systems")
        self.spec = spec
        self.rng = rng
        self.k = Kernel()
        self.tiers = [_Tier(t, i, self._replicas(t)) for i, t in enumerate(tiers)]
        self.legs: list[_Leg] = []
        self._need = 0
        self._open: dict[int, list[_Leg]] = {}
        self._groups = 0
        self._hedge_ns = spec.hedge_after_ns
        self._answers: deque[int] = deque(maxlen=HEDGE_WINDOW)
        self._since_update = 0

    @staticmethod
    def _replicas(t: StageSpec) -> list[_Replica]:
        a = t.autoscale
        first = t.replicas if a is None else min(max(t.replicas, a.min_replicas), a.max_replicas)
        total = first if a is None else max(first, a.max_replicas)
        return [
            _Replica(i, t.slow_factor if i in t.slow_replicas else 1.0, UP if i < first else OFF)
            for i in range(total)
        ]

    # -- requests -------------------------------------------------------------

    def run(self, arrivals_ns: np.ndarray, work_ns: list[int] | None = None) -> SimResult:
        """Serve ``arrivals_ns``; ``work_ns`` replaces the first stage's service draws
        (one per leg, in the order legs are sent), for side-by-side checks."""
        n = len(arrivals_ns)
        self.done = np.full(n, -1, dtype=np.int64)
        self.status = np.full(n, -1, dtype=np.int64)
        self.replica = np.full(n, -1, dtype=np.int64)
        self.good = np.zeros(n, dtype=np.int64)
        self.bad = np.zeros(n, dtype=np.int64)
        spec = self.spec
        self._need = spec.fanout_k or spec.fanout
        legs_per_request = spec.fanout + (1 if spec.hedge_after_ns is not None else 0)
        # The first stage's draws come first from the run's generator, as the vectorised
        # path draws them, so both engines serve identical work for identical inputs.
        first = draw_work(self.tiers[0].spec, self.rng, n * legs_per_request)
        if work_ns is not None:
            first = list(work_ns)
        streams = self.rng.spawn(3 + len(self.tiers))
        self._u = _Uniforms(streams[0])
        self._fail_rng = streams[1]
        for tier, stream in zip(self.tiers, streams[3:], strict=True):
            tier.draws = _Draws(tier.spec, stream, first if tier.index == 0 else [])
            tier.live = [r.index for r in tier.reps if r.state == UP]
            tier.track = tier.spec.autoscale is not None
            self._mark(tier)
            self._start_clocks(tier)
        self._arrivals = arrivals_ns.tolist()
        if n:
            self.k.at(self._arrivals[0], self._arrive, 0, priority=2)
        self.k.run()
        for tier in self.tiers:
            self._mark(tier)
        return self._result()

    def _new_leg(self, request: int) -> _Leg:
        draws = self.tiers[0].draws
        assert draws is not None
        leg = _Leg(request, self.k.now, draws.next())
        self.legs.append(leg)
        self._open.setdefault(request, []).append(leg)
        return leg

    def _arrive(self, i: int) -> None:
        if i + 1 < len(self._arrivals):  # chained: the heap holds one future arrival
            self.k.at(self._arrivals[i + 1], self._arrive, i + 1, priority=2)
        for _ in range(self.spec.fanout):
            if self.done[i] >= 0:  # rejections already decided it: send no more legs
                break
            self._send(self._new_leg(i))
        if self._hedge_ns is not None:
            self.k.at(self.k.now + self._hedge_ns, self._hedge, i)

    def _hedge(self, i: int) -> None:
        if self.done[i] >= 0:
            return
        first = self._open[i][0].replica
        self._send(self._new_leg(i), avoid=first)

    def _leg_finished(self, leg: _Leg) -> None:
        i = leg.request
        if self.done[i] >= 0:
            return
        if leg.status == OK:
            if self.spec.hedge_quantile is not None:
                self._learn_answer(self.k.now - leg.sent)
            self.good[i] += 1
            if self.good[i] >= self._need:
                self._finish(i, OK, leg.replica)
        else:
            self.bad[i] += 1
            alive = sum(1 for x in self._open[i] if x.status < 0)
            alive += max(0, self.spec.fanout - len(self._open[i]))  # legs not sent yet
            hedge_pending = self.spec.hedge_after_ns is not None and len(self._open[i]) == 1
            if self.good[i] + alive < self._need and not hedge_pending:
                self._finish(i, leg.status, leg.replica)

    def _learn_answer(self, latency_ns: int) -> None:
        """Track the hedge quantile over the last answers (recomputed every 128)."""
        q = self.spec.hedge_quantile
        assert q is not None
        self._answers.append(latency_ns)
        self._since_update += 1
        if self._since_update >= 128:
            self._since_update = 0
            self._hedge_ns = int(np.quantile(np.fromiter(self._answers, np.int64), q))

    def _finish(self, i: int, status: int, replica: int) -> None:
        self.done[i], self.status[i], self.replica[i] = self.k.now, status, replica
        for other in self._open.pop(i, []):
            if other.status < 0:
                self._cancel(other)

    # -- routing --------------------------------------------------------------

    def _route(self, tier: _Tier, avoid: int = -1) -> int:
        """A live replica of ``tier`` (not ``avoid`` when another is live), or -1."""
        spec, reps = tier.spec, tier.reps
        live = tier.live
        if not live:
            return -1
        choices = live if avoid < 0 or len(live) == 1 else [j for j in live if j != avoid]
        m = len(choices)
        if m == 1:
            return choices[0]
        if spec.routing == "round_robin":
            tier.rr += 1
            return choices[tier.rr % m]
        u = self._u.next
        if spec.routing == "random":
            return choices[int(u() * m)]
        if spec.routing == "power_of_d":
            # d distinct replicas by a partial Fisher-Yates shuffle; the least loaded wins.
            pool = list(choices)
            best, best_load = -1, -1
            for j in range(min(spec.power_d, m)):
                pick = j + int(u() * (m - j))
                pool[j], pool[pick] = pool[pick], pool[j]
                r = reps[pool[j]]
                load = len(r.queue) + len(r.running)
                if best < 0 or load < best_load:
                    best, best_load = pool[j], load
            return best
        # jsq: fewest waiting, then fewest in service; least_outstanding: fewest of both.
        # Without batching the two orders agree (a replica with a queue has every server
        # busy), so they pick alike; with batching a queue can wait beside idle servers.
        # Ties go round robin (as NGINX least_conn and HAProxy leastconn do): the first
        # tied replica at or after the one after the last choice.
        weight = 1 << 32 if spec.routing == "jsq" else 1
        best_load, ties = -1, []
        for j in choices:
            r = reps[j]
            load = len(r.queue) * weight + len(r.running)
            if best_load < 0 or load < best_load:
                best_load, ties = load, [j]
            elif load == best_load:
                ties.append(j)
        pick = next((j for j in ties if j >= tier.tie), ties[0])
        tier.tie = pick + 1
        return pick

    # -- replicas -------------------------------------------------------------

    def _send(self, leg: _Leg, avoid: int = -1, since: int = -1) -> None:
        """Route ``leg`` in its stage; ``since`` keeps an earlier queue-join time (a leg
        parked for want of a replica has been waiting since it was parked)."""
        tier = self.tiers[leg.stage]
        leg.queued = self.k.now if since < 0 else since
        r = self._route(tier, avoid)
        if r < 0:
            self._no_replica(tier, leg)
            return
        leg.replica = r
        rep = tier.reps[r]
        limit = tier.spec.queue_limit
        if limit is not None and len(rep.queue) >= limit and rep.busy >= tier.spec.servers:
            leg.status, leg.done = REJECTED, self.k.now
            self._leg_finished(leg)
            return
        rep.queue.append(leg)
        if tier.track:
            self._flow(tier, 1, 1)
        self._dispatch(tier, r)

    def _no_replica(self, tier: _Tier, leg: _Leg) -> None:
        """Nobody is up: wait for a starting replica (an activator's buffer), or refuse."""
        a = tier.spec.autoscale
        if a is not None and (tier.count(STARTING) or a.min_replicas == 0):
            tier.pending.append(leg)
            if tier.track:
                self._flow(tier, 1, 1)
            if not tier.count(STARTING):
                self._scale_to(tier, 1)  # scale from zero: the first request wakes one
            return
        leg.status, leg.done = UNAVAILABLE, self.k.now
        self._leg_finished(leg)

    def _dispatch(self, tier: _Tier, r: int) -> None:
        rep, spec = tier.reps[r], tier.spec
        if rep.state not in (UP, DRAINING):
            return
        while rep.queue and rep.busy < spec.servers:
            if spec.batching is None:
                self._start(tier, [rep.queue.popleft()], r)
                continue
            batch = self._take_batch(tier, r)
            if not batch:
                return
            self._start(tier, batch, r)

    def _take_batch(self, tier: _Tier, r: int) -> list[_Leg]:
        rep = tier.reps[r]
        b = tier.spec.batching
        assert b is not None
        if len(rep.queue) >= b.size:
            return [rep.queue.popleft() for _ in range(b.size)]
        if b.mode == "static":
            return []
        fill_by = rep.queue[0].queued + b.max_wait_ns
        if self.k.now >= fill_by:
            return [rep.queue.popleft() for _ in range(len(rep.queue))]
        if rep.timer_at != fill_by:
            rep.timer_at = fill_by
            self.k.at(fill_by, self._dispatch, tier, r)
        return []

    def _start(self, tier: _Tier, batch: list[_Leg], r: int) -> None:
        rep, spec = tier.reps[r], tier.spec
        now = self.k.now
        if spec.batching is None:
            cost = batch[0].work
        else:
            cost = spec.batching.base_ns + spec.batching.per_item_ns * len(batch)
        cost = round(cost * rep.slow)
        rep.busy += 1
        tier.busy_ns += cost
        if tier.track:
            self._flow(tier, 0, -len(batch))
        tier.started += len(batch)
        end = now + cost
        self._groups += 1
        for leg in batch:
            leg.group = self._groups
            if leg.start < 0:
                leg.start = now
            tier.wait_ns += now - leg.queued
            tier.service_ns += cost
            leg.end = end
            rep.running.add(leg)
        self.k.at(end, self._complete, tier, batch, r, [leg.token for leg in batch], rep.epoch)

    def _complete(
        self, tier: _Tier, batch: list[_Leg], r: int, tokens: list[int], epoch: int
    ) -> None:
        rep = tier.reps[r]
        if epoch != rep.epoch:  # the replica crashed meanwhile: this work was lost
            return
        live = [leg for leg, t in zip(batch, tokens, strict=True) if leg.token == t]
        # A batch holds its server to the end; a lone leg cut short freed it at the cut.
        if live or tier.spec.batching is not None:
            rep.busy -= 1
        now = self.k.now
        last = tier.index == len(self.tiers) - 1
        for leg in live:
            rep.running.discard(leg)
            tier.completed += 1
            if tier.track:
                tier.recent_ns.append(now - leg.queued)
                self._flow(tier, -1, 0)
            if not last:  # a pipeline: on to the next stage, with that stage's work
                nxt = self.tiers[tier.index + 1]
                assert nxt.draws is not None
                leg.stage, leg.work = nxt.index, nxt.draws.next()
                self._send(leg)
                continue
            leg.status, leg.done = OK, now
            self._leg_finished(leg)
        self._dispatch(tier, r)
        self._maybe_off(tier, rep)

    def _cancel(self, leg: _Leg) -> None:
        """The request no longer needs this leg: drop it from the queue or cut its service."""
        tier = self.tiers[leg.stage]
        leg.status, leg.done = CANCELLED, self.k.now
        leg.token += 1
        if leg.replica < 0:  # parked, waiting for a replica to start
            if leg in tier.pending:
                tier.pending.remove(leg)
                if tier.track:
                    self._flow(tier, -1, -1)
            return
        rep = tier.reps[leg.replica]
        if leg not in rep.running:
            if leg in rep.queue:
                rep.queue.remove(leg)
                if tier.track:
                    self._flow(tier, -1, -1)
            return
        rep.running.discard(leg)
        if tier.track:
            self._flow(tier, -1, 0)
        if tier.spec.batching is None:  # a lone leg in service: its server is free now
            rep.busy -= 1
            tier.busy_ns -= leg.end - self.k.now
            self._dispatch(tier, leg.replica)
            self._maybe_off(tier, rep)

    # -- failures -------------------------------------------------------------

    def _start_clocks(self, tier: _Tier) -> None:
        f, a = tier.spec.failures, tier.spec.autoscale
        if f is not None:
            for rep in tier.reps:
                if rep.state == UP:
                    self._arm_failure(tier, rep)
        if a is not None:
            self.k.daemon(a.interval_ns, self._tick, tier)

    def _arm_failure(self, tier: _Tier, rep: _Replica) -> None:
        f = tier.spec.failures
        assert f is not None
        up_ns = int(f.mtbf.sample(self._fail_rng, 1)[0])
        self.k.daemon(self.k.now + max(up_ns, 1), self._crash, tier, rep, rep.epoch)

    def _crash(self, tier: _Tier, rep: _Replica, epoch: int) -> None:
        if rep.state not in (UP, DRAINING) or epoch != rep.epoch:
            return  # scaled away (or restarted) since this clock was armed
        f = tier.spec.failures
        assert f is not None
        was = rep.state
        rep.state, rep.epoch, rep.busy, rep.timer_at = DOWN, rep.epoch + 1, 0, -1
        if rep.index in tier.live:
            tier.live.remove(rep.index)
        tier.crashes += 1
        self._mark(tier)
        victims = [*rep.queue, *sorted(rep.running, key=lambda x: x.queued)]
        if tier.track:
            self._flow(tier, -len(victims), -len(rep.queue))
        rep.queue.clear()
        rep.running.clear()
        now = self.k.now
        # Server time after the crash was never used: each service in progress (a
        # batch once) gives back what it had left.
        cut = {leg.group: leg.end for leg in victims if leg.end > now}
        tier.busy_ns -= sum(end - now for end in cut.values())
        for leg in victims:
            leg.token += 1
            leg.end = -1
            if f.retry and leg.tries < f.max_retries:
                leg.tries += 1
                tier.retries += 1
                leg.replica = -1
                self._send(leg)
            else:
                leg.status, leg.done = FAILED, now
                self._leg_finished(leg)
        if was == DRAINING:  # it was on its way out: it stays off
            rep.state = OFF
            self._mark(tier)
            return
        down_ns = int(f.mttr.sample(self._fail_rng, 1)[0])
        self.k.daemon(now + max(down_ns, 1), self._repair, tier, rep, rep.epoch)

    def _repair(self, tier: _Tier, rep: _Replica, epoch: int) -> None:
        if rep.state != DOWN or epoch != rep.epoch:
            return
        self._ready(tier, rep)
        self._arm_failure(tier, rep)

    def _ready(self, tier: _Tier, rep: _Replica) -> None:
        """``rep`` takes legs from now on; legs parked for want of a replica go first."""
        rep.state = UP
        tier.live.append(rep.index)
        tier.live.sort()
        self._mark(tier)
        parked, tier.pending = tier.pending, deque()
        if tier.track:
            self._flow(tier, -len(parked), -len(parked))
        for leg in parked:
            self._send(leg, since=leg.queued)

    # -- autoscaling ----------------------------------------------------------

    def _tick(self, tier: _Tier) -> None:
        a = tier.spec.autoscale
        assert a is not None
        self.k.daemon(self.k.now + a.interval_ns, self._tick, tier)
        current = tier.count(UP, STARTING, DOWN)
        desired = self._recommend(tier, a, current)
        tier.recent_ns = []
        if desired is None:
            return
        now = self.k.now
        tier.recs.append((now, desired))
        while tier.recs and tier.recs[0][0] < now - a.stabilization_ns:
            tier.recs.popleft()
        if desired < current:  # scale down only as far as the window's highest advice
            desired = min(current, max(d for _, d in tier.recs))
        if desired != current:
            self._scale_to(tier, desired)

    def _recommend(self, tier: _Tier, a: Autoscale, current: int) -> int | None:
        """The HPA rule: ``ceil(current x value / target)``, unchanged within the tolerance."""
        if a.metric == "p99":
            if not tier.recent_ns:
                return None  # no traffic finished this interval: no evidence either way
            value = float(np.percentile(tier.recent_ns, 99))
            ratio = value / a.target
        else:
            self._flow(tier, 0, 0)
            sys0, wait0 = tier.tick_areas
            tier.tick_areas = (tier.sys_area, tier.wait_area)
            area = tier.wait_area - wait0 if a.metric == "queue" else tier.sys_area - sys0
            ratio = area / a.interval_ns / (a.target * max(current, 1))
        if current and abs(ratio - 1.0) <= a.tolerance:
            return current
        desired = math.ceil(max(current, 1) * ratio - 1e-9)
        return min(max(desired, a.min_replicas), a.max_replicas)

    def _scale_to(self, tier: _Tier, desired: int) -> None:
        a = tier.spec.autoscale
        assert a is not None
        current = tier.count(UP, STARTING, DOWN)
        if desired > current:
            for _ in range(desired - current):
                self._add_replica(tier, a)
        else:
            for _ in range(current - desired):
                self._remove_replica(tier)
        self._mark(tier)

    def _add_replica(self, tier: _Tier, a: Autoscale) -> None:
        draining = [r for r in tier.reps if r.state == DRAINING]
        if draining:  # still warm: take it back at once
            rep = draining[0]
            rep.state = UP
            tier.live.append(rep.index)
            tier.live.sort()
            return
        rep = next(r for r in tier.reps if r.state == OFF)
        rep.state = STARTING
        rep.epoch += 1
        self.k.at(self.k.now + a.cold_start_ns, self._warm, tier, rep, rep.epoch)

    def _warm(self, tier: _Tier, rep: _Replica, epoch: int) -> None:
        if rep.state != STARTING or epoch != rep.epoch:
            return  # cancelled before it was ready
        self._ready(tier, rep)
        if tier.spec.failures is not None:
            self._arm_failure(tier, rep)

    def _remove_replica(self, tier: _Tier) -> None:
        starting = [r for r in tier.reps if r.state == STARTING]
        if starting:  # not ready yet: cancel the newest start
            starting[-1].state = OFF
            starting[-1].epoch += 1
            return
        up = [tier.reps[j] for j in tier.live]
        if not up:
            return
        # The least loaded replica goes (ties: the newest), after draining its queue.
        rep = min(reversed(up), key=lambda r: len(r.queue) + len(r.running))
        rep.state = DRAINING
        tier.live.remove(rep.index)
        self._maybe_off(tier, rep)

    def _maybe_off(self, tier: _Tier, rep: _Replica) -> None:
        if rep.state == DRAINING and not rep.queue and not rep.running:
            rep.state = OFF
            rep.epoch += 1
            self._mark(tier)

    def _flow(self, tier: _Tier, d_inflight: int, d_waiting: int) -> None:
        now = self.k.now
        tier.sys_area += tier.inflight * (now - tier.flow_t)
        tier.wait_area += tier.waiting * (now - tier.flow_t)
        tier.flow_t = now
        tier.inflight += d_inflight
        tier.waiting += d_waiting

    def _mark(self, tier: _Tier) -> None:
        """Integrate the replica counts up to now, and log a change in the timeline."""
        now = self.k.now
        ready = tier.count(UP)
        billed = tier.count(*_BILLED)
        if tier.timeline:
            t0, r0, b0 = tier.timeline[-1]
            tier.ready_area += r0 * (now - tier.last_t)
            tier.billed_area += b0 * (now - tier.last_t)
            tier.last_t = now
            if (r0, b0) == (ready, billed):
                return
            if t0 == now:  # several changes at one instant: keep the last
                tier.timeline.pop()
                if tier.timeline and tier.timeline[-1][1:] == (ready, billed):
                    return
        tier.last_t = now
        tier.timeline.append((now, ready, billed))

    # -- results --------------------------------------------------------------

    def _stage_stats(self, tier: _Tier) -> dict[str, Any]:
        spec = tier.spec
        out: dict[str, Any] = {
            "name": spec.name,
            "legs_started": tier.started,
            "legs_completed": tier.completed,
            "mean_wait_ms": round(tier.wait_ns / tier.started / 1e6, 4) if tier.started else None,
            "mean_service_ms": round(tier.service_ns / tier.started / 1e6, 4)
            if tier.started
            else None,
            "utilization": round(tier.busy_ns / (spec.servers * tier.ready_area), 4)
            if tier.ready_area > 0
            else None,
        }
        if spec.failures is not None:
            out["crashes"] = tier.crashes
            out["retries"] = tier.retries
            up_share = tier.ready_area / tier.billed_area if tier.billed_area else None
            out["availability"] = round(up_share, 5) if up_share is not None else None
        if spec.autoscale is not None or spec.failures is not None:
            span = max(self.k.now, 1)
            out["mean_ready_replicas"] = round(tier.ready_area / span, 3)
            out["replica_seconds"] = round(tier.billed_area / 1e9, 3)
            out["timeline"] = [
                {"t_s": round(t / 1e9, 3), "ready": r, "billed": b} for t, r, b in tier.timeline
            ]
        return out

    def _result(self) -> SimResult:
        legs = self.legs

        def col(name: str) -> np.ndarray:
            return np.fromiter((getattr(x, name) for x in legs), np.int64, len(legs))

        return SimResult(
            self.done,
            self.status,
            self.replica,
            col("request"),
            col("sent"),
            col("start"),
            col("done"),
            col("status"),
            col("replica"),
            self.k.events,
            [self._stage_stats(t) for t in self.tiers],
            self._hedge_ns,
        )
