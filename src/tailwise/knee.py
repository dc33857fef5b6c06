"""Knee search: the highest offered rate at which every SLO still holds.

Engine-agnostic: it calls ``trial(rate_rps) -> Outcome`` and never knows
whether a load generator or a simulator ran it.

Each trial answers twice: ``passed``, what its point estimates say (it steers
the search), and ``decided``, what its sample supports at its confidence:
``pass``, ``fail`` or ``inconclusive`` (:mod:`tailwise.metrics.intervals`).

1. **Bracket**: from ``start_rps``, double while trials pass (halve while they
   fail) until one rate passes and the next fails.
2. **Bisect** the bracket until ``(hi - lo) / lo <= resolution``.
3. **Repeat** the final ``lo`` and ``hi`` ``repeats`` more times. Noise near
   the knee shows up as disagreement.
4. **Settle**: if no tested rate was *shown* to hold (or to fail), try up to
   :data:`SETTLE_TRIALS` rates further down (up) from the final bracket by
   :data:`SETTLE_STEP`, with the ``confirm`` trial. A measured search steers with
   trials that decide at a lower confidence (they only choose the next rate,
   and stop sooner) and settles with trials at the full confidence: only *firm*
   trials, decided at the search's confidence, make the band.

**Placement** (``place=True``, ``tailwise knee`` without ``--repeats``): after the
bracket, the knee is read where the trials' *levels* cross the threshold
(:func:`level_knee`: each SLO's value at the share it needs, its p99 for a p99 SLO,
against the rate); one short steering *probe* goes there (:data:`PROBES`), then one
firm trial (``confirm``) at ``BAND_AT[0]`` times the estimate and, once its level is
in, one at ``BAND_AT[1]`` times the estimate read again. An end its trial leaves
undecided moves out by :data:`SETTLE_STEP`; an end that comes out the other way
re-reads the knee with its level and places the ends again (:data:`PLACE_ROUNDS`).
No trial is spent where no sample decides (near the knee, bisection's trials ran to
their cap one after another: 21 minutes for an M/M/1 server). ``knee_rps``
is then the levels' crossing read on every trial, clipped to the band (``method``
``levels``). Where trials read as one FIFO server fed by Poisson sends, the FIFO
queue model reads the knee from their service times instead (``queue model``,
:func:`_model_crossing`): no probe is spent, and once both ends are shown the knee
is read again from the firm trials and an end beyond :data:`BAND_REACH` of it is
placed again. Without levels (no percentile or deadline SLO) the search bisects.

``knee_rps`` after bisection is the point estimate: the highest tested rate at which
every trial, at it and at every lower tested rate, passed on its point estimates
(or the miss shares' fitted crossing, :func:`fitted_knee`), never below
``band_rps[0]``. ``band_rps`` is
``[L, H]``: ``L`` the highest rate *shown to hold* (every trial at it decided
pass, and none at or below it decided fail), ``H`` the lowest rate *shown to
fail* (every trial at it decided fail, none at or above it decided pass); each
end is ``None`` when no tested rate shows it. ``undecided_rps`` lists the
inconclusive rates between them: the true knee lies in ``[L, H]`` (each end
holding at the trials' confidence), most likely near ``knee_rps``.

A trial the engine could not run honestly (a saturated load generator, an
interrupted run) stops the search with :class:`KneeAborted`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tailwise import knee_law
from tailwise.errors import ExitCode, TailwiseError
from tailwise.metrics.schema import Summary
from tailwise.metrics.verdict import point_passed, settled


class KneeAborted(TailwiseError):
    """A trial could not be judged (generator saturated, interrupted); the reason says which."""

    exit_code = ExitCode.INVALID

    def __init__(self, message: str, result: KneeResult | None = None) -> None:
        super().__init__(message)
        self.result = result  # the trials run before the search stopped


# what a trial keeps of each SLO's share within its threshold (summary ``slos[].within``)
WITHIN_KEYS = ("share", "n", "needed", "level_ms", "threshold_ms")
MODEL_KEYS = ("model_level_ms", "model_rps")  # kept where the trial's run read one FIFO server
# Invalid runs that do not end a sweep or a knee search: the client's lag could have
# decided this run's verdict, but the next, heavier one can still be judged.
GO_ON_CAUSES = frozenset({"client"})
SETTLE_TRIALS = 3  # at most this many extra trials on each side to show the band's ends
SETTLE_STEP = 0.8  # each settling trial goes this factor further down (1/this up)
BAND_AT = (0.78, 1.15)  # the band's firm trials, as shares of the estimated knee
BAND_REACH = (0.75, 1.25)  # an end already shown this near the knee needs no new trial
PROBES = 1  # a short steering trial at the estimated knee, before the firm ones
PROBE_NEAR = 0.04  # a trial this near the estimate already is a probe
PLACE_ROUNDS = 3  # re-placements after an end came out the other way


@dataclass(frozen=True)
class Outcome:
    passed: bool  # on the point estimates: steers the search
    invalid_reason: str = ""  # non-empty: the search stops
    detail: dict[str, Any] = field(default_factory=dict)  # goodput, p99...: kept in trials
    decided: str = ""  # pass | fail | inconclusive; "" means as ``passed`` (certain)
    firm: bool = True  # decided at the search's confidence (a steering trial's is lower)

    @property
    def settled(self) -> str:
        return self.decided or ("pass" if self.passed else "fail")


@dataclass(frozen=True)
class TrialRun:
    """What an engine hands back for one trial: the run's summary, and its directory
    (None: not written)."""

    summary: Summary
    directory: Path | None = None


RunAt = Callable[[float, int, int], TrialRun]
"""Runs one trial at ``(rate_rps, number, repeat)``: ``number`` counts the search's
trials from 1, ``repeat`` the earlier tries of this rate (0 the first time: the base
seed; a repeat adds it to the seed, so that repeats measure noise)."""


def trial_window_s(base_s: float, min_requests: int, rate_rps: float) -> float:
    """A trial's window: the base one, stretched to hold ``min_requests`` at the rate."""
    return max(base_s, min_requests / rate_rps)


