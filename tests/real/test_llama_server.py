"""tailwise against a real, independently written LLM server: llama.cpp's llama-server.

Every comparison is with what the server says of itself: its per-request
``timings`` (prompt and decode times), its ``usage``, and its ``/metrics``
counters, which tailwise never reads during a run. The model is
SmolLM2-135M-Instruct Q4_1 on one CPU thread (see tests/real/conftest.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tailwise
from tests.real.conftest import SLOTS, _require_built, real_llm, server_metrics

pytestmark = pytest.mark.real


def run(url: str, out: Path, **kw: Any) -> tailwise.loadgen.runner.RunResult:
    args: dict[str, Any] = {
        "api": "openai-chat",
        "model": "smollm2",
        "max_tokens": 16,
        "input_tokens": 32,
        "ignore_eos": True,  # exactly max_tokens: output lengths the test can count
        "timeout": "120s",
    }
    args.update(kw)
    return tailwise.run(url, out=str(out), **args)


def server_rows(directory: Path) -> dict[int, dict[str, Any]]:
    lines = (directory / "server.jsonl").read_text().splitlines()
    return {row["seq"]: row for row in map(json.loads, lines)}


def test_low_load_ttft_tpot_and_tokens_agree_with_the_server(llama: str, tmp_path: Path) -> None:
    before = server_metrics(llama)
    # 128 words: prefill dominates TTFT, as in the comparison
    res = run(llama, tmp_path / "r", concurrency=1, requests=8, input_tokens=128)
    after = server_metrics(llama)
    s, r = res.summary, res.records
    assert s["requests"]["errors"] == {} and s["requests"]["ok"] == 8
    t = s["server_timings"]
    assert t["requests"] == 8
    # Each request's client numbers beside the server's own for that request (paired: with
    # 8 requests, p50s of two separate lists may pick different requests).
    # TTFT: the server's prompt time plus one decode step, within 10% or 5 ms.
    expected_ms = t["prompt_ms"]["p50"] + t["decode_per_token_ms"]["p50"]
    assert abs(t["ttft_gap_ms"]["p50"]) <= max(0.10 * expected_ms, 5.0), t
    # TPOT: the server's own time per generated token, within 5%.
    assert abs(t["tpot_gap_ms"]["p50"]) <= 0.05 * t["decode_per_token_ms"]["p50"], t
    # Tokens: each request's usage, and the server's own counters over the run.
    rows = server_rows(tmp_path / "r")
    assert r.output_tokens.tolist() == [16] * 8
    assert [rows[q]["predicted_n"] for q in r.seq.tolist()] == [16] * 8
    predicted = after["tokens_predicted_total"] - before["tokens_predicted_total"]
    processed = after["prompt_tokens_total"] - before["prompt_tokens_total"]
    assert predicted == s["tokens"]["output_total"] == 8 * 16
    assert processed == t["prompt_tokens_processed"]
    cache = s["prompt_cache"]
    assert int(r.input_tokens.sum()) == cache["prompt_tokens"]
    assert cache["prompt_tokens"] == processed + cache["cached_tokens"]
    # Unique prompts: only the chat template's fixed head can come from the cache.
    assert cache["hit_rate"] < 0.5 and cache["warning"] is None


@pytest.mark.parametrize(
    ("api", "stream"),
    [
        ("openai-chat", False),
        ("openai-completions", True),
        ("openai-completions", False),
    ],
)
def test_chat_and_completions_streamed_or_not(
    llama: str, tmp_path: Path, api: str, stream: bool
) -> None:
    res = run(llama, tmp_path / "r", api=api, stream=stream, concurrency=2, requests=4)
    s = res.summary
    assert s["requests"]["errors"] == {} and s["requests"]["ok"] == 4
    assert s["tokens"]["output_total"] == 4 * 16
    rows = server_rows(tmp_path / "r")
    inputs = res.records.input_tokens.tolist()
    assert [rows[q]["prompt_n"] + rows[q]["cached_tokens"] for q in res.records.seq] == inputs


def test_eight_closed_loop_users_see_no_reset(llama: str, tmp_path: Path) -> None:
    res = run(llama, tmp_path / "r", concurrency=SLOTS, duration="10s", max_tokens=8)
    s = res.summary
    assert s["requests"]["errors"] == {}
    assert s["requests"]["ok"] >= SLOTS
    # llama-server (this pinned version) closes a connection after each streamed answer:
    # the next request on it is sent again on a fresh one, and counted, not failed.
    assert s["reconnects"] > 0
    assert np.all(res.records.output_tokens[res.records.error == 0] == 8)
    # The server's own slot count (-np), for calibrate: from /props, not guessed.
    assert s["server_info"]["engine"] == "llama.cpp" and s["server_info"]["slots"] == SLOTS
    assert s["server_info"]["slot_context_tokens"] == 8192 // SLOTS


def test_an_embeddings_run_counts_its_prompt_tokens(llama_embed: str, tmp_path: Path) -> None:
    res = run(llama_embed, tmp_path / "r", api="openai-embeddings", concurrency=2, requests=6)
    s = res.summary
    assert s["requests"]["errors"] == {} and s["requests"]["ok"] == 6
    assert s["tokens"]["input_total"] > 6 * 32  # the words, and the tokens they split into
    assert s["tokens"]["requests_with_usage"] == 6
    assert s["server_info"]["slots"] == 2


def test_calibrate_takes_the_slots_and_schedule_from_the_server(llama: str, tmp_path: Path) -> None:
    """A short two-step sweep: not enough for a good fit, enough to show the facts the
    fit takes from llama-server itself instead of guessing them."""
    from tailwise.calibrate import calibrate
    from tailwise.loadgen.runner import RunOptions
    from tailwise.loadgen.sweep import Sweep

    opts = RunOptions(
        urls=[llama],
        api="openai-chat",
        model="smollm2",
        max_tokens="8",
        input_tokens="uniform:8-40",
        ignore_eos=True,
        duration="15s",
        warmup="0s",
        timeout="120s",
        progress=False,
    )
    sweep = Sweep(opts, tmp_path / "sweep")
    sweep.run_rates([0.5, 1.0])
    sweep.write()
    cal = calibrate([tmp_path / "sweep"])
    p = cal.fit.params
    assert p["max_num_seqs"] == SLOTS and p["prefill_chunk_tokens"] == 2048
    assert any("llama.cpp /props" in n for n in cal.fit.notes)
    # The template's head came from the prefix cache: the model prefills less than the
    # prompts the client counted.
    step = cal.steps[0]
    assert (step.prompt_tokens() < step.records.input_tokens[step.ok()]).mean() > 0.5


def test_stop_ends_the_servers_process_group(tmp_path: Path) -> None:
    """The server runs in its own process group (session), and stop() leaves nothing of
    it: a benchmark's finally, or a SIGTERM to it, cannot orphan a llama-server."""
    _require_built()
    proc, _ = real_llm.start("-np", "1", "-c", "512", log=tmp_path / "server.log")
    try:
        assert os.getpgid(proc.pid) == proc.pid == os.getsid(proc.pid)
        assert os.getsid(0) != proc.pid  # not the caller's session: a Ctrl-C reaches the caller
    finally:
        real_llm.stop(proc)
    assert proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
