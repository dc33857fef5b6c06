"""The event-driven serving model: tiers of replicas with routing, batching, stragglers,
hedging, fan-out, failures, autoscaling and pipelines.

A *request* is what a client sees; it sends one or more *legs* (a fan-out of
``n``, or a hedge after ``hedge_after``) to replicas chosen by the router
(:mod:`tailwise.sim.routing`). Each replica has ``servers`` FCFS servers and
a queue, optionally bounded (a leg that finds it full is rejected at once). A
server serves one leg at a time, with a time drawn from the service
distribution, or a batch: ``static`` waits for exactly ``batch_size`` legs,
``dynamic`` takes up to ``batch_size`` once the oldest has waited
``max_wait``; a batch of B costs ``c0 + c1 B``.

Stragglers: a replica may be ``slow`` (every service on it is k times longer),
and a fraction of legs may be k times slower wherever they run.

A request finishes when ``k`` of its ``n`` legs succeeded (hedged: the first);
what happens to its other legs is the spec's ``cancel`` mode: ``instant``
removes them from their queue or cuts them short in service, freeing the
server at once (free cancellation); ``queued_only`` removes the queued ones
but lets a leg in service run to its end (most servers cannot abort work in
flight); ``none`` lets every leg run to its end. A leg that runs on is an
*orphan*: it holds its server, and ends ``DISCARDED``. The server time all
legs used, beside the full work of the legs each request needed, is in
:class:`SimResult` (``busy_ns``, ``needed_work_ns``).

**Pipelines**: with several stages a leg that finishes stage ``s`` is sent on
to stage ``s + 1`` (its own replicas, router, batching, service law); the
request is done when the last stage is. **Failures** crash and repair
replicas (:mod:`tailwise.sim.failures`): their legs fail (error ``reset``) or
are re-sent; with no replica up a leg is refused (``unavailable``).
**Autoscaling** sets a stage's replica count the way the Kubernetes HPA does
(:mod:`tailwise.sim.autoscale`). The specification and the result types are
in :mod:`tailwise.sim.system_spec`; the legs, replicas and stages the loop
moves are in :mod:`tailwise.sim.fleet`.

Random choices (routing, tie breaks, failure clocks) come from their own
streams, spawned from the run's generator after the first stage's service
draws, so adding a router never changes the service times.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from tailwise.sim.autoscale import Autoscaler
from tailwise.sim.failures import Failover
from tailwise.sim.fleet import (
    DRAINING,
    OFF,
    STARTING,
    UP,
    Draws,
    Leg,
    Replica,
    Tier,
    Uniforms,
    draw_work,
)
from tailwise.sim.kernel import Kernel
from tailwise.sim.routing import ROUTING, route
from tailwise.sim.system_spec import (
    CANCEL_MODES,
    CANCELLED,
    DISCARDED,
    OK,
    REJECTED,
    UNAVAILABLE,
    SimResult,
    StageSpec,
    SystemSpec,
)

HEDGE_WINDOW = 2048  # answers a percentile hedge delay is taken over


class System:
    """One run of the model: requests in, legs through the stages, a :class:`SimResult` out."""

    def __init__(self, spec: SystemSpec, rng: np.random.Generator) -> None:
        tiers = spec.tiers()
        for t in tiers:
            if t.routing not in ROUTING:
                raise ValueError(f"routing must be one of {ROUTING}")
        if spec.cancel not in CANCEL_MODES:
            raise ValueError(f"cancel must be one of {CANCEL_MODES}")
        if len(tiers) > 1 and (spec.fanout > 1 or spec.hedge_after_ns is not None):
            raise ValueError("fan-out and hedging apply to single-stage systems")
        self.spec = spec
        self.rng = rng
        self.k = Kernel()
        self.tiers = [Tier(t, i, self._replicas(t)) for i, t in enumerate(tiers)]
        self.legs: list[Leg] = []
        self._needed: list[Leg] = []  # the first k legs of each request
        self._need = 0
        self._open: dict[int, list[Leg]] = {}
        self._groups = 0
        self._hedge_ns = spec.hedge_after_ns
        self._answers: deque[int] = deque(maxlen=HEDGE_WINDOW)
        self._since_update = 0

    @staticmethod
    def _replicas(t: StageSpec) -> list[Replica]:
        a = t.autoscale
        first = t.replicas if a is None else min(max(t.replicas, a.min_replicas), a.max_replicas)
        total = first if a is None else max(first, a.max_replicas)
        return [
            Replica(i, t.slow_factor if i in t.slow_replicas else 1.0, UP if i < first else OFF)
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
        self._u = Uniforms(streams[0])
        self._failover = Failover(self.k, streams[1], self)
        self._autoscaler = Autoscaler(self.k, self._failover)
        for tier, stream in zip(self.tiers, streams[3:], strict=True):
            tier.draws = Draws(tier.spec, stream, first if tier.index == 0 else [])
            tier.live = [r.index for r in tier.reps if r.state == UP]
            tier.track = tier.spec.autoscale is not None
            tier.mark(self.k.now)
            self._failover.start(tier)
            self._autoscaler.start(tier)
        self._arrivals = arrivals_ns.tolist()
        if n:
            self.k.at(self._arrivals[0], self._arrive, 0, priority=2)
        self.k.run()
        for tier in self.tiers:
            tier.mark(self.k.now)
        return self._result()

    def _new_leg(self, request: int) -> Leg:
        draws = self.tiers[0].draws
        assert draws is not None
        leg = Leg(request, self.k.now, draws.next())
        self.legs.append(leg)
        mine = self._open.setdefault(request, [])
        if len(mine) < self._need:
            self._needed.append(leg)
        mine.append(leg)
        return leg

    def _arrive(self, i: int) -> None:
        if i + 1 < len(self._arrivals):  # chained: the heap holds one future arrival
            self.k.at(self._arrivals[i + 1], self._arrive, i + 1, priority=2)
        for _ in range(self.spec.fanout):
            if self.done[i] >= 0:  # rejections already decided it: send no more legs
                break
            self.send(self._new_leg(i))
        if self._hedge_ns is not None:
            self.k.at(self.k.now + self._hedge_ns, self._hedge, i)

    def _hedge(self, i: int) -> None:
        if self.done[i] >= 0:
            return
        first = self._open[i][0].replica
        self.send(self._new_leg(i), avoid=first)

    def leg_finished(self, leg: Leg) -> None:
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
                self._let_go(other)

    def _let_go(self, leg: Leg) -> None:
        """A decided request's unfinished leg: cancelled, or an orphan that runs on."""
        mode = self.spec.cancel
        if mode == "queued_only" and leg.replica >= 0:
            in_service = leg in self.tiers[leg.stage].reps[leg.replica].running
        else:
            in_service = False
        if mode == "instant" or (mode == "queued_only" and not in_service):
            self._cancel(leg)
        else:
            leg.orphan = True

    # -- legs in a stage -------------------------------------------------------

    def send(self, leg: Leg, avoid: int = -1, since: int = -1) -> None:
        """Route ``leg`` in its stage; ``since`` keeps an earlier queue-join time (a leg
        parked for want of a replica has been waiting since it was parked)."""
        tier = self.tiers[leg.stage]
        leg.queued = self.k.now if since < 0 else since
        r = route(tier, self._u, avoid)
        if r < 0:
            self._no_replica(tier, leg)
            return
        leg.replica = r
        rep = tier.reps[r]
        limit = tier.spec.queue_limit
        if limit is not None and len(rep.queue) >= limit and rep.busy >= tier.spec.servers:
            leg.status, leg.done = REJECTED, self.k.now
            self.leg_finished(leg)
            return
        rep.queue.append(leg)
        if tier.track:
            tier.flow(self.k.now, 1, 1)
        self._dispatch(tier, r)

    def _no_replica(self, tier: Tier, leg: Leg) -> None:
        """Nobody is up: wait for a starting replica (an activator's buffer), or refuse."""
        a = tier.spec.autoscale
        if a is not None and (tier.count(STARTING) or a.min_replicas == 0):
            tier.pending.append(leg)
            if tier.track:
                tier.flow(self.k.now, 1, 1)
            if not tier.count(STARTING):
                self._autoscaler.scale_to(tier, 1)  # scale from zero: the first request wakes one
            return
        leg.status, leg.done = UNAVAILABLE, self.k.now
        self.leg_finished(leg)

    def _dispatch(self, tier: Tier, r: int) -> None:
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

    def _take_batch(self, tier: Tier, r: int) -> list[Leg]:
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

    def _start(self, tier: Tier, batch: list[Leg], r: int) -> None:
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
            tier.flow(now, 0, -len(batch))
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
        self, tier: Tier, batch: list[Leg], r: int, tokens: list[int], epoch: int
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
                tier.flow(now, -1, 0)
            if not last:  # a pipeline: on to the next stage, with that stage's work
                nxt = self.tiers[tier.index + 1]
                assert nxt.draws is not None
                leg.stage, leg.work = nxt.index, nxt.draws.next()
                self.send(leg)
                continue
            if leg.orphan:  # served to the end for nobody: its answer is thrown away
                leg.status, leg.done = DISCARDED, now
                continue
            leg.status, leg.done = OK, now
            self.leg_finished(leg)
        self._dispatch(tier, r)
        tier.retire_if_drained(rep, now)

    def _cancel(self, leg: Leg) -> None:
        """The request no longer needs this leg: drop it from the queue or cut its service."""
        tier = self.tiers[leg.stage]
        leg.status, leg.done = CANCELLED, self.k.now
        leg.token += 1
        if leg.replica < 0:  # parked, waiting for a replica to start
            if leg in tier.pending:
                tier.pending.remove(leg)
                if tier.track:
                    tier.flow(self.k.now, -1, -1)
            return
        rep = tier.reps[leg.replica]
        if leg not in rep.running:
            if leg in rep.queue:
                rep.queue.remove(leg)
                if tier.track:
                    tier.flow(self.k.now, -1, -1)
            return
        rep.running.discard(leg)
        if tier.track:
            tier.flow(self.k.now, -1, 0)
        if tier.spec.batching is None:  # a lone leg in service: its server is free now
            rep.busy -= 1
            tier.busy_ns -= leg.end - self.k.now
            self._dispatch(tier, leg.replica)
            tier.retire_if_drained(rep, self.k.now)

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
            [t.stats(max(self.k.now, 1)) for t in self.tiers],
            self._hedge_ns,
            sum(t.busy_ns for t in self.tiers),
            self._needed_work_ns(),
        )

    def _needed_work_ns(self) -> int:
        """The full service time of each request's needed legs where they were routed
        (first stage; legs never routed, or turned away, cost nothing)."""
        if len(self.tiers) > 1:  # a leg's work is its last stage's: no single-stage base
            return 0
        reps = self.tiers[0].reps
        return sum(
            round(leg.work * reps[leg.replica].slow)
            for leg in self._needed
            if leg.replica >= 0 and leg.status != REJECTED
        )