def make_trial(
    run_at: RunAt, *, firm: bool = True, counter: Iterator[int] | None = None
) -> Callable[[float], Outcome]:
    """The one trial builder of measured and simulated knee searches: ``run_at`` runs
    the engine at a rate, this numbers the trials, seeds the repeats and judges each
    summary (:func:`trial_outcome`). Trials that share a ``counter`` share one numbering
    (the knee's steering and settling trials: "trial 7" is the search's seventh)."""
    numbers = counter if counter is not None else itertools.count(1)
    tries: dict[float, int] = {}

    def trial(rate_rps: float) -> Outcome:
        n = next(numbers)
        # First tries share the base seed (common random numbers across rates).
        tries[rate_rps] = tries.get(rate_rps, -1) + 1
        return trial_outcome(run_at(rate_rps, n, tries[rate_rps]), firm)

    return trial


def trial_outcome(run: TrialRun, firm: bool = True) -> Outcome:
    """A trial's outcome from its run's summary, measured or simulated alike."""
    s = run.summary
    # A trial the client's lag could have decided is not shown to hold: the search goes
    # on, counting it as a miss (the knee can only come out lower, never higher).
    flipped = s.verdict_cause in GO_ON_CAUSES
    invalid = (s.verdict_reason or "") if s.verdict == "invalid" and not flipped else ""
    detail = trial_detail(s, flipped, run.directory)
    return Outcome(point_passed(s), invalid, detail, settled(s), firm)


def trial_detail(s: Summary, flipped: bool, directory: Path | None) -> dict[str, Any]:
    """What knee.json keeps of a trial's summary (and the live line shows)."""
    latency = s.latency
    return {
        "goodput_rps": s.rates.goodput_rps,
        "throughput_rps": s.rates.throughput_rps,
        "attainment": s.rates.attainment,
        "latency_p99_ms": latency.p99 if latency is not None else None,
        "stopped_early": s.stopped_early,
        # As the trial's own summary says it (any SLO's server bound), so that
        # knee.json and the trial agree; ``client_decided``: that lag made the verdict.
        "client_could_flip": any(
            e.server_bound is not None and e.server_bound.client_could_flip for e in s.slos
        ),
        "client_decided": flipped,
        "within": [
            {
                "spec": e.spec,
                **{k: e.within.get(k) for k in WITHIN_KEYS},
                **{k: v for k in MODEL_KEYS if (v := e.within.get(k)) is not None},
            }
            for e in s.slos
            if e.within is not None
        ],
        "requests": s.requests.scheduled,
        "window_s": s.window.duration_s,
        "verdict_reason": s.verdict_reason,
        **({"directory": str(directory)} if directory is not None else {}),
    }


