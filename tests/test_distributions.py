"""Service-time distributions: draws have the mean and SCV the closed forms claim.

Each property draws 40 000 samples, splits them into 40 batches, and holds the stated
mean and SCV against the batches' 95% interval. Hypothesis tries many parameter sets,
so the interval is widened more than in the simulator's tests (2.5x: about five
standard errors), keeping the chance of a false alarm over all examples under 1%.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailwise.distributions import Distribution, parse_distribution
from tailwise.errors import BadInput
from tests.sim import CI, ci

BATCHES, PER_BATCH = 40, 1000
WIDE = 2.5

ms = st.floats(min_value=0.5, max_value=50.0)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)


def _batches(dist: Distribution, seed: int) -> np.ndarray:
    draws = dist.sample(np.random.default_rng(seed), BATCHES * PER_BATCH)
    assert draws.dtype == np.int64 and (draws >= 0).all()
    return draws.astype(np.float64).reshape(BATCHES, PER_BATCH)


def _check_moments(dist: Distribution, seed: int) -> tuple[CI, CI]:
    b = _batches(dist, seed)
    means = ci(b.mean(axis=1))
    assert means.covers(dist.mean_ns, WIDE), (dist, means)
    scvs = ci(b.var(axis=1, ddof=1) / b.mean(axis=1) ** 2)
    assert scvs.covers(dist.scv, WIDE), (dist, dist.scv, scvs)
    return means, scvs


@SETTINGS
@given(mean=ms, seed=seeds)
def test_exponential_mean_and_scv(mean: float, seed: int) -> None:
    dist = parse_distribution(f"exp:{mean:.6f}ms")
    assert dist.mean_ns == pytest.approx(mean * 1e6, abs=1) and dist.scv == 1.0
    _check_moments(dist, seed)


@SETTINGS
@given(median=ms, sigma=st.floats(min_value=0.05, max_value=1.0), seed=seeds)
def test_lognormal_is_given_by_its_median(median: float, sigma: float, seed: int) -> None:
    """``lognormal:<median>,<sigma>``: the mean is median e^{sigma^2/2}, the SCV e^{sigma^2}-1."""
    dist = parse_distribution(f"lognormal:{median:.6f}ms,{sigma:.4f}")
    s = float(f"{sigma:.4f}")
    assert dist.mean_ns == pytest.approx(median * 1e6 * math.exp(s * s / 2), rel=1e-6)
    assert dist.scv == pytest.approx(math.expm1(s * s))
    _check_moments(dist, seed)
    draws = dist.sample(np.random.default_rng(seed), 20_001)
    # the sample median: a binomial count of draws below the stated median
    below = float((draws < median * 1e6).mean())
    assert abs(below - 0.5) < 5 * math.sqrt(0.25 / len(draws))


@SETTINGS
@given(mean=ms, shape=st.floats(min_value=0.3, max_value=20.0), seed=seeds)
def test_gamma_mean_and_scv(mean: float, shape: float, seed: int) -> None:
    dist = parse_distribution(f"gamma:{mean:.6f}ms,{shape:.4f}")
    assert dist.scv == pytest.approx(1 / float(f"{shape:.4f}"))
    _check_moments(dist, seed)


@SETTINGS
@given(
    lo=st.floats(min_value=0.0, max_value=20.0),
    width=st.floats(min_value=0.0, max_value=20.0),
    seed=seeds,
)
def test_uniform_mean_and_scv(lo: float, width: float, seed: int) -> None:
    text = f"uniform:{lo:.4f}ms-{lo + width:.4f}ms"
    dist = parse_distribution(text)
    a, b = float(f"{lo:.4f}") * 1e6, float(f"{lo + width:.4f}") * 1e6
    assert dist.mean_ns == pytest.approx((a + b) / 2)
    draws = dist.sample(np.random.default_rng(seed), 5000)
    assert draws.min() >= round(a) and draws.max() <= round(b)
    if dist.mean_ns > 0:
        assert dist.scv == pytest.approx((b - a) ** 2 / 12 / ((a + b) / 2) ** 2)
        _check_moments(dist, seed)
    else:  # uniform:0ms-0ms: every draw is 0, and its SCV is 0 (not a division by zero)
        assert dist.scv == 0.0 and (draws == 0).all()


@SETTINGS
@given(mean=st.floats(min_value=0.0, max_value=50.0), seed=seeds)
def test_constant_draws_the_mean(mean: float, seed: int) -> None:
    for text in (f"{mean:.6f}ms", f"const:{mean:.6f}ms", f"constant:{mean:.6f}ms"):
        dist = parse_distribution(text)
        assert dist.kind == "const" and dist.scv == 0.0
        draws = dist.sample(np.random.default_rng(seed), 100)
        assert (draws == round(dist.mean_ns)).all()


def test_scv_distinguishes_the_kinds() -> None:
    """The property tests have teeth: these SCVs are far apart relative to the intervals."""
    scv = {t: _check_moments(parse_distribution(t), 1)[1] for t in
           ("exp:5ms", "gamma:5ms,4", "lognormal:5ms,0.5", "uniform:0ms-10ms")}  # fmt: skip
    assert not scv["gamma:5ms,4"].covers(1.0, WIDE)
    assert not scv["exp:5ms"].covers(0.25, WIDE)
    assert not scv["uniform:0ms-10ms"].covers(0.25, WIDE)  # 1/3
    assert scv["lognormal:5ms,0.5"].covers(math.expm1(0.25), WIDE)


def test_empirical_resamples_a_runs_service_times(tmp_path: Path) -> None:
    from tailwise.sim.run import simulate, write_run
    from tailwise.sim.scenario import parse_scenario

    sc = parse_scenario(
        {"arrival": {"rate": "50/s", "duration": "20s", "seed": 2}, "service": "gamma:4ms,2"}
    )
    run = simulate(sc)
    write_run(tmp_path / "run", run, sc)
    rec = run.records
    service = rec.done_ns - rec.sent_ns
    for where in (tmp_path / "run", tmp_path / "run" / "records.jsonl"):
        dist = parse_distribution(f"empirical:{where}")
        assert dist.kind == "empirical"
        assert dist.mean_ns == pytest.approx(service.mean())
        assert dist.scv == pytest.approx(service.var() / service.mean() ** 2)
        draws = dist.sample(np.random.default_rng(0), 5000)
        assert set(draws.tolist()) <= set(service.tolist())


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "5",  # no unit
        "exp:",
        "exp:-5ms",
        "exp:5ms,3",
        "weibull:5ms,2",
        "EXP:5ms",
        "lognormal:5ms",
        "lognormal:5ms,0",
        "lognormal:5ms,-1",
        "lognormal:5ms,inf",
        "gamma:5ms,nan",
        "gamma:5ms,abc",
        "gamma:5ms,",
        "uniform:2ms",
        "uniform:8ms-2ms",
        "uniform:ms-2ms",
        "const:5 parsecs",
    ],
)
def test_parse_errors_name_the_field(text: str) -> None:
    with pytest.raises(BadInput) as raised:
        parse_distribution(text, "scenario.service")
    message = str(raised.value)
    assert message.startswith("scenario.service: got ") and "\n" not in message


def test_empirical_needs_a_run(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"^scenario\.service: .*run directory"):
        parse_distribution(f"empirical:{tmp_path / 'nope'}", "scenario.service")
