"""How sure each number of summary.json is: intervals, ``decided`` and steady state.

:func:`annotate` adds to a summary that :func:`tailwise.metrics.summary.summarize`
built (DESIGN.md invariant 10; the machinery is :mod:`tailwise.metrics.uncertainty`
and :mod:`tailwise.metrics.steady`):

* ``confidence``: the two-sided level of every interval (0.95);
* each distribution's ``ci``: ``{p50 p90 p95 p99 p999 mean}`` -> ``[lo, hi]`` in
  ms, or ``null`` when the sample cannot carry it ("n too small"), and
  ``ci_note``: ``{key: why}`` for each ``null`` (``{}`` when all are supported).
  ``max`` has no interval: a longer run can only raise it;
* ``rates.ci``: ``throughput_rps``, ``goodput_rps`` (rates of completions in the
  window), ``attainment``, ``error_rate`` (shares of window-scheduled requests);
* each ``slos`` entry's ``ci`` (the interval of its value or attainment, in the
  entry's unit; ``null`` when unsupported; an end ``null`` when unbounded) and
  ``decided``: ``"pass" | "fail" | "inconclusive"``, what the sample alone
  supports (:func:`~tailwise.metrics.uncertainty.judge`); and the summary's
  ``decided``, composed like a verdict: any fail -> fail, else any
  inconclusive -> inconclusive, else pass;
* ``steady_state``: MSER-5 on the window's ok latencies: ``steady``,
  ``truncate_at`` (leading requests it would drop), ``reason``.

Nothing here changes a point value, a count, the window, ``passed`` or the
verdict: ``decided`` is informational until verdicts become three-valued.

**Time order = scheduled order.** The intervals assume values in time order.
Here that is the order of the intended send times: the schedule does not depend
on the system, so request *i*'s latency is the system's response to the state
it found at ``s_i`` (Lindley's recursion runs in arrival order), and the
sequence is a regular sampling of the system over the window. Completion order
would sort by the latency itself (a slow request moves later, past faster
successors) and mix the two. ``itl_ms`` pools the chunk gaps of each request in
the request's scheduled order, gaps within a request in stream order.

Cost: one argsort of the scheduled times (skipped when the rows are already in
that order), one sort per distinct distribution and O(n) passes otherwise: on
1M rows about 0.8x the rest of the summary's time (``docs/metrics.md``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tailwise.metrics import catalog, derive, fifo, tail
from tailwise.metrics.fifo import FifoQueue, fifo_queue
from tailwise.metrics.percentiles import QUANTILES, nearest_rank
from tailwise.metrics.slo import SLO
from tailwise.metrics.steady import steady_state
from tailwise.metrics.tail import Regeneration, idle_on_arrival, regeneration
from tailwise.metrics.uncertainty import (
    CONFIDENCE,
    FIFO_NOTE,
    GRADED_NOTE,
    MIN_BATCHES,
    MIN_EFFECTIVE,
    MIN_REGEN_BEYOND,
    TAIL_NOTE,
    Estimate,
    cycle_quantile_bounds,
    cycle_reach,
    decide_within,
    decision_level,
    heavy_label,
    judge,
    mean_ci,
    proportion_ci,
    quantile_cis,
    rate_ci,
    refuse_tail,
    tail_refusal,
    threshold_share_ci,
    value_inflation,
    wilson_interval,
)
from tailwise.records import Records

__all__ = ["CI_KEYS", "annotate", "compose", "distribution_ci"]

CI_KEYS = (*QUANTILES, "mean")
NS_PER_MS = 1e6
NS_PER_S = 1e9
RISING_SEGMENTS = 8  # an overloaded queue's medians climb through these
RISING_TAU = 0.6  # ... with at least this much of Kendall's tau
RISING_NOTE = (
    "latency still rising at the window's end (an overloaded queue): decided on that trend"
)
IMPLICIT_NOTE = "the default SLO (no --slo given) is judged on this sample only"
MAX_NOTE = "the maximum has no interval: a longer run can only raise it; judged on this sample only"


class _Order:
    """Row indices in scheduled order, or none when the rows already are in it.

    NumPy's default (SIMD) argsort is 4x faster than its stable one on shuffled rows;
    it leaves requests scheduled at the same nanosecond in an arbitrary (deterministic)
    order, which no estimate here can tell apart."""

    def __init__(self, scheduled_ns: np.ndarray) -> None:
        s = np.asarray(scheduled_ns)
        self.perm = None if bool(np.all(s[1:] >= s[:-1])) else np.argsort(s)

    def rows(self, mask: np.ndarray) -> np.ndarray:
        if self.perm is None:
            return np.flatnonzero(mask)
        rows: np.ndarray = self.perm[mask[self.perm]]
        return rows


class _Derived:
    """Per-row derived values (:mod:`tailwise.metrics.derive`), each computed once."""

    def __init__(self, r: Records) -> None:
        self.r = r
        self.known: dict[Callable[[Records], np.ndarray], np.ndarray] = {}
        self._idle: np.ndarray | None = None
        self._fifo: tuple[np.ndarray, FifoQueue] | None = None

    def fifo(self, rows: np.ndarray) -> FifoQueue:
        """The rows read as one FIFO server (:func:`fifo_queue`), once per set of rows
        (every latency SLO of a summary reads the same window)."""
        if self._fifo is None or not np.array_equal(self._fifo[0], rows):
            self._fifo = (rows, fifo_queue(self.r.scheduled_ns[rows], self.r.done_ns[rows]))
        return self._fifo[1]

    def idle(self) -> np.ndarray:
        """Per row: sent while nothing else was in flight (:func:`idle_on_arrival`;
        by scheduled time, as the intervals order the rows)."""
        if self._idle is None:
            start = np.where(self.r.sent_ns < 0, -1, self.r.scheduled_ns)
            self._idle = idle_on_arrival(start, self.r.done_ns)
        return self._idle

    def __call__(self, fn: Callable[[Records], np.ndarray]) -> np.ndarray:
        if fn not in self.known:
            self.known[fn] = fn(self.r)
        return self.known[fn]


class _Quantiles:
    """:func:`quantile_cis`, remembered for repeated samples: a sort of n values each time.

    In a simulation ``service`` equals ``latency``, and a ``p99(latency)`` SLO without
    failures is the latency distribution's p99; equal arrays are found by comparison."""

    def __init__(self, confidence: float = CONFIDENCE) -> None:
        self.confidence = confidence
        self.seen: list[tuple[np.ndarray, dict[float, Estimate]]] = []

    def __call__(self, x: np.ndarray, qs: Sequence[float]) -> list[Estimate]:
        for values, known in self.seen:
            if len(values) == len(x) and all(q in known for q in qs) and np.array_equal(values, x):
                return [known[q] for q in qs]
        estimates = quantile_cis(x, qs, self.confidence)
        self.seen.append((x, dict(zip(qs, estimates, strict=True))))
        return estimates


