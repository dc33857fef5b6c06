"""Fitting an LLM endpoint's step law from TTFT and TPOT against load.

The model is the demo engine's (``tailwise serve-demo --kind llm``, vLLM's
shape; its law is :mod:`tailwise.laws.llm`): continuous batching where a step
costs

    a + b x (prompt tokens prefilled in it) + c x (sequences decoding in it)
      + k x (KV tokens the decoding sequences attend to)

with at most ``max_num_seqs`` sequences running, plus a delay D outside the
engine (HTTP, SSE framing) that every chunk of a stream carries.

* **Prefill, b**: at the lowest load a request is mostly alone, so its TTFT
  (from the send) is about D + a + b P; a line through TTFT against prompt
  tokens P gives b as its slope. One prompt length cannot separate b from a:
  then b is 0 and the run's prefill cost rides in D (the fit says so).
* **Decode, a and c**: TPOT grows with the running batch N (Little's law:
  N = throughput x mean time from first token to done). Prefill steps pause
  decoding, a share u = throughput x (a + b P) of the time, so
  TPOT (1 - u) = a + c N; the line through each step's (N, TPOT (1 - u)) gives
  a and c, iterated because u needs a.
* **max_num_seqs**: at saturation every slot is taken, so N there (plus the
  prefill step each sequence spends admitted) is the slot count.
* **D** is the low-load TTFT intercept less a.
* **Context, k**: the slope of each request's inter-token gaps against its own
  context (:mod:`tailwise.calibrate.context`); what it adds to a step,
  k N (P + O/2) on average, is taken off TPOT before a and c are fitted, and
  k is held at its value while the others are refined.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tailwise.calibrate.context import context_share_ms, fit_context
from tailwise.calibrate.fit import calm_steps, refine, token_form
from tailwise.calibrate.generic import Fit
from tailwise.calibrate.steps import Step
from tailwise.laws.llm import step_cost

UNBOUNDED_SEQS = 1024  # when no step saturated: no slot limit is in evidence


def _prefill(low: Step) -> tuple[float, float, list[str]]:
    """(intercept ms, ms per prompt token, notes) from TTFT against prompt length."""
    r, ok = low.records, low.ok()
    ttft = (r.first_token_ns - r.sent_ns)[ok]
    prompt = r.input_tokens[ok]
    keep = (ttft >= 0) & (prompt > 0)
    ttft_ms, prompt = ttft[keep] / 1e6, prompt[keep].astype(np.float64)
    if len(np.unique(prompt)) < 2 or prompt.max() < 1.2 * prompt.min():
        note = (
            "one prompt length at the lowest load: prefill per token is not identified "
            "(run that step with --input-tokens uniform:A-B); it rides in the delay"
        )
        return float(np.median(ttft_ms)), 0.0, [note]
    slope, intercept = np.polyfit(prompt, ttft_ms, 1)
    return float(intercept), max(float(slope), 0.0), []


def _decode_points(
    steps: list[Step], kv_ms: float = 0.0
) -> list[tuple[float, float, float, float]]:
    """Per step: (throughput /s, running batch N, mean TPOT ms, mean prompt tokens); with
    a context term, TPOT less what that term adds to a step."""
    points = []
    for s in steps:
        r, ok = s.records, s.ok()
        tpot = s.tpot_ms()
        span = (r.done_ns - r.first_token_ns)[ok]
        span = span[span >= 0]
        if len(tpot) == 0 or len(span) == 0:
            continue
        n = s.throughput_rps * float(span.mean()) / 1e9
        prompt = float(r.input_tokens[ok].mean())
        kv = context_share_ms(kv_ms, n, prompt, float(r.output_tokens[ok].mean()))
        points.append((s.throughput_rps, n, float(tpot.mean()) - kv, prompt))
    return points


def _decode(
    points: list[tuple[float, float, float, float]], b_ms: float, a0_ms: float
) -> tuple[float, float]:
    """(a, c) in ms from TPOT (1 - u) = a + c N, u the share of time in prefill steps."""
    a_ms, c_ms = a0_ms, 0.0
    for _ in range(5):
        xs = [n for _, n, _, _ in points]
        # u = throughput x the cost of a prefill step (p prompt tokens, no decodes)
        ys = [tpot * (1 - x * step_cost(a_ms, b_ms, c_ms, p, 0) / 1e3) for x, _, tpot, p in points]
        if len(points) >= 2 and max(xs) > min(xs):
            c_ms, a_ms = (float(v) for v in np.polyfit(xs, ys, 1))
        else:
            a_ms = ys[0] - c_ms * xs[0]
    return max(a_ms, 0.01), max(c_ms, 0.0)


def _slots(steps: list[Step], a_ms: float, b_ms: float, c_ms: float) -> tuple[int, list[str]]:
    """max_num_seqs from the saturated steps' running batch."""
    sat = [s for s in steps if s.saturated]
    if not sat:
        note = "no step reached saturation: max_num_seqs is not identified (left unbounded)"
        return UNBOUNDED_SEQS, [note]
    best = 0.0
    for x, n, _, p in _decode_points(sat):
        best = max(best, n + x * step_cost(a_ms, b_ms, c_ms, p, 0) / 1e3)
    return max(1, round(best)), []


