"""Confidence intervals for time-ordered, autocorrelated samples, and three-valued verdicts.

Latencies from a queue are not independent: a request that waits behind a long
one makes its successors wait too (an M/M/1 queue at 95% load remembers for
thousands of requests), so an interval that assumes independence is far too
narrow. Everything here takes values **in time order** (scheduled or
completion order; pass ``order=`` to have them sorted by it) with the initial
transient already cut (:mod:`tailwise.metrics.steady`), and uses
non-overlapping **batch means** over time. Pure NumPy, no SciPy.

API (``confidence`` defaults to :data:`CONFIDENCE`; each returns an :class:`Estimate`)::

    quantile_ci(values, q, confidence, order)   q-quantile (nearest rank, as summaries)
    quantile_cis(values, qs, confidence, order) several quantiles, one sort
    mean_ci(values, confidence, order)          mean
    proportion_ci(good, confidence, order)      share of True, e.g. SLO attainment
    rate_ci(times_ns, start_ns, end_ns, conf.)  events per second in a window
    judge(estimate, threshold, op)              "pass" | "fail" | "inconclusive"

and the iid pieces: :func:`iid_quantile_ci`, :func:`binomial_ranks`, :func:`wilson_interval`,
:func:`poisson_interval`, :func:`t_quantile`. An ``Estimate`` with
``supported=False`` is "n too small": it must not be shown as a number, and
:func:`judge` calls it inconclusive.

**Batching.** A mean of a per-observation series ``y`` (the values; the
indicator ``x <= t`` for a CDF or a share; counts per time slot for a rate)
is cut into ``k`` consecutive batches of ``b = n // k`` (the oldest
``n - k b`` values are dropped). Starting at ``k = 40`` and halving to 20 and
10, the first ``k`` whose batch means pass a lag-1 autocorrelation test
(``r1 <= -1/k + 1.645/sqrt(k)``, one-sided 5%; as in Law & Carson 1979 and
ASAP3, Steiger et al. 2005) is kept. The grand mean's variance is ``S^2/k``
times ``(1+r)/(1-r)``, ``r = max(0, r1)`` (an AR(1) allowance for correlation
too weak for the test to see in so few batches), and the interval is
Student's t with ``k-1`` degrees of freedom, shifted by Johnson's (1978)
skewness correction ``g (2t^2 + 1) / (6 sqrt(k))`` for the batch means'
skewness ``g``: a queue's excursions make batch means skewed, and the plain
t interval then misses on one side. Still correlated at ``k = 10``: the run
has fewer than 10 independent batches, ``supported=False``. Schmeiser (1982)
recommends 10 to 30 batches: more buy little width and cost validity; 40 is
only the first try, left at the first sign of correlation.

**Quantiles.** ``X_(l) <= x_q <= X_(u)`` is the event ``l <= N(x_q) <= u-1``,
``N(t)`` the count of values ``<= t``, a mean of the indicator. The indicator
at the point estimate is batched as above and the count's interval around
``n q`` is inverted into ranks. With independent data this is the classical
order-statistic interval; the exact binomial one (:func:`binomial_ranks`) is
the floor, so the interval is never narrower than the iid interval.

**"n too small"** (a quantile). Unsupported when (a) fewer than
:data:`MIN_TAIL` = 10 values lie beyond it on the thin side, ``n min(q, 1-q)
< 10`` (a p99 needs 1,000 values, a p99.9 10,000): the binomial count's
normal approximation, and any tail claim, wants ten of them; (b) fewer than
10 *effective* values lie beyond it: ``n min(q, 1-q) / f < 10``, ``f`` the
variance inflation measured by the batches (for a p99 at 95% load ``f`` is
about 1,000, so the p99 needs over a million requests); (c) the batches fail;
or (d) either end of the interval falls outside the sample. A mean needs 20
values and independent batches; a share and a rate always have their iid
floor (Wilson's interval; the Poisson score interval) and are unsupported
only when their batches fail.

**Limits.** The intervals are asymptotic: they hold when a run is long
against the system's memory. When it is not, the lag-1 test on 10-40
batches catches only part of such runs (about half of random walks), and a
mean or median can come out too narrow without a flag: M/M/4 at 95% load in
50,000-request runs (~25 independent-equivalent values) covered its mean in
about 87% of runs and its p50 in about 93%. The p99's effective-tail rule
makes it the most cautious: there it says "n too small".

Validation: ``benchmarks/ci_coverage.py`` (M/M/1 and M/M/4 against closed
forms, 200 runs per cell: coverage 94-97.5% at 0.5-0.95 load) and the
AR(1) coverage test in ``tests/metrics/test_uncertainty.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

import numpy as np

from tailwise.metrics import fifo as fifo_model
from tailwise.metrics import tail
from tailwise.metrics.fifo import FifoQueue
from tailwise.metrics.percentiles import nearest_rank
from tailwise.metrics.tail import Regeneration

CONFIDENCE = 0.95
START_BATCHES = 40  # first batch count tried; halved while batch means stay correlated
MIN_BATCHES = 10  # fewer batches: the variance estimate itself is too uncertain
MIN_TAIL = 10  # values needed beyond a quantile, as counted and as effective (iid-equivalent)
LAG1_Z = 1.645  # one-sided 5% test of the batch means' lag-1 autocorrelation
HEAVY_MIN_VALUES = 200  # fewer values: no far tail to read (and no tail SLO may pass: MIN_TAIL)
MIN_EFFECTIVE = 50  # independent-equivalent values a run's intervals need (n / inflation)
MIN_REGEN_BEYOND = 200  # values beyond a quantile for its interval from regeneration blocks
HEAVY_TOP = 10  # top values the tail's heaviness is read from, at least
HEAVY_RATIO = 2.0  # Hill estimate / an exponential tail's at that depth: heavy from here
HEAVY_SERVICE = 1.1  # the empty-system requests' service_heaviness from which no pass is certified
HEAVY_SERVICE_TOP = 10  # ... read at the top twentieth and over the top 10 values alike
HEAVY_SERVICE_FROM_Q = 0.9  # the quantiles (and the mean) a heavy service refuses; not the median
# A moderately heavy service (lognormal sigma 1, Pareto 2.5: 1.1-1.5) may still pass a
# quantile under HEAVY_SERVICE_GRADED_Q, read from HEAVY_SERVICE_GRADED_FROM bare requests
# on, with HEAVY_SERVICE_MARGIN between its upper bound and the threshold
HEAVY_SERVICE_STRONG = 1.5  # from here (lognormal sigma 1.5: 1.8, sigma 2: 2.5) no pass at all
HEAVY_SERVICE_GRADED_FROM = 1_000
HEAVY_SERVICE_GRADED_Q = 0.995  # a p99 may pass; a p99.9 rests on jobs rarer still
HEAVY_SERVICE_MARGIN = 1.1
NS_PER_S = 1e9

TAIL_NOTE = "decided by the tail model"  # how a pass by :mod:`tailwise.metrics.tail` begins
FIFO_NOTE = (
    "decided by the FIFO queue model"  # how a verdict of :mod:`tailwise.metrics.fifo` begins
)
HEAVY_NOTES = ("heavy tail", "heavy service")  # how a refusal (:func:`tail_refusal`) begins
GRADED_NOTE = "heavy service, passed with its margin"  # how a :func:`_graded_pass` note begins
Verdict = Literal["pass", "fail", "inconclusive"]


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its two-sided interval at ``confidence``.

    ``supported=False`` means the sample cannot carry the number ("n too
    small"): ``value`` is still the raw point estimate, ``lo``/``hi`` are what
    bound can be given (``-inf``/``inf`` where none), and ``reason`` says why.
    ``batches`` is the number of batches the interval rests on (0 = iid only).
    """

    value: float
    lo: float
    hi: float
    supported: bool
    reason: str = ""
    confidence: float = CONFIDENCE
    n: int = 0
    batches: int = 0

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2.0

    def interval(self) -> tuple[float, float] | None:
        """``(lo, hi)``, or None when unsupported (the form summary.json wants)."""
        return (self.lo, self.hi) if self.supported else None


