"""Studies of a scenario: replications with confidence intervals, and one-key variations.

``tailwise simulate --replications N`` and ``--vary KEY=V1,V2,...`` both run
:func:`tailwise.sim.run.simulate` several times and reduce the summaries to a
few numbers per run (:func:`metrics_of`).

**Replications.** One simulated run gives one draw of each estimate (a mean
latency, a p99). Run ``n`` times with arrival seeds ``seed, seed+1, ...,
seed+n-1`` (each run's service stream is derived from its arrival seed), the
``n`` estimates are independent and identically distributed, and their mean
has the Student-t 95% interval ``mean ± t(0.975, n-1) · sd / sqrt(n)``. The
interval is about the *expected value of the estimate for this run length*: it
says nothing of the start-up bias a short window or missing warm-up leaves in
every replication alike, nor of how far one further run may land (that is the
wider prediction interval, :meth:`CI.predicts`).

**Variations.** ``vary`` sets one dotted scenario field (``batching.size``,
``arrival.rate``, ``hedge.after``) to each value in turn, validates every
variant before the first run, and keeps the seeds: every point sees the same
arrivals (common random numbers), so differences between points are the
model's, not the dice's.

Documents are JSON-able dicts: schema ``tailwise.replications/1`` and
``tailwise.vary/1``; :func:`table` formats either one as rows for a terminal.
"""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, get_args, get_origin

import numpy as np
from pydantic import BaseModel

from tailwise.errors import BadInput
from tailwise.metrics.schema import Summary
from tailwise.metrics.uncertainty import CONFIDENCE
from tailwise.metrics.verdict import EXIT_CODES, point_passed
from tailwise.sim.run import simulate
from tailwise.sim.scenario import Scenario, parse_scenario, system_spec
from tailwise.version import __version__

REPLICATIONS_SCHEMA = "tailwise.replications/1"
VARY_SCHEMA = "tailwise.vary/1"

Progress = Callable[[int, int], None]
"""Called after each simulated run with (runs done, runs in the study)."""

# Two-sided 95% Student-t quantiles t(0.975, df).
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
    40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t975(df: int) -> float:
    """The t quantile for ``df`` degrees of freedom (the next smaller tabulated df: wider)."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two replications")
    return _T975[max(k for k in _T975 if k <= df)] if df <= 120 else 1.96


@dataclass(frozen=True)
class CI:
    """Mean of ``n`` replications and the half-width of its 95% interval."""

    mean: float
    half: float
    n: int
    sd: float  # of one replication

    def covers(self, truth: float, widen: float = 1.0) -> bool:
        slack = max(widen * self.half, 1e-12 * max(abs(truth), 1.0))
        return abs(truth - self.mean) <= slack

    def predicts(self, one_draw: float, widen: float = 1.0) -> bool:
        """Could a single further replication plausibly be ``one_draw``? (prediction interval)"""
        half = t975(self.n - 1) * self.sd * math.sqrt(1.0 + 1.0 / self.n)
        return abs(one_draw - self.mean) <= widen * half

    def __str__(self) -> str:
        return f"{self.mean:.6g} ± {self.half:.3g} (95% CI, {self.n} replications)"


def ci(values: Iterable[float]) -> CI:
    v = np.asarray(list(values), dtype=np.float64)
    n = len(v)
    sd = float(v.std(ddof=1)) if n > 1 else 0.0
    return CI(float(v.mean()), t975(n - 1) * sd / math.sqrt(n), n, sd)


# -- one run's numbers ---------------------------------------------------------------

_DISTS = (
    ("latency", "latency_ms", ("mean", "p50", "p90", "p99", "p999")),
    ("ttft", "ttft_ms", ("p50", "p99")),
    ("tpot", "tpot_ms", ("p50", "p99")),
)


def metrics_of(summary: Summary) -> dict[str, float | None]:
    """The numbers a study follows, from one summary; None where a run has none.

    TTFT/TPOT and the redundancy's extra load appear only when the summary has them.
    """
    rates = summary.rates
    out: dict[str, float | None] = {
        k: rates.get(k)
        for k in ("offered_rps", "throughput_rps", "goodput_rps", "attainment", "error_rate")
    }
    for prefix, key, stats in _DISTS:
        dist = summary.distribution(key)
        if dist is not None or prefix == "latency":  # latency always: None when none completed
            out.update({f"{prefix}_{q}_ms": dist.get(q) if dist else None for q in stats})
    little = summary.littles_law
    out["littles_gap"] = little.rel_gap if little is not None else None
    legs = summary.section("sim").get("legs")
    if legs is not None:
        out["extra_load"] = legs.get("extra_load")
    return out


def _stat(values: list[float | None]) -> dict[str, Any]:
    """mean, 95% half-width (None under two values), n, sd, and the values themselves."""
    present = [float(v) for v in values if v is not None and math.isfinite(v)]
    out: dict[str, Any] = {"mean": None, "half": None, "n": len(present), "sd": None}
    if len(present) >= 2:
        c = ci(present)
        out.update(mean=c.mean, half=c.half, sd=c.sd)
    elif present:
        out["mean"] = present[0]
    out["values"] = values
    return out


_WORST = ("invalid", "fail", "inconclusive", "pass")


def _aggregate(seeds: list[int], summaries: list[Summary]) -> dict[str, Any]:
    rows = [metrics_of(s) for s in summaries]
    names = list(dict.fromkeys(k for row in rows for k in row))
    verdicts = [s.verdict for s in summaries]
    return {
        "verdict": next((v for v in _WORST if v in verdicts), "pass"),
        "verdicts": {v: verdicts.count(v) for v in reversed(_WORST) if v in verdicts},
        "metrics": {k: _stat([row.get(k) for row in rows]) for k in names},
        "runs": [
            {
                "seed": seed,
                "verdict": s.verdict,
                "passed_as_measured": point_passed(s),
                "verdict_reason": s.verdict_reason,
            }
            for seed, s in zip(seeds, summaries, strict=True)
        ],
    }


class _Ticker:
    """Counts runs across a whole study for the progress callback."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.done, self.total, self.progress = 0, total, progress

    def __call__(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)