@dataclass(frozen=True)
class TrialRecord:
    rate_rps: float
    passed: bool
    phase: str  # "bracket" | "bisect" | "repeat" | "settle"
    detail: dict[str, Any]
    decided: str = ""  # pass | fail | inconclusive ("" as passed)
    firm: bool = True  # decided at the search's confidence: only firm trials make the band

    @property
    def settled(self) -> str:
        return self.decided or ("pass" if self.passed else "fail")


@dataclass
class KneeResult:
    knee_rps: float | None
    band_rps: tuple[float | None, float | None] | None
    trials: list[TrialRecord]
    note: str = ""
    # how knee_rps was found: bisection | fit | levels | queue model | shown to hold
    method: str = "bisection"

    @property
    def undecided_rps(self) -> list[float]:
        lo, hi = self.band_rps or (None, None)
        return sorted(
            {
                t.rate_rps
                for t in self.trials
                if (t.settled == "inconclusive" or not t.firm)
                and (lo is None or t.rate_rps > lo)
                and (hi is None or t.rate_rps < hi)
            }
        )

    def to_json(self, slos: list[str]) -> dict[str, Any]:
        return {
            "knee_rps": self.knee_rps,
            "knee_method": self.method,
            "band_rps": list(self.band_rps) if self.band_rps else None,
            "undecided_rps": self.undecided_rps,
            "trials": [
                {
                    "rate_rps": t.rate_rps,
                    "passed": t.passed,
                    "decided": t.settled,
                    "firm": t.firm,
                    "phase": t.phase,
                    **t.detail,
                }
                for t in self.trials
            ],
            "slos": slos,
            "note": self.note,
        }


class Judged(Protocol):
    """A step of any origin (a sweep's, a calibration's): its rate and its summary."""

    @property
    def rate_rps(self) -> float: ...

    @property
    def summary(self) -> Summary: ...


def knee_rps(steps: Sequence[Judged]) -> float | None:
    """The highest rate at which this step and every lower one passed on its point estimates
    (:func:`~tailwise.metrics.verdict.point_passed`; None if the first failed).

    None for closed-loop steps: they have no offered rate to find a knee over."""
    if any(s.summary.closed for s in steps):
        return None
    knee = None
    for step in sorted(steps, key=lambda s: s.rate_rps):
        if not point_passed(step.summary):
            break
        knee = step.rate_rps
    return knee


def steps_band(steps: Sequence[Judged]) -> tuple[float | None, float | None] | None:
    """``(L, H)`` of a sweep's steps, as :func:`decided_band` (None in closed loop)."""
    if any(s.summary.closed for s in steps):
        return None
    records = [
        TrialRecord(s.rate_rps, point_passed(s.summary), "step", {}, settled(s.summary))
        for s in steps
    ]
    shown = decided_band(records)
    return shown if shown != (None, None) else None


Trial = Callable[[float], Outcome]


