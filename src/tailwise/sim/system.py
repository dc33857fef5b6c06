"""The event-driven serving model: replicas, routing, batching, stragglers, hedging, fan-out.

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
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tailwise.distributions import Distribution
from tailwise.sim.kernel import Kernel

ROUTING = ("round_robin", "random", "jsq", "least_outstanding", "power_of_d")
OK, REJECTED, CANCELLED = 0, 1, 2


@dataclass(frozen=True)
class Batching:
    mode: str  # "static" | "dynamic"
    size: int
    max_wait_ns: int = 0
    base_ns: int = 0
    per_item_ns: int = 0


@dataclass(frozen=True)
class SystemSpec:
    service: Distribution
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
    fanout: int = 1
    fanout_k: int | None = None  # None: wait for all n
    hedge_after_ns: int | None = None


@dataclass
class SimResult:
    """Per request (client view) and per leg (server view); times in ns, -1 absent."""

    done_ns: np.ndarray
    status: np.ndarray  # OK or REJECTED
    replica: np.ndarray
    leg_parent: np.ndarray
    leg_sent_ns: np.ndarray
    leg_start_ns: np.ndarray
    leg_done_ns: np.ndarray
    leg_status: np.ndarray  # OK, REJECTED or CANCELLED
    leg_replica: np.ndarray
    events: int


@dataclass(eq=False)
class _Leg:
    request: int
    sent: int
    work: int  # ns of service if run alone (batches use their own cost)
    replica: int = -1
    start: int = -1
    done: int = -1
    status: int = -1
    token: int = 0  # bumped on cancel so a stale completion is ignored


@dataclass
class _Replica:
    slow: float
    queue: deque[_Leg] = field(default_factory=deque)
    busy: int = 0
    running: set[_Leg] = field(default_factory=set)
    timer_at: int = -1  # dynamic batching: the pending fill deadline


class System:
    def __init__(self, spec: SystemSpec, rng: np.random.Generator) -> None:
        if spec.routing not in ROUTING:
            raise ValueError(f"routing must be one of {ROUTING}")
        self.spec = spec
        self.rng = rng
        self.k = Kernel()
        self.reps = [
            _Replica(spec.slow_factor if i in spec.slow_replicas else 1.0)
            for i in range(spec.replicas)
        ]
        self.legs: list[_Leg] = []
        self._rr = 0
        self._need = 0
        self._open: dict[int, list[_Leg]] = {}

    # -- requests -------------------------------------------------------------

    def run(self, arrivals_ns: np.ndarray) -> SimResult:
        n = len(arrivals_ns)
        self.done = np.full(n, -1, dtype=np.int64)
        self.status = np.full(n, -1, dtype=np.int64)
        self.replica = np.full(n, -1, dtype=np.int64)
        self.good = np.zeros(n, dtype=np.int64)
        self.bad = np.zeros(n, dtype=np.int64)
        spec = self.spec
        self._need = spec.fanout_k or spec.fanout
        legs_per_request = spec.fanout + (1 if spec.hedge_after_ns is not None else 0)
        draws = self._draw_work(n * legs_per_request)
        self._draws, self._next_draw = draws, 0
        for i, t in enumerate(arrivals_ns.tolist()):
            self.k.at(t, self._arrive, i, priority=1)
        self.k.run()
        return self._result()

    def _draw_work(self, count: int) -> list[int]:
        spec = self.spec
        work = spec.service.sample(self.rng, count).astype(np.float64)
        if spec.straggler_p > 0:
            slow = self.rng.random(count) < spec.straggler_p
            work[slow] *= spec.straggler_factor
        draws: list[int] = np.rint(work).astype(np.int64).tolist()
        return draws

    def _new_leg(self, request: int) -> _Leg:
        work = self._draws[self._next_draw]
        self._next_draw += 1
        leg = _Leg(request, self.k.now, work)
        self.legs.append(leg)
        self._open.setdefault(request, []).append(leg)
        return leg

    def _arrive(self, i: int) -> None:
        for _ in range(self.spec.fanout):
            if self.done[i] >= 0:  # rejections already decided it: send no more legs
                break
            self._send(self._new_leg(i))
        if self.spec.hedge_after_ns is not None:
            self.k.at(self.k.now + self.spec.hedge_after_ns, self._hedge, i)

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
            self.good[i] += 1
            if self.good[i] >= self._need:
                self._finish(i, OK, leg.replica)
        else:
            self.bad[i] += 1
            alive = sum(1 for x in self._open[i] if x.status < 0)
            alive += max(0, self.spec.fanout - len(self._open[i]))  # legs not sent yet
            hedge_pending = self.spec.hedge_after_ns is not None and len(self._open[i]) == 1
            if self.good[i] + alive < self._need and not hedge_pending:
                self._finish(i, REJECTED, leg.replica)

    def _finish(self, i: int, status: int, replica: int) -> None:
        self.done[i], self.status[i], self.replica[i] = self.k.now, status, replica
        for other in self._open.pop(i, []):
            if other.status < 0:
                self._cancel(other)

    # -- routing --------------------------------------------------------------

    def _load(self, r: _Replica, waiting_only: bool) -> int:
        return len(r.queue) + (0 if waiting_only else r.busy)

    def _route(self, avoid: int = -1) -> int:
        spec, reps = self.spec, self.reps
        choices = [i for i in range(len(reps)) if i != avoid] or list(range(len(reps)))
        if spec.routing == "round_robin":
            self._rr += 1
            return choices[self._rr % len(choices)]
        if spec.routing == "random":
            return choices[int(self.rng.integers(len(choices)))]
        if spec.routing == "power_of_d":
            d = min(spec.power_d, len(choices))
            picks: list[int] = self.rng.choice(len(choices), d, replace=False).tolist()
            return min((choices[p] for p in picks), key=lambda j: self._load(reps[j], False))
        waiting_only = spec.routing == "jsq"
        loads = [self._load(reps[j], waiting_only) for j in choices]
        least = min(loads)
        ties = [j for j, load in zip(choices, loads, strict=True) if load == least]
        return int(ties[int(self.rng.integers(len(ties)))]) if len(ties) > 1 else int(ties[0])

    # -- replicas -------------------------------------------------------------

    def _send(self, leg: _Leg, avoid: int = -1) -> None:
        leg.replica = self._route(avoid)
        rep = self.reps[leg.replica]
        limit = self.spec.queue_limit
        if limit is not None and len(rep.queue) >= limit and rep.busy >= self.spec.servers:
            leg.status, leg.done = REJECTED, self.k.now
            self._leg_finished(leg)
            return
        rep.queue.append(leg)
        self._dispatch(leg.replica)

    def _dispatch(self, r: int) -> None:
        rep, spec = self.reps[r], self.spec
        while rep.queue and rep.busy < spec.servers:
            if spec.batching is None:
                self._start([rep.queue.popleft()], r)
                continue
            batch = self._take_batch(r)
            if not batch:
                return
            self._start(batch, r)

    def _take_batch(self, r: int) -> list[_Leg]:
        rep = self.reps[r]
        b = self.spec.batching
        assert b is not None
        if len(rep.queue) >= b.size:
            return [rep.queue.popleft() for _ in range(b.size)]
        if b.mode == "static":
            return []
        fill_by = rep.queue[0].sent + b.max_wait_ns
        if self.k.now >= fill_by:
            return [rep.queue.popleft() for _ in range(len(rep.queue))]
        if rep.timer_at != fill_by:
            rep.timer_at = fill_by
            self.k.at(fill_by, self._dispatch, r)
        return []

    def _start(self, batch: list[_Leg], r: int) -> None:
        rep, spec = self.reps[r], self.spec
        now = self.k.now
        if spec.batching is None:
            cost = batch[0].work
        else:
            cost = spec.batching.base_ns + spec.batching.per_item_ns * len(batch)
        cost = round(cost * rep.slow)
        rep.busy += 1
        for leg in batch:
            leg.start = now
            rep.running.add(leg)
        self.k.at(now + cost, self._complete, batch, r, [leg.token for leg in batch])

    def _complete(self, batch: list[_Leg], r: int, tokens: list[int]) -> None:
        rep = self.reps[r]
        live = [leg for leg, t in zip(batch, tokens, strict=True) if leg.token == t]
        # A batch holds its server to the end; a lone leg cut short freed it at the cut.
        if live or self.spec.batching is not None:
            rep.busy -= 1
        for leg in live:
            rep.running.discard(leg)
            leg.status, leg.done = OK, self.k.now
            self._leg_finished(leg)
        self._dispatch(r)

    def _cancel(self, leg: _Leg) -> None:
        """The request no longer needs this leg: drop it from the queue or cut its service."""
        rep = self.reps[leg.replica]
        leg.status, leg.done = CANCELLED, self.k.now
        leg.token += 1
        if leg.start < 0:
            rep.queue.remove(leg)
            return
        rep.running.discard(leg)
        if self.spec.batching is None:  # a lone leg in service: its server is free now
            rep.busy -= 1
            self._dispatch(leg.replica)

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
        )
