"""Little's law, ``L = lambda W``: any two of the three give the third, and fleet sizes.

:func:`replicas` is the ``capacity_plan`` of seed 002: ``ceil(rate x (1 +
headroom) x W / (u x N)) + spares`` replicas for a rate at a mean latency W,
N requests in flight per replica and a utilization ceiling u (the share of a
replica's capacity ``N / W`` used at the planned rate). The ceiling defaults
to :data:`DEFAULT_CEILING` (80%): a fleet sized at 100% has no slack, and
queueing at high utilization raises W, the very input the size rests on. The
plan warns when the fleet runs at or above its ceiling (all spares failed
included) and when W is inconsistent with the queueing the planned
utilization implies (M/M/N per replica: N slots as N servers).
"""

from __future__ import annotations

import math
from typing import Any

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


DEFAULT_CEILING = 0.8
# W may grow this much from queueing at the planned utilization before the plan warns.
QUEUEING_TOLERANCE = 0.10


def replicas(
    *,
    rate_rps: float,
    latency_s: float,
    per_replica: float,
    utilization: float = DEFAULT_CEILING,
    headroom: float = 0.0,
    spares: int = 0,
) -> Plan:
    """Fleet size by Little's law (the ``capacity_plan`` of seed 002, plus headroom and N+k)."""
    if utilization <= 0:
        raise BadInput("--max-utilization", f"{utilization:.0%}", "a ceiling above 0%")
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
    notes = _ceiling_warnings(outputs, utilization, spares)
    notes += _queueing_warning(latency_s, per_replica, outputs["utilization_after_failures"])
    return Plan("replicas", REPLICAS_TITLE, inputs, outputs, REPLICAS_ASSUMPTIONS, warnings=notes)


def _ceiling_warnings(outputs: dict[str, Any], ceiling: float, spares: int) -> tuple[str, ...]:
    """A fleet at (or above) its ceiling, or a ceiling that leaves no slack at all."""
    out: list[str] = []
    worst = outputs["utilization_after_failures"]
    if ceiling >= 1.0:
        out.append(
            f"utilization ceiling {ceiling:.0%}: a replica at 100% is saturated and its "
            "queue grows without bound (plan queue refuses it); use --max-utilization 80% or less"
        )
    if worst >= ceiling - 1e-9:
        when = f"with {spares} spare(s) failed" if spares else "at the planned rate"
        out.append(
            f"{when} the fleet runs at {worst:.1%} of its capacity, at or above the "
            f"{ceiling:.0%} ceiling: no slack for bursts"
        )
    return tuple(out)


def _queueing_warning(latency_s: float, slots: float, rho: float) -> tuple[str, ...]:
    """If W were the unloaded service time, M/M/N at ``rho`` would make it longer."""
    n = max(1, math.floor(slots))
    if rho >= 1 - 1e-9:  # at capacity (float noise included): the queue never settles
        grown = math.inf
    else:
        grown = cap.mmc_mean_wait_s(n, latency_s, rho * n / latency_s) + latency_s
    if grown <= latency_s * (1 + QUEUEING_TOLERANCE):
        return ()
    became = "unbounded" if math.isinf(grown) else f"{grown * 1e3:.4g} ms"
    return (
        f"W = {latency_s * 1e3:g} ms must be the mean latency AT {rho:.1%} utilization: "
        f"if it is the unloaded service time, {n} slots per replica as M/M/{n} servers queue "
        f"and the mean latency is {became}, so more replicas are needed",
    )
