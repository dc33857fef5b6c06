"""Autoscaling a stage the way the Kubernetes HPA does.

Every ``interval`` the autoscaler reads the stage's metric over the interval
just ended (``concurrency``: time-averaged legs in the stage per replica;
``queue``: time-averaged waiting legs per replica; ``p99``: of the latencies
that finished in it) and recommends ``ceil(current x value / target)``
replicas, keeping the current count within a 10% tolerance. It scales up at
once, and down only as far as the highest recommendation over the
stabilisation window. A new replica takes ``cold_start`` to become ready (a
draining one is taken back at once, still warm); a removed one stops taking
legs and drains what it holds before it goes off. With no replica up and one
starting (or ``min_replicas`` 0), legs wait for it, as behind Knative's
activator; the first such leg wakes one from zero.
"""

from __future__ import annotations

import math

import numpy as np

from tailwise.sim.failures import Failover
from tailwise.sim.fleet import DOWN, DRAINING, OFF, STARTING, UP, Replica, Tier
from tailwise.sim.kernel import Kernel
from tailwise.sim.system_spec import Autoscale

AUTOSCALE_METRICS = ("concurrency", "queue", "p99")


class Autoscaler:
    """The HPA loop of every autoscaled stage, and the replica starts and stops it orders."""

    def __init__(self, kernel: Kernel, failover: Failover) -> None:
        self.k = kernel
        self.failover = failover

    def start(self, tier: Tier) -> None:
        """Start the stage's loop (stages with ``autoscale``)."""
        a = tier.spec.autoscale
        if a is not None:
            self.k.daemon(a.interval_ns, self._tick, tier)

    def _tick(self, tier: Tier) -> None:
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
            self.scale_to(tier, desired)

    def _recommend(self, tier: Tier, a: Autoscale, current: int) -> int | None:
        """The HPA rule: ``ceil(current x value / target)``, unchanged within the tolerance."""
        if a.metric == "p99":
            if not tier.recent_ns:
                return None  # no traffic finished this interval: no evidence either way
            value = float(np.percentile(tier.recent_ns, 99))
            ratio = value / a.target
        else:
            tier.flow(self.k.now, 0, 0)
            sys0, wait0 = tier.tick_areas
            tier.tick_areas = (tier.sys_area, tier.wait_area)
            area = tier.wait_area - wait0 if a.metric == "queue" else tier.sys_area - sys0
            ratio = area / a.interval_ns / (a.target * max(current, 1))
        if current and abs(ratio - 1.0) <= a.tolerance:
            return current
        desired = math.ceil(max(current, 1) * ratio - 1e-9)
        return min(max(desired, a.min_replicas), a.max_replicas)

    def scale_to(self, tier: Tier, desired: int) -> None:
        """Start or stop replicas until ``desired`` are up, starting or down."""
        a = tier.spec.autoscale
        assert a is not None
        current = tier.count(UP, STARTING, DOWN)
        if desired > current:
            for _ in range(desired - current):
                self._add_replica(tier, a)
        else:
            for _ in range(current - desired):
                self._remove_replica(tier)
        tier.mark(self.k.now)

    def _add_replica(self, tier: Tier, a: Autoscale) -> None:
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

    def _warm(self, tier: Tier, rep: Replica, epoch: int) -> None:
        if rep.state != STARTING or epoch != rep.epoch:
            return  # cancelled before it was ready
        self.failover.ready(tier, rep)

    def _remove_replica(self, tier: Tier) -> None:
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
        tier.retire_if_drained(rep, self.k.now)