class KneeSearch:
    def __init__(
        self,
        trial: Trial,
        *,
        resolution: float = 0.05,
        repeats: int = 1,
        max_trials: int = 30,
        on_trial: Callable[[TrialRecord], None] | None = None,
        confirm: Trial | None = None,
        place: bool = False,
    ) -> None:
        """``confirm`` runs the settling trials (at the search's full confidence) when the
        steering ``trial`` decides at less; by default ``trial`` runs them too."""
        if not 0 < resolution < 1:
            raise ValueError("resolution must be in (0, 1)")
        self.trial = trial
        self.confirm = confirm or trial
        self.resolution = resolution
        self.repeats = repeats
        self.max_trials = max_trials
        self.on_trial = on_trial or (lambda t: None)
        self.place = place
        self.trials: list[TrialRecord] = []

    def _run(self, rate: float, phase: str, trial: Trial | None = None) -> bool:
        if len(self.trials) >= self.max_trials:
            raise KneeAborted(f"no knee within {self.max_trials} trials")
        out = (trial or self.trial)(rate)
        if out.invalid_reason:
            raise KneeAborted(f"trial at {rate:g}/s could not be judged: {out.invalid_reason}")
        record = TrialRecord(rate, out.passed, phase, out.detail, out.settled, out.firm)
        self.trials.append(record)
        self.on_trial(record)
        return out.passed

    def _bracket(self, start: float, floor: float, ceiling: float) -> tuple[float, float] | None:
        rate = start
        if self._run(rate, "bracket"):
            while rate * 2 <= ceiling:
                if not self._run(rate * 2, "bracket"):
                    return rate, rate * 2
                rate *= 2
            return None  # passes everywhere we may go
        while rate / 2 >= floor:
            if self._run(rate / 2, "bracket"):
                return rate / 2, rate
            rate /= 2
        return None  # fails everywhere we may go

    def run(self, start_rps: float, floor_rps: float, ceiling_rps: float) -> KneeResult:
        """Search in ``[floor_rps, ceiling_rps]``, starting at ``start_rps``."""
        try:
            bracket = self._bracket(start_rps, floor_rps, ceiling_rps)
            if bracket is None:
                return self._unbracketed(floor_rps, ceiling_rps)
            lo, hi = bracket
            if self.place and self._placed(lo, hi, floor_rps, ceiling_rps):
                return self._result()
            while (hi - lo) / lo > self.resolution:
                mid = (lo + hi) / 2
                if self._run(mid, "bisect"):
                    lo = mid
                else:
                    hi = mid
            for _ in range(self.repeats):
                self._run(lo, "repeat")
                self._run(hi, "repeat")
            self._settle(lo, hi, floor_rps, ceiling_rps)
        except KneeAborted as exc:
            result = self._result()
            result.note = str(exc)
            raise KneeAborted(str(exc), result) from None
        return self._result()

    def _placed(self, lo: float, hi: float, floor: float, ceiling: float) -> bool:
        """The placement phase of the module docstring, after the bracket ``[lo, hi]``;
        False when no trial has a level (the search then bisects)."""
        if not _levels(self.trials):
            return False
        # No crossing to read yet (the failing end's level is reached by failures):
        # the first probe goes to the bracket's geometric middle.
        reading = knee_reading(self.trials)
        knee = reading[0] if reading is not None else math.sqrt(lo * hi)
        for _ in range(PROBES):  # short steering trials where the knee is thought to be
            if any(abs(t.rate_rps / knee - 1) <= PROBE_NEAR for t in self.trials):
                break
            if reading is not None and reading[1] == "queue model":
                break  # the model read the knee itself: a level there adds nothing
            self._run(min(max(knee, floor), ceiling), "probe")
            knee = level_knee(self.trials) or knee
        for _ in range(PLACE_ROUNDS + 1):
            low = max(knee * BAND_AT[0], floor)
            if self._show(low, "low", knee, floor, ceiling):
                # The low end's trial is long and near the knee: its level places the
                # high end better than the steering trials did (M/M/2: 1.34x the truth
                # from the probe's estimate, 17% high).
                knee = level_knee(self.trials) or knee
                high = min(knee * BAND_AT[1], ceiling)
                if self._show(high, "high", knee, floor, ceiling):
                    # Both ends shown. The queue model's knee, read again from the firm
                    # trials' service times, may leave an end placed from the steering
                    # trials' rougher reading far from it: place that end again. (Levels
                    # read again move by their own noise: an M/M/2's emulated searches
                    # took 9.1 minutes instead of 6.7 chasing them.)
                    reading = knee_reading(self.trials)
                    if reading is None or reading[1] != "queue model":
                        return True
                    knee = reading[0]
                    if self._ends_near(knee):
                        return True
                    continue
            knee = level_knee(self.trials) or knee  # an end came out the other way
        return True

    def _ends_near(self, knee: float) -> bool:
        """Whether each shown end of the band lies within :data:`BAND_REACH` of ``knee``
        (an end not shown after its trials counts as near: no trial would show it)."""
        low, high = decided_band(self.trials)
        return (low is None or low >= knee * BAND_REACH[0]) and (
            high is None or high <= knee * BAND_REACH[1]
        )

    def _show(self, rate: float, end: str, knee: float, floor: float, ceiling: float) -> bool:
        """Run firm trials from ``rate`` outwards until this end of the band is shown
        (True; also when it already is, near enough the knee, or when the trials run
        out), or until one comes out the other way (False: the law is refitted)."""
        low, high = decided_band(self.trials)
        if end == "low" and low is not None and low >= knee * BAND_REACH[0]:
            return True
        if end == "high" and high is not None and high <= knee * BAND_REACH[1]:
            return True
        want = "pass" if end == "low" else "fail"
        for _ in range(SETTLE_TRIALS):
            if not floor <= rate <= ceiling:
                return True  # nowhere left to look: the end stays unknown
            self._run(rate, "place", self.confirm)
            got = self.trials[-1].settled
            if got == want:
                return True
            if got != "inconclusive":
                return False
            rate = rate * SETTLE_STEP if end == "low" else rate / SETTLE_STEP
        return True

    def _settle(self, lo: float, hi: float, floor: float, ceiling: float) -> None:
        """Try rates further out until each end of the band is shown (see the docstring)."""
        rate = lo
        for _ in range(SETTLE_TRIALS):
            if decided_band(self.trials)[0] is not None or rate * SETTLE_STEP < floor:
                break
            rate *= SETTLE_STEP
            self._run(rate, "settle", self.confirm)
        rate = hi
        for _ in range(SETTLE_TRIALS):
            if decided_band(self.trials)[1] is not None or rate / SETTLE_STEP > ceiling:
                break
            rate /= SETTLE_STEP
            self._run(rate, "settle", self.confirm)

    def _unbracketed(self, floor: float, ceiling: float) -> KneeResult:
        result = self._result()
        if all(t.passed for t in self.trials):
            result.note = f"every SLO held up to the ceiling, {ceiling:g}/s: the knee is higher"
        else:
            result.note = f"SLOs failed even at the floor, {floor:g}/s"
        return result

    def _result(self) -> KneeResult:
        knee, _ = band(self.trials)
        shown = decided_band(self.trials)
        fitted = fitted_knee(self.trials, shown)
        method = "bisection"
        reading = knee_reading(self.trials) if self.place else None
        if reading is not None and (knee is not None or shown[0] is not None):
            knee, method = _clip(reading[0], shown), reading[1]
        elif fitted is not None and knee is not None:
            knee, method = fitted, "fit"
        if shown[0] is not None and knee is not None and knee < shown[0]:
            knee, method = shown[0], "shown to hold"
        has_band = shown != (None, None)
        return KneeResult(knee, shown if has_band else None, self.trials, method=method)


