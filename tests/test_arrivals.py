"""Schedules: pure, seeded, the requested rate, never rescaled or skipped."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailwise.arrivals import (
    BLOCK,
    Constant,
    Gamma,
    Poisson,
    Ramp,
    Schedule,
    Stages,
    Steady,
    parse_schedule,
)
from tailwise.errors import BadInput

S = 1_000_000_000


def test_constant_is_evenly_spaced_from_zero() -> None:
    o = Schedule(Constant(), Steady(1000.0), horizon_ns=1 * S).offsets_ns()
    assert len(o) == 1000
    assert o[0] == 0
    assert np.all(np.diff(o) == 1_000_000)


def test_same_seed_same_offsets_different_seed_different() -> None:
    a = Schedule(Poisson(), Steady(500.0), seed=7, horizon_ns=5 * S).offsets_ns()
    b = Schedule(Poisson(), Steady(500.0), seed=7, horizon_ns=5 * S).offsets_ns()
    c = Schedule(Poisson(), Steady(500.0), seed=8, horizon_ns=5 * S).offsets_ns()
    assert np.array_equal(a, b)
    assert not np.array_equal(a[:100], c[:100])


def test_poisson_rate_and_exponential_gaps() -> None:
    o = Schedule(Poisson(), Steady(2000.0), seed=1, horizon_ns=100 * S).offsets_ns()
    # 200k events: the count is within 4 sigma of the mean, gaps have CV ~1.
    assert abs(len(o) - 200_000) < 4 * np.sqrt(200_000)
    gaps = np.diff(o)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_burstiness_sets_cv(burstiness: float) -> None:
    o = Schedule(Gamma(burstiness), Steady(1000.0), seed=3, max_count=200_000).offsets_ns()
    gaps = np.diff(o)
    assert gaps.mean() / 1e6 == pytest.approx(1.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.03)


def test_ramp_count_and_shape() -> None:
    o = Schedule(Constant(), Ramp(10.0, 100.0, 10.0), horizon_ns=10 * S).offsets_ns()
    assert len(o) == pytest.approx(550, abs=1)  # the integral of the rate
    first, last = np.sum(o < 1 * S), np.sum(o >= 9 * S)
    assert first == pytest.approx(14.5, abs=1.5)
    assert last == pytest.approx(95.5, abs=1.5)


def test_stages_piecewise_counts() -> None:
    o = Schedule(Constant(), Stages(((50.0, 2.0), (200.0, 1.0))), horizon_ns=3 * S).offsets_ns()
    assert np.sum(o < 2 * S) == 100
    assert np.sum(o >= 2 * S) == 200


def test_count_bound_and_both_bounds() -> None:
    assert len(Schedule(Poisson(), Steady(100.0), max_count=123).offsets_ns()) == 123
    both = Schedule(Constant(), Steady(100.0), horizon_ns=1 * S, max_count=10_000).offsets_ns()
    assert len(both) == 100


def test_blocks_are_bounded_and_concatenate_to_the_whole() -> None:
    sched = Schedule(Poisson(), Steady(50_000.0), seed=2, horizon_ns=3 * S)
    blocks = list(sched.blocks())
    assert all(len(b) <= BLOCK for b in blocks)
    assert np.array_equal(np.concatenate(blocks), sched.offsets_ns())


@settings(max_examples=30, deadline=None)
@given(
    rate=st.floats(1.0, 5000.0),
    seed=st.integers(0, 2**32),
    n=st.integers(1, 3000),
    kind=st.sampled_from(["constant", "poisson", "gamma:0.5", "gamma:3"]),
)
def test_offsets_sorted_nonnegative_exact_count(rate: float, seed: int, n: int, kind: str) -> None:
    o = parse_schedule(kind, f"{rate}/s", seed=seed, horizon_ns=None, max_count=n).offsets_ns()
    assert len(o) == n  # never skipped
    assert o.dtype == np.int64
    assert o[0] >= 0
    assert np.all(np.diff(o) >= 0)


def test_trace_replay_is_exact(tmp_path: object) -> None:
    from pathlib import Path

    p = Path(str(tmp_path)) / "trace.txt"
    p.write_text("# offsets\n0\n0.25\n250ms\n1.5\n")
    o = parse_schedule(f"trace:{p}", None, seed=0, horizon_ns=None, max_count=None).offsets_ns()
    assert o.tolist() == [0, 250_000_000, 250_000_000, 1_500_000_000]


def test_trace_errors_name_the_line(tmp_path: object) -> None:
    from pathlib import Path

    p = Path(str(tmp_path)) / "t.txt"
    p.write_text("0\n2\n1\n")
    with pytest.raises(BadInput, match=r"t\.txt:3"):
        parse_schedule(f"trace:{p}", None, seed=0, horizon_ns=None, max_count=None)
    with pytest.raises(BadInput, match="readable"):
        parse_schedule("trace:/no/such/file", None, seed=0, horizon_ns=None, max_count=None)


@pytest.mark.parametrize("bad", ["lognormal", "gamma:-1", "gamma:x", "ramp:10", "stages:10/s"])
def test_bad_arrival_specs(bad: str) -> None:
    with pytest.raises(BadInput):
        parse_schedule(bad, "10/s", seed=0, horizon_ns=S, max_count=None)


def test_poisson_composes_with_ramp() -> None:
    sched = parse_schedule(
        "ramp:100/s-1000/s+poisson", None, seed=4, horizon_ns=20 * S, max_count=None
    )
    o = sched.offsets_ns()
    assert len(o) == pytest.approx(11_000, rel=0.04)
    assert sched.describe()["process"] == "poisson"
