"""Queues in closed form: M/M/1, M/M/c (Erlang C), M/G/1 (Pollaczek-Khinchine),
M/G/c (the Allen-Cunneen approximation) and M/M/c/K (exact, with blocking).

At each utilization (or arrival rate) the plan gives the chance to wait, the
queue length and, with a service time, the mean wait and latency and (for
exponential service without a bound) the latency percentiles; with a latency
target, the highest rate that still meets it. A bound ``K`` (requests in the
system, waiting and in service) turns arrivals away when full: any offered
load is then stable, and the plan gives the blocking probability and the
throughput carried. The formulas are in :mod:`tailwise.capacity`.
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
    max_in_system: int | None = None,
) -> Plan:
    """M/M/1, M/M/c, M/G/1, M/G/c or M/M/c/K at one or more loads."""
    c, k = servers, max_in_system
    _check_shape(c, cv, k, slo)
    utilizations = _loads(c, service_s, utilizations, rates_rps, slo, bounded=k is not None)
    kind = _kind(c, cv, k)
    limit = _queue_limit(c, service_s, cv, slo) if slo else None
    if k is not None:
        levels = [_bounded_level(c, k, u, service_s) for u in utilizations]
    else:
        levels = [_queue_level(c, u, service_s, cv, limit) for u in utilizations]
    inputs: dict[str, Any] = {"queue": kind, "servers": c}
    if k is not None:
        inputs["max_in_system"] = k
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
    return Plan("queue", f"{kind} queue", inputs, outputs, _queue_assumptions(kind, cv, k))


def _check_shape(
    c: int, cv: float | None, k: int | None, slo: tuple[str, float, float] | None
) -> None:
    if c < 1:
        raise BadInput("--servers", c, "a whole number >= 1")
    if cv is not None and (cv < 0 or not math.isfinite(cv)):
        raise BadInput("--cv", cv, "a coefficient of variation >= 0")
    if k is None:
        return
    if k < c:
        raise BadInput("--max-in-system", k, f"a whole number >= --servers ({c})")
    if cv is not None:
        raise BadInput("--cv", cv, "no --cv with --max-in-system (M/M/c/K: exponential service)")
    if slo is not None:
        raise BadInput("--slo", f"{slo[0]}<={slo[2] * 1e3:g}ms", "no --slo with --max-in-system")


def _loads(
    c: int,
    service_s: float | None,
    utilizations: list[float] | None,
    rates_rps: list[float] | None,
    slo: tuple[str, float, float] | None,
    bounded: bool,
) -> list[float]:
    """The offered utilizations ``lam S / c``; below 1 unless the system is bounded."""
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
            if r * service_s >= c and not bounded:
                raise BadInput("--rate", f"{r:g}/s", f"a rate below capacity {c / service_s:g}/s")
        utilizations = [r * service_s / c for r in rates_rps]
    assert utilizations is not None
    for u in utilizations:
        if bounded and not (u >= 0.0 and math.isfinite(u)):
            raise BadInput("--utilization", f"{u:.0%}", "an offered load >= 0%")
        if not bounded and not 0.0 <= u < 1.0:
            raise BadInput("--utilization", f"{u:.0%}", "a utilization below 100%")
    return utilizations


def _kind(c: int, cv: float | None, k: int | None) -> str:
    if k is not None:
        return f"M/M/{c}/{k}"
    if cv is not None:
        return f"M/G/{c}"
    return "M/M/1" if c == 1 else f"M/M/{c}"


def _queue_level(
    c: int, rho: float, service_s: float | None, cv: float | None, limit: float | None
) -> dict[str, Any]:
    a = rho * c
    if cv is None:
        p_wait, lq = cap.erlang_c(c, a) if a > 0 else 0.0, cap.mmc_queue_length(c, a)
    elif c == 1:
        p_wait, lq = rho, cap.mg1_queue_length(rho, cv)
    else:  # Allen-Cunneen: M/M/c's queue scaled by (1 + cv^2) / 2 (Erlang C's chance to wait)
        p_wait = cap.erlang_c(c, a) if a > 0 else 0.0
        lq = cap.mmc_queue_length(c, a) * cap.allen_cunneen_factor(cv)
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


def _bounded_level(c: int, k: int, rho: float, service_s: float | None) -> dict[str, Any]:
    """One offered load of M/M/c/K: blocking, carried load, L, Lq (and W, Wq with S)."""
    s = 1.0 if service_s is None else service_s  # L, Lq and blocking need only a = lam S
    m = cap.mmck_metrics(c, k, s, rho * c / s)
    row: dict[str, Any] = {"utilization": rho}
    if service_s is not None:
        row["rate_rps"] = rho * c / service_s
    row |= {
        "p_block": m["blocking"],
        "carried_utilization": rho * (1 - m["blocking"]),
        "lq": m["lq"],
        "l": m["l"],
    }
    if service_s is not None:
        row |= {
            "throughput_rps": m["throughput_rps"],
            "wq_ms": m["wq_s"] * 1e3,
            "w_ms": m["w_s"] * 1e3,
        }
    return row


def _queue_limit(
    c: int, service_s: float | None, cv: float | None, slo: tuple[str, float, float]
) -> float:
    """The highest arrival rate at which the latency target still holds."""
    assert service_s is not None
    stat, q, slo_s = slo
    if stat == "mean":
        if cv is None:
            return cap.mmc_max_rate_mean(slo_s, c, service_s)
        if c == 1:
            return cap.mg1_max_utilization_mean(slo_s, service_s, cv) / service_s
        return _mgc_max_rate_mean(slo_s, c, service_s, cv)
    if cv is not None:
        raise BadInput(
            "--slo",
            f"{stat}<={slo_s * 1e3:g}ms",
            "mean<=... with --cv: M/G/c has no closed-form percentiles",
        )
    if c == 1:
        return cap.mm1_max_rate(q, slo_s, service_s)
    return cap.mmc_max_rate(q, slo_s, c, service_s)


def _mgc_max_rate_mean(slo_s: float, c: int, service_s: float, cv: float) -> float:
    """Bisection on the rate: mean latency ``S + Wq`` (Allen-Cunneen) rises with it."""
    if service_s >= slo_s:
        return 0.0
    lo, hi = 0.0, c / service_s
    for _ in range(100):
        mid = (lo + hi) / 2
        if service_s + cap.mgc_mean_wait_s(c, service_s, mid, cv) <= slo_s:
            lo = mid
        else:
            hi = mid
    return lo


def _queue_assumptions(kind: str, cv: float | None, k: int | None) -> tuple[str, ...]:
    bound = (
        f"at most {k} requests in the system (waiting + in service); an arrival finding it "
        "full is turned away (PASTA: with probability p_block); W and Wq are of those admitted"
        if k is not None
        else "infinite queue; steady state (utilization < 1)"
    )
    common = (
        f"Poisson arrivals; FCFS; {bound}",
        "latency W = queueing wait Wq + service; Lq and L by Little's law",
    )
    if cv is None:
        service = "exponential service times with the given mean"
        if k is not None:
            return (*common, service, "M/M/c/K: the exact birth-death solution; means only")
        tails = (
            "percentiles: M/M/1 latency is Exp(mu - lambda), quantile -ln(1-q)/(mu-lambda)"
            if kind == "M/M/1"
            else "percentiles: the exact M/M/c sojourn distribution (Erlang C wait + service)"
        )
        return (*common, service, tails)
    general = f"general service times given by their mean and coefficient of variation ({cv:g})"
    if kind == "M/G/1":
        exact = "M/G/1: Pollaczek-Khinchine, exact for the mean"
    else:
        exact = (
            "M/G/c: the Allen-Cunneen APPROXIMATION Wq = Wq(M/M/c) x (1 + cv^2) / 2 "
            "(exact at cv = 1; a few percent off at moderate to high load; p_wait is Erlang C's)"
        )
    return (
        *common,
        general,
        exact,
        f"{kind} has no closed form for latency percentiles: means only (simulate for tails)",
    )
