"""Little's law, ``L = lambda W``: any two of the three give the third, and fleet sizes.

:func:`replicas` is the ``capacity_plan`` of seed 002: ``ceil(rate x (1 +
headroom) x W / (u x N)) + spares`` replicas for a rate at a mean latency W,
N requests in flight per replica and a utilization ceiling u.
"""

from __future__ import annotations

from tailwise import capacity as cap
from tailwise.errors import BadInput
from tailwise.plan.schema import Plan

LITTLE_TITLE = "Little's law: L = lambda x W"
LITTLE_ASSUMPTIONS = (
    "a stable system in steady state: arrivals keep up with departures",
    "L and W are long-run averages (time-averaged in-flight count, mean latency)",
    "lambda is throughput = arrival rate; no distribution is assumed",
)
REPLICAS_TITLE = "Little's law fleet size: ceil(rate x (1 + headroom) x W / (u x N)) + spares"
REPLICAS_ASSUMPTIONS = (
    "Little's law per replica: at most N requests in flight at mean latency W sustain N/W req/s",
    "W is the mean latency AT the planned load (measure it there: it grows near saturation)",
    "load spreads evenly over replicas; the utilization ceiling keeps each one below N in flight",
    "headroom is extra traffic to absorb (bursts, growth); spares are whole "
    "replicas that may fail (N+k)",
)


def little(*, concurrency: float | None, rate_rps: float | None, latency_s: float | None) -> Plan:
    """Little's law ``L = lambda W``: any two of the three give the third."""
    given = {"concurrency": concurrency, "rate_rps": rate_rps, "latency_s": latency_s}
    if sum(v is None for v in given.values()) != 1:
        named = [f"--{k.split('_')[0]}" for k, v in given.items() if v is not None]
        raise BadInput(
            "--concurrency/--rate/--latency", " ".join(named) or "none", "exactly two of the three"
        )
    if concurrency is None:
        assert rate_rps is not None and latency_s is not None
        concurrency, solved = rate_rps * latency_s, "concurrency"
    elif rate_rps is None:
        assert latency_s is not None
        rate_rps, solved = concurrency / latency_s, "rate_rps"
    else:
        latency_s, solved = concurrency / rate_rps, "latency_ms"
    inputs = {k: v for k, v in given.items() if v is not None and k != "latency_s"}
    if given["latency_s"] is not None:
        inputs["latency_ms"] = latency_s * 1e3
    outputs = {
        "solved_for": solved,
        "concurrency": concurrency,
        "rate_rps": rate_rps,
        "latency_ms": latency_s * 1e3,
    }
    return Plan("little", LITTLE_TITLE, inputs, outputs, LITTLE_ASSUMPTIONS)


def replicas(
    *,
    rate_rps: float,
    latency_s: float,
    per_replica: float,
    utilization: float = 1.0,
    headroom: float = 0.0,
    spares: int = 0,
) -> Plan:
    """Fleet size by Little's law (the ``capacity_plan`` of seed 002, plus headroom and N+k)."""
    if utilization <= 0:
        raise BadInput("--utilization", f"{utilization:.0%}", "a ceiling above 0%")
    if spares < 0:
        raise BadInput("--spares", spares, "a whole number >= 0")
    usable = per_replica * utilization
    per_replica_rps = usable / latency_s
    for_load = cap.replicas_needed(rate_rps, latency_s, per_replica, utilization)
    for_headroom = cap.replicas_needed(
        rate_rps * (1 + headroom), latency_s, per_replica, utilization
    )
    total = for_headroom + spares
    max_rps = per_replica / latency_s
    inputs = {
        "rate_rps": rate_rps,
        "latency_ms": latency_s * 1e3,
        "per_replica_concurrency": per_replica,
        "utilization_ceiling": utilization,
        "headroom": headroom,
        "spares": spares,
    }
    outputs = {
        "required_concurrency": rate_rps * latency_s,
        "per_replica_usable_concurrency": usable,
        "per_replica_max_rps": max_rps,
        "per_replica_capacity_rps": per_replica_rps,
        "replicas_for_load": for_load,
        "replicas_with_headroom": for_headroom,
        "replicas": total,
        "total_capacity_rps": total * per_replica_rps,
        "capacity_after_failures_rps": for_headroom * per_replica_rps,
        "utilization_at_rate": rate_rps / (total * max_rps),
        "utilization_after_failures": rate_rps / (for_headroom * max_rps),
        "ceiling_headroom": 1.0 - utilization,
    }
    return Plan("replicas", REPLICAS_TITLE, inputs, outputs, REPLICAS_ASSUMPTIONS)
