"""``tailwise plan``: every worked example of the seeds, directly and through the CLI.

Seeds are the texts in the shared ``seeds/`` folder: 000 (latency, throughput and
tail latency, with Little's law and fan-out), 001 (the four metrics: cost and
reliability), 002 (latency & throughput engineering notes: capacity_plan,
Amdahl, M/M/1) and 003 (goodput and SLOs: the single-replica load test).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tailwise import capacity as cap
from tailwise import plan
from tailwise.errors import BadInput
from tests.clirun import run_cli

# --- the seeds' worked examples ----------------------------------------------------------


def test_seed000_embedding_fleet_needs_800_per_replica_and_15_replicas() -> None:
    """Seed 000, section 2, "Sizing an Embedding Service With One Equation".

    12,000 req/s, W = 40 ms, L = 32 per replica: 32 / 0.040 = 800 req/s per
    replica, 12000 / 800 = 15 replicas; "plus headroom, so they deployed 18".
    """
    p = plan.replicas(rate_rps=12000, latency_s=0.040, per_replica=32, utilization=1.0)
    assert p.outputs["per_replica_capacity_rps"] == pytest.approx(800)
    assert p.outputs["replicas"] == 15
    assert p.outputs["required_concurrency"] == pytest.approx(480)
    with_headroom = plan.replicas(
        rate_rps=12000, latency_s=0.040, per_replica=32, utilization=1.0, headroom=0.2
    )
    assert with_headroom.outputs["replicas_for_load"] == 15
    assert with_headroom.outputs["replicas"] == 18


def test_seed002_capacity_plan_50_rps_needs_16_gpus() -> None:
    """Seed 002, "Capacity Planning Calculator": capacity_plan(50, 2.0, 8, 0.80).

    Expected output: required_concurrent_slots 100, gpus_needed 16,
    actual_throughput_per_gpu 3.2, total_capacity_rps 51.2, headroom_percent 20.
    """
    out = plan.replicas(rate_rps=50, latency_s=2.0, per_replica=8, utilization=0.8).outputs
    assert out["required_concurrency"] == pytest.approx(100.0)
    assert out["replicas"] == 16
    assert out["per_replica_capacity_rps"] == pytest.approx(3.2)
    assert out["total_capacity_rps"] == pytest.approx(51.2)
    assert round(out["ceiling_headroom"] * 100) == 20


def test_seed002_littles_law_worked_example() -> None:
    """Seed 002, "Little's Law: L = λW", worked example (LLM serving capacity).

    W = 2 s and 8 concurrent requests: lambda = 8 / 2 = 4 req/s; 10 req/s needs
    L = 20 slots, 20 / 8 = 2.5 -> 3 GPUs.
    """
    assert plan.little(concurrency=8, rate_rps=None, latency_s=2.0).outputs[
        "rate_rps"
    ] == pytest.approx(4.0)
    assert plan.little(concurrency=None, rate_rps=10, latency_s=2.0).outputs[
        "concurrency"
    ] == pytest.approx(20.0)
    assert (
        plan.replicas(rate_rps=10, latency_s=2.0, per_replica=8, utilization=1.0).outputs[
            "replicas"
        ]
        == 3
    )


def test_seed002_mm1_queue_length_table() -> None:
    """Seed 002, "Queuing Theory: M/M/1 Queue Basics": Lq = rho^2 / (1 - rho).

    rho 0.5 / 0.8 / 0.9 / 0.95 -> Lq 0.5 / 3.2 / 8.1 / 18.05 (the seed rounds the last to 18.1).
    """
    levels = plan.queue(utilizations=[0.5, 0.8, 0.9, 0.95]).outputs["levels"]
    assert [row["lq"] for row in levels] == pytest.approx([0.5, 3.2, 8.1, 18.05])
    assert [cap.mmc_queue_length(1, r) for r in (0.5, 0.8, 0.9, 0.95)] == pytest.approx(
        [0.5, 3.2, 8.1, 18.05]
    )
    # the seed's Wq = rho / (mu (1 - rho)): with 1 s of service at rho 0.8, 4 s.
    row = plan.queue(service_s=1.0, utilizations=[0.8]).outputs["levels"][0]
    assert row["wq_ms"] == pytest.approx(4000.0)


def test_seed002_amdahl_model_2x_gives_154x_and_10x_gives_27x() -> None:
    """Seed 002, "Amdahl's Law for AI Pipelines": Gateway 5%, Retrieval 15%, Model 70%, Post 10%.

    Model 2x faster -> 1 / (0.30 + 0.35) = 1.54x; 10x -> 1 / (0.30 + 0.07) = 2.7x;
    the ceiling as the model's time goes to zero is 1 / 0.30.
    """
    stages = [("gateway", 0.05), ("retrieval", 0.15), ("model", 0.70), ("post", 0.10)]
    two = plan.amdahl(stages=stages, speedups={"model": 2.0}).outputs
    assert round(two["speedup"], 2) == 1.54
    assert two["ceiling"] == pytest.approx(1 / 0.3)
    ten = plan.amdahl(stages=[("model", 0.70)], speedups={"model": 10.0}).outputs
    assert round(ten["speedup"], 1) == 2.7
    assert [r["stage"] for r in ten["stages"]] == ["model", "(rest)"]


def test_seed002_latency_budget_table_leaves_150ms_margin() -> None:
    """Seed 002, "Latency Budget Breakdown": ten stage budgets total 2850 ms of 3000 ms."""
    budgets = {
        "gateway": 0.030,
        "auth": 0.020,
        "embed": 0.050,
        "search": 0.100,
        "rerank": 0.100,
        "prompt": 0.050,
        "prefill": 0.400,
        "decode": 2.000,
        "post": 0.050,
        "response": 0.050,
    }
    out = plan.amdahl(stages=[], budgets=budgets, total_budget_s=3.0).outputs
    assert out["budget_sum_ms"] == pytest.approx(2850)
    assert out["margin_ms"] == pytest.approx(150)
    assert [r["stage"] for r in out["stages"]] == list(budgets)


def test_seed001_availability_of_all_of_m_machines() -> None:
    """Seed 001, section 5 (reliability): r = 0.999 per machine.

    All of 10 / 100 / 1000 machines up: 99.0% / 90.5% / 36.8% of the time.
    """
    rows = plan.availability(up=0.999, machines=[10, 100, 1000]).outputs["fleets"]
    assert [round(r["availability"], 3) for r in rows] == [0.990, 0.905, 0.368]
    assert [r["expected_healthy"] for r in rows] == pytest.approx([9.99, 99.9, 999])
    assert cap.k_of_m_unavailability(0.999, 1000, 1000) == pytest.approx(1 - 0.999**1000)


def test_seed000_fanout_to_100_is_slow_63_percent_of_the_time() -> None:
    """Seed 000, section 5, and the Fun Note: q = 0.99 -> 1 - 0.99^100 = 0.63, 1 - 0.99^40 = 0.33.

    Seed 002, "Tail Latency": 10 components at p95 -> 0.95^10 = 60% all fast.
    """
    rows = plan.fanout(fanouts=[40, 100], backend_fast=0.99).outputs["fanouts"]
    assert [round(r["p_slow"], 2) for r in rows] == [0.33, 0.63]
    assert cap.fanout_slow_probability(0.95, 10) == pytest.approx(0.40, abs=0.005)


def test_seed000_exercise_343_fanout_numbers() -> None:
    """Seed 000, Exercise 3.4.3: q = 0.99 at n = 10, 50, 200; then q = 0.999 at n = 200."""
    slow = [cap.fanout_slow_probability(0.99, n) for n in (10, 50, 200)]
    assert slow == pytest.approx([0.0956, 0.3950, 0.8660], abs=5e-4)
    better = cap.fanout_slow_probability(0.999, 200)
    assert better == pytest.approx(0.1814, abs=5e-4)
    assert slow[2] / better == pytest.approx(4.77, abs=0.01)


def test_fanout_per_backend_tail_needed_for_a_target() -> None:
    """99% of requests fast at a fan-out of 100 needs each backend fast at about p99.99."""
    row = plan.fanout(fanouts=[100], target=0.99).outputs["fanouts"][0]
    assert row["backend_fast_needed"] ** 100 == pytest.approx(0.99)
    assert row["backend_percentile_needed"] == pytest.approx(99.99, abs=0.001)
    q = cap.fanout_backend_needed(0.5, 40)
    assert cap.fanout_slow_probability(q, 40) == pytest.approx(0.5)


def test_seed001_fleet_exercise() -> None:
    """Seed 001, last exercise: 8,000 req/s at W = 120 ms, 40 per replica, $3/h, 70%.

    L = 8000 x 0.120 = 960 in flight; 960 / 40 = 24 replicas at least, 25 with
    one spare for a failed replica. 25 x $3 = $75/h. By section 4's formula a
    replica (X_max = 40 / 0.120 = 333.3 req/s) at 70% costs
    3 / (3600 x 0.7 x 333.3) = $3.57 per million requests.
    """
    assert plan.little(concurrency=None, rate_rps=8000, latency_s=0.120).outputs[
        "concurrency"
    ] == pytest.approx(960)
    fleet = plan.replicas(
        rate_rps=8000, latency_s=0.120, per_replica=40, utilization=1.0, spares=1
    ).outputs
    assert (fleet["replicas_for_load"], fleet["replicas"]) == (24, 25)
    assert fleet["per_replica_max_rps"] == pytest.approx(1000 / 3)
    bill = plan.cost(
        dollars_per_hour=3, utilization=0.7, peak_rps=40 / 0.120, replicas=25, rate_rps=8000
    ).outputs
    assert bill["fleet_cost_per_hour_usd"] == pytest.approx(75)
    assert round(bill["cost_per_million_requests_usd"], 2) == 3.57
    # 25 replicas at 8,000 req/s are 96% busy, not 70%: the fleet's own cost per 1M.
    assert bill["fleet_utilization_at_rate"] == pytest.approx(0.96)
    assert bill["cost_per_million_requests_at_rate_usd"] == pytest.approx(75 / 28.8)
    # Read 70% as a ceiling instead: 960 / 28 -> 35 replicas, 36 with the spare, $108/h.
    ceiling = plan.replicas(
        rate_rps=8000, latency_s=0.120, per_replica=40, utilization=0.7, spares=1
    ).outputs
    assert ceiling["replicas"] == 36


def test_seed001_littles_law_5000_rps_needs_8_replicas_of_30() -> None:
    """Seed 001, section 3: 5000 req/s x 46.8 ms = 234 in flight; 30 per replica -> 8."""
    out = plan.little(concurrency=None, rate_rps=5000, latency_s=0.0468).outputs
    assert out["concurrency"] == pytest.approx(234)
    full = plan.replicas(rate_rps=5000, latency_s=0.0468, per_replica=30, utilization=1.0)
    assert full.outputs["replicas"] == 8


def test_seed000_littles_law_exercise_and_demo() -> None:
    """Seed 000: Exercise 3.4.1 (L = 24, W = 60 ms -> 400 req/s); Output 3.4.2 (26.209)."""
    assert plan.little(concurrency=24, rate_rps=None, latency_s=0.060).outputs[
        "rate_rps"
    ] == pytest.approx(400)
    out = plan.little(concurrency=None, rate_rps=800.3, latency_s=0.03275).outputs
    assert out["concurrency"] == pytest.approx(26.209, abs=0.01)
    back = plan.little(concurrency=26.209, rate_rps=800.3, latency_s=None).outputs
    assert back["latency_ms"] == pytest.approx(32.75, abs=0.01)


def test_seed003_mm1_percentiles_match_the_simulated_load_test() -> None:
    """Seed 003, Output 5.3.1: one FCFS replica at 500 req/s with exponential service.

    The simulated p50/p95/p99 (ms) at 300, 400 and 450 req/s agree with the
    closed form Exp(mu - lambda) within the simulation's noise, and the SLO
    p99 <= 200 ms breaks between 450 (p99 101 ms) and 480 req/s (249 ms).
    """
    seed = {300: (4, 15, 23), 400: (7, 31, 47), 450: (14, 63, 101)}
    p = plan.queue(service_s=0.002, rates_rps=list(seed), slo=("p99", 0.99, 0.200))
    for row, (p50, p95, p99) in zip(p.outputs["levels"], seed.values(), strict=True):
        assert row["p95_ms"] == pytest.approx(p95, rel=0.1)
        assert row["p99_ms"] == pytest.approx(p99, rel=0.1)
        assert row["p50_ms"] == pytest.approx(p50, abs=1.0)
        assert row["meets_slo"]
    knee = p.outputs["slo_max_rate_rps"]
    assert 450 < knee < 480
    assert knee == pytest.approx(500 - math.log(100) / 0.2)


# --- the closed forms --------------------------------------------------------------------


def test_mm1_closed_forms_agree_with_the_mmc_ones_at_one_server() -> None:
    assert cap.mm1_sojourn_quantile(0.99, 0.005, 150) == pytest.approx(
        cap.mmc_sojourn_quantile(0.99, 1, 0.005, 150)
    )
    assert cap.mm1_max_rate(0.99, 0.05, 0.005) == pytest.approx(
        cap.mmc_max_rate(0.99, 0.05, 1, 0.005), rel=1e-6
    )
    assert cap.mm1_max_rate(0.99, 0.001, 0.005) == 0.0


def test_mmc_level_obeys_littles_law_and_erlang_c() -> None:
    row = plan.queue(servers=4, service_s=0.005, rates_rps=[640]).outputs["levels"][0]
    assert row["p_wait"] == pytest.approx(cap.erlang_c(4, 3.2))
    assert row["lq"] == pytest.approx(640 * row["wq_ms"] / 1e3)
    assert row["l"] == pytest.approx(row["lq"] + 3.2)
    assert row["p99_ms"] / 1e3 == pytest.approx(cap.mmc_sojourn_quantile(0.99, 4, 0.005, 640))


def test_mmc_highest_rate_for_a_mean_latency_target() -> None:
    rate = cap.mmc_max_rate_mean(0.010, 4, 0.005)
    assert 0.005 + cap.mmc_mean_wait_s(4, 0.005, rate) == pytest.approx(0.010, rel=1e-6)
    assert cap.mmc_max_rate_mean(0.010, 1, 0.005) == pytest.approx(200 - 100)
    assert cap.mmc_max_rate_mean(0.004, 2, 0.005) == 0.0


def test_mg1_pollaczek_khinchine_reduces_to_mm1_and_halves_for_md1() -> None:
    mm1 = plan.queue(service_s=0.002, utilizations=[0.8]).outputs["levels"][0]
    mg1 = plan.queue(service_s=0.002, utilizations=[0.8], cv=1.0).outputs["levels"][0]
    for key in ("p_wait", "lq", "l", "wq_ms", "w_ms"):
        assert mg1[key] == pytest.approx(mm1[key])
    assert "p99_ms" not in mg1  # no closed form for M/G/1 percentiles
    assert cap.mg1_queue_length(0.8, 0.0) == pytest.approx(cap.mg1_queue_length(0.8, 1.0) / 2)
    # mean target under M/D/1: W = S (1 + rho / (2 (1 - rho))) <= 10 ms with S = 2 ms
    rho = cap.mg1_max_utilization_mean(0.010, 0.002, 0.0)
    assert 0.002 * (1 + rho / (2 * (1 - rho))) == pytest.approx(0.010)


def test_k_of_m_matches_the_binomial_sum() -> None:
    r, m = 0.97, 12
    for k in (1, 5, 10, 12):
        exact = sum(math.comb(m, i) * r**i * (1 - r) ** (m - i) for i in range(k, m + 1))
        assert 1 - cap.k_of_m_unavailability(r, m, k) == pytest.approx(exact, rel=1e-12)
    # many nines keep their digits: 2 of 3 at 99.9% fails only if 2 are down.
    assert cap.k_of_m_unavailability(0.999, 3, 2) == pytest.approx(3 * 0.001**2 * 0.999 + 1e-9)


def test_k_of_m_sums_both_tails_and_stays_fast_for_huge_fleets() -> None:
    r, m = 0.95, 200  # mode 190: k <= 190 sums the lower tail, k > 190 the upper one
    for k in (150, 190, 191, 195, 199):
        exact = sum(math.comb(m, i) * r**i * (1 - r) ** (m - i) for i in range(k))
        assert cap.k_of_m_unavailability(r, m, k) == pytest.approx(exact, rel=1e-9, abs=1e-300)
    assert cap.k_of_m_unavailability(0.999, 10**7, 10**7 // 2) == 0.0
    assert cap.k_of_m_unavailability(0.999, 10**7, 10**7 - 5000) == 1.0
    mid = cap.k_of_m_unavailability(0.999, 10**7, 10**7 - 10_000)  # the mean: about half
    assert 0.45 < mid < 0.55


def test_amdahl_edges() -> None:
    gone = plan.amdahl(stages=[("a", 1.0)], speedups={"a": math.inf}).to_json()["outputs"]
    assert gone["speedup"] is None and gone["ceiling"] is None  # unbounded
    timed = plan.amdahl(stages=[("a", 0.030), ("b", 0.010)], times=True, speedups={"a": 3.0})
    assert timed.outputs["latency_after_ms"] == pytest.approx(20.0)
    assert timed.outputs["speedup"] == pytest.approx(2.0)


def test_cost_per_unit_inflates_by_one_over_utilization() -> None:
    full = cap.cost_per_unit(3.0, 1.0, 1000.0)
    assert full == pytest.approx(3 / 3.6e6)
    assert cap.cost_per_unit(3.0, 0.5, 1000.0) == pytest.approx(2 * full)


def test_replicas_ignore_float_noise_in_the_ceiling() -> None:
    assert cap.replicas_needed(12000, 0.04, 32, 1.0) == 15  # 15.000000000000002 before
    assert cap.replicas_needed(12001, 0.04, 32, 1.0) == 16


# --- through the CLI ---------------------------------------------------------------------


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run_cli(["plan", *argv, "--json"], capsys)
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["schema"] == "tailwise.plan/1"
    assert set(doc) == {
        "schema",
        "tool_version",
        "model",
        "inputs",
        "outputs",
        "assumptions",
        "warnings",
    }
    assert doc["model"] == argv[0] and doc["assumptions"]
    return doc


def test_cli_replicas_seed000_and_seed002(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 000 section 2 (15 replicas of 800 req/s) and seed 002's capacity_plan (16 GPUs)."""
    argv = ["replicas", "--rate", "12000/s", "--latency", "40ms", "--per-replica", "32"]
    out = _json([*argv, "--max-utilization", "100%"], capsys)["outputs"]
    assert (out["per_replica_capacity_rps"], out["replicas"]) == (pytest.approx(800), 15)
    argv = ["replicas", "--rate", "50/s", "--latency", "2s", "--per-replica", "8"]
    doc = _json([*argv, "--utilization", "80%"], capsys)
    assert doc["outputs"]["replicas"] == 16
    assert doc["inputs"]["latency_ms"] == 2000
    code, text, _ = run_cli(["plan", *argv, "--utilization", "80%"], capsys)
    assert code == 0
    assert "replicas_for_load               16" in text
    assert "total_capacity_rps              51.2" in text


