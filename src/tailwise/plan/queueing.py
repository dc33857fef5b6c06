"""Queues in closed form: M/M/1, M/M/c (Erlang C) and M/G/1 (Pollaczek-Khinchine).

At each utilization (or arrival rate) the plan gives the chance to wait, the
queue length and, with a service time, the mean wait and latency and (for
exponential service) the latency percentiles; with a latency target, the
highest rate that still meets it. The formulas are in :mod:`tailwise.capacity`.
"""

from __future__ import annotations

import math
from typing import Any

from tailwise import capacity as cap
from tailwise.errors import BadInput
from tailwise.plan.schema import Plan

QUANTILES = (
    ("p50_ms", 0.5),
    ("p90_ms", 0.9),
    ("p95_ms", 0.95),
    ("p99_ms", 0.99),
    ("p999_ms", 0.999),
)


def queue(
    *,
    servers: int = 1,
    service_s: float | None = None,
    utilizations: list[float] | None = None,
    rates_rps: list[float] | None = None,
    cv: float | None = None,
    slo: tuple[str, float, float] | None = None,
) -> Plan:
    """M/M/1, M/M/c (Erlang C) or M/G/1 (Pollaczek-Khinchine) at one or more loads."""
    c = servers
    if c < 1:
        raise BadInput("--servers", c, "a whole number >= 1")
    if cv is not None and (c != 1 or cv < 0 or not math.isfinite(cv)):
        raise BadInput("--cv", cv, "a coefficient of variation >= 0, with --servers 1 (M/G/1)")
    if (utilizations is None) == (rates_rps is None):
        raise BadInput("--utilization", utilizations, "either --utilization or --rate (one)")
    no_service = "--service too (the mean service time)"
    if service_s is None and rates_rps is not None:
        raise BadInput("--rate", ",".join(f"{r:g}/s" for r in rates_rps), no_service)
    if service_s is None and slo is not None:
        raise BadInput("--slo", f"{slo[0]}<={slo[2] * 1e3:g}ms", no_service)
    if rates_rps is not None:
        assert service_s is not None
        for r in rates_rps:
            if r * service_s >= c:
                raise BadInput("--rate", f"{r:g}/s", f"a rate below capacity {c / service_s:g}/s")
        utilizations = [r * service_s / c for r in rates_rps]
    assert utilizations is not None
    for u in utilizations:
        if not 0.0 <= u < 1.0:
            raise BadInput("--utilization", f"{u:.0%}", "a utilization below 100%")
    kind = "M/M/1" if c == 1 and cv is None else f"M/M/{c}" if cv is None else "M/G/1"
    limit = _queue_limit(c, service_s, cv, slo) if slo else None
    levels = [_queue_level(c, u, service_s, cv, limit) for u in utilizations]
    inputs: dict[str, Any] = {"queue": kind, "servers": c}
    outputs: dict[str, Any] = {"levels": levels}
    if service_s is not None:
        inputs["service_ms"] = service_s * 1e3
        outputs["capacity_rps"] = c / service_s
    if cv is not None:
        inputs["service_cv"] = cv
    if slo is not None and limit is not None:
        assert service_s is not None
        inputs["slo"] = f"{slo[0]}(latency)<={slo[2] * 1e3:g}ms"
        outputs["slo_max_rate_rps"] = limit
        outputs["slo_max_utilization"] = limit * service_s / c
    return Plan("queue", f"{kind} queue", inputs, outputs, _queue_assumptions(kind, cv))


def _queue_level(
    c: int, rho: float, service_s: float | None, cv: float | None, limit: float | None
) -> dict[str, Any]:
    a = rho * c
    if cv is None:
        p_wait, lq = cap.erlang_c(c, a) if a > 0 else 0.0, cap.mmc_queue_length(c, a)
    else:
        p_wait, lq = rho, cap.mg1_queue_length(rho, cv)
    row: dict[str, Any] = {"utilization": rho}
    if service_s is not None:
        row["rate_rps"] = a / service_s
    row |= {"p_wait": p_wait, "lq": lq, "l": lq + a}
    if service_s is None:
        return row
    lam = a / service_s
    wq = lq / lam if lam > 0 else 0.0  # Little's law on the queue
    row |= {"wq_ms": wq * 1e3, "w_ms": (wq + service_s) * 1e3}
    if cv is None:
        for key, q in QUANTILES:
            t = (
                cap.mm1_sojourn_quantile(q, service_s, lam)
                if c == 1
                else cap.mmc_sojourn_quantile(q, c, service_s, lam)
            )
            row[key] = t * 1e3
    if limit is not None:
        row["meets_slo"] = lam <= limit
    return row


def _queue_limit(
    c: int, service_s: float | None, cv: float | None, slo: tuple[str, float, float]
) -> float:
    """The highest arrival rate at which the latency target still holds."""
    assert service_s is not None
    stat, q, slo_s = slo
    if stat == "mean":
        if cv is not None:
            return cap.mg1_max_utilization_mean(slo_s, service_s, cv) / service_s
        return cap.mmc_max_rate_mean(slo_s, c, service_s)
    if cv is not None:
        raise BadInput(
            "--slo",
            f"{stat}<={slo_s * 1e3:g}ms",
            "mean<=... with --cv: M/G/1 has no closed-form percentiles",
        )
    if c == 1:
        return cap.mm1_max_rate(q, slo_s, service_s)
    return cap.mmc_max_rate(q, slo_s, c, service_s)


def _queue_assumptions(kind: str, cv: float | None) -> tuple[str, ...]:
    common = (
        "Poisson arrivals; FCFS; infinite queue; steady state (utilization < 1)",
        "latency W = queueing wait Wq + service; Lq and L by Little's law",
    )
    if cv is None:
        service = "exponential service times with the given mean"
        tails = (
            "percentiles: M/M/1 latency is Exp(mu - lambda), quantile -ln(1-q)/(mu-lambda)"
            if kind == "M/M/1"
            else "percentiles: the exact M/M/c sojourn distribution (Erlang C wait + service)"
        )
        return (*common, service, tails)
    return (
        *common,
        f"general service times given by their mean and coefficient of variation ({cv:g})",
        "M/G/1 has no closed form for latency percentiles: means only (simulate for tails)",
    )
