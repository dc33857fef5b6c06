"""Helpers for the simulator's tests: replication confidence intervals, scenario runs.

A simulated estimate (a mean latency, a tail share) is a random variable. The
tests do not guess a tolerance for it: they run ``R`` independent replications
(different seeds), take the estimate from each, and build a Student-t 95%
confidence interval of their mean. A closed form passes when it lies inside that
interval widened by :data:`WIDEN` (room for the few-percent chance that a fixed
seed set lands outside, and for the small start-up bias left after warm-up).
The interval itself is the library's (:mod:`tailwise.sim.study`, the one
``tailwise simulate --replications`` prints); these helpers add the slack.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tailwise.sim.run import simulate
from tailwise.sim.scenario import parse_scenario
from tailwise.sim.study import CI as _StudyCI
from tailwise.sim.study import ci as _study_ci
from tailwise.sim.study import t975

__all__ = [
    "CI",
    "WIDEN",
    "assert_covers",
    "check_summary",
    "ci",
    "poisson_arrivals",
    "replicate",
    "run",
    "t975",
]

WIDEN = 1.5


class CI(_StudyCI):
    """The library's interval with the tests' default slack (:data:`WIDEN`)."""

    def covers(self, truth: float, widen: float = WIDEN) -> bool:
        return super().covers(truth, widen)

    def predicts(self, one_draw: float, widen: float = WIDEN) -> bool:
        return super().predicts(one_draw, widen)


def ci(values: Iterable[float]) -> CI:
    c = _study_ci(values)
    return CI(c.mean, c.half, c.n, c.sd)


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
