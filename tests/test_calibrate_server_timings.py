"""The server's own prompt times are used whenever any step has them, pooled across steps.

The truth is a llama.cpp-shaped step law (8 slots, prompts riding in the
decodes' batches) with one prompt length, so the client's TTFT line cannot
tell the prefill cost per token from the step's fixed cost. llama.cpp says,
per request, how long its prompt took: the batch that carried it, which
costs the step's base, b per prompt token and c per sequence decoding beside
it. The server.jsonl each step gets here is that law, written from the
step's own running batch, as a llama-server would report it.

The lowest step has 8 requests, fewer than MIN_SERVER_TIMINGS: read alone,
its timings were dropped without a word and b came out 0; pooled with the
other steps below saturation they identify b.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailwise.calibrate import calibrate
from tailwise.calibrate.llm import MIN_SERVER_TIMINGS
from tailwise.calibrate.steps import load_steps
from tests.test_calibrate import LLAMA_CPP_LAW, _told_by_llama_cpp, simulated_sweep

BASE_MS, PER_TOKEN_MS, PER_SEQ_MS = 3.0, 0.4, 2.0
PROMPT = 48
LAW = {**LLAMA_CPP_LAW, "prompt_tokens": PROMPT}


def _server_says(sweep: Path) -> None:
    """server.jsonl per step: each request's prompt time by the law (a + b P + c N, N the
    step's time-average decoding batch by Little's law)."""
    for run in sorted(p for p in sweep.iterdir() if p.is_dir()):
        [step], _ = load_steps([run])
        r, ok = step.records, step.ok()
        span = (r.done_ns - r.first_token_ns)[ok]
        n = step.throughput_rps * float(span[span >= 0].mean()) / 1e9
        rows = [
            {"seq": int(q), "prompt_n": PROMPT, "cached_tokens": 0,
             "prompt_ms": BASE_MS + PER_TOKEN_MS * PROMPT + PER_SEQ_MS * n}
            for q in r.seq[ok].tolist()
        ]  # fmt: skip
        (run / "server.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


def _sweeps(tmp: Path, thin_only: bool = False) -> list[Path]:
    """A thin lowest step (0.6/s for 12 s: 8 requests) and, unless ``thin_only``, steps up
    to saturation (capacity about 11/s), every one timed by the server."""
    truth = {"llm": LAW, "delay": "1ms"}
    low = simulated_sweep(tmp / "low", truth, [0.6], 12)
    sweeps = [low] if thin_only else [low, simulated_sweep(tmp / "up", truth, [3, 5, 7, 20], 20)]
    for s in sweeps:
        _told_by_llama_cpp(s, 8)
        _server_says(s)
    return sweeps


def test_a_thin_lowest_step_still_identifies_prefill_from_the_pool(tmp_path: Path) -> None:
    sweeps = _sweeps(tmp_path)
    steps, _ = load_steps(sweeps)
    assert len(steps[0].records.seq[steps[0].ok()]) < MIN_SERVER_TIMINGS
    cal = calibrate(sweeps)
    notes = " | ".join(cal.fit.notes)
    assert "prefill and delay from the server's own prompt times" in notes
    assert "4 steps, 0.6-7/s" in notes
    assert "at saturated steps left out" in notes  # the 20/s step's
    assert "one prompt length" not in notes  # the TTFT line was not needed
    start = cal.fit.params["closed_form_start"]["prefill_ms_per_token"]
    assert start == pytest.approx(PER_TOKEN_MS, rel=0.15)
    assert cal.fit.params["prefill_ms_per_token"] == pytest.approx(PER_TOKEN_MS, rel=0.3)


def test_too_few_timings_in_the_pool_are_said_and_not_used(tmp_path: Path) -> None:
    cal = calibrate(_sweeps(tmp_path, thin_only=True))
    notes = " | ".join(cal.fit.notes)
    assert "the server's own prompt times: only" in notes
    assert f"fewer than {MIN_SERVER_TIMINGS}: not used" in notes
    assert "one prompt length at the lowest load" in notes  # and what it fell back to