MAX_MISS_FACTOR = 10.0  # a trial missing 10x the allowed share is far past the knee: unfit


def fitted_knee(
    trials: list[TrialRecord], shown: tuple[float | None, float | None] = (None, None)
) -> float | None:
    """Where the trials' miss share crosses the share an SLO allows, pooled over trials.

    A single trial near the knee decides little: its miss share (``1 - F(t)``) has a
    wide interval, and bisecting on it wanders by the noise. Every trial that missed
    some requests but not ten times the allowance (``detail["within"]``: share, n,
    needed, per SLO) is a point of ``log(miss share)`` against rate, nearly linear
    near the knee (exactly so for M/M/1, where ``1 - F(t) = exp(-(mu - lam) t)``); a
    weighted least-squares line (weight: the misses, whose count sets each log's
    variance) is solved for ``log(1 - needed)``. The knee is the lowest such crossing
    over the SLOs, kept inside the tested rates and the decided band. None with fewer
    than two such rates, or a line that does not rise."""
    points: dict[str, list[tuple[float, float, float]]] = {}
    for t in trials:
        for w in t.detail.get("within") or []:
            miss = 1.0 - float(w["share"])
            allowed = 1.0 - float(w["needed"])
            if 0.0 < miss <= MAX_MISS_FACTOR * allowed and allowed > 0:
                points.setdefault(str(w["spec"]), []).append((t.rate_rps, miss, w["n"] * miss))
    crossings = []
    for spec, pts in points.items():
        needed = next(
            float(w["needed"])
            for t in trials
            for w in t.detail.get("within") or []
            if w["spec"] == spec
        )
        k = _crossing(pts, math.log(1.0 - needed))
        if k is not None:
            crossings.append(k)
    if not crossings:
        return None
    tested = [t.rate_rps for t in trials]
    return _clip(min(max(min(crossings), min(tested)), max(tested)), shown)


