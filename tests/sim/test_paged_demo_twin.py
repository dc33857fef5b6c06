"""Paged KV in the demo engine (``serve-demo --kv-allocation paged``) against the simulator.

The demo server is the simulator's measured twin: both follow the rules of
:mod:`tailwise.sim.llm_paged` (blocks taken as the KV grows, a watermark at
admission, recompute preemption of the most recently admitted sequence). A
hand case is worked out on paper; random workloads are replayed by the real
engine on a virtual clock and by the simulator, request by request.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np
import pytest

from tailwise.laws.llm import EngineConfig
from tailwise.server.apps import _llm_metrics
from tailwise.server.engine import Engine
from tailwise.sim.llm import LlmSpec, _simulate
from tests.sim import test_llm_model as twin

MS = 1_000_000

# 4 blocks of 16 tokens, no watermark (int(0.01 x 4) = 0); 1 ms + 10 us/prompt token
# + 0.1 ms per decoding sequence.
HAND = EngineConfig(
    base_s=0.001,
    prefill_s_per_token=1e-5,
    decode_s_per_seq=1e-4,
    max_num_seqs=4,
    kv_cache_tokens=64,
    kv_allocation="paged",
)


class Recording(Engine):
    """The demo engine, remembered so that a test can read its counters afterwards."""

    made: ClassVar[list[Engine]] = []

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        Recording.made.append(self)


def replay(
    cfg: EngineConfig, arr: np.ndarray, p: Any, m: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Engine]:
    n = len(arr)
    p = np.broadcast_to(np.asarray(p, dtype=np.int64), n)
    m = np.broadcast_to(np.asarray(m, dtype=np.int64), n)
    Recording.made = []
    monkeypatch.setattr(twin, "Engine", Recording)
    first, done, status = twin.drive_engine(cfg, arr, p, m, monkeypatch)
    return first, done, status, Recording.made[-1]


def test_hand_case_one_recompute_preemption(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 16-token prompts, 20 tokens each, in 4 blocks.

    Prefill both (1.32 ms, one block each); decodes 2..17 take a second block each
    (16 steps of 1.2 ms: 20.52 ms). Token 18 of A needs a third block, none is free:
    B, the newer, is preempted and waits for 3 blocks (16 + 17 tokens). A ends alone
    (3 x 1.1 ms: 23.82 ms); B re-prefills 33 tokens (1.33 ms), makes token 18 there,
    then 19 and 20 (2 x 1.1 ms): done at 27.35 ms, 3.23 ms later than without it.
    """
    arr = np.array([0, 0])
    first, done, status, eng = replay(HAND, arr, 16, 20, monkeypatch)
    assert status.tolist() == [200, 200]
    np.testing.assert_allclose(first, [0.00132, 0.00132], atol=1e-9)
    np.testing.assert_allclose(done, [0.02382, 0.02735], atol=1e-9)
    assert eng.stats.preemptions == 1
    assert eng.stats.admitted == 2 and eng.stats.finished == 2
    assert eng.stats.generated_tokens == 40
    assert eng.stats.prompt_tokens == 16 + 16 + 33  # the recompute prefills B's context
    assert eng.kv_used_tokens == 0 and eng.free_blocks == 4
    assert "tailwise_demo_preemptions_total 1" in _llm_metrics(eng)
    for jump in (True, False):
        res = _simulate(LlmSpec(HAND), arr, np.array([16, 16]), np.array([20, 20]), None, jump)
        assert res.preemptions == 1
        assert res.first_token_ns.tolist() == [1_320_000, 1_320_000]
        assert res.done_ns.tolist() == [23_820_000, 27_350_000]
    # With KV reserved at admission neither could start beside the other (2 x 36 > 64):
    # that is the capacity paging buys, at the price of the recompute.
    reserve = EngineConfig(**{**HAND.__dict__, "kv_allocation": "reserve"})
    _, done_r, _, eng_r = replay(reserve, arr, 16, 20, monkeypatch)
    assert eng_r.stats.preemptions == 0 and done_r[1] > done[1]


def test_watermark_holds_admission_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """10 blocks, watermark 0.2 (2 blocks): a third 48-token prompt (3 blocks) waits
    while 2 x 3 are held, since 4 - 3 < 2; it starts when the first one ends."""
    cfg = EngineConfig(
        **{**HAND.__dict__, "kv_cache_tokens": 160, "kv_watermark": 0.2, "max_num_seqs": 8}
    )
    arr = np.array([0, 0, 0])
    first, done, status, _ = replay(cfg, arr, 48, 2, monkeypatch)
    assert status.tolist() == [200, 200, 200]
    assert first[2] > done[0] - 1e-12  # admitted only once blocks came back
    res = _simulate(LlmSpec(cfg), arr, np.full(3, 48), np.full(3, 2), None, True)
    np.testing.assert_allclose(res.first_token_ns / 1e9, first, atol=1e-9)
    np.testing.assert_allclose(res.done_ns / 1e9, done, atol=1e-9)


