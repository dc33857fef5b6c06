"""A tail model that passes far thresholds early, where the run shows it may.

Counting misses decides a pass slowly when the threshold lies far beyond the
quantile: a p99 SLO twice the true p99 of an M/M/1 queue at 42% load has about
one miss in 10,000 requests, and the share within the threshold, which allows
for the misses' clustering (a miss comes with about five more there), needs
about 2,300 requests to show it holds 99%. The values *below* the threshold know
much more: the top tenth of the sample falls off like the tail does.

**The model** (peaks over threshold; Pickands 1975, Balkema & de Haan 1974): the
excesses over a high level ``u`` (the ``k``-th largest value,
``k = clamp(10 n (1 - q), 100, 2000)``, at most a fifth of the sample) follow a
generalized Pareto law; its shape ``xi`` and scale come from probability-weighted
moments (Hosking & Wallis 1987: closed form, valid for ``xi < 0.5``), the shape
held at ``xi >= 0`` (no lighter than exponential: a latency tail that looks bounded
in a short run is not taken to be). The miss share is then ``k/n`` times the
excesses' survival at ``T - u``, plus any value already infinite (a failure, a
request still pending). Its upper bound: a delete-one-block jackknife of
``log(share)`` over :data:`BLOCKS` consecutive blocks of the run, Student's t with
``BLOCKS - 1`` degrees of freedom at the verdict's one-sided level.

**When it may decide** (each rule from the validation below): only a pass (a
failure is shown by the misses themselves), only for ``q >= 0.98`` (a lower level
has its own plentiful misses), and only where the run is made of many short,
independent stretches, which the jackknife's blocks assume:

* at least :data:`IDLE_GATE` of the requests found nothing in flight when sent (a
  single server under 60% load). Each such instant starts the system afresh
  (a regeneration point), so blocks of such a run are nearly independent; at 70%
  load and above, or with several servers, a run remembers longer than its blocks
  and the jackknife is too narrow (M/M/1 at 80% load, 5,000 requests: 8.5% false
  passes at 0.95x the true p99);
* the requests that found the system empty, whose latency is the service alone,
  do not have a power-law top (:func:`~tailwise.metrics.uncertainty.tail_heaviness`
  under :data:`SERVICE_HEAVY`): a single server at 70% load smooths a lognormal
  (sigma 1.5-2) or Pareto (2.5) service into a queue whose top looks exponential,
  and the tail model then passed 10-30% of false SLOs; the empty-system requests
  show the service's tail bare.

Validation (``benchmarks/quick_decisions.py``: M/M/1 at 42%, 54% and 60% load, 400
seeded runs each, truth in closed form; the grid's cells for the gates): with
``--duration auto``'s looks, ``p99 <= 2x truth`` at 42% load is passed by 1,500
requests in 57% of runs (3% by counting alone), at 1.5x in 35% (3%); false
decisions at 0.95x the truth 0-1.2% (counting alone 0-0.8%). The gates refused
every run of M/M/1 at 70-95%, M/M/4, the LLM engine and the bursty arrivals, and
all but 1 in 200 of the heavy single-server cells at 70% load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BLOCKS = 20  # consecutive blocks of the jackknife
IDLE_GATE = 0.4  # requests that found nothing in flight, at least this share
SERVICE_HEAVY = 1.5  # empty-system latencies' tail_heaviness must stay under this
MIN_Q = 0.98  # the model decides quantile levels from here up
SPAN = 10  # the level u sits SPAN times further from the top than the quantile
MIN_EXCESS, MAX_EXCESS = 100, 2000  # values above u the model rests on
MAX_EXCESS_SHARE = 0.2  # ... and at most this share of the sample
MIN_BLOCK_EXCESS = 10  # a jackknife sample with fewer finite excesses: no bound
# The jackknife's spread, widened: a run's estimate and its spread rise and fall
# together (a run that met fewer long busy periods reads both low), so the
# studentized bound at its nominal level passed 4-4.5% of runs at 0.95x the true
# p99 (M/M/1 at 42-60% load, 400 runs each); widened 1.5x, 1.25-2.25%.
WIDEN = 1.5


@dataclass(frozen=True)
class Regeneration:
    """What the run says about its own memory: the share of requests that found
    nothing in flight when sent, and the values of those requests (the service
    alone, in the judged metric)."""

    idle_share: float
    service: np.ndarray


def idle_on_arrival(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """For each request, whether nothing else was in flight at its start.

    ``end_ns`` negative (never answered) counts as still in flight. Requests with a
    negative start (never sent) are never idle and never in flight. O(n log n)."""
    start, end = np.asarray(start_ns), np.asarray(end_ns)
    never = np.iinfo(np.int64).max if np.issubdtype(end.dtype, np.integer) else math.inf
    sent = start >= 0
    end = np.where(end < 0, never, end)
    starts = np.sort(start[sent])
    ends = np.sort(end[sent])
    before = np.searchsorted(starts, start, side="left")  # started strictly earlier
    finished = np.searchsorted(ends, start, side="right")
    return sent & (before - finished <= 0)


def regeneration(idle: np.ndarray, values: np.ndarray) -> Regeneration:
    """:class:`Regeneration` from ``idle`` (:func:`idle_on_arrival`, aligned with
    ``values``)."""
    idle = np.asarray(idle, dtype=bool)
    share = float(idle.mean()) if len(idle) else 0.0
    return Regeneration(share, np.asarray(values, dtype=np.float64)[idle])


def _excess_survival(excess: np.ndarray, y: float) -> float:
    """``P(E > y)`` for the sorted excesses ``excess`` under a generalized Pareto law
    fitted by probability-weighted moments, the shape held at ``>= 0``."""
    m = len(excess)
    a0 = float(excess.mean())
    if a0 <= 0.0:
        return 0.0
    plot = (np.arange(1, m + 1) - 0.35) / m
    a1 = float(np.mean((1.0 - plot) * excess))
    spread = a0 - 2.0 * a1
    if spread <= 0.0:  # shape >= 1/2 or worse: no finite bound from this sample
        return 1.0
    xi = 2.0 - a0 / spread
    if xi <= 1e-9:
        return math.exp(-y / a0)
    sigma = 2.0 * a0 * a1 / spread
    return float((1.0 + xi * y / sigma) ** (-1.0 / xi))


def _log_share(finite: list[np.ndarray], lost: np.ndarray, rows: int, y: float) -> float:
    excess = np.sort(np.concatenate(finite))
    if len(excess) < MIN_BLOCK_EXCESS:
        return math.nan
    share = len(excess) / rows * _excess_survival(excess, y) + float(lost.sum()) / rows
    return math.log(share) if share > 0 else -745.0


def miss_bound(values: np.ndarray, threshold: float, q: float, t_level: float) -> float | None:
    """Upper bound on the share of time-ordered ``values`` above ``threshold`` by the
    tail model, ``t_level`` the Student t quantile (``BLOCKS - 1`` degrees of freedom)
    of the bound; None where the model does not apply (``q`` under :data:`MIN_Q`, too
    few values, the threshold inside the top ``k``)."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    k = int(min(max(round(n * SPAN * (1.0 - q)), MIN_EXCESS), MAX_EXCESS))
    if q < MIN_Q or k > MAX_EXCESS_SHARE * n:
        return None
    u = float(np.partition(x, n - k - 1)[n - k - 1])
    if not math.isfinite(u) or threshold <= u:
        return None
    size = n // BLOCKS
    blocks = x[n - BLOCKS * size :].reshape(BLOCKS, size)
    finite = [row[np.isfinite(row) & (row > u)] - u for row in blocks]
    lost = np.array([np.count_nonzero(~np.isfinite(row)) for row in blocks])
    y = threshold - u
    whole = _log_share(finite, lost, BLOCKS * size, y)
    left_out = np.array(
        [
            _log_share(finite[:j] + finite[j + 1 :], np.delete(lost, j), (BLOCKS - 1) * size, y)
            for j in range(BLOCKS)
        ]
    )
    if not (math.isfinite(whole) and np.isfinite(left_out).all()):
        return None
    # Quenouille's bias correction: log(share) of a short run sits low (a convex
    # function of the scale, and the excesses cluster), by about a third of its
    # spread at 1,500-3,000 requests; corrected, the bound holds its level.
    centre = BLOCKS * whole - (BLOCKS - 1) * float(left_out.mean())
    spread = math.sqrt((BLOCKS - 1) / BLOCKS * float(np.sum((left_out - left_out.mean()) ** 2)))
    return min(1.0, math.exp(centre + WIDEN * t_level * spread))


def gates(regen: Regeneration | None, service_heaviness: float) -> str:
    """Why the tail model may not decide this run ("" when it may)."""
    if regen is None:
        return "no send times"
    if regen.idle_share < IDLE_GATE:
        return f"{regen.idle_share:.0%} of requests found the system empty (under {IDLE_GATE:.0%})"
    if service_heaviness >= SERVICE_HEAVY:
        return "the empty-system requests' own tail is heavy"
    return ""