def llm_model(p: dict[str, float], timeout: str) -> dict[str, Any]:
    """Scenario fields for step-law numbers (ms) and a slot count."""
    llm = {
        "base": f"{p['base_ms']:.6g}ms",
        "prefill_per_token": f"{p['prefill_ms_per_token']:.6g}ms",
        "decode_per_seq": f"{p['decode_ms_per_seq']:.6g}ms",
        "max_num_seqs": int(p["max_num_seqs"]),
        # Not identified from outside: the slot count is the binding limit here.
        "kv_cache_tokens": 1 << 30,
        "max_waiting": 1 << 20,
        "max_model_len": 1 << 20,
        "timeout": timeout,
    }
    if p.get("kv_ms_per_token"):
        llm["kv_per_token"] = f"{p['kv_ms_per_token']:.6g}ms"
    model: dict[str, Any] = {"llm": llm}
    if p["delay_ms"] > 0:
        model["delay"] = f"{p['delay_ms']:.6g}ms"
    return model


def fit_llm(steps: list[Step], on_step: Callable[[int, float], None] | None = None) -> Fit:
    """Closed forms for a first guess, then a pattern search on the simulated steps."""
    low = steps[0]
    intercept_ms, b_ms, notes = _prefill(low)
    kv_ms, more = fit_context(steps)  # the step law holds at any load: every step counts
    notes += more
    points = _decode_points(calm_steps(steps), kv_ms)
    a_ms, c_ms = _decode(points, b_ms, points[0][2] if points else 1.0)
    slots, more = _slots(steps, a_ms, b_ms, c_ms)
    notes += more
    start = {
        "base_ms": a_ms,
        "prefill_ms_per_token": b_ms,
        "decode_ms_per_seq": c_ms,
        "delay_ms": max(intercept_ms - a_ms, 0.0),
        "max_num_seqs": float(slots),
    }
    timeout = str(low.options.get("timeout") or "60s")
    integers = frozenset({"max_num_seqs"}) if slots != UNBOUNDED_SEQS else frozenset()
    if slots == UNBOUNDED_SEQS:
        start.pop("max_num_seqs")

    def build(p: dict[str, float]) -> dict[str, Any]:
        return llm_model({"max_num_seqs": float(slots), "kv_ms_per_token": kv_ms, **p}, timeout)

    best, _ = refine(build, start, steps, integers=integers, on_step=on_step)
    params: dict[str, Any] = {k: round(v, 6) for k, v in best.items()}
    params["kv_ms_per_token"] = round(kv_ms, 9)
    params["max_num_seqs"] = int(best.get("max_num_seqs", slots))
    params["closed_form_start"] = {k: round(v, 6) for k, v in start.items()}
    params["highest_throughput_rps"] = round(max(s.throughput_rps for s in steps), 3)
    model = build(best)
    # The workload the runs sent, so the model predicts for it until told otherwise.
    prompts = np.concatenate([s.records.input_tokens[s.ok()] for s in steps])
    outputs = np.concatenate([s.records.output_tokens[s.ok()] for s in steps])
    model["llm"] |= {"prompt_tokens": token_form(prompts), "output_tokens": token_form(outputs)}
    return Fit("llm", model, params, notes)