_Memo = tuple[_Derived, _Quantiles]
_ModelLevel = tuple[float | None, float | None]  # the FIFO model's level (ns) and rate
_Within = tuple[Estimate, float, float, _ModelLevel]  # share, needed, level (ns), model


def distribution_ci(
    values: np.ndarray,
    scale: float = NS_PER_MS,
    quantiles: _Quantiles | None = None,
    idle: np.ndarray | None = None,
) -> dict[str, Any]:
    """``{"ci": {key: [lo, hi] | None}, "ci_note": {key: why}}`` for values in time order,
    bounds divided by ``scale`` (ns -> ms by default). ``idle`` (aligned with ``values``:
    the request found nothing in flight) adds the intervals of :func:`_regenerative`."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0:
        return {"ci": dict.fromkeys(CI_KEYS), "ci_note": dict.fromkeys(CI_KEYS, "no values")}
    regen = regeneration(idle, x) if idle is not None and len(idle) == len(x) else None
    refusal = tail_refusal(x, regen)
    heavy = refusal.reason()
    if heavy and refusal.reason(0.5):  # every interval under-covers, the median's too
        return {"ci": dict.fromkeys(CI_KEYS), "ci_note": dict.fromkeys(CI_KEYS, heavy)}
    confidence = quantiles.confidence if quantiles else CONFIDENCE
    cycles = _regenerative(x, idle, confidence)
    short = _short_memory_note(x)
    if short:
        estimates = [Estimate(math.nan, -math.inf, math.inf, False, short)] * len(CI_KEYS)
    else:
        quantiles = quantiles or _Quantiles()
        estimates = quantiles(x, [q / 100.0 for q in QUANTILES.values()])
        estimates.append(mean_ci(x, confidence))
    ci: dict[str, Any] = {}
    notes: dict[str, str] = {}
    for key, e in zip(CI_KEYS, estimates, strict=True):
        pair, by_cycles = _pair(e, scale), cycles.get(key)
        if by_cycles is not None:  # the wider of the two where both exist
            lo, hi = (b / scale for b in by_cycles)
            pair = [lo, hi] if pair is None else [min(pair[0], lo), max(pair[1], hi)]
        if heavy and key != "p50":  # a heavy bare service: all but the median declined
            pair, e = None, Estimate(e.value, e.lo, e.hi, False, heavy)
        ci[key] = pair
        if pair is None:
            notes[key] = e.reason
    return {"ci": ci, "ci_note": notes}


def _regenerative(x: np.ndarray, idle: np.ndarray | None, confidence: float) -> dict[str, Any]:
    """``{key: (lo, hi)}``: intervals from blocks of whole regeneration cycles, where the
    tail model's gates hold (:func:`tailwise.metrics.tail.gates`: many requests found the
    system empty, and those requests' own latencies, the bare service, are not heavy).

    A request that finds nothing in flight starts the system afresh, so blocks cut there
    (:func:`~tailwise.metrics.tail.regeneration_blocks`) are independent: their spread
    needs no allowance for memory, where batch means of equal slices understate it in a
    run not long against a busy period, or decline. Validation grid (200 runs a cell,
    docs/benchmarks.md): M/M/1 at 80% load, 50,000 requests, p99 given in 65 runs
    covering 93.8% before, now 179 covering 96.6%; at 5,000 requests p90 103 runs at
    87.4% -> 140 at 91.4%; M/M/1 at 50%, 50,000, p90 and mean 92.4% -> 94.4% and 93.9%.
    Where the gates stay shut (M/M/4, heavy service, an LLM engine, 95% load) the
    intervals are as before. Quantiles only with :data:`MIN_REGEN_BEYOND` values beyond
    them (ten per block): with fewer, the few blocks holding them decide the spread, and
    such p99 intervals covered 32% (M/M/1 at 80% load, 5,000 requests)."""
    if idle is None or len(idle) != len(x) or not np.isfinite(x).all():
        return {}
    regen = regeneration(idle, x)
    if tail.gates(regen, tail.service_heaviness(regen.service)):
        return {}
    ranges = tail.regeneration_blocks(len(x), regen.idle)
    if not ranges:
        return {}
    out: dict[str, Any] = {}
    n = len(x)
    ordered = np.sort(x)
    for key, pct in QUANTILES.items():
        q = pct / 100.0
        if n * min(q, 1.0 - q) < MIN_REGEN_BEYOND:
            continue
        value = nearest_rank(ordered, pct)
        bounds = cycle_quantile_bounds(x <= value, ordered, q, ranges, confidence)
        if bounds is not None:
            out[key] = bounds
    reach = cycle_reach(x, ranges, confidence)
    out["mean"] = (float(x.mean()) - reach, float(x.mean()) + reach)
    return out


def _short_memory_note(x: np.ndarray) -> str:
    """Why no interval of this distribution holds, when the run is short against the
    system's memory: fewer than :data:`MIN_EFFECTIVE` independent-equivalent values (n
    over the variance inflation its batches measure). A queue at 95% load remembers for
    thousands of requests: its batch means can pass their correlation test while the
    whole run holds a handful of independent excursions, and the intervals covered the
    truth in 0-65% of runs (p90, p50; 5,000 requests, validation grid)."""
    inflation, b = value_inflation(x[np.isfinite(x)])
    if not b.independent or inflation < 2 or len(x) / inflation >= MIN_EFFECTIVE:
        return ""  # correlated batches: each estimate says so; nearly independent: iid floors
    return (
        f"n too small: the run holds about {len(x) / inflation:.0f} independent values "
        f"(autocorrelation inflates the variance {inflation:.3g}x), {MIN_EFFECTIVE} needed"
    )


def _pair(e: Estimate, scale: float = 1.0) -> list[float] | None:
    """``[lo, hi]`` / scale, or None when unsupported (an infinite end becomes null later).
    A bound within 1e-12 of 0 is 0 (Wilson's interval of 0 successes, in floating point)."""
    if not e.supported:
        return None
    return [0.0 if abs(x) < 1e-12 else x / scale for x in (e.lo, e.hi)]


def _distributions(
    s: dict[str, Any], r: Records, order: _Order, window: np.ndarray, memo: _Memo
) -> None:
    """Each catalog distribution the summary holds gets its interval (a pooled sample,
    ITL's gaps, its own quantile memo: it never equals another sample)."""
    derived, quantiles = memo
    for m in catalog.CATALOG:
        if s.get(m.summary_key) is None:
            continue
        values = derived(m.per_request_ns)
        rows = order.rows(window & (r.error == 0) if m.pooled else window)
        sample = catalog.summary_sample(m, r, values, rows)
        memo_q = _Quantiles(quantiles.confidence) if m.pooled else quantiles
        idle = None if m.pooled else derived.idle()[rows][m.population(r, values)[rows]]
        s[m.summary_key].update(distribution_ci(sample, quantiles=memo_q, idle=idle))


def _rate_estimates(
    r: Records,
    window_ns: tuple[int, int],
    good: np.ndarray,
    window_rows: np.ndarray,
    confidence: float = CONFIDENCE,
) -> dict[str, Estimate]:
    start, end = window_ns
    ok = r.error == 0
    return {
        "throughput_rps": rate_ci(r.done_ns[ok], start, end, confidence),
        "goodput_rps": rate_ci(r.done_ns[good], start, end, confidence),
        "attainment": proportion_ci(good[window_rows], confidence),
        "error_rate": proportion_ci(~ok[window_rows], confidence),
    }


def _slo_estimate(
    r: Records,
    slo: SLO,
    window_rows: np.ndarray,
    rates: tuple[dict[str, Estimate], dict[str, Estimate]],
    memo: _Memo,
    within: dict[str, _Within],
) -> tuple[Estimate | None, str, str]:
    """``(estimate, decided, note)`` for one SLO, the estimate in the entry's unit (ms,
    share, rps); None where no interval exists (``max``), ``note`` saying why.

    The estimate's interval is two-sided at the summary's confidence (what is shown);
    the verdict decides on the interval at
    :func:`~tailwise.metrics.uncertainty.decision_level` (today the same level, so each
    is computed once). ``rates`` holds the rates at both levels (shown, decided).

    A percentile objective and a deadline are both decided on the share of values
    within the threshold (``p_q <= T`` exactly when ``F(T) >= q``;
    :func:`~tailwise.metrics.uncertainty.threshold_share_ci`): that interval needs no
    estimate of the tail beyond ``T``, so a p99 far above its threshold fails even when
    the p99 itself is "n too small", and it allows for the latencies' memory, so a short
    correlated run without an excursion is not taken for a pass. The entry's ``ci``
    stays the interval of its value (the percentile, in ms); ``within`` holds the
    share's interval at the decision's level."""
    derived, quantiles = memo
    decide_at = decision_level(quantiles.confidence)
    if slo.kind == "rate":
        key = {"goodput": "goodput_rps", "throughput": "throughput_rps"}.get(slo.stat, slo.stat)
        op = "<=" if slo.stat == "error_rate" else ">="
        return rates[0][key], judge(rates[1][key], slo.threshold, op), ""
    v = derived(catalog.lookup(slo.metric).per_request_ns)[window_rows]
    x = v.astype(np.float64)
    x[(v < 0) | (r.error[window_rows] != 0)] = math.inf  # failures: infinitely slow
    regen = regeneration(derived.idle()[window_rows], x)
    # Latency SLOs of a run whose every request succeeded may be read as one FIFO server.
    fine = slo.metric == "latency" and bool(np.all(np.isfinite(x)))
    queue = derived.fifo(window_rows) if fine else None
    if slo.kind == "deadline":
        share, level, decided = decide_within(x, slo.threshold, slo.target, decide_at, regen, queue)
        within[slo.spec] = (
            share,
            slo.target,
            level.value,
            _model(queue, slo.target, slo.threshold),
        )
        shown = (
            share
            if decide_at == quantiles.confidence
            else threshold_share_ci(x, slo.threshold, quantiles.confidence)
        )
        return shown, *_settle(x, slo.threshold, slo.target, decided, shown.reason, regen)
    if slo.stat in ("max", "p100"):  # a claim about this sample only: see MAX_NOTE
        return None, "fail" if x.max() > slo.threshold else "pass", MAX_NOTE
    if slo.stat == "mean":
        if not np.isfinite(x).all():
            inf = Estimate(math.inf, math.inf, math.inf, True, n=len(x))
            return inf, "fail", "unbounded: failed or unsent requests count as infinitely slow"
        e = mean_ci(x, quantiles.confidence)
        decided = judge(e if decide_at == e.confidence else mean_ci(x, decide_at),
                        slo.threshold, "<=")  # fmt: skip
        heavy = refuse_tail(x, regen) if decided == "pass" else ""
        if heavy:  # the mean: q None, a heavy bare service refuses it too
            return _in_ms(e), "inconclusive", heavy
        return _in_ms(e), decided, e.reason
    q = float(slo.stat[1:]) / 100.0
    (e,) = quantiles(x, [q])
    share, level, decided = decide_within(x, slo.threshold, q, decide_at, regen, queue)
    within[slo.spec] = (share, q, level.value, _model(queue, q, slo.threshold))
    # A pass by a model (the tail's, the FIFO queue's), or with a heavy service's margin,
    # says so, over the quantile's own "n too small".
    own = share.reason.startswith((TAIL_NOTE, FIFO_NOTE, GRADED_NOTE))
    note = share.reason if own else e.reason or share.reason
    return _in_ms(e), *_settle(x, slo.threshold, q, decided, note, regen)


def _model(queue: FifoQueue | None, needed: float, threshold_ns: float) -> _ModelLevel:
    """``(level_ns, rate_rps)`` of the FIFO queue model (:func:`fifo.model_level`,
    :func:`fifo.model_rate`): the steady state's level at the run's rate and the rate
    whose level is the threshold; None each where the model does not apply."""
    if queue is None:
        return None, None
    level_s = fifo.model_level(queue, needed)
    rate = fifo.model_rate(queue, needed, threshold_ns / NS_PER_S)
    return (level_s * NS_PER_S if level_s is not None else None), rate


def _settle(
    x: np.ndarray, threshold: float, needed: float, decided: str, note: str, regen: Regeneration
) -> tuple[str, str]:
    """``(decided, note)`` once the two rules past the intervals are applied: an
    overloaded queue is shown to fail, a heavy tail is never passed."""
    if decided == "inconclusive" and _overloaded(x, threshold, needed):
        return "fail", RISING_NOTE
    heavy = refuse_tail(x, regen, needed) if decided == "inconclusive" else ""
    if heavy:
        return "inconclusive", heavy
    return decided, note


def _overloaded(x: np.ndarray, threshold: float, needed: float) -> bool:
    """A queue that is still filling: the medians of the window's eight eighths climb
    (Kendall's tau over them at least :data:`RISING_TAU`), the last over twice the
    first, and the last eighth misses the share needed (on Wilson's bound too). Its
    memory defeats every interval, yet it can only get worse: the failure is shown. A
    cold start that fades falls instead.

    Four rising quarters were the rule before: a stationary M/G/1 at 70% load with a
    heavy-tailed service (one giant job, then its backlog draining) climbed through four
    quarters now and then and was "shown to fail" at 1.5x its true p99 (6 of 29 runs in
    one trial); eight strictly rising eighths missed half of the runs 4% past capacity.
    The trend over eight eighths fires on 97% of those (M/M/1, 2 ms, 520/s, 20 s) and on
    0.5% of 200 runs of the M/G/1 (lognormal sigma 1.5, 5,000 requests) at 1.5x its p99."""
    n = len(x)
    if n < RISING_SEGMENTS * MIN_BATCHES:
        return False
    finite = x[np.isfinite(x)]
    capped = np.minimum(x, finite.max() if len(finite) else threshold)
    size = n // RISING_SEGMENTS
    medians = [float(np.median(capped[k * size : (k + 1) * size])) for k in range(RISING_SEGMENTS)]
    rising = _kendall_tau(medians) >= RISING_TAU and medians[-1] > 2 * medians[0]
    good = int((x[-size:] <= threshold).sum())
    return rising and wilson_interval(good, size)[1] < needed


def _kendall_tau(values: Sequence[float]) -> float:
    """Kendall's tau of ``values`` against their order: 1 when they only rise."""
    pairs = list(itertools.combinations(values, 2))
    signs = sum((b > a) - (b < a) for a, b in pairs)
    return signs / len(pairs) if pairs else 0.0


def _in_ms(e: Estimate) -> Estimate:
    return Estimate(
        e.value / NS_PER_MS, e.lo / NS_PER_MS, e.hi / NS_PER_MS, e.supported, e.reason,
        e.confidence, e.n, e.batches,
    )  # fmt: skip


def _slos(
    entries: list[dict[str, Any]],
    slos: list[SLO],
    r: Records,
    window_rows: np.ndarray,
    rates: tuple[dict[str, Estimate], dict[str, Estimate]],
    memo: _Memo,
) -> None:
    for entry, slo in zip(entries, slos, strict=True):
        if len(window_rows) == 0:
            entry.update(ci=None, decided="inconclusive", ci_note="no request in the window")
            continue
        within: dict[str, _Within] = {}
        e, decided, note = _slo_estimate(r, slo, window_rows, rates, memo, within)
        # A tail refused (heavy) has no interval here either, as in its distribution's row.
        refused = bool(heavy_label(note)) and decided == "inconclusive"
        entry["ci"] = _pair(e) if e is not None and not refused else None
        entry["decided"] = decided
        if slo.implicit:  # no claim was asked for: the default sanity check is the sample's
            entry["decided"] = "pass" if entry["passed"] else "fail"
            note = IMPLICIT_NOTE
        if note:
            entry["ci_note"] = note
        if slo.spec in within:
            share, needed, level_ns, (model_ns, model_rps) = within[slo.spec]
            entry["within"] = {
                "share": share.value,
                "ci": _pair(share),
                "needed": needed,
                "n": share.n,
                "threshold_ms": slo.threshold / NS_PER_MS,
                # the metric's value at the share needed (its p99 for 99%): what a knee
                # search models against the rate; None where failures reach it
                "level_ms": level_ns / NS_PER_MS if math.isfinite(level_ns) else None,
            }
            if model_ns is not None or model_rps is not None:  # one FIFO server, Poisson sends
                entry["within"]["model_level_ms"] = (
                    model_ns / NS_PER_MS if model_ns is not None else None
                )
                entry["within"]["model_rps"] = model_rps


def honour_looks(entries: list[dict[str, Any]], sequential: dict[str, Any] | None) -> None:
    """A ``--duration auto`` run that stopped because a look decided every SLO reports
    that look's decisions (in place on the summary's SLO ``entries``).

    The look is the test that stopped the run: its share of the run's error was spent
    on it, at a stricter level than the summary's. Judging the sample again (a few more
    requests, those in flight answered, batches and jackknife blocks cut elsewhere) is a
    second test whose noise could leave undecided a run stopped as decided (a knee's
    settling trial on an M/M/2 at 69/s stopped at its look of 8,192 requests and then
    read "inconclusive"). Where the summary decides alone, it agrees with the look in the
    validation; where it would decide the other way, the SLO is left inconclusive."""
    decided = (sequential or {}).get("decided") or {}
    settled = str((sequential or {}).get("settled") or "").split(":")[0]
    for entry in entries:
        look = decided.get(entry.get("spec"))
        own = entry.get("decided")
        if look is None or own == look:
            continue
        if own == "inconclusive":
            entry["decided"] = look
            entry["ci_note"] = f"{look}: the run's deciding look ({settled}) decided it" + (
                f"; the whole sample alone: {entry['ci_note']}" if entry.get("ci_note") else ""
            )
        else:
            entry["decided"] = "inconclusive"
            entry["ci_note"] = f"the deciding look ({settled}) said {look}, the whole sample {own}"


def compose(decisions: Iterable[str]) -> str:
    """Any fail -> fail; else any inconclusive -> inconclusive; else pass."""
    seen = set(decisions)
    return "fail" if "fail" in seen else "inconclusive" if "inconclusive" in seen else "pass"


def _steady(r: Records, order: _Order, window: np.ndarray, derived: _Derived) -> dict[str, Any]:
    latency = derived(derive.latency_ns)[order.rows(window & (r.error == 0))]
    st = steady_state(latency)
    return {"steady": st.steady, "truncate_at": st.truncate, "reason": st.reason}


def annotate(
    s: dict[str, Any],
    r: Records,
    window_ns: tuple[int, int],
    slos: list[SLO],
    good: np.ndarray,
    confidence: float = CONFIDENCE,
) -> None:
    """Add the keys of the module docstring to summary ``s`` (in place).

    ``good`` is the summary's good mask (ok and every deadline met), ``slos`` the
    SLOs whose entries ``s["slos"]`` holds, in the same order."""
    order = _Order(r.scheduled_ns)
    window = np.asarray(r.in_window, dtype=bool)
    window_rows = order.rows(window)
    memo = (_Derived(r), _Quantiles(confidence))
    s["confidence"] = confidence
    _distributions(s, r, order, window, memo)
    rates = _rate_estimates(r, window_ns, good, window_rows, confidence)
    s["rates"]["ci"] = {k: _pair(e) for k, e in rates.items()}
    decide_at = decision_level(confidence)
    decided_rates = (
        rates
        if decide_at == confidence
        else _rate_estimates(r, window_ns, good, window_rows, decide_at)
    )
    _slos(s["slos"], slos, r, window_rows, (rates, decided_rates), memo)
    s["decided"] = compose(e["decided"] for e in s["slos"])
    s["steady_state"] = _steady(r, order, window, memo[0])
