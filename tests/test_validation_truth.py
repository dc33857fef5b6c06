"""The validation grid's truth (benchmarks/validation_grid.py): its closed forms against
known values, and its C recursion against the closed forms."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import validation_grid as vg

needs_cc = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="the grid's recursion is C, compiled at run time: no compiler here",
)
MU = 1.0 / vg.SERVICE_S  # 50/s


def test_mm1_closed_form_is_exponential() -> None:
    lam = 0.7 * MU
    assert vg.mmc_quantile(0.99, 1, MU, lam) == pytest.approx(math.log(100) / (MU - lam), 1e-9)
    assert vg.mmc_quantile(0.5, 1, MU, lam) == pytest.approx(math.log(2) / (MU - lam), 1e-9)
    assert vg.mmc_mean(1, MU, lam) == pytest.approx(1 / (MU - lam), 1e-12)
    assert vg.erlang_c(1, 0.7) == pytest.approx(0.7, 1e-12)  # M/M/1 waits with prob. rho


def test_mm2_closed_form_known_values() -> None:
    # M/M/2: P(wait) = 2 rho^2 / (1 + rho); at rho = 0.5 that is 1/3
    assert vg.erlang_c(2, 1.0) == pytest.approx(1 / 3, 1e-12)
    lam = 2 * 0.5 * MU
    # mean sojourn = 1/mu + C / (2 mu - lam) = 20 ms + (1/3) / 50 = 26.67 ms
    assert vg.mmc_mean(2, MU, lam) == pytest.approx(0.02 + (1 / 3) / 50, 1e-12)
    # the survival function at its own quantile is 1 - q, and it starts at 1
    t99 = vg.mmc_quantile(0.99, 2, MU, lam)
    assert vg.mmc_survival(t99, 2, MU, lam) == pytest.approx(0.01, 1e-9)
    assert vg.mmc_survival(0.0, 2, MU, lam) == pytest.approx(1.0, 1e-12)
    # Erlang C for c = 4 at a = 3.2 (80% load): 0.5964 (standard tables)
    assert vg.erlang_c(4, 3.2) == pytest.approx(0.5964, abs=5e-4)


def test_gm1_with_exponential_gaps_is_mm1() -> None:
    lam = 0.7 * MU
    assert vg.gm1_decay(MU, lam, 1.0) == pytest.approx(MU - lam, 1e-9)
    # burstier arrivals (CV 2) wait longer than Poisson ones at the same load
    assert vg.gm1_decay(MU, lam, 0.25) < 0.5 * (MU - lam)


def test_pollaczek_khinchine_exponential_case() -> None:
    cell = vg.Cell("x", 1, 0.7, "exp")
    assert vg.pk_mean(cell) == pytest.approx(vg.mmc_mean(1, MU, 0.7 * MU), 1e-12)


@needs_cc
@pytest.mark.parametrize("servers", [1, 2])
def test_recursion_matches_mmc_closed_form(servers: int) -> None:
    cell = vg.Cell(f"mm{servers}-test", servers, 0.7, "exp")
    got = vg.recursion_truth(cell, 2_000_000, seed=11)
    exact = vg.closed_form(cell)
    assert exact is not None
    assert got["mean"] == pytest.approx(exact["mean"], rel=0.02)
    assert got["p99"] == pytest.approx(exact["p99"], rel=0.04)
    assert got["p50"] == pytest.approx(exact["p50"], rel=0.02)


@needs_cc
def test_recursion_matches_gm1_closed_form() -> None:
    cell = vg.Cell("gamma-test", 1, 0.5, "exp", arrival_cv=2.0)
    got = vg.recursion_truth(cell, 2_000_000, seed=12)
    exact = vg.closed_form(cell)
    assert exact is not None
    assert got["mean"] == pytest.approx(exact["mean"], rel=0.03)
    assert got["p99"] == pytest.approx(exact["p99"], rel=0.05)


@needs_cc
def test_recursion_service_distributions_have_their_mean() -> None:
    # at low load the sojourn is nearly the service: mean 20 ms whatever the shape
    for service, shape in (("lognormal", 1.5), ("pareto", 2.5)):
        cell = vg.Cell("light", 1, 0.05, service, shape)
        got = vg.recursion_truth(cell, 1_000_000, seed=13)
        pk = vg.pk_mean(cell)
        assert pk is not None
        assert got["mean"] == pytest.approx(pk, rel=0.03), service


@needs_cc
def test_sample_path_starts_empty_and_serves_in_order() -> None:
    cell = vg.Cell("mm1-test", 1, 0.9, "exp")
    sched, done, first = vg.sample_path(cell, 20_000, seed=5)
    assert first is None and sched[0] == 0
    assert np.all(np.diff(sched) >= 0) and np.all(done > sched)
    assert np.all(np.diff(done) > 0)  # one FCFS server: answers leave in arrival order


@needs_cc
def test_llm_engine_capacity_and_first_token() -> None:
    overloaded = vg.Cell("llm-test", 32, 1.5, "llm")
    sched, done, first = vg.sample_path(overloaded, 100_000, seed=3)
    assert first is not None
    # the first request finds the engine idle: its prefill step is 4 ms + 128 x 0.02 ms
    assert (first[0] - sched[0]) / 1e6 == pytest.approx(6.56, abs=1e-3)
    assert np.all(first < done)
    ends = np.sort(done)[20_000:80_000] / 1e9
    assert (len(ends) - 1) / (ends[-1] - ends[0]) == pytest.approx(vg.LLM_CAPACITY_RPS, rel=0.01)
    assert abs(vg.LLM_CAPACITY_RPS - 33.46) < 0.01  # 32 / 956.32 ms
