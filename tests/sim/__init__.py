"""Helpers for the simulator's tests: replication confidence intervals, scenario runs.

A simulated estimate (a mean latency, a tail share) is a random variable. The
tests do not guess a tolerance for it: they run ``R`` independent replications
(different seeds), take the estimate from each, and build a Student-t 95%
confidence interval of their mean. A closed form passes when it lies inside that
interval widened by :data:`WIDEN` (room for the few-percent chance that a fixed
seed set lands outside, and for the small start-up bias left after warm-up).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailwise.sim.run import simulate
from tailwise.sim.scenario import parse_scenario

WIDEN = 1.5

# Two-sided 95% Student-t quantiles t(0.975, df).
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
    40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t975(df: int) -> float:
    """The t quantile for ``df`` degrees of freedom (the next smaller tabulated df: wider)."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two replications")
    return _T975[max(k for k in _T975 if k <= df)] if df <= 120 else 1.96


@dataclass(frozen=True)
class CI:
    """Mean of ``n`` replications and the half-width of its 95% interval."""

    mean: float
    half: float
    n: int
    sd: float  # of one replication

    def covers(self, truth: float, widen: float = WIDEN) -> bool:
        slack = max(widen * self.half, 1e-12 * max(abs(truth), 1.0))
        return abs(truth - self.mean) <= slack

    def predicts(self, one_draw: float, widen: float = WIDEN) -> bool:
        """Could a single further replication plausibly be ``one_draw``? (prediction interval)"""
        half = t975(self.n - 1) * self.sd * math.sqrt(1.0 + 1.0 / self.n)
        return abs(one_draw - self.mean) <= widen * half

    def __str__(self) -> str:
        return f"{self.mean:.6g} ± {self.half:.3g} (95% CI, {self.n} replications)"


def ci(values: Iterable[float]) -> CI:
    v = np.asarray(list(values), dtype=np.float64)
    n = len(v)
    sd = float(v.std(ddof=1))
    return CI(float(v.mean()), t975(n - 1) * sd / math.sqrt(n), n, sd)


def assert_covers(values: Iterable[float], truth: float, what: str, widen: float = WIDEN) -> CI:
    """Assert ``truth`` lies in the (widened) replication CI of ``values``; return the CI."""
    interval = ci(values)
    assert interval.covers(truth, widen), f"{what}: closed form {truth:.6g} outside {interval}"
    return interval


def replicate(estimate: Callable[[int], float], seeds: Iterable[int]) -> list[float]:
    return [estimate(seed) for seed in seeds]


def run(scenario: dict[str, Any]) -> Any:
    """simulate() a scenario dict, checking the invariants every summary must keep."""
    result = simulate(parse_scenario(scenario))
    check_summary(result.summary)
    return result


def check_summary(s: dict[str, Any], littles_tol: float = 0.01) -> None:
    """Accounting holds, and Little's law within ``littles_tol`` (edge effects only)."""
    assert s["requests"]["accounted"], s["requests"]
    assert s["source"] == "sim"
    gap = s["littles_law"]["rel_gap"]
    assert gap <= littles_tol, f"Little's law gap {gap:.3g} > {littles_tol} ({s['littles_law']})"


def poisson_arrivals(rate_rps: float, n: int, seed: int) -> np.ndarray:
    """``n`` Poisson arrival instants (int64 ns) from their own seeded stream."""
    gaps = np.random.default_rng([seed, 1]).exponential(1e9 / rate_rps, n)
    return np.floor(np.cumsum(gaps)).astype(np.int64)
