"""Chances over many independent parts: fan-out tails and fleet availability.

A request that waits for all of n calls is fast only if every call is:
``P(slow) = 1 - q^n``. A service that needs all of M machines is up with
probability ``r^M``, one that needs k of M by the binomial tail.
"""

from __future__ import annotations

import math
from typing import Any

from tailwise import capacity as cap
from tailwise.errors import BadInput
from tailwise.plan.schema import Plan

HOURS_PER_YEAR = 8766.0  # 365.25 days
FANOUT_TITLE = "fan-out: P(slow) = 1 - q^n"
FANOUT_ASSUMPTIONS = (
    "a request calls n backends in parallel and waits for ALL of them",
    "each call is fast (under the latency bound) with probability q, independently",
    "q = 0.99 when the bound is a backend's own p99; needed q = target^(1/n)",
)
AVAILABILITY_TITLE = "availability: all of M up = r^M; at least k of M up = binomial tail"
AVAILABILITY_ASSUMPTIONS = (
    "each machine is up with probability r, independently of the others",
    "the service is up while at least `need` machines are (all of them by default)",
    "availability is a share of time; downtime uses 8766 hours a year",
)


def fanout(
    *, fanouts: list[int], backend_fast: float | None = None, target: float | None = None
) -> Plan:
    """A request that waits for all n calls is slow unless every call is fast: ``1 - q^n``."""
    if backend_fast is None and target is None:
        raise BadInput("--backend-fast", "nothing", "--backend-fast (q), --target, or both")
    rows = []
    for n in fanouts:
        row: dict[str, Any] = {"fanout": n}
        if backend_fast is not None:
            slow = cap.fanout_slow_probability(backend_fast, n)
            row |= {
                "p_all_fast": 1.0 - slow,
                "p_slow": slow,
                "expected_slow_calls": n * (1 - backend_fast),
            }
        if target is not None:
            need = cap.fanout_backend_needed(target, n)
            row |= {
                "backend_fast_needed": need,
                "backend_slow_needed": 1.0 - need,
                "backend_percentile_needed": 100.0 * need,
            }
        rows.append(row)
    inputs = {"backend_fast": backend_fast, "target": target}
    inputs = {k: v for k, v in inputs.items() if v is not None}
    return Plan("fanout", FANOUT_TITLE, inputs, {"fanouts": rows}, FANOUT_ASSUMPTIONS)


def availability(*, up: float, machines: list[int], need: int | None = None) -> Plan:
    """All-of-M (``r^M``) or k-of-M (binomial) availability, and expected healthy replicas."""
    if need is not None and need > min(machines):
        raise BadInput("--need", need, f"at most the smallest --machines ({min(machines)})")
    rows = []
    for m in machines:
        k = m if need is None else need
        down = cap.k_of_m_unavailability(up, m, k)
        rows.append(
            {
                "machines": m,
                "need": k,
                "availability": 1.0 - down,
                "unavailability": down,
                "nines": abs(math.log10(down)) if down > 0 else math.inf,
                "expected_healthy": m * up,
                "downtime_hours_per_year": down * HOURS_PER_YEAR,
            }
        )
    inputs = {"up": up, "need": "all" if need is None else need}
    return Plan(
        "availability", AVAILABILITY_TITLE, inputs, {"fleets": rows}, AVAILABILITY_ASSUMPTIONS
    )
