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
``log(share)`` over :data:`BLOCKS` blocks of the run, each cut where a request found
nothing in flight (:func:`regeneration_blocks`), Student's t with ``BLOCKS - 1``
degrees of freedom at the verdict's one-sided level.

**When it may decide** (each rule from the validation below): only a pass (a
failure is shown by the misses themselves), only for ``q >= 0.98`` (a lower level
has its own plentiful misses), and only where the run is made of many independent
stretches, which the jackknife's blocks assume:

* at least :data:`SHORT_CYCLES` of the requests found nothing in flight when sent (a
  single server under 60% load), or at least :data:`IDLE_GATE` of them and
  :data:`MIN_CYCLES` in all. Each such instant starts the system afresh (a
  regeneration point: what follows is independent of what came before), and the
  blocks are cut there, so they are independent stretches, not slices of one busy
  period. Blocks of equal size were too narrow at 70% load and above (M/M/1 at 80%
  load, 5,000 requests: 8.5% false passes at 0.95x the true p99); cut at
  regeneration points with a thousand of them, 0.7-2% over 300 runs of 8,000
  requests (M/M/1 at 70-80%, M/M/2 at 64-72%, bursty arrivals), where 300 of them
  let a Pareto service on one server at 70% load through 6.7% of the time;
* the requests that found the system empty, whose latency is the service alone,
  have a top no heavier than exponential (:func:`service_heaviness` under
  :data:`SERVICE_HEAVY`): a single server smooths a lognormal or Pareto service into
  a queue whose top looks exponential, and the tail model then passed 10-30% of
  false SLOs at 70% load, and at 50% load (where 50% of requests find it empty) a
  pass at 0.7x the true p99 of a lognormal (sigma 1.5) service; the empty-system
  requests show the service's tail bare.

Validation (``benchmarks/quick_decisions.py``: M/M/1 at 42%, 54% and 60% load, 400
seeded runs each, truth in closed form; 300 runs of 8,000 requests per queue for the
gates, docs/benchmarks.md): with ``--duration auto``'s looks, ``p99 <= 2x truth`` at
42% load is passed by 1,500 requests in 56.5% of runs (3% by counting alone), at
1.5x in 34% (3%); false decisions at 0.95x the truth 0-1.2% (counting alone
0-0.8%). At 1.5x the truth by 8,000 requests: M/M/2 at 72% load per server 42% of
runs (18% by counting), M/M/1 at 70% 41% (7%), at 80% 20% (0%). The gates refuse
M/M/1 at 95%, M/M/4 at 80% and the LLM engine; with lognormal (sigma 1 to 2) and
Pareto (2.5) service on one server at 50-70% load the engine decides exactly as it
does without the tail model, up to 50,000 requests.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

BLOCKS = 20  # consecutive blocks of the jackknife
IDLE_GATE = 0.1  # requests that found nothing in flight, at least this share ...
SHORT_CYCLES = 0.4  # ... and this share, or under it at least MIN_CYCLES of them
MIN_CYCLES = 1000
SERVICE_HEAVY = 1.0  # empty-system latencies' service_heaviness must stay under this
# (an exponential service reads 0.6-0.9 in 90% of samples of 600-2,500; lognormal sigma 1
# 0.9-1.5, Pareto 2.5 0.8-1.4, lognormal sigma 1.5 1.4-2.2)
SERVICE_TOP = 20  # ... read over their top 1/SERVICE_TOP (at least MIN_SERVICE_TOP values)
MIN_SERVICE_TOP = 50
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
    idle: np.ndarray | None = None  # per value, aligned with them: found nothing in flight


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
    return Regeneration(share, np.asarray(values, dtype=np.float64)[idle], idle)


