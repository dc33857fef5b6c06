"""Closed forms against textbook values and against a Monte Carlo M/M/c queue."""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest

from tailwise import capacity as cap


def test_erlang_c_matches_textbook_values() -> None:
    assert cap.erlang_c(1, 0.7) == pytest.approx(0.7)  # M/M/1: P(wait) = rho
    assert cap.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert cap.erlang_c(3, 2.0) == pytest.approx(4 / 9)
    assert cap.erlang_c(4, 4.0) == 1.0  # at capacity everyone waits


def test_mm1_sojourn_is_exponential_with_rate_mu_minus_lambda() -> None:
    # M/M/1 latency ~ Exp(mu - lam): with mu = 200/s, lam = 150/s, p99 = ln(100)/50 s.
    assert cap.mmc_sojourn_survival(0.01, 1, 0.005, 150) == pytest.approx(math.exp(-0.5))
    assert cap.mmc_sojourn_quantile(0.99, 1, 0.005, 150) == pytest.approx(math.log(100) / 50)


def _simulate_mmc(c: int, service_s: float, lam: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    work = rng.exponential(service_s, n)
    free = [0.0] * c
    done = np.empty(n)
    for i in range(n):
        start = max(arrivals[i], free[0])
        done[i] = start + work[i]
        heapq.heapreplace(free, done[i])
    return (done - arrivals)[n // 10 :]  # drop the empty-start transient


def test_mmc_p99_matches_a_simulated_queue() -> None:
    lat = _simulate_mmc(4, 0.005, 640.0, 200_000, seed=3)  # rho = 0.8
    p99 = float(np.quantile(lat, 0.99))
    assert cap.mmc_sojourn_quantile(0.99, 4, 0.005, 640.0) == pytest.approx(p99, rel=0.05)


def test_knee_at_a_percentile_slo_is_where_the_quantile_meets_it() -> None:
    rate = cap.mmc_max_rate(0.99, 0.05, 4, 0.005)
    assert 600 < rate < 800
    assert cap.mmc_sojourn_quantile(0.99, 4, 0.005, rate) == pytest.approx(0.05, rel=1e-6)
    assert cap.mmc_max_rate(0.99, 0.001, 4, 0.005) == 0.0  # even idle misses 1 ms


def test_batch_throughput_saturates_at_one_over_c1() -> None:
    # seed 000: c0 = 4 ms, c1 = 0.9 ms
    assert cap.batch_throughput(16, 0.004, 0.0009) == pytest.approx(16 / 0.0184)
    assert cap.batch_throughput(10**6, 0.004, 0.0009) == pytest.approx(1 / 0.0009, rel=1e-3)


def test_llm_saturated_rate_for_the_demo_defaults() -> None:
    # N=32, T_d = 4 + 0.3*32 = 13.6 ms; prefill step 4 + 0.02*128 = 6.56 ms; L = 64
    x = cap.llm_saturated_rps(0.004, 0.00002, 0.0003, 32, 128, 64)
    assert x == pytest.approx(32 / (63 * 0.0136 + 32 * 0.00656))
    assert cap.llm_idle_ttft_s(0.004, 0.00002, 128) == pytest.approx(0.00656)


@pytest.mark.parametrize("q", [0.0, 1.0, 1.5])
def test_mmc_quantile_refuses_a_quantile_outside_0_1(q: float) -> None:
    """q >= 1 used to loop for ever (the bracket doubles while survival > 1 - q)."""
    with pytest.raises(ValueError, match="quantile"):
        cap.mmc_sojourn_quantile(q, 2, 0.01, 100.0)


# --- M/M/c/K (exact) and M/G/c (Allen-Cunneen) -------------------------------------------


@pytest.mark.parametrize(("rho", "k"), [(0.5, 1), (0.9, 4), (1.0, 4), (1.5, 6)])
def test_mm1k_matches_its_textbook_closed_form(rho: float, k: int) -> None:
    """M/M/1/K: p_n = (1 - rho) rho^n / (1 - rho^(K+1)) (uniform 1/(K+1) at rho = 1);
    blocking p_K; L = rho/(1-rho) - (K+1) rho^(K+1) / (1 - rho^(K+1))."""
    p = cap.mmck_probabilities(1, k, rho)
    if rho == 1.0:
        expected = [1 / (k + 1)] * (k + 1)
        length = k / 2
    else:
        expected = [(1 - rho) * rho**n / (1 - rho ** (k + 1)) for n in range(k + 1)]
        length = rho / (1 - rho) - (k + 1) * rho ** (k + 1) / (1 - rho ** (k + 1))
    assert p == pytest.approx(expected, rel=1e-12)
    m = cap.mmck_metrics(1, k, 0.01, rho / 0.01)
    assert m["blocking"] == pytest.approx(expected[-1], rel=1e-12)
    assert m["l"] == pytest.approx(length, rel=1e-12)
    # Little's law on the admitted: W = L / (lam (1 - p_K)); one server busy = 1 - p_0.
    assert m["w_s"] == pytest.approx(length / (rho / 0.01 * (1 - expected[-1])), rel=1e-12)
    assert m["busy_servers"] == pytest.approx(1 - expected[0], rel=1e-12)


@pytest.mark.parametrize(("c", "a"), [(1, 0.5), (3, 2.7), (10, 12.0)])
def test_mmcc_blocking_is_erlang_b(c: int, a: float) -> None:
    """With no waiting room (K = c) blocking is Erlang B: (a^c/c!) / sum_{j<=c} a^j/j!."""
    erlang_b = (a**c / math.factorial(c)) / sum(a**j / math.factorial(j) for j in range(c + 1))
    m = cap.mmck_metrics(c, c, 0.005, a / 0.005)
    assert m["blocking"] == pytest.approx(erlang_b, rel=1e-12)
    assert m["lq"] == 0 and m["w_s"] == pytest.approx(0.005)


def test_mmck_tends_to_mmc_as_the_bound_grows() -> None:
    """K -> infinity below capacity: blocking -> 0, Lq -> Erlang C's M/M/c queue."""
    m = cap.mmck_metrics(4, 400, 0.01, 320)
    assert m["blocking"] < 1e-30
    assert m["lq"] == pytest.approx(cap.mmc_queue_length(4, 3.2), rel=1e-9)


def test_allen_cunneen_is_exact_where_it_must_be() -> None:
    """cv = 1: M/M/c itself; c = 1: Pollaczek-Khinchine; cv = 0 halves the M/M/c wait."""
    wq = cap.mmc_mean_wait_s(4, 0.01, 320)
    assert cap.mgc_mean_wait_s(4, 0.01, 320, 1.0) == wq
    assert cap.mgc_mean_wait_s(4, 0.01, 320, 0.0) == pytest.approx(wq / 2)
    rho, cv = 0.8, 0.5
    pk_wq = cap.mg1_queue_length(rho, cv) / (rho / 0.01)
    assert cap.mgc_mean_wait_s(1, 0.01, rho / 0.01, cv) == pytest.approx(pk_wq, rel=1e-12)
    assert math.isinf(cap.mgc_mean_wait_s(4, 0.01, 400, 0.5))
