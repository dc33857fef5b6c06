"""``tailwise calibrate``: fit a simulator scenario to measured runs, and say how well it fits.

1. :mod:`~tailwise.calibrate.steps` loads the runs (a sweep, a knee search or
   run directories) and tells the saturated steps from the calm ones;
2. :mod:`~tailwise.calibrate.generic` (a generic or a batching endpoint) or
   :mod:`~tailwise.calibrate.llm` fits the model's numbers;
3. :mod:`~tailwise.calibrate.fit` re-runs every step on the simulator and
   compares the percentiles people quote.

The model is an ordinary scenario file (``tailwise simulate model.yaml`` runs
it; ``tailwise plan capacity --model model.yaml`` asks it what-if questions)
with a ``calibration:`` block saying where it came from and how well it fits.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.calibrate.advice import advice, measured_range
from tailwise.calibrate.fit import METRICS, Goodness, goodness
from tailwise.calibrate.generic import SHAPES, Fit, fit_batching, fit_http
from tailwise.calibrate.llm import fit_llm
from tailwise.calibrate.steps import Step, load_steps
from tailwise.errors import BadInput
from tailwise.knee import knee_rps
from tailwise.loadgen.llm import apis
from tailwise.plan.schema import Plan
from tailwise.version import __version__

SERVICE_CHOICES = ("auto", *SHAPES)
MAX_SLOTS = 65_536
MAX_CHUNK_TOKENS = 1 << 20


@dataclass
class Calibration:
    fit: Fit
    goodness: Goodness
    steps: list[Step]
    notes: list[str]
    sources: list[str]

    @property
    def advice(self) -> list[str]:
        """What would make a poor fit good (empty when it is good)."""
        return advice(self.steps, self.goodness, self.notes + self.fit.notes)

    @property
    def range(self) -> dict[str, Any]:
        """What the runs covered: the model is flagged beyond it (tailwise.sim.trust)."""
        return measured_range(self.steps)

    @property
    def slos(self) -> list[str]:
        """The SLOs the runs were judged by (the model keeps them for knee searches)."""
        return [s.spec for s in self.steps[0].summary.slos if not s.implicit]

    @property
    def measured_knee_rps(self) -> float | None:
        """The highest rate at which this step and every lower one passed."""
        return knee_rps(self.steps)

    def model_doc(self) -> dict[str, Any]:
        """The scenario to write: the fitted serving model, a default workload, the SLOs."""
        calm = [s for s in self.steps if not s.saturated] or self.steps[:1]
        rate = self.measured_knee_rps or calm[-1].rate_rps
        target = str(self.steps[0].summary.to_json()["target"] or "the endpoint")
        doc: dict[str, Any] = {
            "name": f"calibrated: {target}",
            "arrival": {"process": "poisson", "rate": f"{rate:g}/s", "duration": "60s"},
            **self.fit.model,
            "slo": self.slos,
            "calibration": self.calibration_block(),
        }
        return doc

    def calibration_block(self) -> dict[str, Any]:
        g = self.goodness.to_json()
        return {
            "tool_version": __version__,
            "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "kind": self.fit.kind,
            "from": self.sources,
            "steps": len(self.steps),
            "params": self.fit.params,
            "measured_knee_rps": self.measured_knee_rps,
            "fit": {
                k: g[k] for k in ("rms_log_error", "worst", "objective", "capacity", "poor", "rule")
            },
            "range": self.range,
            "advice": self.advice,
            "notes": self.notes + self.fit.notes + self.goodness.notes(),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "tailwise.calibration/1",
            "tool_version": __version__,
            "kind": self.fit.kind,
            "params": self.fit.params,
            "model": self.fit.model,
            "goodness": self.goodness.to_json(),
            "measured_knee_rps": self.measured_knee_rps,
            "range": self.range,
            "advice": self.advice,
            "notes": self.notes + self.fit.notes + self.goodness.notes(),
        }


Progress = Callable[[int, float], None]


def _check_llm_steps(steps: list[Step]) -> None:
    """An LLM fit needs streamed answers (TTFT and token gaps); plain HTTP runs have none."""
    streamed = [
        st for st in steps if st.records.chunk_times and any(c for c in st.records.chunk_times)
    ]
    if not streamed:
        streaming = " or ".join(n for n in apis.names() if apis.get(n).streams)
        raise BadInput(
            "--kind",
            "llm",
            f"runs streamed from an LLM endpoint (--api {streaming}); "
            "these runs hold no token timings: use --kind http",
        )


def calibrate(
    paths: list[Path],
    *,
    kind: str | None = None,
    service: str = "auto",
    max_batch: int | None = None,
    max_wait_ms: float | None = None,
    progress: Progress | None = None,
    slots: int | None = None,
    prefill_chunk: int | None = None,
) -> Calibration:
    if service not in SERVICE_CHOICES:
        raise BadInput("--service", service, " | ".join(SERVICE_CHOICES))
    if slots is not None and not 1 <= slots <= MAX_SLOTS:
        raise BadInput("--slots", slots, f"a slot count from 1 to {MAX_SLOTS}")
    if prefill_chunk is not None and not 0 <= prefill_chunk <= MAX_CHUNK_TOKENS:
        raise BadInput("--prefill-chunk", prefill_chunk, f"tokens from 0 to {MAX_CHUNK_TOKENS}")
    steps, notes = load_steps(paths, kind)
    kind = steps[0].kind
    if kind == "llm":
        _check_llm_steps(steps)
        fit = fit_llm(steps, progress, slots=slots, prefill_chunk=prefill_chunk)
    elif kind == "batching":
        fit = fit_batching(steps, max_batch, max_wait_ms)
    else:
        fit = fit_http(steps, SHAPES if service == "auto" else (service,))
    return Calibration(fit, goodness(fit.model, steps), steps, notes, [str(p) for p in paths])


def write_model(cal: Calibration, out: Path) -> list[Path]:
    """Write the model (YAML) and, for an empirical service law, its samples beside it."""
    import yaml

    doc = cal.model_doc()
    written = [out]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput("-o", str(out), f"a writable file ({exc.strerror})") from None
    if cal.fit.samples_ms is not None:
        samples = out.with_name(out.stem + ".service.txt")
        header = "service times in ms, one per line, fitted by tailwise calibrate"
        np.savetxt(samples, cal.fit.samples_ms, fmt="%.6f", header=header)
        doc["service"] = f"empirical:{samples.name}"
        written.append(samples)
    head = (
        "# A serving model fitted by `tailwise calibrate` to measured runs; see\n"
        "# calibration: below for where it came from and how well it fits.\n"
        "# Run it with `tailwise simulate`; ask it what-if questions with\n"
        "# `tailwise plan capacity --model`.\n"
    )
    try:
        # JSON round trip: plain floats and lists only (no NumPy scalars in the YAML).
        plain = json.loads(json.dumps(doc))
        out.write_text(head + yaml.safe_dump(plain, sort_keys=False, width=100))
    except OSError as exc:
        raise BadInput("-o", str(out), f"a writable file ({exc.strerror})") from None
    return written


def as_plan(cal: Calibration, written: list[Path]) -> Plan:
    """The calibration as a plan-style table: fitted numbers, then the fit step by step."""
    g = cal.goodness
    rows = []
    for row in g.rows:
        line: dict[str, Any] = {"rate": f"{row.rate_rps:g}/s"}
        for label in ["throughput", *(m[0] for m in METRICS[cal.fit.kind])]:
            m, p = row.measured.get(label), row.predicted.get(label)
            name = "thruput" if label == "throughput" else label
            line[f"{name} meas"] = m
            line[f"{name} model"] = p
            err = row.error(label)
            if label != "throughput":
                line[f"{name} err"] = f"{err:+.0%}" if err is not None else None
        line["scored"] = "saturated" if row.saturated else "yes"
        rows.append(line)
    label, rate, err = g.worst
    verdict = "POOR: do not trust predictions far from the measured steps" if g.poor else "good"
    outputs: dict[str, Any] = {**cal.fit.params, "fit": rows}
    outputs["fit rms error"] = f"{g.rms_log_error:.3f} (log ratio; {verdict})"
    outputs["worst"] = f"{label} at {rate:g}/s off by {err:+.0%}"
    if written:
        outputs["wrote"] = ", ".join(str(p) for p in written)
    inputs = {"runs": ", ".join(cal.sources), "steps": len(cal.steps)}
    return Plan(
        cal.fit.kind,
        f"model fitted to {len(cal.steps)} measured step{'s' if len(cal.steps) != 1 else ''}",
        inputs,
        outputs,
        tuple(cal.notes + cal.fit.notes),
        command="calibrate",
        warnings=tuple(g.notes()) + tuple(f"to fit well: {a}" for a in cal.advice),
    )
