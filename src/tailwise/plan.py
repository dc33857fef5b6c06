"""Capacity plans from closed forms: the models behind ``tailwise plan``.

Each model function takes numbers in named units, checks them (a
:class:`BadInput` naming the CLI option on anything out of range) and returns
a :class:`Plan`: its inputs, its outputs and the assumptions the outputs rest
on. The closed forms themselves live in :mod:`tailwise.capacity`; this module
assembles them, parses the option forms only ``plan`` uses (lists, NAME=VALUE
pairs, latency targets) and renders a plan as a table or as JSON::

    {"schema": "tailwise.plan/1", "tool_version": ..., "model": "replicas",
     "inputs": {...}, "outputs": {...}, "assumptions": [...]}

Names carry their unit (``_rps``, ``_ms``, ``_usd``); shares and
probabilities are fractions in [0, 1]; an unbounded value is ``null``.
Outputs are scalars, or lists of rows (one per level, stage or fleet size).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tailwise import capacity as cap
from tailwise.errors import BadInput
from tailwise.units import parse_duration_ns, parse_fraction

SCHEMA = "tailwise.plan/1"
QUANTILES = (
    ("p50_ms", 0.5),
    ("p90_ms", 0.9),
    ("p95_ms", 0.95),
    ("p99_ms", 0.99),
    ("p999_ms", 0.999),
)
HOURS_PER_YEAR = 8766.0  # 365.25 days
HOURS_PER_MONTH = 730.0

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    model: str
    title: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    assumptions: tuple[str, ...]
    command: str = "plan"  # the heading's verb: plan, calibrate

    def to_json(self) -> dict[str, Any]:
        from tailwise.version import __version__

        return {
            "schema": SCHEMA,
            "tool_version": __version__,
            "model": self.model,
            "inputs": _finite(self.inputs),
            "outputs": _finite(self.outputs),
            "assumptions": list(self.assumptions),
        }


def _finite(v: Any) -> Any:
    """JSON has no infinity: unbounded values become null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


# --- option forms ------------------------------------------------------------------------

_NUMBER = re.compile(r"^\s*\$?\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*x?\s*$")
_LATENCY_SLO = re.compile(r"^\s*(p[0-9.]+|mean)\s*(?:\(\s*latency\s*\))?\s*<=\s*(.+?)\s*$")
SLO_FORM = "a latency target such as p99<=200ms, p99(latency)<=200ms or mean<=50ms"


def parse_positive(
    text: str, field: str, expected: str = "a positive number", *, allow_zero: bool = False
) -> float:
    """``"3"``, ``"$3"`` or ``"2x"`` -> a finite number > 0 (or >= 0 with ``allow_zero``)."""
    m = _NUMBER.match(text) if isinstance(text, str) else None
    value = float(m.group(1)) if m else math.nan
    if not (math.isfinite(value) and (value > 0 or (allow_zero and value == 0))):
        raise BadInput(field, text, expected)
    return value


def parse_list(text: str, field: str, parse: Callable[[str, str], T]) -> list[T]:
    """``"10,100,1000"`` -> one parsed value per comma-separated item."""
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else []
    if not items or not all(items):
        raise BadInput(field, text, "a comma-separated list, e.g. 10,100,1000")
    return [parse(s, field) for s in items]


def parse_pairs(items: tuple[str, ...], field: str) -> list[tuple[str, str]]:
    """``("model=70%", ...)`` -> ``[("model", "70%"), ...]``; names are unique."""
    pairs: list[tuple[str, str]] = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise BadInput(field, item, "NAME=VALUE, e.g. model=70% or model=1400ms")
        if name.strip() in (n for n, _ in pairs):
            raise BadInput(field, item, "each stage once")
        pairs.append((name.strip(), value.strip()))
    return pairs


def parse_utilizations(text: str, field: str = "--utilization") -> list[float]:
    """Queue utilizations: fractions strictly below 1 (a full queue never settles)."""
    levels = parse_list(text, field, parse_fraction)
    if any(u >= 1.0 for u in levels):
        raise BadInput(
            field, text, "utilizations below 100%: a queue at or over capacity grows forever"
        )
    return levels


