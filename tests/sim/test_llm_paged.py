"""Paged KV with preemption (``kv_allocation: paged``, tailwise.sim.llm_paged).

A hand-traced pair of sequences (every block, the preemption and the
recompute by hand); equivalence with the reservation engine when the cache is
ample; the jumped path against the step-by-step one under heavy preemption;
and the issue's example: reservation caps the batch at 14 sequences, paging
runs more, with preemptions reported.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailwise.errors import BadInput
from tailwise.laws.llm import EngineConfig
from tailwise.sim.llm import LlmSpec, _simulate
from tailwise.sim.run import simulate
from tailwise.sim.scenario import load_scenario, parse_scenario

MS = 1_000_000
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"

# Every step costs 1 ms whatever it holds: the timeline is counting steps.
FLAT = EngineConfig(base_s=0.001, prefill_s_per_token=0.0, decode_s_per_seq=0.0)


def _two(mode: str, jump: bool = True, **more: Any) -> Any:
    """A and B at t = 0: prompts of 4 tokens, 6 output tokens each; blocks of 4 tokens,
    4 blocks (16 tokens), no watermark, 2 sequences at most."""
    cfg = dataclasses.replace(
        FLAT,
        max_num_seqs=2,
        kv_cache_tokens=16,
        kv_allocation=mode,
        kv_block_tokens=4,
        kv_watermark=0.0,
        **more,
    )
    spec = LlmSpec(engine=cfg)
    arrivals = np.array([0, 0], np.int64)
    return _simulate(spec, arrivals, np.array([4, 4]), np.array([6, 6]), None, jump=jump)


@pytest.mark.parametrize("jump", [True, False])
def test_two_sequences_by_hand(jump: bool) -> None:
    """Paged, by hand. Admission: A and B take 1 block each (4 prompt tokens); 2 free.
    Step 0-1 ms prefills both: first tokens at 1 ms. Token k needs the KV of 4 + k - 1
    tokens, so the step making token 2 (1-2 ms) needs 5: a second block each (0 free);
    tokens 3, 4, 5 (at 3, 4, 5 ms) fit in 2 blocks (6, 7, 8 tokens). Token 6 needs 9
    tokens, a third block, and none is free: B, the newest, is preempted at 5 ms (it
    made 5 tokens; its 2 blocks freed), A takes one and makes its last token at 6 ms,
    freeing 3 blocks. At 6 ms B is admitted again with 3 blocks (prompt + 5 made = 9
    tokens to recompute), prefilled 6-7 ms, which samples its 6th and last token.
    Reserving prompt + max_tokens (10 tokens each of 16) runs A alone: B starts when A
    ends at 6 ms, first token at 7 ms, last at 12 ms."""
    paged = _two("paged", jump)
    assert paged.done_ns.tolist() == [6 * MS, 7 * MS]
    assert paged.first_token_ns.tolist() == [1 * MS, 1 * MS]
    assert paged.token_times == [
        [k * MS for k in (1, 2, 3, 4, 5, 6)],
        [k * MS for k in (1, 2, 3, 4, 5, 7)],
    ]
    assert paged.http_status.tolist() == [200, 200]
    assert paged.preemptions == 1 and paged.preempted is not None
    assert paged.preempted.tolist() == [0, 1]
    assert paged.peak_running == 2
    reserve = _two("reserve", jump)
    assert reserve.done_ns.tolist() == [6 * MS, 12 * MS]
    assert reserve.first_token_ns.tolist() == [1 * MS, 7 * MS]
    assert reserve.preemptions == 0 and reserve.peak_running == 1


@pytest.mark.parametrize("jump", [True, False])
def test_two_sequences_swapping_by_hand(jump: bool) -> None:
    """The same pair, preempting by swap at 0.5 ms a block. At 5 ms B's 2 blocks go to
    CPU memory (it made 5 tokens) and A takes one: that step costs 1 + 2 x 0.5 = 2 ms, A's
    6th token at 7 ms, A done (3 blocks freed). At 7 ms B's 2 blocks come back (1 ms
    more) and it decodes on, no recompute: it needs a 3rd block for 9 tokens, and its
    6th token comes at 7 + 2 = 9 ms."""
    res = _two("paged", jump, kv_preemption="swap", kv_swap_s_per_block=0.0005)
    assert res.done_ns.tolist() == [7 * MS, 9 * MS]
    assert res.token_times == [
        [k * MS for k in (1, 2, 3, 4, 5, 7)],
        [k * MS for k in (1, 2, 3, 4, 5, 9)],
    ]
    assert res.preemptions == 1 and res.preempted is not None
    assert res.preempted.tolist() == [0, 1]


def _jumped_equals_stepped(
    spec: LlmSpec, seed: int, n: int, gap_ms: float, prompts: tuple[int, int], groups: int = 0
) -> tuple[Any, np.ndarray]:
    """Run one random workload jumped and step by step; assert they agree on every instant
    and that every answered request made its tokens, in increasing order."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(gap_ms * MS, n)).astype(np.int64)
    lengths, outputs = rng.integers(*prompts, n), rng.integers(1, 200, n)
    kw: dict[str, Any] = {"groups": rng.integers(0, groups, n)} if groups else {}
    fast = _simulate(spec, arrivals, lengths, outputs, None, jump=True, **kw)
    slow = _simulate(spec, arrivals, lengths, outputs, None, jump=False, **kw)
    for name in ("first_token_ns", "done_ns", "http_status", "preempted"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
    assert fast.token_times == slow.token_times and fast.preemptions == slow.preemptions
    assert fast.prefix_hits == slow.prefix_hits
    assert fast.token_times is not None
    for i in np.flatnonzero(fast.http_status == 200):
        times = fast.token_times[i]
        assert times is not None and len(times) == outputs[i]
        assert all(x < y for x, y in itertools.pairwise(times))
    return fast, outputs


def test_swap_jumps_equal_single_steps() -> None:
    """Swapping under heavy pressure, with timeouts: jumped and step-by-step agree."""
    cfg = EngineConfig(
        max_num_seqs=12,
        kv_cache_tokens=640,
        kv_allocation="paged",
        kv_preemption="swap",
        kv_swap_s_per_block=0.0002,
        request_timeout_s=2.0,
        max_model_len=640,
    )
    fast, _ = _jumped_equals_stepped(LlmSpec(engine=cfg), 6, 600, 40, (1, 400))
    assert fast.preemptions >= 20


def _example(name: str, mode: str, **llm: Any) -> Any:
    sc = load_scenario(EXAMPLES / name)
    assert sc.llm is not None
    model = sc.llm.model_copy(update={"kv_allocation": mode, **llm})
    arrival = sc.arrival.model_copy(update={"duration": "20s"})
    return simulate(sc.model_copy(update={"llm": model, "arrival": arrival}))


@pytest.mark.parametrize(
    ("name", "llm"),
    [("llm.yaml", {}), ("llm.yaml", {"prefill_chunk_tokens": 256}), ("llm_colocated.yaml", {})],
)
def test_paged_with_ample_kv_gives_todays_answers(name: str, llm: dict[str, Any]) -> None:
    """With a cache that never runs short, paging admits exactly as reservation does
    (only max_num_seqs binds) and never preempts: every record is the same."""
    reserve, paged = _example(name, "reserve", **llm), _example(name, "paged", **llm)
    a, b = reserve.records, paged.records
    for col in ("first_token_ns", "done_ns", "status", "output_tokens"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    assert a.chunk_times == b.chunk_times
    assert paged.summary["sim"]["preemptions"] == {"count": 0, "requests": 0}
    assert reserve.summary["latency_ms"] == paged.summary["latency_ms"]


@pytest.mark.parametrize(("chunk", "preemption"), [(0, "recompute"), (48, "swap")])
def test_context_cost_jumps_equal_single_steps_under_preemption(
    chunk: int, preemption: str
) -> None:
    """With a context term each decode step costs its own, and a run of them is still
    jumped in one go (blocks permitting): the same instants as step by step."""
    cfg = EngineConfig(
        max_num_seqs=12,
        kv_cache_tokens=640,
        prefill_chunk_tokens=chunk,
        kv_allocation="paged",
        kv_preemption=preemption,
        kv_swap_s_per_block=0.0002,
        kv_s_per_token=2e-6,
        request_timeout_s=2.0,
        max_model_len=640,
    )
    fast, _ = _jumped_equals_stepped(LlmSpec(engine=cfg), 7, 600, 40, (1, 400))
    assert fast.preemptions >= 20


@pytest.mark.parametrize("chunk", [0, 48])
def test_jumps_equal_single_steps_under_preemption(chunk: int) -> None:
    """Heavy preemption (a cache of 40 blocks of 16 for 12 sequences of up to 400 + 200
    tokens): the jumped path and the step-by-step one agree on every instant; every
    answered request made exactly max_tokens tokens, in increasing order."""
    cfg = EngineConfig(
        max_num_seqs=12,
        kv_cache_tokens=640,
        prefill_chunk_tokens=chunk,
        kv_allocation="paged",
        request_timeout_s=2.0,
        max_model_len=640,
    )
    fast, _ = _jumped_equals_stepped(LlmSpec(engine=cfg), 5, 600, 40, (1, 400))
    assert fast.preemptions >= 20 and fast.peak_running > 1
    assert fast.token_times is not None
    for i in np.flatnonzero(fast.http_status == 200):
        times = fast.token_times[i]
        assert times is not None
        assert times[0] == fast.first_token_ns[i] and times[-1] == fast.done_ns[i]


def test_the_issue_example_runs_more_than_reservation_allows() -> None:
    """kv 16384, prompt 128, output 1024, max_num_seqs 64 at 3/s. Reservation holds
    1152 tokens a sequence: at most 16384 // 1152 = 14 run. Paged, the batch grows past
    14 (the output length is unknown to admission), preemptions are reported, and the
    engine finishes more requests."""
    runs = {}
    for mode in ("reserve", "paged"):
        sc = {
            "arrival": {"rate": "3/s", "duration": "300s", "warmup": "30s", "seed": 1},
            "llm": {
                "kv_cache_tokens": 16384,
                "prompt_tokens": 128,
                "output_tokens": 1024,
                "max_num_seqs": 64,
                "kv_allocation": mode,
            },
        }
        runs[mode] = simulate(parse_scenario(sc)).summary
    reserve, paged = runs["reserve"]["sim"], runs["paged"]["sim"]
    assert reserve["peak_running_seqs"] == 16384 // (128 + 1024) == 14
    assert reserve["preemptions"] == {"count": 0, "requests": 0}
    assert paged["kv_allocation"] == "paged" and paged["peak_running_seqs"] > 14
    assert paged["preemptions"]["count"] >= paged["preemptions"]["requests"] > 0
    assert runs["paged"]["rates"]["throughput_rps"] > runs["reserve"]["rates"]["throughput_rps"]


@pytest.mark.parametrize(
    ("llm", "where"),
    [
        ({"kv_allocation": "lazy"}, "scenario.llm.kv_allocation"),
        ({"kv_block_tokens": 0}, "scenario.llm.kv_block_tokens"),
        ({"kv_watermark": 1.0}, "scenario.llm.kv_watermark"),
        ({"kv_block_tokens": 64, "kv_cache_tokens": 32}, "scenario.llm.kv_block_tokens"),
        ({"kv_allocation": "paged", "prefill_replicas": 1}, "scenario.llm.kv_allocation"),
        ({"kv_preemption": "evict"}, "scenario.llm.kv_preemption"),
        ({"kv_preemption": "swap"}, "scenario.llm.kv_preemption"),
        ({"kv_allocation": "paged", "kv_preemption": "swap"}, "scenario.llm.kv_swap_per_block"),
        ({"kv_swap_per_block": "fast"}, "scenario.llm.kv_swap_per_block"),
    ],
)
def test_bad_paged_fields_name_themselves(llm: dict[str, Any], where: str) -> None:
    with pytest.raises(BadInput) as err:
        simulate(parse_scenario({"arrival": {"rate": "1/s", "duration": "1s"}, "llm": llm}))
    assert err.value.field == where


def test_a_context_the_watermark_leaves_no_room_for_is_refused() -> None:
    """100 blocks of 16, watermark 10%: admission may use 90 blocks, 1440 tokens; a
    request of 1400 + 41 tokens could never be admitted (paged), so it is a 400; with
    reservation it fits the 1600-token cache."""
    base = EngineConfig(kv_cache_tokens=1600, kv_watermark=0.1, max_model_len=4096)
    for mode, status in (("paged", 400), ("reserve", 200)):
        spec = LlmSpec(engine=dataclasses.replace(base, kv_allocation=mode))
        res = _simulate(spec, np.array([0]), np.array([1400]), np.array([41]), None)
        assert res.http_status.tolist() == [status]


def _cached(arrivals_ms: list[int], groups: list[int], caching: bool = True) -> Any:
    """Blocks of 4 tokens, 4 of them, no watermark; prefixes of 4 tokens (1 block) in 4
    groups; prompts of 5 tokens (the prefix block + 1 own), 1 token out. A step costs
    1 ms + 1 ms per prompt token prefilled."""
    cfg = EngineConfig(
        base_s=0.001,
        prefill_s_per_token=0.001,
        decode_s_per_seq=0.0,
        kv_cache_tokens=16,
        kv_allocation="paged",
        kv_block_tokens=4,
        kv_watermark=0.0,
        prefix_caching=caching,
        max_model_len=16,
    )
    spec = LlmSpec(engine=cfg, prefix_groups=4, prefix_tokens=4)
    n = len(arrivals_ms)
    arrivals = np.array(arrivals_ms, np.int64) * MS
    return _simulate(
        spec, arrivals, np.full(n, 5), np.ones(n, np.int64), None, groups=np.array(groups)
    )


def test_prefix_cache_hits_and_evicts_least_recently_used_by_hand() -> None:
    """One request at a time (every 10 ms), groups 0 1 2 0 3 1 2 3. A miss prefills 5
    tokens (6 ms), a hit skips the cached block and prefills 1 (2 ms). The cache holds 4
    blocks; a request holds 2 (its group's prefix block and its own) while it runs.
    0, 1, 2: misses, each prefix left cached (nobody uses it: evictable). 0 at 30 ms: a
    hit. 3 at 40 ms needs 2 blocks, 1 is free: the least recently used unused prefix goes,
    group 1's (group 0 was used at 30 ms). 1 at 50 ms: a miss; it evicts group 2's (used
    at 20 ms, before 0 and 3). 2 at 60 ms: a miss; it evicts group 0's. 3 at 70 ms: a hit."""
    res = _cached([0, 10, 20, 30, 40, 50, 60, 70], [0, 1, 2, 0, 3, 1, 2, 3])
    took = (res.done_ns - np.arange(8) * 10 * MS) // MS
    assert took.tolist() == [6, 6, 6, 2, 6, 6, 6, 2]
    assert res.prefix_hits == 2
    off = _cached([0, 10, 20, 30, 40, 50, 60, 70], [0, 1, 2, 0, 3, 1, 2, 3], caching=False)
    assert ((off.done_ns - np.arange(8) * 10 * MS) // MS).tolist() == [6] * 8
    assert off.prefix_hits == 0


def _prefixed(rate: str, **llm: Any) -> Any:
    sc = {
        "arrival": {"rate": rate, "duration": "120s", "warmup": "10s", "seed": 4},
        "llm": {
            "kv_cache_tokens": 16384,
            "prompt_tokens": "uniform:600-1000",
            "output_tokens": "uniform:50-300",
            "max_num_seqs": 64,
            "kv_allocation": "paged",
            **llm,
        },
    }
    return simulate(parse_scenario(sc))


def test_a_cached_system_prompt_cuts_ttft_and_a_described_one_changes_nothing() -> None:
    """Prompts of 600-1000 tokens that start with one of 4 system prompts of 512 tokens
    (32 blocks): with prefix caching most admissions skip those 512 tokens of prefill,
    and TTFT falls. Describing the prefixes without caching them changes no number."""
    plain = _prefixed("8/s")
    described = _prefixed("8/s", prefix_tokens=512, prefix_groups=4)
    cached = _prefixed("8/s", prefix_tokens=512, prefix_groups=4, prefix_caching=True)
    np.testing.assert_array_equal(plain.records.done_ns, described.records.done_ns)
    assert described.summary["sim"]["prefix_hits"] is None
    hits = cached.summary["sim"]["prefix_hits"]
    assert hits > 0.9 * cached.summary["sim"]["requests"]
    assert cached.summary["ttft_ms"]["p50"] < 0.8 * plain.summary["ttft_ms"]["p50"]


@pytest.mark.parametrize("chunk", [0, 64])
def test_prefix_caching_jumps_equal_single_steps_under_pressure(chunk: int) -> None:
    """A small cache, 6 groups, preemption and eviction together: jumped and
    step-by-step runs agree on every instant, and every answer has its tokens."""
    cfg = EngineConfig(
        max_num_seqs=12,
        kv_cache_tokens=1024,
        prefill_chunk_tokens=chunk,
        kv_allocation="paged",
        prefix_caching=True,
        request_timeout_s=3.0,
        max_model_len=1024,
    )
    spec = LlmSpec(engine=cfg, prefix_groups=6, prefix_tokens=80)
    fast, _ = _jumped_equals_stepped(spec, 9, 500, 50, (100, 400), groups=6)
    assert fast.prefix_hits > 50 and fast.preemptions > 0


@pytest.mark.parametrize(
    ("llm", "where"),
    [
        ({"prefix_caching": True}, "scenario.llm.prefix_caching"),
        (
            {"kv_allocation": "paged", "prefix_caching": True, "kv_preemption": "swap",
             "kv_swap_per_block": "1ms"},
            "scenario.llm.prefix_caching",
        ),
        ({"prefix_tokens": 128}, "scenario.llm.prefix_tokens"),
        ({"prefix_tokens": -1}, "scenario.llm.prefix_tokens"),
        ({"prefix_groups": 0}, "scenario.llm.prefix_groups"),
    ],
)  # fmt: skip
def test_bad_prefix_fields_name_themselves(llm: dict[str, Any], where: str) -> None:
    with pytest.raises(BadInput) as err:
        simulate(parse_scenario({"arrival": {"rate": "1/s", "duration": "1s"}, "llm": llm}))
    assert err.value.field == where
