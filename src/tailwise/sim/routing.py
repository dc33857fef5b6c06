"""Routers: which live replica of a stage a leg goes to.

* ``round_robin``: the next live replica in turn;
* ``random``: uniform over the live replicas;
* ``power_of_d``: the least loaded (waiting + in service) of ``power_d``
  distinct replicas drawn at random;
* ``jsq``: fewest waiting, then fewest in service;
* ``least_outstanding``: fewest waiting + in service.

Ties of ``jsq`` and ``least_outstanding`` go round robin, as NGINX
``least_conn`` and HAProxy ``leastconn`` do. A hedge avoids the replica of
the leg it backs up when another is live. Random choices come from the
system's own routing stream (:class:`~tailwise.sim.fleet.Uniforms`), so
adding a router never changes the service times.
"""

from __future__ import annotations

from collections.abc import Callable

from tailwise.sim.fleet import Replica, Tier, Uniforms

ROUTING = ("round_robin", "random", "jsq", "least_outstanding", "power_of_d")


def route(tier: Tier, uniforms: Uniforms, avoid: int = -1) -> int:
    """A live replica of ``tier`` (not ``avoid`` when another is live), or -1."""
    spec = tier.spec
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
    u = uniforms.next
    if spec.routing == "random":
        return choices[int(u() * m)]
    if spec.routing == "power_of_d":
        return _power_of_d(tier.reps, choices, spec.power_d, u)
    return _least_loaded(tier, choices)


def _power_of_d(reps: list[Replica], choices: list[int], d: int, u: Callable[[], float]) -> int:
    """d distinct replicas by a partial Fisher-Yates shuffle; the least loaded wins."""
    m = len(choices)
    pool = list(choices)
    best, best_load = -1, -1
    for j in range(min(d, m)):
        pick = j + int(u() * (m - j))
        pool[j], pool[pick] = pool[pick], pool[j]
        r = reps[pool[j]]
        load = len(r.queue) + len(r.running)
        if best < 0 or load < best_load:
            best, best_load = pool[j], load
    return best


def _least_loaded(tier: Tier, choices: list[int]) -> int:
    """jsq: fewest waiting, then fewest in service; least_outstanding: fewest of both.

    Without batching the two orders agree (a replica with a queue has every
    server busy), so they pick alike; with batching a queue can wait beside
    idle servers. Ties go to the first tied replica at or after the one after
    the last choice.
    """
    reps = tier.reps
    weight = 1 << 32 if tier.spec.routing == "jsq" else 1
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
