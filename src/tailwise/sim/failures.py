"""Replica failures: each replica of a stage with ``failures`` alternates up and down.

Up times are drawn from the MTBF law and down times from the MTTR law, from
the system's own failure stream. A crash loses the work in progress (the
server time it had left is given back), and each leg the replica held, queued
or in service, either fails (error ``reset``) or, with ``retry``, is re-sent
elsewhere in its stage (at most ``max_retries`` times per leg). A crashed
replica that was draining stays off; any other comes back up after its
repair and takes the legs that were parked for want of a live replica first.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from tailwise.sim.fleet import DOWN, DRAINING, OFF, UP, Leg, Replica, Tier
from tailwise.sim.kernel import Kernel
from tailwise.sim.system_spec import FAILED


class Legs(Protocol):
    """What replica events need from the system that moves legs (its ``System``)."""

    def send(self, leg: Leg, avoid: int = -1, since: int = -1) -> None: ...

    def leg_finished(self, leg: Leg) -> None: ...


class Failover:
    """Failure clocks of every replica, and what a crash or a return does to the legs."""

    def __init__(self, kernel: Kernel, rng: np.random.Generator, legs: Legs) -> None:
        self.k = kernel
        self.rng = rng
        self.legs = legs

    def start(self, tier: Tier) -> None:
        """Arm the clock of every replica up at the start (stages with ``failures``)."""
        if tier.spec.failures is not None:
            for rep in tier.reps:
                if rep.state == UP:
                    self.arm(tier, rep)

    def arm(self, tier: Tier, rep: Replica) -> None:
        f = tier.spec.failures
        assert f is not None
        up_ns = int(f.mtbf.sample(self.rng, 1)[0])
        self.k.daemon(self.k.now + max(up_ns, 1), self._crash, tier, rep, rep.epoch)

    def ready(self, tier: Tier, rep: Replica) -> None:
        """``rep`` takes legs from now on (parked ones first), and may fail again."""
        for leg in tier.bring_up(rep, self.k.now):
            self.legs.send(leg, since=leg.queued)
        if tier.spec.failures is not None:
            self.arm(tier, rep)

    def _crash(self, tier: Tier, rep: Replica, epoch: int) -> None:
        if rep.state not in (UP, DRAINING) or epoch != rep.epoch:
            return  # scaled away (or restarted) since this clock was armed
        f = tier.spec.failures
        assert f is not None
        was = rep.state
        rep.state, rep.epoch, rep.busy, rep.timer_at = DOWN, rep.epoch + 1, 0, -1
        if rep.index in tier.live:
            tier.live.remove(rep.index)
        tier.crashes += 1
        now = self.k.now
        tier.mark(now)
        victims = [*rep.queue, *sorted(rep.running, key=lambda x: x.queued)]
        if tier.track:
            tier.flow(now, -len(victims), -len(rep.queue))
        rep.queue.clear()
        rep.running.clear()
        # Server time after the crash was never used: each service in progress (a
        # batch once) gives back what it had left.
        cut = {leg.group: leg.end for leg in victims if leg.end > now}
        tier.busy_ns -= sum(end - now for end in cut.values())
        for leg in victims:
            self._lose(tier, leg, f.retry and leg.tries < f.max_retries)
        if was == DRAINING:  # it was on its way out: it stays off
            rep.state = OFF
            tier.mark(now)
            return
        down_ns = int(f.mttr.sample(self.rng, 1)[0])
        self.k.daemon(now + max(down_ns, 1), self._repair, tier, rep, rep.epoch)

    def _lose(self, tier: Tier, leg: Leg, retry: bool) -> None:
        """A leg on a crashed replica: sent again in its stage, or failed."""
        leg.token += 1
        leg.end = -1
        if retry and not leg.orphan:  # nobody waits for an orphan's answer: not re-sent
            leg.tries += 1
            tier.retries += 1
            leg.replica = -1
            self.legs.send(leg)
        else:
            leg.status, leg.done = FAILED, self.k.now
            self.legs.leg_finished(leg)

    def _repair(self, tier: Tier, rep: Replica, epoch: int) -> None:
        if rep.state != DOWN or epoch != rep.epoch:
            return
        self.ready(tier, rep)