PAGED_CASES = {
    "tight": EngineConfig(
        max_num_seqs=16, kv_cache_tokens=2048, max_waiting=40, kv_allocation="paged"
    ),
    "tight-kv-term": EngineConfig(
        max_num_seqs=16,
        kv_cache_tokens=2048,
        max_waiting=40,
        kv_s_per_token=2e-6,
        kv_allocation="paged",
    ),
    "chunked-watermark": EngineConfig(
        max_num_seqs=16,
        kv_cache_tokens=2048,
        prefill_chunk_tokens=64,
        kv_watermark=0.05,
        max_waiting=40,
        kv_allocation="paged",
        kv_block_tokens=32,
    ),
    "timeouts": EngineConfig(
        max_num_seqs=12,
        kv_cache_tokens=1600,
        max_waiting=40,
        request_timeout_s=0.8,
        kv_allocation="paged",
    ),
}


@pytest.mark.parametrize("case", sorted(PAGED_CASES))
def test_demo_engine_and_simulator_agree_request_by_request(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = PAGED_CASES[case]
    arr, p, m = twin.workload(400, seed=10 + sorted(PAGED_CASES).index(case), rate_rps=8.0)
    m = m * 3  # long outputs: contexts grow past what the cache holds for all of them
    first_s, done_s, status, eng = replay(cfg, arr, p, m, monkeypatch)
    for jump in (True, False):
        res = _simulate(LlmSpec(cfg), arr, p, m, None, jump=jump)
        np.testing.assert_array_equal(res.http_status, status)
        got = res.first_token_ns >= 0
        np.testing.assert_array_equal(got, first_s >= 0)
        np.testing.assert_allclose(res.first_token_ns[got] / 1e9, first_s[got], rtol=0, atol=1e-6)
        np.testing.assert_allclose(res.done_ns / 1e9, done_s, rtol=0, atol=1e-6)
        assert res.preemptions == eng.stats.preemptions
    assert eng.stats.preemptions > 20  # the case exercises preemption
    assert (status == 200).sum() > 80
    if case == "timeouts":
        assert (status == 504).sum() > 10


SERVE_DEMO = [sys.executable, "-m", "tailwise", "serve-demo", "--kind", "llm", "--port", "0"]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--kv-allocation", "pages"], "--kv-allocation"),
        (["--kv-watermark", "1"], "--kv-watermark"),
        (["--kv-watermark", "nan"], "--kv-watermark"),
        (["--kv-block-tokens", "0"], "--kv-block-tokens"),
        (["--kv-block-tokens", "64", "--kv-cache-tokens", "32"], "--kv-block-tokens"),
        (["--per-kv-token", "-1us"], "--per-kv-token"),
    ],
)
def test_serve_demo_bad_paged_options_are_one_line_exit_2(argv: list[str], field: str) -> None:
    proc = subprocess.run(
        [*SERVE_DEMO, "--lifetime", "5s", *argv], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "listening" not in proc.stdout


def test_a_real_paged_server_preempts_and_still_answers_in_full(
    demo_target: Callable[..., str],
) -> None:
    """Six 100-word prompts asking for 200 tokens each in 1024 KV tokens (64 blocks):
    they are all admitted (7 blocks each), then need 19 blocks each. Sequences are
    preempted and recomputed, and every stream still brings 200 tokens, then [DONE]."""
    base = demo_target(
        "llm",
        *("--kv-allocation", "paged", "--kv-cache-tokens", "1024"),
        *("--step-base", "1ms", "--per-prefill-token", "1us", "--per-seq", "10us"),
    )
    prompt = " ".join(["word"] * 100)
    body = json.dumps(
        {"model": "tailwise-demo", "prompt": prompt, "max_tokens": 200, "stream": True}
    ).encode()

    def tokens(_: int) -> tuple[int, bool]:
        """(token chunks received, whether the stream ended with [DONE])."""
        req = urllib.request.Request(
            base + "/v1/completions", body, {"content-type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            events = [ln[6:] for ln in resp.read().decode().splitlines() if ln[:6] == "data: "]
        chunks = [json.loads(e) for e in events if e != "[DONE]"]
        made = sum(1 for c in chunks if c["choices"][0]["finish_reason"] is None)
        return made, events[-1] == "[DONE]"

    with ThreadPoolExecutor(6) as pool:
        streams = list(pool.map(tokens, range(6)))
    assert streams == [(200, True)] * 6
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    values = dict(
        line.rsplit(" ", 1) for line in metrics.splitlines() if line.startswith("tailwise_demo_")
    )
    assert float(values["tailwise_demo_preemptions_total"]) >= 1
    assert float(values["tailwise_demo_requests_finished_total"]) == 6
    assert float(values["tailwise_demo_kv_cache_used_tokens"]) == 0