def service_heaviness(service: np.ndarray, depth: int | None = None) -> float:
    """How much heavier than exponential the top twentieth of the empty-system latencies
    falls off: the Hill estimate over the top ``k = max(50, n / 20)`` values times
    ``ln(n / k)`` (about 1 for an exponential service, within 0.15 at k = 50; a lognormal
    service of sigma 1 reads about 1.8, sigma 1.5 about 2.7). Deeper than the latency
    guard's top thousandth: it asks only whether the service's bulk tail is light, and
    a deeper read is steadier. ``inf`` with fewer than ``2 MIN_SERVICE_TOP`` values (no
    service to read: the model must not decide). ``depth`` reads it over that many top
    values instead."""
    x = np.asarray(service, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = len(x)
    if n < 2 * MIN_SERVICE_TOP:
        return math.inf
    k = depth if depth is not None else max(MIN_SERVICE_TOP, n // SERVICE_TOP)
    top = np.sort(np.partition(x, n - k - 1)[n - k - 1 :])
    floor = float(top[0])
    if floor <= 0.0:
        return math.inf
    return float(np.mean(np.log(top[1:] / floor))) * math.log(n / k)


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


def regeneration_blocks(n: int, idle: np.ndarray | None) -> list[tuple[int, int]]:
    """:data:`BLOCKS` consecutive ``(start, stop)`` row ranges covering ``n`` rows.

    With ``idle`` (rows whose request found nothing in flight), each cut falls on such
    a row, the one nearest to the equal split: the system starts afresh there, so the
    blocks are independent stretches of the run (regeneration cycles grouped), not
    slices of one busy period. Empty when fewer than :data:`BLOCKS` distinct cuts exist.
    Without ``idle``, equal blocks of the run's last ``BLOCKS * (n // BLOCKS)`` rows."""
    if idle is None:
        size = n // BLOCKS
        first = n - BLOCKS * size
        return [(first + j * size, first + (j + 1) * size) for j in range(BLOCKS)]
    starts = np.flatnonzero(np.asarray(idle, dtype=bool)[:n])
    if len(starts) < BLOCKS:
        return []
    wanted = np.arange(1, BLOCKS) * (n / BLOCKS)
    at = np.clip(np.searchsorted(starts, wanted), 1, len(starts) - 1)
    nearer = np.where(wanted - starts[at - 1] < starts[at] - wanted, at - 1, at)
    cuts = sorted({0, *starts[nearer].tolist(), n})
    if len(cuts) != BLOCKS + 1:
        return []
    return list(itertools.pairwise(cuts))


def miss_bound(
    values: np.ndarray,
    threshold: float,
    q: float,
    t_level: float,
    idle: np.ndarray | None = None,
) -> float | None:
    """Upper bound on the share of time-ordered ``values`` above ``threshold`` by the
    tail model, ``t_level`` the Student t quantile (``BLOCKS - 1`` degrees of freedom)
    of the bound, the jackknife's blocks cut where ``idle`` (aligned with ``values``)
    says the system was empty (:func:`regeneration_blocks`); None where the model does
    not apply (``q`` under :data:`MIN_Q`, too few values or regeneration points, the
    threshold inside the top ``k``)."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    k = int(min(max(round(n * SPAN * (1.0 - q)), MIN_EXCESS), MAX_EXCESS))
    if q < MIN_Q or k > MAX_EXCESS_SHARE * n:
        return None
    u = float(np.partition(x, n - k - 1)[n - k - 1])
    if not math.isfinite(u) or threshold <= u:
        return None
    ranges = regeneration_blocks(n, idle)
    if not ranges:
        return None
    blocks = [x[a:b] for a, b in ranges]
    rows = np.array([len(row) for row in blocks])
    finite = [row[np.isfinite(row) & (row > u)] - u for row in blocks]
    lost = np.array([np.count_nonzero(~np.isfinite(row)) for row in blocks])
    y = threshold - u
    whole = _log_share(finite, lost, int(rows.sum()), y)
    left_out = np.array(
        [
            _log_share(
                finite[:j] + finite[j + 1 :], np.delete(lost, j), int(rows.sum() - rows[j]), y
            )
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
    cycles = len(regen.service)
    if regen.idle_share < SHORT_CYCLES and cycles < MIN_CYCLES:
        return (
            f"{cycles} requests found the system empty ({regen.idle_share:.0%} of them, "
            f"under {SHORT_CYCLES:.0%}: at least {MIN_CYCLES} needed)"
        )
    if service_heaviness >= SERVICE_HEAVY:
        return "the empty-system requests' own tail is heavy"
    return ""