def _run_seeds(sc: Scenario, seeds: list[int], tick: _Ticker) -> list[Summary]:
    summaries = []
    for seed in seeds:
        arrival = sc.arrival.model_copy(update={"seed": seed})
        summaries.append(simulate(sc.model_copy(update={"arrival": arrival})).summary)
        tick()
    return summaries


def _seeds(sc: Scenario, n: int) -> list[int]:
    return [sc.arrival.seed + i for i in range(n)]


def replications(sc: Scenario, n: int, progress: Progress | None = None) -> dict[str, Any]:
    """Run ``sc`` with ``n`` >= 2 arrival seeds from its own; each metric's mean and 95% CI."""
    if n < 2:
        raise BadInput("--replications", n, "at least 2 (a confidence interval needs two runs)")
    seeds = _seeds(sc, n)
    summaries = _run_seeds(sc, seeds, _Ticker(n, progress))
    return {
        "schema": REPLICATIONS_SCHEMA,
        "tool_version": __version__,
        "target": f"sim:{sc.name}",
        "replications": n,
        "seeds": seeds,
        "confidence": CONFIDENCE,
        **_aggregate(seeds, summaries),
        "scenario": sc.model_dump(),
    }


# -- variations ------------------------------------------------------------------------

VARY_FORM = "KEY=V1,V2,... (or V1;V2;... when values hold commas), e.g. batching.size=1,2,4,8"
POINT_FIELDS = (
    "offered_rps throughput_rps goodput_rps attainment latency_p50_ms latency_p99_ms".split()
)


def parse_vary(text: str) -> tuple[str, list[str]]:
    """``KEY=V1,V2,...`` -> (key, values); values split on ``;`` instead when one is present."""
    key, sep, rest = text.partition("=")
    values = [v.strip() for v in rest.split(";" if ";" in rest else ",")]
    if not sep or not key.strip() or not all(values):
        raise BadInput("--vary", text, VARY_FORM)
    return key.strip(), values


INDEX = "<i>"  # a list position in a key: stages.<i>.replicas is stages.0.replicas, ...


