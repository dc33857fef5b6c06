"""Goodness of fit: simulate every measured step with the fitted model and compare.

Each step is re-run on the simulator as the same experiment (its offered
rate, arrival process, warm-up and window, starting empty), replicated with
fresh seeds until the replications hold ``min_requests`` between them; the
median replication is compared with the measurement. The comparison uses the
percentiles people quote: latency p50 and p99 for a generic or batching
endpoint; TTFT p50, TTFT p99 and TPOT p50 for an LLM. A p99 of fewer than
100 measured samples is not compared (it is the maximum).

The score is the root mean square of ``log(predicted / measured)`` over the
steps below saturation (past capacity, latency grows for as long as the
window lasts: those steps are compared on throughput instead). A fit is
**poor** when that RMS is over :data:`POOR_RMS` (about 15%) or any one value
is off by more than :data:`POOR_ONE` (35%).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailwise.calibrate.steps import Step
from tailwise.sim.run import simulate
from tailwise.sim.scenario import parse_scenario

POOR_RMS = 0.14  # log error: exp(0.14) = 1.15
POOR_ONE = 0.30  # log error: exp(0.30) = 1.35
MIN_REQUESTS = 20_000  # per step, over its replications

# (label, summary section, percentile) compared per kind of endpoint
METRICS: dict[str, list[tuple[str, str, str]]] = {
    "http": [("latency p50", "latency_ms", "p50"), ("latency p99", "latency_ms", "p99")],
    "llm": [
        ("TTFT p50", "ttft_ms", "p50"),
        ("TTFT p99", "ttft_ms", "p99"),
        ("TPOT p50", "tpot_ms", "p50"),
    ],
}
METRICS["batching"] = METRICS["http"]
# Past capacity: what got done and, for an LLM, the pace of a full batch.
SATURATED_METRICS = {
    "http": ["throughput"],
    "batching": ["throughput"],
    "llm": ["throughput", "TPOT p50"],
}


def calm_steps(steps: list[Step]) -> list[Step]:
    """The steps a fit is judged on: those below saturation (the first if none is).

    Steps close to capacity count: a short run there is noisy, but it is also
    where the number of servers and the service law's spread show most."""
    return [s for s in steps if not s.saturated] or steps[:1]


@dataclass(frozen=True)
class FitRow:
    rate_rps: float
    saturated: bool
    scored: bool  # below saturation: counts toward the score
    measured: dict[str, float]  # label -> ms, plus "throughput" in req/s
    predicted: dict[str, float]

    def error(self, label: str) -> float | None:
        """Relative error of the prediction, (predicted - measured) / measured."""
        m, p = self.measured.get(label), self.predicted.get(label)
        if m is None or p is None or not m > 0:
            return None
        return p / m - 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "rate_rps": self.rate_rps,
            "saturated": self.saturated,
            "scored": self.scored,
            "measured": self.measured,
            "predicted": self.predicted,
            "error": {k: self.error(k) for k in self.measured},
        }


@dataclass(frozen=True)
class Goodness:
    rows: list[FitRow]
    rms_log_error: float
    worst: tuple[str, float, float]  # (label, rate, relative error)
    poor: bool

    def to_json(self) -> dict[str, Any]:
        label, rate, err = self.worst
        return {
            "rms_log_error": round(self.rms_log_error, 4),
            "worst": {"metric": label, "rate_rps": rate, "error": round(err, 4)},
            "poor": self.poor,
            "rule": f"poor when RMS log error > {POOR_RMS} or one value off by > "
            f"{math.exp(POOR_ONE) - 1:.0%}",
            "steps": [r.to_json() for r in self.rows],
        }


def _percentile(values: np.ndarray, p: str) -> float | None:
    if len(values) == 0:
        return None
    return float(np.percentile(values, float(p.removeprefix("p"))))


def measured(step: Step) -> dict[str, float]:
    """The step's own numbers, from its records (TTFT from the actual send)."""
    arrays = {"latency_ms": step.latency_ms}
    if step.kind == "llm":
        arrays = {"ttft_ms": step.ttft_ms, "tpot_ms": step.tpot_ms}
    out: dict[str, float] = {"throughput": step.throughput_rps}
    for label, section, p in METRICS[step.kind]:
        values = arrays[section]()
        if p == "p99" and len(values) < MIN_P99_SAMPLES:
            continue  # with fewer, "p99" is the maximum: no percentile to fit
        v = _percentile(values, p)
        if v is not None:
            out[label] = v
    return out


def token_form(values: np.ndarray) -> int | str:
    """A workload column as the scenario's form: N, or uniform:A-B over what was seen."""
    lo, hi = int(values.min()), int(values.max())
    return lo if lo == hi else f"uniform:{lo}-{hi}"


MAX_REPLICATIONS = 40
MIN_P99_SAMPLES = 100


def step_model(model: dict[str, Any], step: Step, seed: int) -> dict[str, Any]:
    """The model running this step's experiment: its offered rate, process, warm-up and
    window, from empty (and, for an LLM, its prompt and output lengths).

    The window is kept as measured, not stretched: near capacity a short run from
    empty has not yet built the queue a long one would, and the model must predict
    what was measured, not what a longer run would have seen."""
    data = copy.deepcopy(model)
    data.pop("calibration", None)
    process = step.process
    if process.startswith(("stages", "trace", "ramp")):
        process = "poisson"  # a shaped schedule has no one rate: model its mean
    data["arrival"] = {
        "process": process,
        "rate": f"{step.rate_rps:.6g}/s",
        "duration": f"{step.window_s:.6g}s",
        "warmup": f"{step.warmup_s:.6g}s",
        "seed": seed,
    }
    data["slo"] = []
    if step.kind == "llm":
        r, ok = step.records, step.ok()
        data["llm"] = {
            **data["llm"],
            "prompt_tokens": token_form(step.prompt_tokens()),
            "output_tokens": token_form(r.output_tokens[ok]),
            "token_times": False,  # TTFT and TPOT need no per-token times
        }
    return data