def _crossing(points: list[tuple[float, float, float]], target: float) -> float | None:
    if len({p[0] for p in points}) < 2:
        return None
    x = [p[0] for p in points]
    y = [math.log(p[1]) for p in points]
    w = [p[2] for p in points]
    sw = sum(w)
    mx = sum(wi * xi for wi, xi in zip(w, x, strict=True)) / sw
    my = sum(wi * yi for wi, yi in zip(w, y, strict=True)) / sw
    sxx = sum(wi * (xi - mx) ** 2 for wi, xi in zip(w, x, strict=True))
    sxy = sum(wi * (xi - mx) * (yi - my) for wi, xi, yi in zip(w, x, y, strict=True))
    if sxx <= 0 or sxy <= 0:
        return None
    slope = sxy / sxx
    return mx + (target - my) / slope


def decided_band(trials: list[TrialRecord]) -> tuple[float | None, float | None]:
    """``(L, H)``: the highest rate shown to hold and the lowest shown to fail."""
    firm = [t for t in trials if t.firm]
    rates = sorted({t.rate_rps for t in firm})
    at = {r: {t.settled for t in firm if t.rate_rps == r} for r in rates}
    low = None
    for r in rates:
        if "fail" in at[r]:
            break
        if at[r] == {"pass"}:
            low = r
    high = None
    for r in reversed(rates):
        if "pass" in at[r]:
            break
        if at[r] == {"fail"}:
            high = r
    return low, high


def band(trials: list[TrialRecord]) -> tuple[float | None, tuple[float, float] | None]:
    """(knee, band) on the point estimates alone, from every trial so far."""
    rates = sorted({t.rate_rps for t in trials})
    all_pass = {r: all(t.passed for t in trials if t.rate_rps == r) for r in rates}
    all_fail = {r: not any(t.passed for t in trials if t.rate_rps == r) for r in rates}
    low = None
    for r in rates:
        if not all_pass[r]:
            break
        low = r
    high = None
    for r in reversed(rates):
        if not all_fail[r]:
            break
        high = r
    if low is None or high is None:
        return low, None
    return low, (low, high)


def level_knee(trials: list[TrialRecord]) -> float | None:
    """Where the trials' levels cross their thresholds (the lowest rate over the SLOs).

    Each trial keeps, per SLO, the metric's value at the share needed (``within``:
    ``level_ms``, its p99 for a p99 SLO). Between the highest rate whose level is under
    the threshold and the lowest above it (the levels' bracket), the crossing is read on
    a straight line of the level's log against the rate. That line sits between the
    shapes a knee takes: a queue's tail grows like ``1 / (C - rate)`` (an M/M/1's p99 is
    ``ln(100) / (mu - rate)``), which the line reads a few percent low across a bracket
    of +-20% (M/M/1 at 0.85x and 1.27x its knee: 4.5% low); a batching engine's TTFT,
    flat until its slots fill, climbs faster, which :mod:`tailwise.knee_law`'s
    ``a + b / (C - rate)`` fitted to it read 14% high (the demo LLM's twin, the line
    within 1%). Without a bracket the law extrapolates, kept within half the lowest
    and twice the highest rate tried. None when no SLO has two levels to go on.

    Where trials read as one FIFO server fed by Poisson sends, the FIFO queue model
    gives the crossing itself (:func:`_model_crossing`), from one trial at any load."""
    reading = knee_reading(trials)
    return reading[0] if reading is not None else None


def knee_reading(trials: list[TrialRecord]) -> tuple[float, str] | None:
    """``(rate, method)`` of :func:`level_knee`: the lowest crossing over the SLOs, and
    how it was read (``queue model`` or ``levels``)."""
    crossings = []
    for points in _levels(trials).values():
        rate, method = _model_crossing(points), "queue model"
        if rate is None:
            firm = [p for p in points if p.firm]
            rate = _level_crossing(firm) if _brackets(firm) else None
            method = "levels"
        if rate is None:
            rate = _level_crossing(points)
        if rate is not None and rate > 0:
            crossings.append((rate, method))
    return min(crossings) if crossings else None