def _fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted leaf field of a scenario model, optional sections and list items included."""
    out: list[str] = []
    for name, info in model.model_fields.items():
        kinds = get_args(info.annotation) or (info.annotation,)
        items = [get_args(k)[0] for k in kinds if get_origin(k) is list and get_args(k)]
        sub = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        models = [k for k in items if isinstance(k, type) and issubclass(k, BaseModel)]
        if sub:
            out += _fields(sub[0], f"{prefix}{name}.")
        elif models:
            out += _fields(models[0], f"{prefix}{name}.{INDEX}.")
        else:
            out.append(f"{prefix}{name}")
    return out


def _check_key(key: str, given: str, flag: str = "--vary") -> None:
    fields = _fields(Scenario)
    if ".".join(INDEX if p.isdigit() else p for p in key.split(".")) in fields:
        return
    close = difflib.get_close_matches(key, fields, n=3)
    hint = f"did you mean {' or '.join(close)}?" if close else "one of " + ", ".join(fields)
    raise BadInput(flag, given, f"KEY a dotted scenario field: {hint}")


def _value(raw: str, current: Any) -> Any:
    """The string as given (pydantic converts it for int/float fields); none/null -> None."""
    if raw.lower() in ("none", "null"):
        return None
    return [raw] if isinstance(current, list) else raw


def _section(parts: list[str], i: int, given: str, whole: Any, flag: str = "--vary") -> None:
    """Raise unless ``whole`` (the full dump at parts[:i+1]) is a section one can set inside."""
    where = ".".join(parts[: i + 1])
    if whole is None:
        raise BadInput(flag, given, f"a scenario with a {where} section (add one to the file)")
    if isinstance(whole, list) and not int(parts[i + 1]) < len(whole):
        raise BadInput(flag, given, f"an index below {len(whole)}: {where} has {len(whole)}")


def with_value(sc: Scenario, key: str, raw: str, flag: str = "--vary") -> Scenario:
    """``sc`` with the dotted field ``key`` set to ``raw``, validated as a scenario file is.

    Only the fields the scenario set are carried over (plus the section the key is in),
    so a value the file left to its default stays a default.
    """
    given = f"{key}={raw}"
    _check_key(key, given, flag)
    data, full = sc.model_dump(exclude_unset=True), sc.model_dump()
    node, whole, parts = data, full, key.split(".")
    for i, part in enumerate(parts[:-1]):
        at: Any = int(part) if isinstance(whole, list) else part
        _section(parts, i, given, whole[at], flag)
        if isinstance(node, dict) and at not in node:
            node[at] = copy.deepcopy(whole[at])  # a default section, set explicitly now
        node, whole = node[at], whole[at]
    node[parts[-1]] = _value(raw, whole[parts[-1]])
    try:
        return _validated(data)
    except BadInput as exc:
        if node[parts[-1]] is None:  # "none" may be a word the field takes (hedge.cancel)
            node[parts[-1]] = raw
            try:
                return _validated(data)
            except BadInput:
                pass
        raise BadInput(flag, given, f"a valid {key} ({exc})") from None


def _validated(data: dict[str, Any]) -> Scenario:
    varied = parse_scenario(data)
    system_spec(varied)  # cross-field checks (fan-out k <= n, slow replica indices)
    return varied


def vary(
    sc: Scenario,
    key: str,
    values: list[str],
    replications: int = 1,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """One point per value of ``key``: rates, latency p50/p99 (95% CIs when replicated)."""
    if replications < 1:
        raise BadInput("--replications", replications, "at least 1 run per value")
    variants = [with_value(sc, key, v) for v in values]  # every value checked before any run
    tick = _Ticker(len(values) * replications, progress)
    points = []
    for value, variant in zip(values, variants, strict=True):
        seeds = _seeds(variant, replications)
        agg = _aggregate(seeds, _run_seeds(variant, seeds, tick))
        m = agg["metrics"]
        point: dict[str, Any] = {"value": value, **{f: m[f]["mean"] for f in POINT_FIELDS}}
        point["half_width"] = {f: m[f]["half"] for f in POINT_FIELDS} if replications > 1 else None
        points.append({**point, **agg})
    verdicts = [p["verdict"] for p in points]
    return {
        "schema": VARY_SCHEMA,
        "tool_version": __version__,
        "target": f"sim:{sc.name}",
        "key": key,
        "values": values,
        "replications": replications,
        "confidence": CONFIDENCE,
        "verdict": next((v for v in _WORST if v in verdicts), "pass"),
        "points": points,
        "scenario": sc.model_dump(),
    }


def exit_code(doc: dict[str, Any]) -> int:
    """As a single run: 0 every run passed, 1 an SLO failed somewhere, 3 a run was invalid,
    5 no run failed but some could not decide."""
    return EXIT_CODES[doc["verdict"]]
