"""Intervals from blocks of whole regeneration cycles (``intervals._regenerative``).

Truth in closed form: an M/M/1 queue's sojourn is exponential with rate mu - lambda, so
its p99 is ln(100) / (mu - lambda) and its mean 1 / (mu - lambda). Sample paths from
Lindley's recursion, here, independent of tailwise's simulator."""

from __future__ import annotations

import math

import numpy as np

from tailwise.metrics import tail
from tailwise.metrics.intervals import _regenerative, distribution_ci
from tailwise.metrics.uncertainty import cycle_reach, t_quantile

SERVICE_MS = 20.0


def mm1_path(rho: float, n: int, seed: int, service: str = "exp") -> tuple[np.ndarray, np.ndarray]:
    """``(latency_ns, idle)`` of ``n`` requests from an empty FCFS server at load ``rho``."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(SERVICE_MS / rho, n)
    if service == "exp":
        work = rng.exponential(SERVICE_MS, n)
    else:  # lognormal, sigma 1.5, the same mean
        sigma = 1.5
        work = rng.lognormal(math.log(SERVICE_MS) - sigma * sigma / 2, sigma, n)
    arrive = np.cumsum(gaps)
    sojourn = np.empty(n)
    wait = 0.0
    for i in range(n):
        if i:
            wait = max(0.0, wait + work[i - 1] - gaps[i])
        sojourn[i] = wait + work[i]
    idle = tail.idle_on_arrival(arrive, arrive + sojourn)
    return np.rint(sojourn * 1e6).astype(np.int64), idle


def test_an_m_m_1_run_at_80_percent_gets_p99_intervals_that_cover() -> None:
    """30 runs of 50,000 requests at 80% load: the p99's batch means mostly say "n too
    small" (a run of ~10 independent busy-period clusters beyond it), while its blocks cut
    where the server was found empty are independent; with them the interval is given in
    most runs and holds the true p99 about as often as its level says."""
    p99_ms = math.log(100) * SERVICE_MS / (1 - 0.8)
    mean_ms = SERVICE_MS / (1 - 0.8)
    given = {"without": 0, "with": 0}
    covered = {"p99": 0, "mean": 0}
    for seed in range(30):
        x, idle = mm1_path(0.8, 50_000, seed)
        given["without"] += distribution_ci(x)["ci"]["p99"] is not None
        ci = distribution_ci(x, idle=idle)["ci"]
        if ci["p99"] is not None:
            given["with"] += 1
            covered["p99"] += ci["p99"][0] <= p99_ms <= ci["p99"][1]
        covered["mean"] += ci["mean"][0] <= mean_ms <= ci["mean"][1]
    assert given["without"] <= 15 and given["with"] >= 25, given
    assert covered["p99"] >= 0.85 * given["with"], (covered, given)
    assert covered["mean"] >= 26, covered


def test_the_blocks_widen_and_never_narrow_the_batch_means_interval() -> None:
    x, idle = mm1_path(0.5, 20_000, 1)
    plain, both = distribution_ci(x)["ci"], distribution_ci(x, idle=idle)["ci"]
    for key in ("p50", "p90", "mean"):
        assert both[key][0] <= plain[key][0] and both[key][1] >= plain[key][1], key


def test_a_heavy_service_keeps_the_gate_shut() -> None:
    """Lognormal (sigma 1.5) service at 50% load: half the requests find the server empty,
    but their own latencies (the bare service) have a heavy top, and the run's cycles
    are then no guide to the tail's excursions: no interval from them."""
    x, idle = mm1_path(0.5, 20_000, 2, service="lognormal")
    assert idle.mean() > 0.4
    assert tail.service_heaviness(x[idle].astype(float)) >= tail.SERVICE_HEAVY
    assert _regenerative(x.astype(float), idle, 0.95) == {}


def test_too_few_values_beyond_a_quantile_get_no_interval_from_the_blocks() -> None:
    """5,000 requests hold 50 values beyond the p99: too few for 20 blocks to measure
    their spread (such intervals covered a third of the time); the p90's 500 suffice."""
    x, idle = mm1_path(0.5, 5_000, 3)
    cycles = _regenerative(x.astype(float), idle, 0.95)
    assert "p99" not in cycles and "p90" in cycles and "mean" in cycles


def test_the_cycle_reach_of_independent_values_is_the_t_interval() -> None:
    """With independent values every request is a cycle of its own: the ratio
    estimator's half-width is then t(19) s / sqrt(n) within its sampling noise."""
    rng = np.random.default_rng(4)
    y = rng.normal(10.0, 2.0, 20_000)
    ranges = [(j * 1000, (j + 1) * 1000) for j in range(20)]
    expected = t_quantile(0.975, 19) * 2.0 / math.sqrt(len(y))
    assert 0.6 * expected <= cycle_reach(y, ranges, 0.95) <= 1.4 * expected