def parse_stages(items: tuple[str, ...]) -> tuple[list[tuple[str, float]], bool]:
    """``--stage`` values: all shares (``70%``, ``0.7``) or all times (``1400ms``)."""
    stages: list[tuple[str, float]] = []
    kinds = set()
    for name, value in parse_pairs(items, "--stage"):
        is_time = value[-1].isalpha()
        kinds.add(is_time)
        if is_time:
            stages.append((name, parse_duration_ns(value, "--stage", allow_zero=False) / 1e9))
        else:
            stages.append((name, parse_fraction(value, "--stage")))
    if len(kinds) > 1:
        raise BadInput("--stage", " ".join(items), "all shares (model=70%) or all times (1400ms)")
    return stages, kinds == {True}


def parse_speedup(text: str, field: str = "--speedup") -> float:
    """``"2"``, ``"10x"`` or ``"inf"`` (the stage vanishes)."""
    if text.strip().lower() in ("inf", "infinite"):
        return math.inf
    return parse_positive(text, field, "a speedup factor such as 2, 10x or inf")


def parse_latency_slo(text: str) -> tuple[str, float, float]:
    """``"p99<=200ms"`` -> ``("p99", 0.99, 0.2)``; ``"mean<=50ms"`` -> ``("mean", nan, 0.05)``."""
    m = _LATENCY_SLO.match(text) if isinstance(text, str) else None
    if m is None:
        raise BadInput("--slo", text, SLO_FORM)
    stat, value = m.groups()
    q = math.nan
    if stat != "mean":
        try:
            q = float(stat[1:]) / 100
        except ValueError:
            raise BadInput("--slo", text, SLO_FORM) from None
        if not 0 < q < 1:
            raise BadInput("--slo", text, "a percentile between p0 and p100 (exclusive), e.g. p99")
    return stat, q, parse_duration_ns(value, "--slo", allow_zero=False) / 1e9


# --- models ------------------------------------------------------------------------------


TITLES = {
    "little": "Little's law: L = lambda x W",
    "replicas": "Little's law fleet size: ceil(rate x (1 + headroom) x W / (u x N)) + spares",
    "amdahl": "Amdahl's law: speedup = 1 / sum(share_i / s_i)",
    "fanout": "fan-out: P(slow) = 1 - q^n",
    "availability": "availability: all of M up = r^M; at least k of M up = binomial tail",
    "cost": "cost per unit of work = D / (3600 x u x X_max)",
}
ASSUMPTIONS: dict[str, tuple[str, ...]] = {
    "little": (
        "a stable system in steady state: arrivals keep up with departures",
        "L and W are long-run averages (time-averaged in-flight count, mean latency)",
        "lambda is throughput = arrival rate; no distribution is assumed",
    ),
    "replicas": (
        "Little's law per replica: at most N requests in flight at mean latency W "
        "sustain N/W req/s",
        "W is the mean latency AT the planned load (measure it there: it grows near saturation)",
        "load spreads evenly over replicas; the utilization ceiling keeps each one "
        "below N in flight",
        "headroom is extra traffic to absorb (bursts, growth); spares are whole "
        "replicas that may fail (N+k)",
    ),
    "amdahl": (
        "stages run one after another; a request's latency is the sum of its stage times",
        "a stage's speedup divides its own time only; the other stages are unchanged",
        "ceiling: the limit as the sped-up stages become free, 1 / (share of the rest)",
        "shares given as percentages that add up to less than 100% leave a (rest) stage",
    ),
    "fanout": (
        "a request calls n backends in parallel and waits for ALL of them",
        "each call is fast (under the latency bound) with probability q, independently",
        "q = 0.99 when the bound is a backend's own p99; needed q = target^(1/n)",
    ),
    "availability": (
        "each machine is up with probability r, independently of the others",
        "the service is up while at least `need` machines are (all of them by default)",
        "availability is a share of time; downtime uses 8766 hours a year",
    ),
    "cost": (
        "a replica is billed D $/h whether busy or idle",
        "X_max is what one replica completes per second when always busy; it does "
        "useful work a share u of the time",
        "with --rate and no --replicas: replicas = ceil(rate / (u x X_max))",
    ),
}


