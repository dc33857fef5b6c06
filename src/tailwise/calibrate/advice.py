"""What a model's runs covered, and what would make a poor fit good.

The range (:func:`measured_range`) goes into the model's ``calibration:``
block, where :mod:`tailwise.sim.trust` reads it to flag answers beyond it. The
advice (:func:`advice`) names what the sweep lacked, in the order it matters:
a step past saturation (without one, capacity is a guess), enough steps below
it, steps long enough for their p99, prompts of several lengths; when the
sweep lacks none of these, the server does not follow the model's law (else
the worst value is named beside them, to look at once the sweep is complete).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tailwise.calibrate.fit import MIN_P99_SAMPLES, Goodness, calm_steps
from tailwise.calibrate.steps import Step

MIN_CALM_STEPS = 3  # below saturation: a line (decode cost, service law) needs a spread


def measured_range(steps: list[Step]) -> dict[str, Any]:
    """The highest throughput measured (and its 95% interval's upper end), whether a
    step saturated and, for an LLM, the prompt (as prefilled) and answer lengths sent."""
    top = max(steps, key=lambda s: s.throughput_rps)
    interval = (top.summary.rates.ci or {}).get("throughput_rps")
    edge = top.throughput_rps
    if interval is not None and interval[1] is not None:
        edge = max(edge, float(interval[1]))
    out: dict[str, Any] = {
        "throughput_rps": round(top.throughput_rps, 4),
        "throughput_edge_rps": round(edge, 4),
        "saturated": any(s.saturated for s in steps),
    }
    if steps[0].kind == "llm":
        prompts = np.concatenate([s.prompt_tokens() for s in steps])
        outputs = np.concatenate([s.records.output_tokens[s.ok()] for s in steps])
        out["prompt_tokens"] = [int(prompts.min()), int(prompts.max())]
        out["output_tokens"] = [int(outputs.min()), int(outputs.max())]
    return out


def _sample(step: Step) -> int:
    return len(step.ttft_ms() if step.kind == "llm" else step.latency_ms())


def advice(steps: list[Step], g: Goodness, notes: list[str]) -> list[str]:
    """What would make this fit good (empty when it is good)."""
    if not g.poor:
        return []
    out = []
    if not any(s.saturated for s in steps):
        out.append("sweep further, past saturation (no step fell short of its rate)")
    calm = [s for s in calm_steps(steps) if not s.saturated]
    if len(calm) < MIN_CALM_STEPS:
        out.append(f"more steps below saturation ({len(calm)} now, {MIN_CALM_STEPS}+ wanted)")
    thin = [s for s in calm if _sample(s) < MIN_P99_SAMPLES]
    if thin:
        fewest = min(_sample(s) for s in thin)
        out.append(
            f"longer steps ({len(thin)} below saturation had under {MIN_P99_SAMPLES} requests, "
            f"fewest {fewest}: no p99 to fit)"
        )
    if any(n.startswith("one prompt length") for n in notes):
        out.append("prompts of several lengths (--input-tokens uniform:A-B)")
    label, rate, err = g.worst
    worst = f"{label} at {rate:g}/s off by {err:+.0%}"
    if not out:
        known = "--slots or --prefill-chunk" if steps[0].kind == "llm" else "--kind"
        out.append(
            f"the server does not follow the model's law where it is worst ({worst}): "
            f"more steps around there, or {known} if you know better"
        )
    elif math.isfinite(err):
        out.append(f"then look where it is worst now: {worst}")
    return out
