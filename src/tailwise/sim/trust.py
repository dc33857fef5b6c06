"""Whether a calibrated model may answer a question: its fit, and the range it was fitted on.

``tailwise calibrate`` writes, in the model's ``calibration:`` block, how well
the model fits (``fit.poor``), what would make a poor fit good (``advice``)
and the range of the measurement (``range``: the highest throughput measured
and its 95% interval, whether a step saturated, and, for an LLM, the prompt
and answer lengths the runs sent). ``plan capacity`` and ``simulate`` read it:

* a **POOR** fit is refused (:func:`require`, one line, exit code 2) unless
  the user accepts it (``--accept-poor-fit``); then every answer is marked
  extrapolated;
* a **rate beyond the measured range** (per replica, above the upper end of
  the 95% interval of the highest throughput measured) is a prediction no
  measurement supports: past a saturated step's throughput the real server
  cannot go, and without a saturated step nobody knows where it stops;
* a **workload outside the calibrated lengths** (a prompt or answer length
  the runs never sent) rests on the step law's shape alone.

An answer that rests on any of these is given, flagged, and exits with
:data:`UNTRUSTED_EXIT` (8) instead of its verdict's code, so a script cannot
mistake it for an answer from a model that fits.

A scenario without a ``calibration:`` block is the user's own model: nothing
here applies to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tailwise.arrivals import is_steady
from tailwise.errors import BadInput, ExitCode, excerpt
from tailwise.sim.llm_scenario import token_range
from tailwise.sim.scenario import Scenario
from tailwise.units import parse_rate_rps

UNTRUSTED_EXIT = (
    ExitCode.UNTRUSTED
)  # an answer given from a model that does not fit, or beyond its range
ACCEPT_FLAG = "--accept-poor-fit"


@dataclass(frozen=True)
class Range:
    """What the runs a model was fitted to covered."""

    throughput_rps: float  # the highest throughput measured
    throughput_edge_rps: float  # the upper end of that throughput's 95% interval
    saturated: bool  # some step was past capacity: the highest throughput is the capacity
    prompt_tokens: tuple[int, int] | None  # LLM: shortest and longest prompt (prefilled)
    output_tokens: tuple[int, int] | None


@dataclass(frozen=True)
class Trust:
    """A calibrated model's fit and range, as its ``calibration:`` block records them."""

    poor: bool
    rms_log_error: float | None
    advice: tuple[str, ...]
    range: Range | None  # None: a model calibrated before the range was recorded

    def rate_beyond(self, per_replica_rps: float | None) -> str | None:
        """Why a rate per replica lies beyond the measured range (None: it does not):
        "above the highest throughput measured, ..."."""
        if per_replica_rps is None or self.range is None:
            return None
        r = self.range
        if per_replica_rps <= r.throughput_edge_rps:
            return None
        where = "a saturated step's" if r.saturated else "no step saturated"
        return (
            f"above the highest throughput measured, {r.throughput_rps:.4g}/s ({where}; "
            f"95% interval up to {r.throughput_edge_rps:.4g}/s)"
        )

    def workload_beyond(self, sc: Scenario) -> list[str]:
        """The LLM workload's lengths the runs never sent."""
        if sc.llm is None or self.range is None:
            return []
        out = []
        for name, seen in (
            ("prompt", self.range.prompt_tokens),
            ("answer", self.range.output_tokens),
        ):
            if seen is None:
                continue
            field = "prompt_tokens" if name == "prompt" else "output_tokens"
            lo, hi = token_range(getattr(sc.llm, field), f"scenario.llm.{field}")
            if lo < seen[0] or hi > seen[1]:
                out.append(
                    f"{name} lengths {_span(lo, hi)} tokens are outside the calibrated "
                    f"{_span(*seen)}"
                )
        return out

    def concerns(self, sc: Scenario, per_replica_rps: float | None) -> list[str]:
        """Everything that makes an answer for ``sc`` at this rate per replica untrusted."""
        out = [self.poor_line()] if self.poor else []
        beyond = self.rate_beyond(per_replica_rps)
        if beyond:
            out.append(f"{per_replica_rps:.4g}/s per replica is {beyond}")
        return out + self.workload_beyond(sc)

    def poor_line(self) -> str:
        rms = f" (rms log error {self.rms_log_error:.3g})" if self.rms_log_error else ""
        return f"the model's fit is POOR{rms}, accepted with {ACCEPT_FLAG}: every answer is a guess"


def _span(lo: int, hi: int) -> str:
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _number(v: Any) -> float | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return float(v) if ok else None


def _tokens(v: Any) -> tuple[int, int] | None:
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return int(v[0]), int(v[1])
    return None


def _range(cal: dict[str, Any]) -> Range | None:
    got = cal.get("range")
    if isinstance(got, dict):
        top = _number(got.get("throughput_rps"))
        if top is not None:
            edge = _number(got.get("throughput_edge_rps")) or top
            return Range(
                top,
                max(edge, top),
                bool(got.get("saturated")),
                _tokens(got.get("prompt_tokens")),
                _tokens(got.get("output_tokens")),
            )
    # A model calibrated before the range was written: its highest throughput, if kept.
    params = cal.get("params")
    top = _number(params.get("highest_throughput_rps")) if isinstance(params, dict) else None
    return Range(top, top, False, None, None) if top is not None else None


def of(sc: Scenario) -> Trust | None:
    """The model's fit and range; None when it is not a calibrated model."""
    cal = sc.calibration
    if not isinstance(cal, dict):
        return None
    fit = cal.get("fit") if isinstance(cal.get("fit"), dict) else {}
    assert isinstance(fit, dict)
    advice = cal.get("advice")
    return Trust(
        poor=fit.get("poor") is True,
        rms_log_error=_number(fit.get("rms_log_error")),
        advice=tuple(str(a) for a in advice) if isinstance(advice, list) else (),
        range=_range(cal),
    )


class PoorFit(BadInput):
    """A POOR calibrated model asked a question without ``--accept-poor-fit``: bad input
    (exit code 2), on one line, with all the advice (not cut to an excerpt)."""

    def __init__(self, field: str, given: str, trust: Trust) -> None:
        fix = "; ".join(trust.advice) or "a sweep that fits (docs/calibrate.md)"
        rms = f", rms log error {trust.rms_log_error:.3g}" if trust.rms_log_error else ""
        expected = (
            f"a calibrated model whose fit is good (this one is POOR{rms}: its answers would "
            f"be guesses). To fit it well: {fix}. Or {ACCEPT_FLAG}: answers marked "
            "extrapolated, exit code 8"
        )
        super().__init__(field, given, expected)
        self.args = (
            f"{excerpt(field, 160)}: got {excerpt(given)!r}, expected {excerpt(expected, 2000)}",
        )


def require(sc: Scenario, accept_poor_fit: bool, field: str, given: str) -> Trust | None:
    """Refuse a POOR calibrated model unless it was accepted; its Trust (None: not calibrated)."""
    trust = of(sc)
    if trust is not None and trust.poor and not accept_poor_fit:
        raise PoorFit(field, given, trust)
    return trust


def scenario_rate_rps(sc: Scenario) -> float | None:
    """The scenario's offered rate per replica, when it has one number."""
    if sc.arrival.rate is None or not is_steady(sc.arrival.process):
        return None
    try:
        rate = parse_rate_rps(sc.arrival.rate, "scenario.arrival.rate")
    except BadInput:
        return None
    return rate / max(sc.replicas, 1)