def _plan(model: str, inputs: dict[str, Any], outputs: dict[str, Any]) -> Plan:
    return Plan(model, TITLES[model], inputs, outputs, ASSUMPTIONS[model])


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
    return _plan("little", inputs, outputs)


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
    return _plan("replicas", inputs, outputs)


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


def amdahl(
    *,
    stages: list[tuple[str, float]],
    times: bool = False,
    speedups: dict[str, float] | None = None,
    budgets: dict[str, float] | None = None,
    total_budget_s: float | None = None,
) -> Plan:
    """Amdahl's law over pipeline stages, and a latency budget (stage budgets vs measured)."""
    speedups, budgets = speedups or {}, budgets or {}
    if not stages and not budgets:
        raise BadInput("--stage", "nothing", "at least one --stage NAME=SHARE|TIME, or --budget")
    names = [n for n, _ in stages]
    for opt, named in (("--speedup", speedups), ("--budget", budgets if stages else {})):
        for n in named:
            if n not in names:
                raise BadInput(opt, n, f"a stage named in --stage ({', '.join(names)})")
    inputs: dict[str, Any] = {}
    if stages:
        key, scale = ("stage_ms", 1e3) if times else ("stage_shares", 1.0)
        inputs[key] = {n: v * scale for n, v in stages}
    if speedups:
        inputs["speedups"] = dict(speedups)
    if budgets:
        inputs["budgets_ms"] = {n: v * 1e3 for n, v in budgets.items()}
    if total_budget_s is not None:
        inputs["total_budget_ms"] = total_budget_s * 1e3
    outputs: dict[str, Any] = {}
    rows = _amdahl_rows(stages, times, speedups, outputs) if stages else []
    if budgets or total_budget_s is not None:
        rows = _budget_rows(rows, budgets, total_budget_s, outputs)
    outputs = {"stages": rows, **outputs}
    return _plan("amdahl", inputs, outputs)


def _amdahl_rows(
    stages: list[tuple[str, float]], times: bool, speedups: dict[str, float], out: dict[str, Any]
) -> list[dict[str, Any]]:
    total = math.fsum(v for _, v in stages)
    if times:
        shares = [(n, v / total) for n, v in stages]
    elif total > 1 + 1e-9:
        raise BadInput(
            "--stage", f"shares adding up to {total:.4g}", "shares that add up to <= 100%"
        )
    else:
        shares = list(stages) + ([("(rest)", 1.0 - total)] if total < 1 - 1e-9 else [])
    factors = [speedups.get(n, 1.0) for n, _ in shares]
    speedup = cap.amdahl_speedup([p for _, p in shares], factors)
    rest = math.fsum(p for n, p in shares if n not in speedups)
    out["speedup"] = speedup
    out["ceiling"] = (1.0 / rest if rest > 0 else math.inf) if speedups else None
    if times:
        out["latency_ms"] = total * 1e3
        out["latency_after_ms"] = total / speedup * 1e3
    left = math.fsum(p / s for (_, p), s in zip(shares, factors, strict=True))
    rows = []
    for (name, share), s in zip(shares, factors, strict=True):
        row: dict[str, Any] = {"stage": name}
        if times:
            row["measured_ms"] = share * total * 1e3
        row |= {
            "share": share,
            "speedup": s,
            "share_after": share / s / left if left > 0 else None,
            "ceiling_if_free": 1.0 / (1.0 - share) if share < 1 else math.inf,
        }
        rows.append(row)
    return rows


