"""The simulator's LLM model (tailwise.sim.llm) against the demo engine itself, the
closed forms of tailwise.capacity, accounting invariants, routing, disaggregated
pools, and its own step-by-step path.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np
import pytest

from tailwise.capacity import llm_idle_ttft_s, llm_saturated_rps, llm_saturated_rps_upper
from tailwise.errors import BadInput
from tailwise.laws.llm import EngineConfig
from tailwise.server import engine as engine_mod
from tailwise.server.engine import ABORTED, FINISHED, Engine, QueueFull
from tailwise.sim.llm import LlmResult, LlmSpec, _simulate, simulate_llm
from tailwise.sim.llm_scenario import LlmModel, llm_spec, token_counts

MS = 1_000_000
S = 1_000_000_000
DEFAULT = EngineConfig()


def poisson(rate_rps: float, n: int, seed: int) -> np.ndarray:
    gaps = np.random.default_rng(seed).exponential(S / rate_rps, n)
    return np.cumsum(np.rint(gaps)).astype(np.int64) + 1


def workload(n: int, seed: int, rate_rps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    prompts = rng.integers(1, 400, n)
    outputs = rng.integers(1, 90, n)
    return poisson(rate_rps, n, seed), prompts, outputs


def sim(spec: LlmSpec, arr: np.ndarray, p: Any, m: Any, seed: int = 0) -> LlmResult:
    n = len(arr)
    p = np.broadcast_to(np.asarray(p, dtype=np.int64), n)
    m = np.broadcast_to(np.asarray(m, dtype=np.int64), n)
    return simulate_llm(spec, arr, p, m, np.random.default_rng(seed))


# -- 1. the real engine, driven on a virtual clock -----------------------------------------


def drive_engine(
    cfg: EngineConfig,
    arrivals_ns: np.ndarray,
    prompts: np.ndarray,
    outputs: np.ndarray,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Engine's loop, unrolled: float seconds, steps back to back, submits between steps.

    Returns first-token seconds, answer seconds and HTTP statuses, read from each
    sequence's event queue (what the HTTP layer streams) at the instant it is drained.
    """
    clock = [0.0]
    monkeypatch.setattr(engine_mod, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    eng = Engine(cfg)
    n = len(arrivals_ns)
    arr_s = (arrivals_ns / 1e9).tolist()
    first, done, status = np.full(n, -1.0), np.full(n, -1.0), np.zeros(n, dtype=np.int64)
    live: dict[int, Any] = {}

    def submit(k: int) -> None:
        clock[0] = arr_s[k]
        p, m = int(prompts[k]), int(outputs[k])
        if eng.check(p, m):
            done[k], status[k] = arr_s[k], 400
            return
        try:
            live[k] = eng.submit(p, m)
        except QueueFull:
            done[k], status[k] = arr_s[k], 429

    def drain(now: float) -> None:
        for k, seq in list(live.items()):
            while not seq.events.empty():
                ev = seq.events.get_nowait()
                if ev == 1 and first[k] < 0:
                    first[k] = now
                elif ev in (FINISHED, ABORTED):
                    done[k], status[k] = now, 200 if ev == FINISHED else 504
                    del live[k]

    nxt, t = 0, 0.0
    while True:
        if not eng.running and not eng.waiting:  # idle: wake at the next arrival
            if nxt == n:
                break
            t = arr_s[nxt]
            while nxt < n and arr_s[nxt] <= t:
                submit(nxt)
                nxt += 1
        clock[0] = t
        eng._expire(t)
        drain(t)
        eng._admit()
        if not eng.running:
            continue
        prefill, decoding = eng._plan()
        end = t + eng.step_s(prefill, decoding)
        while nxt < n and arr_s[nxt] <= end:  # arrivals during the step (or at its end)
            submit(nxt)
            nxt += 1
        clock[0] = end
        eng._apply(prefill, decoding, end)
        drain(end)
        t = end
    assert not live
    return first, done, status


CROSS_CASES = {
    "defaults": EngineConfig(),
    "small-queue-and-kv": EngineConfig(max_num_seqs=8, kv_cache_tokens=1500, max_waiting=3),
    "chunked-256": EngineConfig(max_num_seqs=16, prefill_chunk_tokens=256, max_waiting=6),
    "chunked-below-batch": EngineConfig(max_num_seqs=12, prefill_chunk_tokens=10, max_waiting=20),
    "timeouts": EngineConfig(max_num_seqs=6, max_waiting=40, request_timeout_s=0.8),
    "chunked-timeouts": EngineConfig(
        max_num_seqs=8, prefill_chunk_tokens=64, kv_cache_tokens=2000, request_timeout_s=0.8
    ),
    "too-long": EngineConfig(max_model_len=300, max_num_seqs=4, max_waiting=10),
    # Attention's context term: 2 us per KV token of the decoding batch.
    "kv-term": EngineConfig(max_num_seqs=8, kv_s_per_token=2e-6, max_waiting=20),
    "chunked-kv-term": EngineConfig(
        max_num_seqs=8, prefill_chunk_tokens=64, kv_s_per_token=2e-6, max_waiting=20
    ),
}


@pytest.mark.parametrize("case", sorted(CROSS_CASES))
def test_model_replays_the_real_engine_request_by_request(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = CROSS_CASES[case]
    arr, p, m = workload(400, seed=sorted(CROSS_CASES).index(case), rate_rps=40.0)
    first_s, done_s, status = drive_engine(cfg, arr, p, m, monkeypatch)
    spec = LlmSpec(cfg)
    for jump in (True, False):
        res = _simulate(spec, arr, p, m, None, jump=jump)
        np.testing.assert_array_equal(res.http_status, status)
        got = res.first_token_ns >= 0
        np.testing.assert_array_equal(got, first_s >= 0)
        np.testing.assert_allclose(res.first_token_ns[got] / 1e9, first_s[got], rtol=0, atol=1e-6)
        np.testing.assert_allclose(res.done_ns / 1e9, done_s, rtol=0, atol=1e-6)
    # The case exercises what it is named after.
    counts = {int(c): int(k) for c, k in zip(*np.unique(status, return_counts=True), strict=True)}
    assert counts[200] > 80
    if case.startswith("small"):
        assert counts.get(429, 0) > 10
    if "timeouts" in case:
        assert counts.get(504, 0) > 10
    if case == "too-long":
        assert counts.get(400, 0) > 10


def test_same_instant_rules() -> None:
    """Arrivals at an instant come before a step that ends or starts then; a deadline
    equal to a step start expires there, after that step's tokens."""
    # Three requests at one instant on an idle engine share its first (prefill) step.
    res = sim(LlmSpec(DEFAULT), np.array([S, S, S]), 128, 4)
    assert res.first_token_ns.tolist() == [S + 4 * MS + 3 * 2_560_000] * 3
    # An arrival exactly at a step end joins the very next step (a prefill step).
    res = sim(LlmSpec(DEFAULT), np.array([0, 6_560_000]), 128, 4)
    assert res.first_token_ns.tolist() == [6_560_000, 13_120_000]
    assert res.token_times is not None
    assert res.token_times[0][:2] == [6_560_000, 13_120_000 + 4_600_000]
    # Deadline 15.16 ms = the start of the third step: two decode tokens, then 504.
    cfg = dataclasses.replace(DEFAULT, request_timeout_s=0.01516)
    res = sim(LlmSpec(cfg), np.array([0]), 128, 64)
    assert (res.http_status[0], res.done_ns[0]) == (504, 15_160_000)
    assert res.token_times is not None and res.token_times[0] == [6_560_000, 10_860_000, 15_160_000]


# -- 2. closed forms ---------------------------------------------------------------------


def test_a_lone_request_takes_one_prefill_step_then_decodes_alone() -> None:
    res = sim(LlmSpec(DEFAULT), np.array([5 * MS]), 128, 64)
    ttft_s = llm_idle_ttft_s(DEFAULT.base_s, DEFAULT.prefill_s_per_token, 128)
    assert res.first_token_ns[0] - 5 * MS == round(ttft_s * 1e9) == 6_560_000
    assert res.done_ns[0] - 5 * MS == 6_560_000 + 63 * 4_300_000  # e2e 277.46 ms
    assert res.token_times is not None
    assert np.diff(res.token_times[0]).tolist() == [4_300_000] * 63
    assert res.steps == 64


def test_saturated_throughput_lies_between_the_closed_form_bounds() -> None:
    cfg = dataclasses.replace(DEFAULT, max_waiting=10**6, request_timeout_s=1e4)
    arr = poisson(60.0, 60 * 60, seed=3)  # twice the capacity for 60 s
    res = sim(LlmSpec(cfg, token_times=False), arr, 128, 64)
    assert (res.http_status == 200).all()
    done = np.sort(res.done_ns)
    in_window = done[(done >= 10 * S) & (done < 60 * S)]
    x_rps = len(in_window) / 50.0
    args = (cfg.base_s, cfg.prefill_s_per_token, cfg.decode_s_per_seq, cfg.max_num_seqs, 128, 64)
    lower, upper = llm_saturated_rps(*args), llm_saturated_rps_upper(*args)
    assert lower == pytest.approx(30.0, abs=0.05) and upper == pytest.approx(33.9, abs=0.05)
    assert lower * 0.99 <= x_rps <= upper * 1.01


def test_a_binding_kv_budget_lowers_capacity_as_in_the_docs() -> None:
    """docs/demo-server.md: with 4096 KV tokens, N_eff = 21 and X = 26.7 req/s (m = N)."""
    cfg = EngineConfig(kv_cache_tokens=4096, max_waiting=10**6, request_timeout_s=1e4)
    arr = poisson(60.0, 60 * 60, seed=4)
    res = sim(LlmSpec(cfg, token_times=False), arr, 128, 64)
    done = res.done_ns
    x_rps = int(((done >= 10 * S) & (done < 60 * S)).sum()) / 50.0
    args = (cfg.base_s, cfg.prefill_s_per_token, cfg.decode_s_per_seq, 21, 128, 64)
    assert llm_saturated_rps(*args) * 0.99 <= x_rps <= llm_saturated_rps_upper(*args) * 1.01


# -- 3. accounting, routing, disaggregated pools ------------------------------------------


def concurrency(start: np.ndarray, end: np.ndarray, weight: np.ndarray) -> int:
    """The largest total weight of half-open intervals [start, end) alive at once."""
    t = np.concatenate([start, end])
    w = np.concatenate([weight, -weight])
    order = np.lexsort((w, t))  # at a tie, ends (negative) before starts
    return int(np.cumsum(w[order]).max())


def test_every_request_is_answered_once_and_tokens_add_up() -> None:
    cfg = EngineConfig(max_num_seqs=8, kv_cache_tokens=2500, max_waiting=10, max_model_len=400)
    cfg = dataclasses.replace(cfg, request_timeout_s=1.0)
    arr, p, m = workload(3000, seed=11, rate_rps=30.0)
    res = sim(LlmSpec(cfg), arr, p, m)
    st = res.http_status
    assert set(np.unique(st).tolist()) == {200, 400, 429, 504}
    assert (res.done_ns >= arr).all()
    assert ((p + m > 400) == (st == 400)).all()
    assert res.token_times is not None
    step_min_ns = round(cfg.base_s * 1e9)
    for k in range(len(arr)):
        toks = res.token_times[k]
        if st[k] == 200:
            assert toks is not None and len(toks) == m[k]
            assert toks[0] == res.first_token_ns[k] > arr[k] and toks[-1] == res.done_ns[k]
            assert (np.diff(toks) >= step_min_ns).all()
        elif st[k] == 504:
            assert res.done_ns[k] >= arr[k] + 1 * S
            assert toks is None or len(toks) < m[k]
        else:
            assert toks is None and res.done_ns[k] == arr[k] and res.first_token_ns[k] == -1
    # A sequence holds a slot and its KV from before its first token to its answer.
    ok = st == 200
    start, end = res.first_token_ns[ok], res.done_ns[ok]
    assert concurrency(start, end, np.ones(int(ok.sum()), dtype=np.int64)) <= cfg.max_num_seqs
    assert concurrency(start, end, (p + m)[ok]) <= cfg.kv_cache_tokens


def test_littles_law_holds_on_a_stable_run() -> None:
    arr = poisson(20.0, 4000, seed=5)
    res = sim(LlmSpec(DEFAULT, token_times=False), arr, 128, 64)
    t0, t1 = 20 * S, int(arr[-1])
    lat = (res.done_ns - arr).astype(np.float64)
    l_measured = float((np.clip(res.done_ns, t0, t1) - np.clip(arr, t0, t1)).sum()) / (t1 - t0)
    inside = (arr >= t0) & (arr < t1)
    lam_w = inside.sum() / ((t1 - t0) / 1e9) * lat[inside].mean() / 1e9
    assert l_measured == pytest.approx(lam_w, rel=0.02)
    assert 5 < l_measured < 32  # below the batch: stable


@pytest.mark.parametrize("routing", ["round_robin", "random", "least_outstanding"])
def test_two_replicas_double_the_capacity(routing: str) -> None:
    cfg = dataclasses.replace(DEFAULT, max_waiting=10**6, request_timeout_s=1e4)
    arr = poisson(120.0, 120 * 40, seed=6)

    def x_rps(replicas: int) -> float:
        res = sim(LlmSpec(cfg, replicas=replicas, routing=routing, token_times=False), arr, 128, 64)
        assert set(np.unique(res.replica).tolist()) == set(range(replicas))
        done = res.done_ns
        return int(((done >= 10 * S) & (done < 40 * S)).sum()) / 30.0

    one, two = x_rps(1), x_rps(2)
    assert 30 * 0.99 < one < 34 * 1.01
    assert 1.9 < two / one < 2.1


def test_least_outstanding_beats_random_at_moderate_load() -> None:
    arr = poisson(45.0, 6000, seed=7)
    p99: dict[str, float] = {}
    for routing in ("random", "least_outstanding"):
        res = sim(LlmSpec(DEFAULT, replicas=2, routing=routing, token_times=False), arr, 128, 64)
        assert (res.http_status == 200).all()
        p99[routing] = float(np.percentile(res.first_token_ns - arr, 99))
    assert p99["least_outstanding"] < 0.8 * p99["random"]
    # random routing is reproducible from the generator given
    a = sim(LlmSpec(DEFAULT, replicas=3, routing="random"), arr[:500], 128, 64, seed=9)
    b = sim(LlmSpec(DEFAULT, replicas=3, routing="random"), arr[:500], 128, 64, seed=9)
    np.testing.assert_array_equal(a.replica, b.replica)
    np.testing.assert_array_equal(a.done_ns, b.done_ns)


def test_least_outstanding_counts_before_a_step_ending_at_the_arrival() -> None:
    # Engine 1's only request ends at 10.86 ms, the instant the third arrives: arrivals
    # come first, so both engines still hold one and the tie goes to engine 0.
    spec = LlmSpec(DEFAULT, replicas=2, routing="least_outstanding")
    res = sim(spec, np.array([0, 0, 10_860_000]), 128, [64, 2, 4])
    assert res.replica.tolist() == [0, 1, 0]
    assert res.done_ns[1] == 10_860_000
    assert res.first_token_ns[2] == 10_860_000 + 6_560_000  # engine 0's next step prefills it


def test_round_robin_is_a_strict_rotation() -> None:
    arr = poisson(10.0, 30, seed=8)
    res = sim(LlmSpec(DEFAULT, replicas=3), arr, 128, 8)
    assert res.replica.tolist() == [k % 3 for k in range(30)]


def test_disaggregated_lone_request_prefill_then_transfer_then_decode() -> None:
    spec = LlmSpec(
        DEFAULT, replicas=2, prefill_replicas=1, transfer_ns=MS, transfer_ns_per_token=1000.0
    )
    res = sim(spec, np.array([S]), 128, 64)
    assert res.first_token_ns[0] == S + 6_560_000  # the prefill step's end
    joined = S + 6_560_000 + MS + 128_000  # after the KV transfer
    assert res.done_ns[0] == joined + 63 * 4_300_000  # 63 decode steps alone
    assert res.token_times is not None
    assert res.token_times[0][1] == joined + 4_300_000
    assert res.replica[0] == 0 and res.http_status[0] == 200 and res.steps == 64
    # max_tokens 1: answered by the prefill engine, no decode engine
    one = sim(spec, np.array([S]), 128, 1)
    assert one.done_ns[0] == one.first_token_ns[0] == S + 6_560_000 and one.replica[0] == -1


def test_disaggregated_slots_on_both_sides() -> None:
    """max_num_seqs bounds a prefill step's prompts and a decode engine's batch."""
    spec = LlmSpec(EngineConfig(max_num_seqs=2), prefill_replicas=1)
    res = sim(spec, np.zeros(3, dtype=np.int64), 128, 4)
    # prefill steps: [0, 1] costs 4 + 2 x 2.56 ms; then [2] costs 6.56 ms
    assert res.first_token_ns.tolist() == [9_120_000, 9_120_000, 15_680_000]
    # decode: 0 and 1 join at 9.12 ms, 3 steps of 4.6 ms; 2 waits for a slot, then 3 x 4.3
    assert res.done_ns.tolist() == [22_920_000, 22_920_000, 35_820_000]
    assert res.steps == 2 + 3 + 3


def test_kv_transfers_reach_the_decode_pool_in_time_order() -> None:
    """A long prompt prefilled and moved slowly is overtaken by a short one."""
    cfg = EngineConfig(max_num_seqs=1)
    spec = LlmSpec(cfg, prefill_replicas=2, transfer_ns_per_token=10_000.0)
    res = sim(spec, np.array([0, 0]), [1000, 10], 3)
    assert res.first_token_ns.tolist() == [24_000_000, 4_200_000]
    # the short one joins at 4.3 ms, the long one at 34 ms, after the short one is done
    assert res.done_ns.tolist() == [34_000_000 + 2 * 4_300_000, 4_300_000 + 2 * 4_300_000]


def test_disaggregated_pools_keep_decodes_out_of_ttft() -> None:
    arr = poisson(20.0, 3000, seed=10)
    pools_spec = LlmSpec(DEFAULT, replicas=1, prefill_replicas=1, transfer_ns=MS)
    pools = sim(pools_spec, arr, 128, 64)
    colocated = sim(LlmSpec(DEFAULT), arr, 128, 64)  # the same engine doing both
    assert (pools.http_status == 200).all() and (colocated.http_status == 200).all()
    ttft_pools = pools.first_token_ns - arr
    ttft_colocated = colocated.first_token_ns - arr
    assert np.percentile(ttft_pools, 99) < 0.85 * np.percentile(ttft_colocated, 99)
    # Most prompts meet an idle prefill engine: TTFT is exactly one step, a + bP, which
    # even two colocated replicas (half the load each) cannot offer at the median.
    two = sim(LlmSpec(DEFAULT, replicas=2, routing="least_outstanding"), arr, 128, 64)
    assert np.median(ttft_pools) == 6_560_000 < np.median(two.first_token_ns - arr)
    assert ttft_pools.min() == 6_560_000
    # The first token ends a prefill step, which nothing on the decode side can move:
    # slower or more decode engines leave every first-token instant where it was.
    slow_decode = dataclasses.replace(DEFAULT, decode_s_per_seq=3 * DEFAULT.decode_s_per_seq)
    for other in (
        dataclasses.replace(pools_spec, engine=slow_decode),
        dataclasses.replace(pools_spec, replicas=3, transfer_ns=20 * MS),
    ):
        res = sim(other, arr, 128, 64)
        np.testing.assert_array_equal(res.first_token_ns, pools.first_token_ns)
        assert not np.array_equal(res.done_ns, pools.done_ns)
    # Decode interference moves to the stream instead: no prefill ever pauses a decode,
    # so no inter-token gap exceeds a full decode step.
    assert pools.token_times is not None
    gaps = np.concatenate([np.diff(t[1:]) for t in pools.token_times if t is not None])
    assert gaps.max() <= round(DEFAULT.step_s(0, DEFAULT.max_num_seqs) * 1e9)
    assert colocated.token_times is not None
    gaps_colocated = np.concatenate([np.diff(t) for t in colocated.token_times if t is not None])
    assert gaps_colocated.max() > round(DEFAULT.step_s(128, 0) * 1e9)


# -- 4. the jump over decode runs changes nothing -------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        LlmSpec(EngineConfig(max_num_seqs=8, request_timeout_s=0.5, max_waiting=30)),
        LlmSpec(EngineConfig(prefill_chunk_tokens=48, kv_cache_tokens=3000)),
        LlmSpec(EngineConfig(request_timeout_s=0.4), replicas=3, routing="least_outstanding"),
        LlmSpec(EngineConfig(max_num_seqs=4), replicas=2, routing="random"),
        LlmSpec(
            EngineConfig(max_num_seqs=6, request_timeout_s=0.6, max_waiting=40),
            replicas=2,
            prefill_replicas=2,
            routing="least_outstanding",
            transfer_ns=2 * MS,
            transfer_ns_per_token=300.0,
        ),
        # A context term: every step of a run costs its own; the run is still jumped.
        LlmSpec(EngineConfig(max_num_seqs=8, request_timeout_s=0.5, kv_s_per_token=2e-6)),
        LlmSpec(EngineConfig(prefill_chunk_tokens=48, kv_s_per_token=1e-6)),
        LlmSpec(
            EngineConfig(max_num_seqs=6, kv_s_per_token=1e-6),
            replicas=2,
            prefill_replicas=2,
            routing="least_outstanding",
            transfer_ns=2 * MS,
        ),
    ],
    ids=[
        "timeouts",
        "chunked-kv",
        "least-outstanding",
        "random",
        "disaggregated",
        "context-timeouts",
        "context-chunked",
        "context-disaggregated",
    ],
)
def test_the_fast_path_equals_the_step_by_step_path(spec: LlmSpec) -> None:
    arr, p, m = workload(1500, seed=12, rate_rps=35.0)
    fast = _simulate(spec, arr, p, m, np.random.default_rng(1), jump=True)
    slow = _simulate(spec, arr, p, m, np.random.default_rng(1), jump=False)
    for name in ("first_token_ns", "done_ns", "http_status", "replica"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
    assert fast.token_times == slow.token_times
    assert fast.steps == slow.steps


# -- the scenario section -------------------------------------------------------------------


def test_the_scenario_section_defaults_are_the_demo() -> None:
    spec = llm_spec(LlmModel(), replicas=2, routing="least_outstanding")
    assert spec.engine == EngineConfig()
    assert (spec.replicas, spec.routing, spec.prefill_replicas, spec.transfer_ns) == (
        2,
        "least_outstanding",
        0,
        0,
    )
    p, m = token_counts(LlmModel(), np.random.default_rng(0), 5)
    assert p.tolist() == [128] * 5 and m.tolist() == [64] * 5
    model = LlmModel(prompt_tokens="uniform:10-20", output_tokens="const:7", transfer="2ms")
    p, m = token_counts(model, np.random.default_rng(0), 1000)
    assert p.min() == 10 and p.max() == 20 and (m == 7).all()
    assert llm_spec(model, 1, "random").transfer_ns == 2 * MS


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"base": "4"}, "scenario.llm.base"),
        ({"base": "0ms"}, "scenario.llm.base"),
        ({"timeout": "soon"}, "scenario.llm.timeout"),
        ({"prompt_tokens": "uniform:20-10"}, "scenario.llm.prompt_tokens"),
        ({"output_tokens": "exp:5"}, "scenario.llm.output_tokens"),
        ({"output_tokens": 0}, "scenario.llm.output_tokens"),
    ],
)
def test_bad_values_name_their_field(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(BadInput) as err:
        LlmModel(**fields)
    assert err.value.field == where
    with pytest.raises(BadInput) as err:
        llm_spec(LlmModel(), 1, "power_of_d")
    assert err.value.field == "scenario.routing"


def test_the_context_term_by_hand() -> None:
    """base 1 ms, no prefill or decode cost, 0.1 ms per KV token; one request, prompt 10,
    3 tokens. Prefill (no decoding sequence: no KV term) 0-1 ms: token 1. Token 2 attends
    to 10 + 1 tokens: 1 + 1.1 = 2.1 ms, at 3.1 ms; token 3 to 12: 2.2 ms, at 5.3 ms."""
    cfg = EngineConfig(
        base_s=0.001, prefill_s_per_token=0.0, decode_s_per_seq=0.0, kv_s_per_token=0.0001
    )
    for jump in (True, False):
        res = _simulate(LlmSpec(cfg), np.array([0]), np.array([10]), np.array([3]), None, jump)
        assert res.token_times == [[1 * MS, 3_100_000, 5_300_000]]
        assert res.done_ns.tolist() == [5_300_000]
    # B arrives at 5.3 ms, exactly where A's third token's step ends: the run of A's
    # decode steps stops there, B's prompt takes the next step alone (1 ms: its token at
    # 6.3 ms), then A's fourth token attends to 13 tokens (2.3 ms: at 8.6), jumped or not.
    for jump in (True, False):
        res = _simulate(
            LlmSpec(cfg), np.array([0, 5_300_000]), np.array([10, 10]), np.array([5, 1]), None, jump
        )
        assert res.first_token_ns.tolist() == [1 * MS, 6_300_000]
        assert res.token_times is not None and res.token_times[0][:4] == [
            1 * MS,
            3_100_000,
            5_300_000,
            8_600_000,
        ]
    spec = llm_spec(LlmModel(kv_per_token="0.1ms"), 1, "round_robin")
    assert spec.engine.kv_s_per_token == pytest.approx(0.0001)
    assert EngineConfig().step_s(100, 8, 5000) == EngineConfig().step_s(100, 8)  # 0 by default


def test_a_decode_run_costs_what_each_step_costs() -> None:
    """The simulator's runs of decode steps use ``decode_run_ns``: the same integers as
    ``step_ns`` step by step, over random laws (float sums in the same order)."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        cfg = EngineConfig(
            base_s=float(rng.uniform(1e-4, 0.05)),
            prefill_s_per_token=float(rng.uniform(0, 1e-4)),
            decode_s_per_seq=float(rng.uniform(0, 1e-3)),
            kv_s_per_token=float(rng.choice([0.0, rng.uniform(1e-9, 1e-5)])),
        )
        n, kv = int(rng.integers(1, 64)), int(rng.integers(1, 100_000))
        run = cfg.decode_run_ns(n, kv)
        assert [next(run) for _ in range(50)] == [cfg.step_ns(0, n, kv + n * k) for k in range(50)]
