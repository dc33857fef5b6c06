"""Knee search: the highest offered rate at which every SLO still holds.

Engine-agnostic: it calls ``trial(rate_rps) -> Outcome`` and never knows
whether a load generator or a simulator ran it.

1. **Bracket**: from ``start_rps``, double while trials pass (halve while they
   fail) until one rate passes and the next fails.
2. **Bisect** the bracket until ``(hi - lo) / lo <= resolution``.
3. **Band**: run the final ``lo`` and ``hi`` ``repeats`` more times. Noise near
   the knee shows up as disagreement. ``band_rps`` is ``[L, H]``: ``L`` is the
   highest tested rate at which every trial (at it and at every lower tested
   rate) passed; ``H`` is the lowest tested rate at which every trial (at it
   and at every higher tested rate) failed. The knee reported is ``L``: the
   highest rate shown to hold, never an interpolation.

A trial the engine could not run honestly (a saturated load generator, an
interrupted run) stops the search with :class:`KneeAborted`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tailwise.errors import TailwiseError


class KneeAborted(TailwiseError):
    """A trial could not be judged (generator saturated, interrupted); the reason says which."""

    exit_code = 3

    def __init__(self, message: str, result: KneeResult | None = None) -> None:
        super().__init__(message)
        self.result = result  # the trials run before the search stopped


@dataclass(frozen=True)
class Outcome:
    passed: bool
    invalid_reason: str = ""  # non-empty: the search stops
    detail: dict[str, Any] = field(default_factory=dict)  # goodput, p99...: kept in trials


@dataclass(frozen=True)
class TrialRecord:
    rate_rps: float
    passed: bool
    phase: str  # "bracket" | "bisect" | "repeat"
    detail: dict[str, Any]


@dataclass
class KneeResult:
    knee_rps: float | None
    band_rps: tuple[float, float] | None
    trials: list[TrialRecord]
    note: str = ""

    def to_json(self, slos: list[str]) -> dict[str, Any]:
        return {
            "knee_rps": self.knee_rps,
            "band_rps": list(self.band_rps) if self.band_rps else None,
            "trials": [
                {"rate_rps": t.rate_rps, "passed": t.passed, "phase": t.phase, **t.detail}
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
    def summary(self) -> dict[str, Any]: ...


def knee_rps(steps: Sequence[Judged]) -> float | None:
    """The highest rate at which this step and every lower one passed (None if the first failed).

    None for closed-loop steps: they have no offered rate to find a knee over."""
    if any(s.summary.get("mode") == "closed" for s in steps):
        return None
    knee = None
    for step in sorted(steps, key=lambda s: s.rate_rps):
        if step.summary["verdict"] != "pass":
            break
        knee = step.rate_rps
    return knee


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
    ) -> None:
        if not 0 < resolution < 1:
            raise ValueError("resolution must be in (0, 1)")
        self.trial = trial
        self.resolution = resolution
        self.repeats = repeats
        self.max_trials = max_trials
        self.on_trial = on_trial or (lambda t: None)
        self.trials: list[TrialRecord] = []

    def _run(self, rate: float, phase: str) -> bool:
        if len(self.trials) >= self.max_trials:
            raise KneeAborted(f"no knee within {self.max_trials} trials")
        out = self.trial(rate)
        if out.invalid_reason:
            raise KneeAborted(f"trial at {rate:g}/s could not be judged: {out.invalid_reason}")
        record = TrialRecord(rate, out.passed, phase, out.detail)
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
            while (hi - lo) / lo > self.resolution:
                mid = (lo + hi) / 2
                if self._run(mid, "bisect"):
                    lo = mid
                else:
                    hi = mid
            for _ in range(self.repeats):
                self._run(lo, "repeat")
                self._run(hi, "repeat")
        except KneeAborted as exc:
            result = self._result()
            result.note = str(exc)
            raise KneeAborted(str(exc), result) from None
        return self._result()

    def _unbracketed(self, floor: float, ceiling: float) -> KneeResult:
        result = self._result()
        if all(t.passed for t in self.trials):
            result.note = f"every SLO held up to the ceiling, {ceiling:g}/s: the knee is higher"
        else:
            result.note = f"SLOs failed even at the floor, {floor:g}/s"
        return result

    def _result(self) -> KneeResult:
        return KneeResult(*band(self.trials), self.trials)


def band(trials: list[TrialRecord]) -> tuple[float | None, tuple[float, float] | None]:
    """(knee, band) from every trial so far; see the module docstring."""
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
