"""Load sweeps: one open-loop run per offered rate, lowest first, each a full run.

Every step is an ordinary run (its own directory, records, summary.json) with
its own warm-up, measurement window and drain: the runner waits for the
step's in-flight requests (up to the request timeout) before the next step
starts, so one step's backlog never leaks into the next one's numbers.

``sweep.json`` lists the steps and the sweep's knee: the highest offered rate
at which that step and every lower one passed all SLOs. A step the generator
could not keep up with is ``invalid`` and ends the sweep (rates beyond it
would measure the client, not the target); so does an interrupted step.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailwise.errors import BadInput
from tailwise.files import atomic_write_text
from tailwise.knee import (
    GO_ON_CAUSES,
    Outcome,
    TrialRun,
    knee_rps,
    make_trial,
    steps_band,
    trial_window_s,
)
from tailwise.limits import MAX_CONCURRENCY, within
from tailwise.loadgen.runner import RunOptions, execute, prepare, run_directory
from tailwise.metrics.catalog import CATALOG
from tailwise.metrics.schema import Summary
from tailwise.metrics.uncertainty import CONFIDENCE
from tailwise.metrics.verdict import point_passed, settled
from tailwise.units import parse_rate_rps
from tailwise.version import __version__

SCHEMA = "tailwise.sweep/1"
RATES_FORM = "a comma-separated list of rates such as 10,20,40 or 10/s,20/s, auto or double"
AUTO_MAX_STEPS = 10


def parse_users(text: str) -> list[int]:
    """``"1,4,16"`` -> [1, 4, 16]: closed-loop user counts, sorted."""
    from tailwise.units import parse_count

    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise BadInput("--concurrency", text, "a list of user counts such as 1,4,16")
    users = sorted({parse_count(p, "--concurrency") for p in parts})
    within("--concurrency", users[-1], MAX_CONCURRENCY, "closed-loop users")
    return users


def parse_rates(text: str) -> list[float] | None:
    """``"10,20,40"`` -> [10.0, 20.0, 40.0], sorted; ``"auto"`` or ``"double"`` -> None."""
    if text.strip() in ("auto", "double"):
        return None
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise BadInput("--rates", text, RATES_FORM)
    rates = sorted({parse_rate_rps(p if "/" in p else p.strip() + "/s", "--rates") for p in parts})
    return rates


@dataclass(frozen=True)
class Step:
    rate_rps: float
    directory: Path
    summary: Summary

    @property
    def passed(self) -> bool:
        """On the point estimates (an inconclusive step whose SLOs all passed as measured)."""
        return point_passed(self.summary)


def step_row(step: Step) -> dict[str, Any]:
    """One line of sweep.json: what a table or a plot of the sweep needs."""
    s = step.summary
    closed = s.closed
    rates = s.rates
    row: dict[str, Any] = {
        # Closed loop offers no rate: its step is a number of users.
        "offered_rps": None if closed else step.rate_rps,
        **({"concurrency": s.concurrency} if closed else {}),
        "directory": str(step.directory),
        **{k: rates.get(k) for k in ("throughput_rps", "goodput_rps", "attainment", "error_rate")},
        "measured_offered_rps": rates.offered_rps,
        "verdict": s.verdict,
        "decided": settled(s),
        "verdict_reason": s.verdict_reason,
    }
    for key in (m.summary_key for m in CATALOG if m.sweep_step):
        dist = s.distribution(key)
        if dist is not None:
            row[key] = {q: dist.get(q) for q in ("p50", "p90", "p99")}
    if s.tokens:
        row["output_tps"] = s.tokens.get("output_tps")
    return row


def sweep_json(
    steps: list[Step], target: Any, slos: list[str], note: str, confidence: float = CONFIDENCE
) -> dict[str, Any]:
    closed = any(s.summary.closed for s in steps)
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "mode": "closed" if closed else "open",
        "target": target,
        "slos": slos,
        "steps": [step_row(s) for s in steps],
        "knee_rps": knee_rps(steps),
        "band_rps": list(band) if (band := steps_band(steps)) else None,
        "confidence": confidence,  # the level every step's verdict was decided at
        "note": note,
    }


OnStep = Callable[[int, int, float, Step | None], None]


class Sweep:
    """Runs the steps; ``on_step(i, n, rate, None)`` before a step and with its result after."""

    def __init__(self, base: RunOptions, out_dir: Path, on_step: OnStep | None = None) -> None:
        self.base = base
        self.out_dir = out_dir
        self.on_step = on_step or (lambda *a: None)
        self.steps: list[Step] = []
        self.note = ""
        self.extra: dict[str, Any] = {}  # more for sweep.json (an auto sweep's probe)

    def run_step(self, rate_rps: float, index: int, total: int, users: int | None = None) -> Step:
        """One step: open loop at ``rate_rps``, or closed loop with ``users`` when given."""
        name = f"{users}users" if users else f"{rate_rps:g}rps"
        sequential = self.base.duration in (None, "auto") and not users
        opts = dataclasses.replace(
            self.base,
            duration="auto" if sequential else self.base.duration,
            max_duration=self.base.max_duration or TRIAL_MAX_DURATION,
            rate=None if users else f"{rate_rps:g}/s",
            concurrency=users,
            out=str(self.out_dir / f"step-{index + 1:02d}-{name}"),
            label=f"[{index + 1}/{total}] {f'{users} users' if users else f'{rate_rps:g}/s'}",
        )
        self.on_step(index, total, rate_rps, None)
        prepared = prepare(opts)
        result = execute(prepared, run_directory(opts, prepared.targets[0]))
        step = Step(rate_rps, result.directory, result.summary)
        self.steps.append(step)
        self.on_step(index, total, rate_rps, step)
        return step

    def stop_reason(self, step: Step) -> str:
        s = step.summary
        if s.interrupted:
            return f"interrupted at {step.rate_rps:g}/s"
        if s.verdict == "invalid" and s.verdict_cause not in GO_ON_CAUSES:
            return f"stopped at {step.rate_rps:g}/s: {s.verdict_reason}"
        return ""

    def run_rates(self, rates: list[float]) -> None:
        for i, rate in enumerate(rates):
            step = self.run_step(rate, i, len(rates))
            self.note = self.stop_reason(step)
            if self.note:
                return

    def run_users(self, levels: list[int]) -> None:
        """CLOSED-LOOP comparison: one step per number of users (no knee over offered load)."""
        for i, users in enumerate(levels):
            step = self.run_step(float(users), i, len(levels), users=users)
            self.note = self.stop_reason(step)
            if self.note:
                return
        self.note = "CLOSED LOOP (comparison only): load follows the server; no knee is claimed"

    def run_auto(self, start_rps: float, refine: int = 3) -> None:
        """Double from ``start_rps`` until a step fails, then fill the last bracket."""
        rate, last_pass = start_rps, None
        for i in range(AUTO_MAX_STEPS):
            step = self.run_step(rate, i, AUTO_MAX_STEPS)
            self.note = self.stop_reason(step)
            if self.note:
                return
            if not step.passed:
                break
            last_pass, rate = rate, rate * 2
        else:
            self.note = f"every rate up to {rate / 2:g}/s passed; no knee found"
            return
        if last_pass is None:
            self.note = f"the first rate, {start_rps:g}/s, already fails; try a lower --start"
            return
        inner = [last_pass + (rate - last_pass) * k / (refine + 1) for k in range(1, refine + 1)]
        for j, r in enumerate(inner):
            step = self.run_step(_round_rate(r), len(self.steps), len(self.steps) + refine - j)
            self.note = self.stop_reason(step)
            if self.note:
                return
        self.steps.sort(key=lambda s: s.rate_rps)

    def write(self) -> dict[str, Any]:
        target = self.steps[0].summary.to_json()["target"] if self.steps else None
        doc = sweep_json(
            self.steps, target, list(self.base.slo), self.note,
            float(self.base.confidence),
        )  # fmt: skip
        doc.update(self.extra)
        atomic_write_text(self.out_dir / "sweep.json", json.dumps(doc, indent=2) + "\n")
        return doc


def _round_rate(rate: float) -> float:
    """Three significant figures: step directories and tables stay readable."""
    if rate <= 0:
        return rate
    digits = 2 - math.floor(math.log10(rate))
    return round(rate, max(digits, 0))


TRIAL_MAX_DURATION = "120s"  # the cap of a sequential knee trial or sweep step
STEER_CONFIDENCE = 0.80  # a knee's steering trials: they choose the next rate, no more
STEER_MAX_DURATION = "20s"  # and their cap: near the knee they cannot decide anyway
CONFIRM_MAX_DURATION = "300s"  # the cap of a knee's settling trial (full confidence)


def knee_trial(
    base: RunOptions,
    out_dir: Path,
    min_requests: int = 0,
    stop_early: bool = True,
    confidence: float = CONFIDENCE,
    max_duration: str = TRIAL_MAX_DURATION,
    prefix: str = "trial",
    counter: Iterator[int] | None = None,
) -> Callable[[float], Outcome]:
    """A knee-search trial that runs one open-loop step per call, in ``out_dir/trial-NN-R``.

    Without a ``--duration``, each trial is sequential (``--duration auto``): it
    runs until every SLO is decided at its confidence, or to ``--max-duration``
    (120 s per trial by default), so a trial near the knee gets the samples it
    needs and one far from it ends soon. With a fixed duration and
    ``min_requests``, a trial's window stretches to hold at least that many
    requests at its rate. With ``stop_early``, a trial stops sending once an SLO
    is certainly lost (:mod:`tailwise.loadgen.engine.watch`). A sequential trial decides at
    ``confidence`` (a steering trial of the knee search uses less; only a trial at the
    search's confidence is *firm*, see :mod:`tailwise.knee`). Trials that share a
    ``counter`` share one numbering (the knee's steering and settling trials: "trial 7"
    is the search's seventh, whichever kind it is). :func:`tailwise.knee.make_trial`
    numbers, seeds and judges them, as it does the simulator's.
    """
    from tailwise.units import parse_duration_ns

    sequential = base.duration in (None, "auto")
    base_window_s = 0.0 if sequential else parse_duration_ns(str(base.duration), "--duration") / 1e9

    def run_at(rate_rps: float, n: int, repeat: int) -> TrialRun:
        opts = dataclasses.replace(
            base,
            rate=f"{rate_rps:.6g}/s",
            seed=base.seed + repeat,
            duration="auto"
            if sequential
            else f"{trial_window_s(base_window_s, min_requests, rate_rps):.3f}s",
            max_duration=base.max_duration or max_duration,
            confidence=confidence if sequential else base.confidence,
            stop_on_slo_loss=stop_early,
            out=str(out_dir / f"{prefix}-{n:02d}-{_round_rate(rate_rps):g}rps"),
            label=f"trial {n}: {rate_rps:.4g}/s",
        )
        prepared = prepare(opts)
        result = execute(prepared, run_directory(opts, prepared.targets[0]))
        return TrialRun(result.summary, result.directory)

    firm = not sequential or confidence >= float(base.confidence)
    return make_trial(run_at, firm=firm, counter=counter)