def _model_crossing(points: list[_Level]) -> float | None:
    """The FIFO queue model's rate at the threshold (``within.model_rps``), averaged
    over the trials that read one, weighted by their requests; the firm trials' alone
    where any has one (long and near the knee, where a service that slows with the load
    shows). One FIFO server's service law does not change with the rate, so the model
    reads the knee from every service time of a run, where a level rests on its
    excursions: the M/M/1 knee's high trial read a p99 of 938 ms where the steady
    state's is 523 ms, and the levels' line put the knee 12% low."""
    read = [p for p in points if p.model_rps is not None and p.tail > 0]
    use = [p for p in read if p.firm] or read
    if not use:
        return None
    return sum(p.model_rps * p.tail for p in use if p.model_rps) / sum(p.tail for p in use)


def _brackets(points: list[_Level]) -> bool:
    """Whether some level is under its threshold and a higher rate's above it. The firm
    trials' levels are read alone when they bracket the knee: a short steering trial
    near the knee starts from an empty queue that has not filled in its 20 s, so its
    level reads low (the demo LLM server at 15.55/s: a TTFT p99 of 180 ms in 20 s where
    a 300 s run has 1.2-1.9 s), and taken for a point under the threshold it put the
    knee 25% too high."""
    under = [p.rate_rps for p in points if p.level_ms is not None and p.level_ms <= p.threshold_ms]
    over = [p.rate_rps for p in points if p.level_ms is None or p.level_ms > p.threshold_ms]
    return bool(under and over and max(under) < max(over))


def _level_crossing(points: list[_Level]) -> float | None:
    threshold = points[0].threshold_ms
    below = [p for p in points if p.level_ms is not None and p.level_ms <= threshold]
    lo = max(below, key=lambda p: p.rate_rps, default=None)
    above = [
        p
        for p in points
        if (p.level_ms is None or p.level_ms > threshold)
        and (lo is None or p.rate_rps > lo.rate_rps)
    ]
    hi = min(above, key=lambda p: p.rate_rps, default=None)
    if lo is not None and hi is not None:
        if hi.level_ms is not None and lo.level_ms:
            slope = math.log(hi.level_ms / lo.level_ms) / (hi.rate_rps - lo.rate_rps)
            return lo.rate_rps + math.log(threshold / lo.level_ms) / slope
        return None
    law = knee_law.fit([p.point() for p in points], threshold)
    by_law = law.rate_at(threshold) if law is not None else None
    if by_law is None:
        return None
    tried = [p.rate_rps for p in points]
    return min(max(by_law, min(tried) / 2), max(tried) * 2)


@dataclass(frozen=True)
class _Level:
    rate_rps: float
    level_ms: float | None  # None: failures reach the share needed
    threshold_ms: float
    tail: float  # values beyond the level, n (1 - needed): the law's weight
    firm: bool  # from a trial at the search's confidence (a long one near the knee)
    model_rps: float | None = None  # the FIFO queue model's rate at the threshold

    def point(self) -> knee_law.Point:
        level = self.level_ms if self.level_ms is not None else math.inf
        return knee_law.Point(self.rate_rps, level, self.tail)


def _levels(trials: list[TrialRecord]) -> dict[str, list[_Level]]:
    """Each SLO's levels over the trials that kept one."""
    out: dict[str, list[_Level]] = {}
    for t in trials:
        for w in t.detail.get("within") or []:
            threshold = w.get("threshold_ms")
            if threshold is None or "level_ms" not in w:
                continue
            level = None if w["level_ms"] is None else float(w["level_ms"])
            tail = float(w.get("n") or 0) * (1.0 - float(w["needed"]))
            model = None if w.get("model_rps") is None else float(w["model_rps"])
            point = _Level(t.rate_rps, level, float(threshold), tail, t.firm, model)
            out.setdefault(str(w["spec"]), []).append(point)
    return out


def _clip(knee: float, shown: tuple[float | None, float | None]) -> float:
    lo, hi = shown
    if lo is not None:
        knee = max(knee, lo)
    if hi is not None:
        knee = min(knee, hi)
    return knee