def _budget_rows(
    rows: list[dict[str, Any]],
    budgets: dict[str, float],
    total_budget_s: float | None,
    out: dict[str, Any],
) -> list[dict[str, Any]]:
    if not rows:
        rows = [{"stage": n} for n in budgets]
    for row in rows:
        b = budgets.get(row["stage"])
        row["budget_ms"] = None if b is None else b * 1e3
        measured = row.get("measured_ms")
        row["slack_ms"] = None if b is None or measured is None else b * 1e3 - measured
    out["budget_sum_ms"] = math.fsum(budgets.values()) * 1e3
    if total_budget_s is not None:
        out["margin_ms"] = total_budget_s * 1e3 - out["budget_sum_ms"]
        if "latency_ms" in out:
            out["total_slack_ms"] = total_budget_s * 1e3 - out["latency_ms"]
    return rows


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
    return _plan("fanout", {k: v for k, v in inputs.items() if v is not None}, {"fanouts": rows})


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
    return _plan(
        "availability", {"up": up, "need": "all" if need is None else need}, {"fleets": rows}
    )


def cost(
    *,
    dollars_per_hour: float,
    utilization: float = 1.0,
    peak_rps: float | None = None,
    peak_tps: float | None = None,
    replicas: int | None = None,
    rate_rps: float | None = None,
) -> Plan:
    """Cost per unit of work, ``D / (3600 u X_max)``, and a fleet's cost per hour."""
    if utilization <= 0:
        raise BadInput("--utilization", f"{utilization:.0%}", "a utilization above 0%")
    if peak_rps is None and peak_tps is None:
        raise BadInput(
            "--peak-rate",
            "nothing",
            "--peak-rate (or --per-replica with --latency), or --peak-tokens",
        )
    if rate_rps is not None and peak_rps is None:
        raise BadInput(
            "--rate", f"{rate_rps:g}/s", "--peak-rate too (or --per-replica with --latency)"
        )
    inputs = {
        "dollars_per_hour": dollars_per_hour,
        "utilization": utilization,
        "peak_rps": peak_rps,
        "peak_tps": peak_tps,
        "replicas": replicas,
        "rate_rps": rate_rps,
    }
    out: dict[str, Any] = {}
    if peak_rps is not None:
        each = cap.cost_per_unit(dollars_per_hour, utilization, peak_rps)
        out |= {
            "served_rps_per_replica": utilization * peak_rps,
            "cost_per_request_usd": each,
            "cost_per_million_requests_usd": each * 1e6,
        }
    if peak_tps is not None:
        each = cap.cost_per_unit(dollars_per_hour, utilization, peak_tps)
        out |= {"cost_per_token_usd": each, "cost_per_million_tokens_usd": each * 1e6}
    if rate_rps is not None and replicas is None:
        assert peak_rps is not None
        replicas = cap.replicas_needed(rate_rps, 1.0, peak_rps, utilization)
        out["replicas"] = replicas
    if replicas is not None:
        out |= _fleet_cost(dollars_per_hour, replicas, peak_rps, rate_rps)
    return _plan("cost", {k: v for k, v in inputs.items() if v is not None}, out)


def _fleet_cost(
    dollars_per_hour: float, replicas: int, peak_rps: float | None, rate_rps: float | None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "fleet_cost_per_hour_usd": replicas * dollars_per_hour,
        "fleet_cost_per_month_usd": replicas * dollars_per_hour * HOURS_PER_MONTH,
    }
    if peak_rps is not None:
        out["fleet_peak_rps"] = replicas * peak_rps
    if rate_rps is not None:
        assert peak_rps is not None
        if rate_rps > replicas * peak_rps:
            raise BadInput(
                "--rate", f"{rate_rps:g}/s", f"at most the fleet's peak {replicas * peak_rps:g}/s"
            )
        out["fleet_utilization_at_rate"] = rate_rps / (replicas * peak_rps)
        out["cost_per_million_requests_at_rate_usd"] = (
            replicas * dollars_per_hour / (3600 * rate_rps) * 1e6
        )
    return out