def test_cli_fleet_exercise_seed001(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 001's fleet exercise: 8,000 req/s, 120 ms, 40 per replica, $3/h, 70%."""
    little = _json(["little", "--rate", "8000/s", "--latency", "120ms"], capsys)
    assert little["outputs"]["concurrency"] == pytest.approx(960)
    fleet = ["--rate", "8000/s", "--latency", "120ms", "--per-replica", "40"]
    full = ["--spares", "1", "--max-utilization", "100%"]
    assert _json(["replicas", *fleet, *full], capsys)["outputs"]["replicas"] == 25
    argv = ["cost", "--dollars-per-hour", "3", "--utilization", "70%", *fleet, "--replicas", "25"]
    out = _json(argv, capsys)["outputs"]
    assert out["fleet_cost_per_hour_usd"] == pytest.approx(75)
    assert round(out["cost_per_million_requests_usd"], 2) == 3.57


def test_cli_queue_table_seed002(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 002's M/M/1 table, printed: Lq 0.5 / 3.2 / 8.1 / 18.05."""
    code, out, err = run_cli(["plan", "queue", "--utilization", "50%,80%,90%,95%"], capsys)
    assert (code, err) == (0, "")
    lq = [line.split()[2] for line in out.splitlines() if line.startswith("0.")]
    assert lq == ["0.5", "3.2", "8.1", "18.05"]


def test_cli_queue_mmc_with_a_percentile_target(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["queue", "--servers", "4", "--service", "5ms", "--rate", "640/s,760/s"]
    doc = _json([*argv, "--slo", "p99(latency)<=50ms"], capsys)
    assert doc["outputs"]["slo_max_rate_rps"] == pytest.approx(
        cap.mmc_max_rate(0.99, 0.05, 4, 0.005)
    )
    assert [r["meets_slo"] for r in doc["outputs"]["levels"]] == [True, False]
    assert doc["inputs"]["queue"] == "M/M/4"


def test_cli_queue_mg1_with_a_mean_target(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["queue", "--service", "2ms", "--cv", "0", "--utilization", "80%"]
    doc = _json([*argv, "--slo", "mean<=10ms"], capsys)
    assert doc["inputs"]["queue"] == "M/G/1"
    assert doc["outputs"]["levels"][0]["lq"] == pytest.approx(1.6)  # M/D/1: half of M/M/1
    assert doc["outputs"]["slo_max_utilization"] == pytest.approx(8 / 9)
    assert any("no closed form" in a for a in doc["assumptions"])


def test_cli_amdahl_seed002(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 002's Amdahl example through the CLI: 1.54x, and 2.7x at 10x."""
    stages = ["--stage", "gateway=5%", "--stage", "retrieval=15%", "--stage", "model=70%"]
    stages += ["--stage", "post=10%"]
    doc = _json(["amdahl", *stages, "--speedup", "model=2"], capsys)
    assert round(doc["outputs"]["speedup"], 2) == 1.54
    doc = _json(["amdahl", *stages, "--speedup", "model=10x"], capsys)
    assert round(doc["outputs"]["speedup"], 1) == 2.7
    times = ["--stage", "embed=45ms", "--stage", "search=95ms", "--stage", "generate=1710ms"]
    doc = _json(["amdahl", *times, "--budget", "generate=1500ms", "--total-budget", "2s"], capsys)
    gen = doc["outputs"]["stages"][2]
    assert (gen["measured_ms"], gen["slack_ms"]) == (pytest.approx(1710), pytest.approx(-210))
    assert doc["outputs"]["total_slack_ms"] == pytest.approx(150)
    assert doc["outputs"]["ceiling"] is None  # nothing sped up


def test_cli_fanout_and_availability_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 000 (0.63 at n = 100, 0.33 at n = 40) and seed 001 (0.990 / 0.905 / 0.368)."""
    doc = _json(["fanout", "--fanout", "40,100", "--backend-fast", "99%"], capsys)
    assert [round(r["p_slow"], 2) for r in doc["outputs"]["fanouts"]] == [0.33, 0.63]
    doc = _json(["availability", "--up", "99.9%", "--machines", "10,100,1000"], capsys)
    assert [round(r["availability"], 3) for r in doc["outputs"]["fleets"]] == [0.99, 0.905, 0.368]
    doc = _json(["availability", "--up", "0.999", "--machines", "1000", "--need", "9"], capsys)
    assert doc["outputs"]["fleets"][0]["nines"] is None  # unbounded is null, never Infinity


def test_cli_cost_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cost", "--dollars-per-hour", "$2.50", "--peak-tokens", "2500/s"]
    argv += ["--utilization", "50%"]
    out = _json(argv, capsys)["outputs"]
    assert out["cost_per_million_tokens_usd"] == pytest.approx(2.5 / (3600 * 0.5 * 2500) * 1e6)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (
            [
                "replicas",
                "--rate",
                "1/s",
                "--latency",
                "1s",
                "--per-replica",
                "4",
                "--utilization",  # the old name of --max-utilization, still accepted
                "120%",
            ],
            "--max-utilization",
        ),
        (
            [
                "replicas",
                "--rate",
                "1/s",
                "--latency",
                "1s",
                "--per-replica",
                "4",
                "--max-utilization",
                "0%",
            ],
            "--max-utilization",
        ),
        (
            [
                "replicas",
                "--rate",
                "1/s",
                "--latency",
                "1s",
                "--per-replica",
                "4",
                "--spares",
                "-2",
            ],
            "--spares",
        ),
        (["replicas", "--rate", "1/s", "--latency", "1s", "--per-replica", "-4"], "--per-replica"),
        (
            [
                "replicas",
                "--rate",
                "1/s",
                "--latency",
                "1s",
                "--per-replica",
                "4",
                "--utilization",
                "0%",
            ],
            "--max-utilization",  # the error names the option's current name
        ),
        (["queue", "--utilization", "100%"], "--utilization"),
        (["queue", "--utilization", "50%,1.5"], "--utilization"),
        (["queue", "--service", "5ms", "--rate", "300/s"], "--rate"),
        (["queue", "--rate", "300/s"], "--rate"),
        (["queue", "--servers", "-1", "--utilization", "50%"], "--servers"),
        (  # M/G/c is Allen-Cunneen's; there is no M/G/c/K form
            [
                "queue",
                "--servers",
                "2",
                "--cv",
                "0.5",
                "--max-in-system",
                "4",
                "--utilization",
                "50%",
            ],
            "--cv",
        ),
        (
            ["queue", "--servers", "3", "--max-in-system", "2", "--utilization", "50%"],
            "--max-in-system",
        ),
        (["queue", "--max-in-system", "x", "--utilization", "50%"], "--max-in-system"),
        (["queue", "--max-in-system", "3", "--utilization", "-5%"], "--utilization"),
        (["queue", "--max-in-system", "3", "--utilization", "50%", "--slo", "p99<=9ms"], "--slo"),
        (
            ["queue", "--service", "2ms", "--cv", "2", "--utilization", "50%", "--slo", "p99<=9ms"],
            "--slo",
        ),
        (["queue", "--service", "2ms", "--utilization", "50%", "--slo", "p100<=9ms"], "--slo"),
        (["little", "--rate", "5/s"], "--concurrency/--rate/--latency"),
        (["little", "--rate", "5/s", "--latency", "1s", "--concurrency", "5"], "--concurrency"),
        (["amdahl", "--stage", "a=70%", "--stage", "b=50%"], "--stage"),
        (["amdahl", "--stage", "a=70%", "--stage", "b=5ms"], "--stage"),
        (["amdahl", "--stage", "a=70%", "--speedup", "b=2"], "--speedup"),
        (["amdahl", "--stage", "a=70%", "--speedup", "a=-2"], "--speedup"),
        (["amdahl"], "--stage"),
        (["fanout", "--fanout", "0", "--backend-fast", "99%"], "--fanout"),
        (["fanout", "--fanout", "10", "--backend-fast", "101%"], "--backend-fast"),
        (["fanout", "--fanout", "10"], "--backend-fast"),
        (["availability", "--up", "99.9%", "--machines", "-10"], "--machines"),
        (["availability", "--up", "99.9%", "--machines", "10,5", "--need", "8"], "--need"),
        (["cost", "--dollars-per-hour", "-3", "--peak-rate", "5/s"], "--dollars-per-hour"),
        (["cost", "--dollars-per-hour", "3"], "--peak-rate"),
        (
            [
                "cost",
                "--dollars-per-hour",
                "3",
                "--peak-rate",
                "5/s",
                "--replicas",
                "2",
                "--rate",
                "20/s",
            ],
            "--rate",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_option_and_exit_2(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["plan", *argv], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"tailwise: error: {option}")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_input_from_the_library_names_the_option() -> None:
    with pytest.raises(BadInput, match="--utilization"):
        plan.queue(utilizations=[1.0])
    with pytest.raises(BadInput, match="--need"):
        plan.availability(up=0.9, machines=[3], need=4)


# --- the utilization ceiling and its warnings ----------------------------------------------


def test_replicas_default_ceiling_is_80_percent_and_warns_at_it() -> None:
    """The issue's fleet: 8,000/s x 120 ms = 960 in flight, 40 per replica. At the default
    80% ceiling: 960 / 32 = 30 replicas, 31 with the spare; with the spare failed the 30
    run at exactly 80%: warned. At 100% (the seed's sum) 25 replicas, saturated when one
    fails: warned twice (the ceiling itself, and the fleet at it)."""
    p = plan.replicas(rate_rps=8000, latency_s=0.120, per_replica=40, spares=1)
    assert p.inputs["utilization_ceiling"] == plan.littles.DEFAULT_CEILING == 0.8
    assert p.outputs["replicas"] == 31
    assert p.outputs["utilization_after_failures"] == pytest.approx(0.8)
    assert any("at or above the 80% ceiling" in w for w in p.warnings)
    full = plan.replicas(rate_rps=8000, latency_s=0.120, per_replica=40, spares=1, utilization=1)
    assert full.outputs["replicas"] == 25
    assert any("ceiling 100%" in w for w in full.warnings)
    assert any("at or above the 100% ceiling" in w for w in full.warnings)
    assert any("unbounded" in w for w in full.warnings)  # M/M/40 at 100%: no mean at all


def test_replicas_below_the_ceiling_do_not_warn() -> None:
    """7,000/s: 840 in flight / 32 = 26.25 -> 27 replicas at 7000 / (27 x 333.3) = 77.8%,
    below 80%; 40 slots per replica barely queue there (M/M/40 at 78%: W grows < 1%)."""
    p = plan.replicas(rate_rps=7000, latency_s=0.120, per_replica=40)
    assert p.outputs["replicas"] == 27
    assert p.outputs["utilization_at_rate"] == pytest.approx(7000 / (27 * 40 / 0.120))
    assert p.warnings == ()


def test_replicas_warn_when_the_latency_contradicts_the_queueing() -> None:
    """50/s at W = 2 s, 8 per replica (seed 002): 16 replicas at 78.1%. If 2 s were the
    unloaded service time, M/M/8 at 78.1% waits Erlang C / (8 mu - lam) on top, which
    the test computes on its own: the plan warns and names that mean latency."""
    p = plan.replicas(rate_rps=50, latency_s=2.0, per_replica=8)
    rho = 50 / (16 * 8 / 2.0)
    a = 8 * rho
    b = 1.0
    for j in range(1, 9):
        b = a * b / (j + a * b)
    erlang_c = b / (1 - rho * (1 - b))
    mean_ms = (2.0 + erlang_c / (8 / 2.0 - a / 2.0)) * 1e3
    assert mean_ms > 2000 * 1.1
    (warning,) = p.warnings
    assert f"{mean_ms:.4g} ms" in warning and "78.1%" in warning


def test_cli_replicas_prints_the_warning(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "replicas", "--rate", "8000/s", "--latency", "120ms", "--per-replica", "40"]
    code, out, _ = run_cli([*argv, "--spares", "1", "--max-utilization", "100%"], capsys)
    assert code == 0
    assert "warning   with 1 spare(s) failed the fleet runs at 100.0%" in out
    doc = _json([*argv[1:], "--spares", "1"], capsys)
    assert doc["outputs"]["replicas"] == 31 and doc["warnings"]


# --- M/G/c and M/M/c/K ----------------------------------------------------------------------


def test_queue_mgc_is_allen_cunneen(capsys: pytest.CaptureFixture[str]) -> None:
    """c = 4, S = 10 ms, cv 0.5 at 90%: Wq = Wq(M/M/4) x (1 + 0.25) / 2, said to be an
    approximation; cv 1 gives M/M/4's numbers exactly."""
    argv = ["queue", "--servers", "4", "--service", "10ms", "--utilization", "90%"]
    doc = _json([*argv, "--cv", "0.5"], capsys)
    (row,) = doc["outputs"]["levels"]
    wq_ms = cap.mmc_mean_wait_s(4, 0.01, 360) * 1e3 * 1.25 / 2
    assert doc["inputs"]["queue"] == "M/G/4"
    assert row["wq_ms"] == pytest.approx(wq_ms) and row["w_ms"] == pytest.approx(wq_ms + 10)
    assert any("APPROXIMATION" in a for a in doc["assumptions"])
    exp = plan.queue(servers=4, service_s=0.01, utilizations=[0.9], cv=1.0).outputs["levels"][0]
    mmc = plan.queue(servers=4, service_s=0.01, utilizations=[0.9]).outputs["levels"][0]
    assert exp["wq_ms"] == pytest.approx(mmc["wq_ms"], rel=1e-12)
    # A mean target: the highest rate whose Allen-Cunneen mean latency is 20 ms.
    slo = plan.queue(
        servers=4, service_s=0.01, utilizations=[0.5], cv=0.5, slo=("mean", 0.0, 0.020)
    ).outputs
    lam = slo["slo_max_rate_rps"]
    assert 0.01 + cap.mgc_mean_wait_s(4, 0.01, lam, 0.5) == pytest.approx(0.020, rel=1e-6)


def test_queue_mmck_over_capacity_settles_and_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    """M/M/2/5 offered 120%: blocking p_5 from the birth-death weights computed here;
    throughput lam (1 - p_5); carried utilization below 1."""
    argv = ["queue", "--servers", "2", "--service", "10ms", "--max-in-system", "5"]
    doc = _json([*argv, "--utilization", "120%"], capsys)
    (row,) = doc["outputs"]["levels"]
    a = 2.4
    w = [a**n / math.factorial(min(n, 2)) / 2 ** max(0, n - 2) for n in range(6)]
    p_block = w[-1] / sum(w)
    assert doc["inputs"]["queue"] == "M/M/2/5"
    assert row["p_block"] == pytest.approx(p_block, rel=1e-12)
    assert row["throughput_rps"] == pytest.approx(240 * (1 - p_block))
    assert (
        row["carried_utilization"] == pytest.approx(1.2 * (1 - p_block))
        and row["carried_utilization"] < 1
    )
    lengths = sum(n * x for n, x in enumerate(w)) / sum(w)
    assert row["w_ms"] == pytest.approx(lengths / (240 * (1 - p_block)) * 1e3)
