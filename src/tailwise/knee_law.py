"""The load law a knee search places its trials with: an SLO's level against the rate.

Each trial measures, per SLO, the metric's value at the share the SLO needs (its
p99 for a p99 objective or a 99% deadline: ``within.level_ms``). Near saturation a
queue's tail grows like ``1 / (C - rate)`` (Kingman's heavy-traffic law; exact for
M/M/1, whose p99 is ``ln(100) / (mu - lambda)``), on top of the latency it has
unloaded. So the search fits

    level(rate) = a + b / (C - rate),   a >= 0, b > 0, C above every rate fitted

to the trials' levels by weighted least squares on relative errors (a trial's weight
is the count of values beyond its level, ``n (1 - q)``, capped: a p99 from 300
requests rests on 3 of them), and reads where it crosses the threshold. The knee
search uses it to extrapolate, before its trials bracket the crossing (inside a
bracket it reads a log-linear line instead: :func:`tailwise.knee.level_knee`, where
the law read a batching engine's TTFT knee 14% high). Trials far past saturation (a
level over :data:`MAX_RATIO` times the threshold: a queue still filling, whose level
measures the window, not the rate) are left out. With two usable rates ``a`` is 0
(two points fix ``b`` and ``C``).

Pure functions of numbers: no I/O, no knowledge of which engine ran the trials.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_RATIO = 5.0  # a level beyond this many thresholds is a filling queue's: not fitted
MAX_WEIGHT = 50.0  # tail values a point's weight counts at most (a p99 from 5,000 requests)
C_GRID = 400  # capacities tried between the highest rate and C_REACH times it
C_REACH = 20.0


@dataclass(frozen=True)
class Point:
    rate_rps: float
    level_ms: float
    weight: float  # values beyond the level (n (1 - q)), capped


@dataclass(frozen=True)
class LoadLaw:
    """``level(rate) = a + b / (C - rate)`` in ms, rates in requests/s."""

    a_ms: float
    b: float
    capacity_rps: float
    points: int

    def level_ms(self, rate_rps: float) -> float:
        if rate_rps >= self.capacity_rps:
            return math.inf
        return self.a_ms + self.b / (self.capacity_rps - rate_rps)

    def rate_at(self, level_ms: float) -> float | None:
        """The rate whose level is ``level_ms`` (None when even an idle server is above it)."""
        if level_ms <= self.a_ms:
            return None
        return self.capacity_rps - self.b / (level_ms - self.a_ms)


def fit(points: Sequence[Point], threshold_ms: float) -> LoadLaw | None:
    """The law fitted to ``points`` (None with fewer than two usable rates, or when no
    law with a capacity above them rises through them)."""
    usable = [
        p
        for p in points
        if math.isfinite(p.level_ms) and 0 < p.level_ms <= MAX_RATIO * threshold_ms
    ]
    rates = np.array([p.rate_rps for p in usable], dtype=np.float64)
    if len(set(rates.tolist())) < 2:
        return None
    levels = np.array([p.level_ms for p in usable], dtype=np.float64)
    weights = np.array([min(max(p.weight, 1.0), MAX_WEIGHT) for p in usable])
    if levels[rates.argmax()] <= levels[rates.argmin()]:
        return None  # no rise with the rate: nothing tells where it saturates
    free_a = len(set(rates.tolist())) >= 3
    top = float(rates.max())
    best: tuple[float, LoadLaw] | None = None
    for capacity in top * np.exp(np.linspace(math.log1p(1e-3), math.log(C_REACH), C_GRID)):
        law = _fit_at(rates, levels, weights, float(capacity), free_a)
        if law is None:
            continue
        pred = np.array([law.level_ms(r) for r in rates])
        sse = float(np.sum(weights * ((levels - pred) / levels) ** 2))
        if best is None or sse < best[0]:
            best = (sse, law)
    if best is None or best[1].capacity_rps >= 0.99 * C_REACH * top:
        return None  # the best capacity is the grid's edge: the points barely rise
    return best[1]


def _fit_at(
    rates: np.ndarray, levels: np.ndarray, weights: np.ndarray, capacity: float, free_a: bool
) -> LoadLaw | None:
    """Weighted least squares of ``a + b x`` (``x = 1 / (C - rate)``) on relative errors,
    for one capacity; ``a`` held at 0 when not free or when it comes out negative."""
    x = 1.0 / (capacity - rates)
    w = weights / levels**2  # relative errors: each residual divided by its level
    if free_a:
        design = np.stack([np.ones_like(x), x], axis=1)
        lhs = design.T @ (design * w[:, None])
        rhs = design.T @ (w * levels)
        if abs(float(np.linalg.det(lhs))) > 1e-300:
            a, b = (float(v) for v in np.linalg.solve(lhs, rhs))
            if a >= 0 and b > 0:
                return LoadLaw(a, b, capacity, len(rates))
    b = float(np.sum(w * x * levels) / np.sum(w * x * x))
    return LoadLaw(0.0, b, capacity, len(rates)) if b > 0 else None
