"""The workload of a run or a sweep, so that ``compare`` can refuse to compare unlike runs.

A 300/s run against a 100/s run differs in load, not in the system under test;
an HTTP run against an LLM run, or a 60 s simulation against a 15 s measurement,
differ in what was asked. Comparing them prints regressions that are not. The
workload is read from the run's :class:`Summary` (source, mode, arrival, window) and, when
the directory has one, ``run.json`` (API, prompt and output lengths, bodies).
The target URL and the seed are not workload: comparing two deployments under
the same load is the point, and a new seed is a new sample of the same load.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tailwise.metrics.schema import Summary
from tailwise.metrics.shape import read_summary_or_none

# run.json options that shape what each request asks for
_REQUEST_OPTIONS = (
    ("api", "API"),
    ("model", "model"),
    ("input_tokens", "prompt length"),
    ("max_tokens", "output length"),
    ("prompts", "prompt dataset"),
    ("shared_prefix", "shared prefix"),
    ("documents", "documents"),
    ("document_tokens", "document length"),
    ("stream", "streaming"),
    ("method", "method"),
    ("bodies", "bodies"),
    ("extra_body", "extra body"),
)
_REL_TOLERANCE = 0.01  # rates and durations within 1% are the same workload


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _arrival(summary: Summary) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in summary.arrival.items():
        if key == "seed":
            continue
        label = "rate" if key == "rate_rps" else f"arrival {key}"
        out[label] = value
    return out


def run_workload(summary: Summary, directory: Path | None) -> dict[str, Any]:
    """``{field label: value}`` describing the load a run offered and what it asked."""
    out: dict[str, Any] = {
        "source": summary.source,
        "mode": summary.mode,
        "duration": summary.window.duration_s,
        "LLM metrics": summary.distribution("ttft_ms") is not None,
        **_arrival(summary),
    }
    if summary.closed:
        out["users"] = summary.concurrency
    run = _read(directory / "run.json") if directory is not None else None
    options = (run or {}).get("options")
    if isinstance(options, dict):
        for key, label in _REQUEST_OPTIONS:
            out[label] = options.get(key)
    return out


def sweep_workload(sweep: dict[str, Any], directory: Path) -> dict[str, Any]:
    """A sweep's workload: its first step's, less the rate (the rates are the sweep)."""
    steps = sweep.get("steps") if isinstance(sweep.get("steps"), list) else []
    if not steps or not isinstance(steps[0], dict):
        return {"mode": sweep.get("mode")}
    step_dir = step_directory(str(steps[0].get("directory", "")), directory)
    summary = read_summary_or_none(step_dir / "summary.json") if step_dir is not None else None
    if summary is None:
        return {"mode": sweep.get("mode")}
    out = run_workload(summary, step_dir)
    out.pop("rate", None)
    out.pop("users", None)
    return out


def step_directory(recorded: str, sweep_dir: Path) -> Path | None:
    """A step's directory as recorded, or by its name inside the sweep directory (moved)."""
    for candidate in (Path(recorded), sweep_dir / Path(recorded).name):
        if recorded and candidate.is_dir():
            return candidate
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        if not (math.isfinite(a) and math.isfinite(b)):
            return a == b
        return abs(a - b) <= _REL_TOLERANCE * max(abs(a), abs(b))
    return bool(a == b)


def _show(value: Any, label: str) -> str:
    if value is None:
        return "none"
    if label == "rate" and isinstance(value, int | float):
        return f"{value:g}/s"
    if label == "duration" and isinstance(value, int | float):
        return f"{value:g}s"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """``["rate 300/s vs 100/s", ...]``: fields both workloads state, with unequal values."""
    out = []
    for label in a:
        if label in b and not _same(a[label], b[label]):
            out.append(f"{label} {_show(a[label], label)} vs {_show(b[label], label)}")
    return out