def replications_for(step: Step, min_requests: int) -> int:
    """Enough runs of the step's experiment to hold ``min_requests`` between them."""
    per_run = max(step.rate_rps * step.window_s, 1.0)
    return max(1, min(MAX_REPLICATIONS, math.ceil(min_requests / per_run)))


def predict(model: dict[str, Any], step: Step, min_requests: int) -> dict[str, float]:
    """The median, over replications with seeds 1, 2, ..., of what the step measured:
    what one run of that experiment typically shows (a mean would be ruled by the
    rare replication that congested)."""
    sums: dict[str, list[float]] = {}
    for seed in range(1, replications_for(step, min_requests) + 1):
        # Point estimates: a fit reads percentiles, never their intervals.
        summary = simulate(parse_scenario(step_model(model, step, seed)), intervals=False).summary
        sums.setdefault("throughput", []).append(float(summary["rates"]["throughput_rps"]))
        for label, section, p in METRICS[step.kind]:
            value = (summary.get(section) or {}).get(p)
            if value is not None:
                sums.setdefault(label, []).append(float(value))
    return {k: float(np.median(v)) for k, v in sums.items()}


def goodness(
    model: dict[str, Any], steps: list[Step], min_requests: int = MIN_REQUESTS
) -> Goodness:
    """Every step predicted; the calm ones scored."""
    calm = {id(s) for s in calm_steps(steps)}
    rows = [
        FitRow(s.rate_rps, s.saturated, id(s) in calm, measured(s), predict(model, s, min_requests))
        for s in steps
    ]
    return judge(rows, steps[0].kind)


def judge(rows: list[FitRow], kind: str) -> Goodness:
    errors: list[tuple[str, float, float]] = []
    for row in rows:
        if not row.scored:
            continue
        for label, _, _ in METRICS[kind]:
            e = row.error(label)
            if e is not None and e > -1:
                errors.append((label, row.rate_rps, e))
    if not errors:
        return Goodness(rows, math.inf, ("-", 0.0, math.inf), True)
    logs = [math.log1p(e) for _, _, e in errors]
    rms = math.sqrt(sum(x * x for x in logs) / len(logs))
    worst = max(errors, key=lambda t: abs(math.log1p(t[2])))
    poor = rms > POOR_RMS or abs(math.log1p(worst[2])) > POOR_ONE
    return Goodness(rows, rms, worst, poor)


def score(model: dict[str, Any], steps: list[Step], min_requests: int) -> float:
    """The RMS log error over ``steps`` (all scored): what a fit minimises."""
    rows = [
        FitRow(s.rate_rps, s.saturated, True, measured(s), predict(model, s, min_requests))
        for s in steps
    ]
    return judge(rows, steps[0].kind).rms_log_error


def objective(model: dict[str, Any], steps: list[Step], min_requests: int) -> float:
    """What a refinement minimises: the mean square log error of the calm steps'
    percentiles plus that of the saturated steps' throughput, under one root.

    Capacity weighs as much as all the percentiles together: a knee is mostly
    where capacity runs out, so a model that fits the calm steps by giving up
    capacity would predict the wrong knee."""
    calm = {id(s) for s in calm_steps(steps)}
    shape: list[float] = []
    capacity: list[float] = []
    for s in steps:
        if id(s) not in calm and not s.saturated:
            continue
        row = FitRow(s.rate_rps, s.saturated, True, measured(s), predict(model, s, min_requests))
        labels = SATURATED_METRICS[s.kind] if s.saturated else [m[0] for m in METRICS[s.kind]]
        for label in labels:
            e = row.error(label)
            if e is not None:
                (capacity if s.saturated else shape).append(math.log1p(max(e, -0.99)))
    parts = [sum(x * x for x in v) / len(v) for v in (shape, capacity) if v]
    return math.sqrt(sum(parts)) if parts else math.inf


Build = Callable[[dict[str, float]], dict[str, Any]]


def refine(
    build: Build,
    start: dict[str, float],
    steps: list[Step],
    *,
    integers: frozenset[str] = frozenset(),
    min_requests: int = 1_500,
    max_evaluations: int = 100,
    on_step: Callable[[int, float], None] | None = None,
) -> tuple[dict[str, float], float]:
    """A pattern search (Hooke and Jeeves, in log space) from ``start``: each parameter
    is scaled up and down by a factor that halves whenever no move improves.

    The simulator's seeds are fixed, so the objective is deterministic and a move
    that helps helps for real, not by luck of the draw."""
    best = dict(start)
    best_err = objective(build(best), steps, min_requests)
    evaluations, factor = 1, 0.25
    while factor > 0.01 and evaluations < max_evaluations:
        moved = False
        for name in start:
            if best[name] == 0:
                continue  # a term the closed forms found absent stays absent
            for sign in (1, -1):
                trial = dict(best)
                value = best[name] * (1 + sign * factor)
                if name in integers:
                    value = max(1.0, float(round(value)))
                    if value == best[name]:
                        value = max(1.0, best[name] + sign)
                if value == best[name]:
                    continue
                trial[name] = value
                err = objective(build(trial), steps, min_requests)
                evaluations += 1
                if on_step is not None:
                    on_step(evaluations, min(err, best_err))
                if err < best_err:
                    best, best_err, moved = trial, err, True
                    break
        if not moved:
            factor /= 2
    return best, best_err