# -- distribution quantiles (no SciPy) ---------------------------------------------------


def normal_quantile(p: float) -> float:
    return NormalDist().inv_cdf(p)


def t_cdf(t: float, df: int) -> float:
    """Student's t CDF for integer ``df`` (Abramowitz & Stegun 26.7.3-4, exact sums)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:
        term, total = math.cos(theta), 0.0
        for j in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * j) / (2 * j + 1)
        inside = 2.0 / math.pi * (theta + s * total)
    else:
        term, total = 1.0, 0.0
        for j in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * j - 1) / (2 * j)
        inside = s * total
    return 0.5 + math.copysign(inside / 2.0, t)


@lru_cache(maxsize=512)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("t needs df >= 1")
    z = normal_quantile(p)
    if df > 200:  # Cornish-Fisher: error below 1e-6 here, and the sums above grow with df
        g1 = (z**3 + z) / 4
        g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
        return z + g1 / df + g2 / df**2
    lo, hi = min(z, -z) * 100, max(z, -z) * 100
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def _two_sided(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return 1.0 - (1.0 - confidence) / 2.0


# -- batching ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batching:
    """Batch means of a series; ``independent`` if the lag-1 test passed at ``count``."""

    means: np.ndarray
    size: int
    lag1: float
    independent: bool

    @property
    def count(self) -> int:
        return len(self.means)

    def variance_of_mean(self) -> float:
        """Variance of the grand mean: ``S^2/k`` with the AR(1) allowance ``(1+r)/(1-r)``."""
        r = min(max(self.lag1, 0.0), 0.9)
        return float(self.means.var(ddof=1)) / self.count * (1 + r) / (1 - r)


def lag1(x: np.ndarray) -> float:
    """Lag-1 autocorrelation (0 for a constant series)."""
    d = x - x.mean()
    denom = float(d @ d)
    return float(d[:-1] @ d[1:]) / denom if denom > 0 else 0.0


def batch_means(series: np.ndarray, start: int = START_BATCHES) -> Batching:
    """The batching rule of the module docstring, on ``series`` in time order."""
    y = np.asarray(series, dtype=np.float64)
    k = start
    while True:
        b = len(y) // k
        means = y[len(y) - k * b :].reshape(k, b).mean(axis=1) if b else np.zeros(k)
        r = lag1(means)
        ok = b > 0 and r <= -1.0 / k + LAG1_Z / math.sqrt(k)
        if ok or k // 2 < MIN_BATCHES:
            return Batching(means, b, r, ok)
        k //= 2


# -- the iid floors ------------------------------------------------------------------------


def binomial_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """Ranks ``(l, u)`` (1-based) with ``P(X_(l) <= x_q <= X_(u)) >= confidence`` for iid data.

    Equal tails: ``l`` is the largest rank with ``P(B <= l-1) <= alpha/2`` and ``u``
    the smallest with ``P(B <= u-1) >= 1 - alpha/2``, ``B ~ Binomial(n, q)``. ``l = 0``
    or ``u = n + 1`` mean that end lies beyond the sample.
    """
    tail = 1.0 - _two_sided(confidence)
    ks, cdf = _binomial_cdf(n, q)
    below = ks[cdf <= tail]  # k = l - 1 candidates
    lower = int(below[-1]) + 1 if len(below) else int(ks[0])
    above = ks[cdf >= 1.0 - tail]  # k = u - 1 candidates
    upper = int(above[0]) + 1 if len(above) else n + 1
    return max(lower, 0), min(upper, n + 1)


def _binomial_cdf(n: int, q: float) -> tuple[np.ndarray, np.ndarray]:
    """``(k, P(B <= k))`` for ``B ~ Bin(n, q)`` over a window holding all but ~1e-30 of it."""
    sd = math.sqrt(n * q * (1 - q))
    k0 = max(0, int(n * q - 14 * sd - 20))
    k1 = min(n, int(n * q + 14 * sd + 20))
    ks = np.arange(k0, k1 + 1)
    log0 = (
        math.lgamma(n + 1) - math.lgamma(k0 + 1) - math.lgamma(n - k0 + 1)
        + k0 * math.log(q) + (n - k0) * math.log1p(-q)
    )  # fmt: skip
    steps = np.log((n - ks[:-1]) / (ks[:-1] + 1.0)) + math.log(q) - math.log1p(-q)
    logpmf = log0 + np.concatenate(([0.0], np.cumsum(steps)))
    return ks, np.minimum(np.cumsum(np.exp(logpmf)), 1.0)


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval of a proportion from ``n`` independent trials."""
    if n == 0:
        return 0.0, 1.0
    z = normal_quantile(_two_sided(confidence))
    p = successes / n
    scale = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / scale
    half = z / scale * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def poisson_interval(count: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Score interval of a Poisson mean from one count: ``(x - m)^2 = z^2 m`` solved for m."""
    z = normal_quantile(_two_sided(confidence))
    root = z * math.sqrt(count + z * z / 4)
    return max(0.0, count + z * z / 2 - root), count + z * z / 2 + root


# -- estimates -----------------------------------------------------------------------------


def in_time_order(values: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """``values`` as float64, sorted by ``order`` (e.g. ``done_ns``; stable) when given."""
    x = np.asarray(values, dtype=np.float64)
    if order is None:
        return x
    if len(order) != len(x):
        raise ValueError(f"order has {len(order)} entries for {len(x)} values")
    return x[np.argsort(np.asarray(order), kind="stable")]


def _unsupported(value: float, n: int, reason: str, confidence: float) -> Estimate:
    return Estimate(value, -math.inf, math.inf, False, reason, confidence, n)


def _batched_reach(batching: Batching, confidence: float) -> tuple[float, float]:
    """``(minus, plus)``: the batch-means interval of the grand mean is ``[m - minus, m + plus]``.

    Student's t with Johnson's (1978) skewness correction: with ``g`` the skewness of
    the batch means, the pivot's quantiles shift by ``d = g (2t^2 + 1) / (6 sqrt(k))``,
    so a right-skewed mean (g > 0) reaches further up than down. ``|d|`` is capped at
    ``t/2`` (the correction is a first-order expansion).
    """
    k = batching.count
    t = t_quantile(_two_sided(confidence), k - 1)
    se = math.sqrt(batching.variance_of_mean())
    shift = skewness(batching.means) * (2 * t * t + 1) / (6 * math.sqrt(k))
    shift = min(max(shift, -t / 2), t / 2)
    return (t - shift) * se, (t + shift) * se


def cycle_reach(
    series: np.ndarray, ranges: Sequence[tuple[int, int]], confidence: float = CONFIDENCE
) -> float:
    """Half-width of the interval of ``series``' mean from blocks of whole regeneration
    cycles (``ranges``, :func:`tailwise.metrics.tail.regeneration_blocks`): the blocks are
    independent, of unequal sizes, so the mean is a ratio of their sums to their sizes;
    its variance is the classical ratio estimator's (the residuals ``Y_j - m N_j``), and
    the interval Student's t with one degree of freedom fewer than blocks."""
    y = np.asarray(series, dtype=np.float64)
    sums = np.array([y[a:b].sum() for a, b in ranges])
    sizes = np.array([b - a for a, b in ranges], dtype=np.float64)
    k, total = len(ranges), float(sizes.sum())
    residual = sums - float(sums.sum()) / total * sizes
    se = math.sqrt(k / (k - 1) * float(residual @ residual)) / total
    return t_quantile(_two_sided(confidence), k - 1) * se


def cycle_quantile_bounds(
    good: np.ndarray,
    ordered: np.ndarray,
    q: float,
    ranges: Sequence[tuple[int, int]],
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """The ``q``-quantile's interval from the indicator ``good`` (value <= the sample
    quantile, in time order) over regeneration blocks, inverted into ranks as
    :func:`quantile_ci` does, never narrower than the iid interval; None when an end
    falls outside the sample."""
    n = len(ordered)
    reach = cycle_reach(good, ranges, confidence)
    l_iid, u_iid = binomial_ranks(n, q, confidence)
    lower = min(l_iid, math.floor(n * (q - reach)))
    upper = max(u_iid, math.ceil(n * (q + reach)) + 1)
    if lower < 1 or upper > n:
        return None
    return _rank_bounds(ordered, lower, upper)


def skewness(x: np.ndarray) -> float:
    """Sample skewness ``m3 / m2^1.5`` (0 for a constant series)."""
    d = x - x.mean()
    m2 = float(d @ d) / len(d)
    return float((d**3).mean()) / m2**1.5 if m2 > 0 else 0.0


def _not_independent(b: Batching) -> str:
    return (
        f"too few independent batches: {b.count} batches of {b.size} still correlated "
        f"(lag-1 {b.lag1:.2f})"
    )


def mean_ci(
    values: np.ndarray, confidence: float = CONFIDENCE, order: np.ndarray | None = None
) -> Estimate:
    """Mean of ``values`` with a batch-means t interval, never narrower than the iid one."""
    x = in_time_order(values, order)
    n = len(x)
    value = float(x.mean()) if n else math.nan
    if n < 2 * MIN_BATCHES:
        return _unsupported(value, n, f"{n} values: a mean needs {2 * MIN_BATCHES}", confidence)
    b = batch_means(x)
    if not b.independent:
        return _unsupported(value, n, _not_independent(b), confidence)
    iid = t_quantile(_two_sided(confidence), n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    minus, plus = _batched_reach(b, confidence)
    lo, hi = value - max(minus, iid), value + max(plus, iid)
    return Estimate(value, lo, hi, True, "", confidence, n, b.count)


def proportion_ci(
    good: np.ndarray, confidence: float = CONFIDENCE, order: np.ndarray | None = None
) -> Estimate:
    """Share of True in ``good``: batch means of the indicator, Wilson's interval as floor."""
    y = in_time_order(good, order) > 0
    n = len(y)
    if n == 0:
        return _unsupported(math.nan, 0, "no observations", confidence)
    k = int(y.sum())
    value = k / n
    lo, hi = wilson_interval(k, n, confidence)
    if n < 2 * MIN_BATCHES or k in (0, n):  # nothing to batch: the iid interval is all we have
        return Estimate(value, lo, hi, True, "", confidence, n, 0)
    b = batch_means(y)
    if not b.independent:
        return _unsupported(value, n, _not_independent(b), confidence)
    minus, plus = _batched_reach(b, confidence)
    lo, hi = min(lo, max(0.0, value - minus)), max(hi, min(1.0, value + plus))
    return Estimate(value, lo, hi, True, "", confidence, n, b.count)


def value_inflation(values: np.ndarray) -> tuple[float, Batching]:
    """How much the series' autocorrelation inflates the variance of its mean, ``f >= 1``,
    from batch means of the (finite) values, and the batching it rests on.

    A tail indicator (``x <= t``) inherits its memory from the latencies: in an M/M/1
    queue at 56-80% load the inflation of ``mean(x <= t)`` measured over 150 replications
    matched this estimate within its noise (11.2 vs 11.5, 23.3 vs 19.1, 56.5 vs 57.1),
    where ranks or logs understated it by 40-50%. It matters most when *no* value lies
    beyond ``t``: the indicator is then constant and says nothing of its own memory, and a
    run that held no excursion (common in a short, correlated run) would look certain.
    Infinite values (failures) count as the largest finite one."""
    x = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(x)
    if not finite.all():
        x = np.where(finite, x, x[finite].max() if finite.any() else 0.0)
    b = batch_means(x)
    var = float(x.var())
    if var <= 0 or not b.independent:
        return 1.0, b
    return max(1.0, len(x) * b.variance_of_mean() / var), b


def _wilson_effective(share: float, n_eff: float, confidence: float) -> tuple[float, float]:
    """Wilson's score interval for a share observed over ``n_eff`` effective trials."""
    z = normal_quantile(_two_sided(confidence))
    scale = 1.0 + z * z / n_eff
    centre = (share + z * z / (2 * n_eff)) / scale
    half = z / scale * math.sqrt(share * (1 - share) / n_eff + z * z / (4 * n_eff * n_eff))
    return max(0.0, centre - half), min(1.0, centre + half)


def threshold_share_ci(
    values: np.ndarray,
    threshold: float,
    confidence: float = CONFIDENCE,
    order: np.ndarray | None = None,
) -> Estimate:
    """``F(t)``: the share of time-ordered ``values`` at or below ``threshold``.

    The test behind a percentile or attainment verdict (``p_q <= t`` exactly when
    ``F(t) >= q``). Wilson's interval over ``n / f`` effective trials, ``f`` the larger
    of the indicator's own inflation (batch means, when it varies) and the values'
    (:func:`value_inflation`), widened to the indicator's batch-means interval. Unsupported
    with fewer than 20 values or when either batching stays correlated at 10 batches.

    Validation (M/M/1, mean service 20 ms, ``p99 <= 300 ms``, knee 34.65/s, 30 runs per
    cell, 1,000-16,000 requests): no run decided pass at 36/s or above, none decided fail
    at 33/s or below; the plain indicator with Wilson's iid interval passed 4 runs in 20
    at 40/s (true p99 461 ms) from 1,000 requests that happened to hold no excursion.
    """
    x = in_time_order(values, order)
    n = len(x)
    good = x <= threshold
    k = int(good.sum())
    value = k / n if n else math.nan
    if n < 2 * MIN_BATCHES:
        if n == 0:
            return _unsupported(value, n, "no values", confidence)
        # Too few values to measure their memory: Wilson's iid bound may show a failure
        # (k of n far below the share needed), never a pass (the lower end is 0).
        hi = wilson_interval(k, n, confidence)[1]
        why = f"{n} values: only a failure can be shown"
        return Estimate(value, 0.0, hi, True, why, confidence, n)
    inflation, b = value_inflation(x)
    if not b.independent:
        return _drifting(good, value, n, _not_independent(b), confidence)
    reach = (0.0, 0.0)
    if 0 < k < n:
        bi = batch_means(good)
        if not bi.independent:
            return _drifting(good, value, n, _not_independent(bi), confidence)
        inflation = max(inflation, n * bi.variance_of_mean() / (value * (1.0 - value)))
        reach = _batched_reach(bi, confidence)
    lo, hi = _wilson_effective(value, n / inflation, confidence)
    lo, hi = min(lo, max(0.0, value - reach[0])), max(hi, min(1.0, value + reach[1]))
    return Estimate(value, lo, hi, True, "", confidence, n, b.count)


def _drifting(good: np.ndarray, value: float, n: int, why: str, confidence: float) -> Estimate:
    """The share's bound when its series stays correlated at 10 batches (an overloaded
    queue whose latency keeps growing, a run shorter than the system's memory).

    No interval holds then, but a failure can still be shown: if even the best tenth of
    the run (and Wilson's iid bound on the whole) stays under the share needed, no
    amount of memory makes the run a pass. The lower end is 0: a pass is never shown."""
    tenths = good[len(good) % MIN_BATCHES :].reshape(MIN_BATCHES, -1).mean(axis=1)
    hi = max(float(tenths.max()), wilson_interval(int(good.sum()), n, confidence)[1])
    return Estimate(value, 0.0, hi, True, f"{why}: only a failure can be shown", confidence, n)


def decision_level(confidence: float) -> float:
    """The two-sided level a verdict at ``confidence`` decides on: ``confidence`` itself.

    A verdict tests one side (a pass is wrong only when the truth fails, and then only
    the interval's lower end of the share within the threshold could have misled it),
    so on valid intervals a one-sided bound at ``confidence`` would do, and decide with
    about 30% fewer requests. The intervals are not that exact: batch means understate
    a queue's memory when a run is not long against it, and the validation grid's
    one-sided decisions at 95% were wrong in 7-9% of runs at 0.95x the truth (M/M/4 at
    80% load, 5,000 requests; an M/G/1 with Pareto service), over the 5% they claim.
    Deciding on the two-sided interval (each end a 97.5% bound) keeps that margin: a
    variance understated by up to 40% still leaves a verdict wrong at most 5% of the
    time. One function, so that the level is chosen in one place."""
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")
    return confidence


def tail_heaviness(values: np.ndarray) -> float:
    """How much heavier than exponential the sample's far tail is: the Hill estimate of
    the tail index ``xi`` over the top ``k = max(10, n / 1000)`` values, times ``ln(n /
    k)``, what an exponential tail's Hill estimate is at that depth divided into it.

    About 1 (``Gamma(k, k)``) for an exponential or lighter tail (every M/M/c, bursty
    Poisson-like arrivals, an LLM engine's TTFT); 2 and more when the top values are a
    power law (a service that now and then takes 100 times its median). 0 with fewer
    than 1,000 values (no tail to read) or no positive spread at the top.

    Why it matters: with such a service on several servers the steady state's tail is
    made by jobs rarer than a run of thousands holds (a 4-server queue at 80% load,
    lognormal service sigma 2: a p99 of ~167 ms in 5,000 requests, ~1.8 s in 10^9),
    and no interval from the sample covers it; the rare giant jobs the sample did see
    show as a top that falls off as a power law."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = len(x)
    if n < HEAVY_MIN_VALUES:
        return 0.0
    k = max(HEAVY_TOP, n // 1000)
    top = np.partition(x, n - k - 1)[n - k - 1 :]
    floor = float(top.min())
    if floor <= 0.0:
        return 0.0
    xi = float(np.mean(np.log(np.sort(top)[1:] / floor)))
    return xi * math.log(n / k)


def heavy_tailed(values: np.ndarray) -> bool:
    """:func:`tail_heaviness` at or above :data:`HEAVY_RATIO`."""
    return tail_heaviness(values) >= HEAVY_RATIO


def heavy_note(values: np.ndarray) -> str:
    return (
        f"heavy tail: the top values fall off {tail_heaviness(values):.2g}x slower than an "
        "exponential tail's, so the steady state's tail rests on jobs rarer than this "
        "sample holds: no interval is given and no pass is certified"
    )


def heavy_service(regen: Regeneration | None) -> bool:
    """Whether the requests that found the system empty (its bare service) fall off
    heavier than exponential: :func:`tailwise.metrics.tail.service_heaviness` at or
    above :data:`HEAVY_SERVICE` (False when too few are there to read).

    Why beside :func:`heavy_tailed`: on one server a heavy service hides from the
    latencies' own top. A giant job makes one excursion (its backlog draining), whose
    latencies fall off about linearly, and a run that held few such excursions shows a
    light top while its steady-state p99 rests on them. In the validation grid
    (docs/benchmarks.md) an M/G/1 at 70% load with lognormal service (sigma 1.5),
    50,000 requests, passed ``p99 <= 0.95x`` its truth in 9.5% of runs with the
    latency guard never firing (its heaviness 0.13-0.79); the empty-system requests
    read 1.78-1.99 there (2.4-2.7 at sigma 2, 1.1-1.3 for a Pareto service of index
    2.5), and 0.46-0.96 in every light cell (exponential service about 0.8).

    Read at two depths, both of which must say heavy: the top twentieth and the top
    :data:`HEAVY_SERVICE_TOP` values. A bounded slow mode (one request in 60 takes 80 ms
    where the rest take 5 ms: a cache miss) fills the top values with one level and reads
    light over them, where its twentieth, reaching down into the fast mode, reads heavy;
    a lognormal or power-law service reads heavy at both. In the grid the second depth
    leaves 0.5-5% of the heavy cells' runs unflagged (no false pass among them at 50,000
    requests; at 5,000 the 4-server lognormal cell's worst false pass went 8.5% -> 4%)."""
    if regen is None:
        return False
    h = _service_heaviness(regen)
    return math.isfinite(h) and h >= HEAVY_SERVICE


def _graded_pass(
    quantile: Estimate, threshold: float, q: float, regen: Regeneration | None
) -> bool:
    """Whether a pass stands for a run whose bare service is heavy (:func:`heavy_service`):
    only for a moderately heavy service, read from enough bare requests, a quantile
    under :data:`HEAVY_SERVICE_GRADED_Q`, and an upper bound :data:`HEAVY_SERVICE_MARGIN`
    under the threshold.

    Why graded: a lognormal service of sigma 1 (a common shape) reads heavy (about
    1.25), yet a long run's p99 is within reach (M/G/1 at 70% load, 50,000 requests: 1
    false pass at 0.95x in 100 runs with no bare-service guard at all), and refusing it
    outright left 3% of those runs passing 1.5x their true p99. Validation grid
    (docs/benchmarks.md): with the rule that cell passes 1.5x its p99 in 60% of runs at
    50,000 requests and 93.5% at 500,000, the Pareto (2.5) single server in 33.5% and
    31% (2% and 0% when refused), and no heavy cell's false passes over 3.5%. Each limit
    is where that grid broke: a stronger service (lognormal sigma 1.5, which reads 1.8)
    passed 0.95x its p99 in 9.5% of runs with the margin alone; a 4-server queue with
    ~150 bare requests reads its service too noisily (8.5%); a p99.9 under a Pareto
    service passed 0.95x in 8.5% of 500,000-request runs. The margin: the quantile of a
    sample short of the rare long jobs sits low, and 1.1 took the Pareto cell's false
    passes at 0.95x from 5% to 0 at 50,000 requests (100 runs)."""
    if regen is None or q >= HEAVY_SERVICE_GRADED_Q:
        return False
    if len(regen.service) < HEAVY_SERVICE_GRADED_FROM:
        return False
    if _service_heaviness(regen) >= HEAVY_SERVICE_STRONG:
        return False
    return quantile.hi * HEAVY_SERVICE_MARGIN <= threshold


def _service_heaviness(regen: Regeneration) -> float:
    return min(
        tail.service_heaviness(regen.service),
        tail.service_heaviness(regen.service, HEAVY_SERVICE_TOP),
    )


@dataclass(frozen=True)
class TailRefusal:
    """Why a tail may not be certified, read once per sample: ``values`` (a heavy tail
    in the values themselves) refuses every quantile and the mean; ``service`` (a heavy
    bare service) refuses those from :data:`HEAVY_SERVICE_FROM_Q` up and the mean."""

    values: str = ""
    service: str = ""

    def reason(self, q: float | None = None) -> str:
        """The refusal for quantile ``q`` (the mean when None); "" when it may pass.
        The median rests on no rare job: on a busy machine the bare service's top is
        the scheduler's hiccups (a 2 ms loopback service beside four CPU-bound
        processes read heavy), and a p50 far under its threshold stays decided."""
        if self.values:
            return self.values
        return self.service if q is None or q >= HEAVY_SERVICE_FROM_Q else ""


def heavy_label(note: str) -> str:
    """``heavy tail`` or ``heavy service`` when ``note`` is such a refusal, else ""."""
    return next((h for h in HEAVY_NOTES if note.startswith(h)), "")


def tail_refusal(values: np.ndarray, regen: Regeneration | None = None) -> TailRefusal:
    """The :class:`TailRefusal` of ``values`` and their bare service ``regen``."""
    if heavy_tailed(values):
        return TailRefusal(values=heavy_note(values))
    if heavy_service(regen):
        assert regen is not None
        return TailRefusal(
            service=(
                f"heavy service: the requests that found the system empty fall off "
                f"{_service_heaviness(regen):.2g}x slower than an exponential "
                "service, so the steady state's tail rests on rare long jobs this sample "
                "may not hold: no interval is given and no pass is certified (but for a "
                f"p99 of a service under {HEAVY_SERVICE_STRONG:g}x, from "
                f"{HEAVY_SERVICE_GRADED_FROM:,} such requests, whose upper bound sits "
                f"{HEAVY_SERVICE_MARGIN:g}x under its threshold)"
            )
        )
    return TailRefusal()


def refuse_tail(
    values: np.ndarray, regen: Regeneration | None = None, q: float | None = None
) -> str:
    """Why no interval is given and no pass certified for ``values`` ("" when they may
    be): :meth:`TailRefusal.reason` of :func:`tail_refusal`."""
    return tail_refusal(values, regen).reason(q)


def decide_within(
    values: np.ndarray,
    threshold: float,
    q: float,
    confidence: float = CONFIDENCE,
    regen: Regeneration | None = None,
    fifo: FifoQueue | None = None,
) -> tuple[Estimate, Estimate, Verdict]:
    """Is ``p_q <= threshold``? ``(share, quantile, verdict)`` for time-ordered values.

    ``confidence`` is the two-sided level of the two intervals; each end is a
    one-sided bound at ``(1 + confidence) / 2`` (see :func:`decision_level`).

    Two tests of one hypothesis (``p_q <= t`` exactly when ``F(t) >= q``): the share
    within the threshold (:func:`threshold_share_ci`, which allows for the latencies'
    memory even when no value lies beyond ``t``) and the quantile's own interval
    (:func:`quantile_ci`, whose batches see the memory of the tail at ``p_q``). Each is
    conservative where the other is not: a queue that held no excursion in a short run
    looks certain to the quantile's tail but not to the share; a fast service whose
    millisecond jitter comes in bursts looks uncertain to the share's value-memory
    floor but not to a p99 whose interval sits far under a 500 ms threshold. The
    verdict is what either decides (they never decide opposite ways in the validation:
    M/M/1 at 30-40/s against ``p99 <= 300 ms``, 40 runs of 1,000-16,000 requests per
    cell: no pass at 36/s or above, no fail at 33/s or below). A heavy tail
    in the values themselves is never passed, nor one in the bare service but as
    :func:`_graded_pass` allows, nor a quantile from a sample with fewer than
    :data:`MIN_TAIL` values expected beyond it (a p99 needs 1,000 requests, as its own
    interval does): 300 calm requests with no miss pass a p99 by the rule of three if
    they are independent and their tail is light, which is what such a sample cannot
    show (4-server queues with lognormal service passed 20-35% of false p99 SLOs at a
    --duration auto look of a few hundred requests).

    A third test may only pass: the tail model of :mod:`tailwise.metrics.tail`, for a
    far threshold (``q >= 0.98``) in a run that ``regen`` (the requests that found the
    system empty) shows to be made of short independent stretches with a light-tailed
    service. Its reason replaces the share's. A fourth is the FIFO queue model of
    :mod:`tailwise.metrics.fifo`, when ``fifo`` (the run read as one server answering
    in order, or several first come first served; ``values`` its latencies, in ns)
    shows that structure: where the sends are a Poisson schedule one server passes
    and fails by Pollaczek-Khinchine's law (its ceiling and its floor on the share
    beyond the threshold) and several pass by Wolff's cyclic bound; elsewhere one
    server passes by Kingman's bound."""
    share = threshold_share_ci(values, threshold, confidence)
    quantile = quantile_ci(values, q, confidence)
    votes = {judge(share, q, ">="), judge(quantile, threshold, "<=")}
    if votes == {"pass", "fail"}:
        return share, quantile, "inconclusive"
    verdict: Verdict = "pass" if "pass" in votes else "fail" if "fail" in votes else "inconclusive"
    refusal = tail_refusal(values, regen)
    if len(values) * min(q, 1 - q) < MIN_TAIL or refusal.values:
        return share, quantile, "inconclusive" if verdict == "pass" else verdict
    if refusal.reason(q) and verdict == "pass":
        if regen is None or not _graded_pass(quantile, threshold, q, regen):
            return share, quantile, "inconclusive"
        note = (
            f"{GRADED_NOTE}: the requests that found the system empty fall off "
            f"{_service_heaviness(regen):.2g}x slower than an exponential service "
            f"(under {HEAVY_SERVICE_STRONG:g}), and the quantile's upper bound sits "
            f"{HEAVY_SERVICE_MARGIN:g}x under the threshold, room for a sample short of "
            "the rarest long jobs"
        )
        return replace(share, reason=note), quantile, "pass"
    if verdict == "inconclusive":
        bound = _tail_bound(values, threshold, q, confidence, regen)
        if bound is not None and bound <= 1.0 - q:
            note = (
                f"{TAIL_NOTE}: at most {bound:.3%} beyond the threshold "
                f"(peaks over the top values, {tail.BLOCKS}-block jackknife)"
            )
            return replace(share, reason=note), quantile, "pass"
        ceiling = _fifo_bound(fifo, threshold, confidence, 1.0 - q)
        if ceiling is not None and ceiling[0] <= 1.0 - q and fifo is not None:
            servers = (
                f"{fifo.servers} servers taking requests in turn"
                if fifo.servers > 1
                else "one server answering in order"
            )
            note = (
                f"{FIFO_NOTE}: at most {ceiling[0]:.3%} beyond the threshold ({ceiling[1]} "
                f"from {len(fifo.service_s):,} service times of {servers})"
            )
            return replace(share, reason=note), quantile, "pass"
        floor = _fifo_floor(fifo, threshold, confidence)
        if floor is not None and floor > 1.0 - q:
            note = (
                f"{FIFO_NOTE}: at least {floor:.3%} beyond the threshold "
                f"(Pollaczek-Khinchine's law from {len(fifo.service_s) if fifo else 0:,} "
                "service times of one server answering in order, fed by Poisson sends)"
            )
            return replace(share, reason=note), quantile, "fail"
    return share, quantile, verdict


def _fifo_floor(fifo: FifoQueue | None, threshold_ns: float, confidence: float) -> float | None:
    """The FIFO model's lower bound on the share beyond ``threshold_ns``, one-sided at
    ``(1 + confidence) / 2`` (one test: a failure wrongly shown is the only error it
    can make); None where it does not apply."""
    if fifo is None:
        return None
    return fifo_model.miss_floor(
        fifo, threshold_ns / NS_PER_S, normal_quantile(_two_sided(confidence))
    )


def _fifo_bound(
    fifo: FifoQueue | None, threshold_ns: float, confidence: float, allowed: float
) -> tuple[float, str] | None:
    """The FIFO model's upper bound on the share beyond ``threshold_ns``, one-sided at
    ``(1 + confidence) / 2``, and the law it comes from (computed only as far as shows
    it over ``allowed``, the share the SLO allows); None where it does not apply.
    Several servers: Wolff's cyclic bound (one test). One server fed by a Poisson
    schedule: Pollaczek-Khinchine's ceiling (tight at moderate load: M/M/1 at 0.8x its
    knee passes ``p99 <= 300 ms`` from 4,000 requests in 99% of runs, Kingman's in
    51%) or Kingman's bound (tighter near saturation, where the ceiling's error grows
    like the load's 1 / (1 - load)^2), each at half the error, so either may pass.
    Other schedules: Kingman's bound, over all its tests."""
    if fifo is None or fifo.why_not:
        return None
    threshold_s = threshold_ns / NS_PER_S
    error = 1.0 - _two_sided(confidence)  # one-sided
    poisson = not fifo_model.poisson_sends(fifo.gaps_s)
    if fifo.servers > 1:
        z = normal_quantile(1.0 - error)
        bound = fifo_model.miss_ceiling(fifo, threshold_s, z, allowed)
        return None if bound is None else (bound, "Wolff's cyclic bound")
    if poisson:
        error /= 2.0
        bound = fifo_model.miss_ceiling(fifo, threshold_s, normal_quantile(1.0 - error), allowed)
        if bound is not None and bound <= allowed:
            return bound, "Pollaczek-Khinchine's law"
    z = normal_quantile(1.0 - error / fifo_model.TESTS)
    kingman = fifo_model.miss_bound(fifo, threshold_s, z)
    return None if kingman is None else (kingman, "Kingman's bound")


def _tail_bound(
    values: np.ndarray, threshold: float, q: float, confidence: float, regen: Regeneration | None
) -> float | None:
    """The tail model's upper bound on the share beyond ``threshold``, one-sided at
    ``(1 + confidence) / 2``; None where its gates refuse the run."""
    if q < tail.MIN_Q or regen is None:
        return None
    if tail.gates(regen, tail.service_heaviness(regen.service)):
        return None
    t_level = t_quantile(_two_sided(confidence), tail.BLOCKS - 1)
    return tail.miss_bound(values, threshold, q, t_level, regen.idle)


def rate_ci(
    times_ns: np.ndarray, start_ns: int, end_ns: int, confidence: float = CONFIDENCE
) -> Estimate:
    """Events per second in ``[start_ns, end_ns)``: counts in equal sub-windows, batched in
    time like a mean; the Poisson score interval of the total count is the floor."""
    span_s = (end_ns - start_ns) / NS_PER_S
    if span_s <= 0:
        return _unsupported(math.nan, 0, "empty window", confidence)
    t = np.asarray(times_ns, dtype=np.int64)
    t = t[(t >= start_ns) & (t < end_ns)]
    count = len(t)
    value = count / span_s
    plo, phi = poisson_interval(count, confidence)
    lo, hi = plo / span_s, phi / span_s
    slots = START_BATCHES * 25  # fine sub-windows, merged into batches by the rule
    per_slot = np.bincount((t - start_ns) * slots // (end_ns - start_ns), minlength=slots)
    b = batch_means(per_slot.astype(np.float64))
    if count == 0 or b.means.var() == 0:
        return Estimate(value, lo, hi, True, "", confidence, count, 0)
    if not b.independent:
        return _unsupported(value, count, _not_independent(b), confidence)
    minus, plus = (r * slots / span_s for r in _batched_reach(b, confidence))
    lo, hi = min(lo, max(0.0, value - minus)), max(hi, value + plus)
    return Estimate(value, lo, hi, True, "", confidence, count, b.count)


def quantile_ci(
    values: np.ndarray, q: float, confidence: float = CONFIDENCE, order: np.ndarray | None = None
) -> Estimate:
    """The ``q``-quantile (0 < q < 1, nearest rank) of ``values`` and its interval."""
    return quantile_cis(values, (q,), confidence, order)[0]


def quantile_cis(
    values: np.ndarray,
    qs: Sequence[float],
    confidence: float = CONFIDENCE,
    order: np.ndarray | None = None,
) -> list[Estimate]:
    """:func:`quantile_ci` for each of ``qs``, sorting the sample once."""
    x = in_time_order(values, order)
    ordered = np.sort(x)
    return [_quantile(x, ordered, q, confidence) for q in qs]


def _quantile(x: np.ndarray, ordered: np.ndarray, q: float, confidence: float) -> Estimate:
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    n = len(x)
    value = nearest_rank(ordered, 100.0 * q)
    l_iid, u_iid = binomial_ranks(n, q, confidence) if n else (0, 1)
    iid = _rank_bounds(ordered, l_iid, u_iid)
    thin = min(q, 1.0 - q)
    if n * thin < MIN_TAIL:
        reason = f"n too small: {n * thin:.3g} values beyond the quantile, {MIN_TAIL} needed"
        return Estimate(value, *iid, False, reason, confidence, n)
    b = batch_means(x <= value)
    if not b.independent:
        return Estimate(value, *iid, False, _not_independent(b), confidence, n, b.count)
    inflation = max(1.0, n * b.variance_of_mean() / (q * (1.0 - q)))
    if n * thin / inflation < MIN_TAIL:
        reason = (
            f"n too small: {n * thin / inflation:.3g} effective values beyond the quantile "
            f"(autocorrelation inflates its variance {inflation:.3g}x), {MIN_TAIL} needed"
        )
        return Estimate(value, *iid, False, reason, confidence, n, b.count)
    minus, plus = _batched_reach(b, confidence)
    # The count of values <= x_q must fall in [n (q - plus), n (q + minus)]: the mean's
    # interval mirrored, since here the mean (q) is known and the count is random.
    lower = min(l_iid, math.floor(n * (q - plus)))
    upper = max(u_iid, math.ceil(n * (q + minus)) + 1)
    lo, hi = _rank_bounds(ordered, lower, upper)
    if lower < 1 or upper > n:
        reason = "n too small: the interval reaches beyond the sample"
        return Estimate(value, lo, hi, False, reason, confidence, n, b.count)
    return Estimate(value, lo, hi, True, "", confidence, n, b.count)


def iid_quantile_ci(values: np.ndarray, q: float, confidence: float = CONFIDENCE) -> Estimate:
    """The exact distribution-free interval for independent data (order statistics at
    :func:`binomial_ranks`); unsupported when an end lies beyond the sample. Only the
    floor for time-ordered latencies: their correlation makes it far too narrow."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)
    value = nearest_rank(ordered, 100.0 * q)
    lower, upper = binomial_ranks(n, q, confidence) if n else (0, 1)
    lo, hi = _rank_bounds(ordered, lower, upper)
    ok = lower >= 1 and upper <= n
    reason = "" if ok else "n too small: the interval reaches beyond the sample"
    return Estimate(value, lo, hi, ok, reason, confidence, n)


def _rank_bounds(ordered: np.ndarray, lower: int, upper: int) -> tuple[float, float]:
    """Order statistics at 1-based ranks ``lower``, ``upper``; ``-inf``/``inf`` off the sample."""
    n = len(ordered)
    lo = float(ordered[lower - 1]) if 1 <= lower <= n else -math.inf
    hi = float(ordered[upper - 1]) if 1 <= upper <= n else math.inf
    return lo, hi


# -- verdicts ------------------------------------------------------------------------------


def judge(estimate: Estimate, threshold: float, op: str = "<=") -> Verdict:
    """Three-valued verdict on "``true value op threshold``" (op: ``<=``, ``<``, ``>=``, ``>``).

    pass when the whole interval satisfies it, fail when none of it does,
    inconclusive when the interval straddles the threshold or the estimate is
    unsupported ("n too small").
    """
    if op not in ("<=", "<", ">=", ">"):
        raise ValueError(f"op must be one of <=, <, >=, >; got {op!r}")
    if not estimate.supported:
        return "inconclusive"
    upper = op in ("<=", "<")
    lo_ok = _holds(estimate.lo, threshold, op)
    hi_ok = _holds(estimate.hi, threshold, op)
    best, worst = (lo_ok, hi_ok) if upper else (hi_ok, lo_ok)
    if worst:
        return "pass"
    return "fail" if not best else "inconclusive"


def _holds(x: float, threshold: float, op: str) -> bool:
    return {"<=": x <= threshold, "<": x < threshold, ">=": x >= threshold, ">": x > threshold}[op]
