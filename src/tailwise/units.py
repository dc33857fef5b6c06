"""Parsing of the human strings users type: durations, rates, percentages.

Every parser returns integers in a named unit (``parse_duration_ns``) or a float
with the unit in the name (``parse_rate_rps``), and raises :class:`BadInput`
naming the field and the expected form on anything else. Parsers are total:
no input makes them raise anything but ``BadInput``.
"""

from __future__ import annotations

import math
import re

from tailwise.errors import BadInput
from tailwise.limits import MAX_RATE_RPS, MIN_RATE_RPS, within

_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "min": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_PER_SECOND = {"s": 1.0, "sec": 1.0, "m": 1 / 60, "min": 1 / 60, "h": 1 / 3600, "ms": 1000.0}
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?"
_DURATION_RE = re.compile(rf"^\s*({_NUMBER})\s*(ns|us|µs|ms|s|min|m|h)\s*$")
_RATE_RE = re.compile(rf"^\s*({_NUMBER})\s*(?:(?:/|\s*per\s*)(s|sec|min|m|h|ms)|rps)?\s*$")
_PERCENT_RE = re.compile(rf"^\s*({_NUMBER})\s*%\s*$")

DURATION_FORM = "a duration such as 250ms, 30s, 1.5m, 500us"
RATE_FORM = "a rate such as 100/s, 6000/min or 50 (per second)"


def parse_duration_ns(text: str, field: str = "duration", *, allow_zero: bool = True) -> int:
    """``"250ms"`` -> 250_000_000. Units: ns, us, ms, s, m/min, h. A unit is required."""
    m = _DURATION_RE.match(text) if isinstance(text, str) else None
    if m is None:
        raise BadInput(field, text, DURATION_FORM)
    value = float(m.group(1)) * _NS_PER_UNIT[m.group(2)]
    if not math.isfinite(value) or value > 10 * 365 * 86400e9:
        raise BadInput(field, text, DURATION_FORM + " (at most ten years)")
    ns = round(value)
    if ns == 0 and not allow_zero:
        raise BadInput(field, text, "a duration greater than zero")
    return ns


def parse_rate_rps(text: str, field: str = "rate") -> float:
    """``"100/s"`` -> 100.0 requests per second; must be positive and finite."""
    m = _RATE_RE.match(text) if isinstance(text, str) else None
    if m is None:
        raise BadInput(field, text, RATE_FORM)
    value = float(m.group(1)) * _PER_SECOND[m.group(2) or "s"]
    if not math.isfinite(value) or not MIN_RATE_RPS <= value <= MAX_RATE_RPS:
        # Below the floor a gap overflows int64 nanoseconds; above it no client keeps up.
        raise BadInput(field, text, "a rate from 1e-6/s to 1e9/s, such as 100/s")
    return value


def parse_fraction(text: str, field: str) -> float:
    """``"99%"`` or ``"0.99"`` -> 0.99, within [0, 1]."""
    m = _PERCENT_RE.match(text) if isinstance(text, str) else None
    try:
        value = float(m.group(1)) / 100 if m else float(text)
    except (TypeError, ValueError):
        raise BadInput(field, text, "a percentage such as 99% or a fraction such as 0.99") from None
    if not 0.0 <= value <= 1.0:
        raise BadInput(field, text, "a percentage between 0% and 100%")
    return value


CONFIDENCE_RANGE = (0.8, 0.999)  # how sure a verdict may be asked to be


def parse_confidence(value: str | float, field: str = "--confidence") -> float:
    """``"95%"``, ``"0.95"`` or ``0.95`` -> 0.95: how sure a verdict must be (a wrong pass
    or fail at most ``1 -`` it), within :data:`CONFIDENCE_RANGE`."""
    lo, hi = CONFIDENCE_RANGE
    expected = f"a level from {100 * lo:g}% to {100 * hi:g}%, e.g. 95%"
    try:
        level = parse_fraction(str(value), field) if not isinstance(value, float) else value
    except BadInput:
        raise BadInput(field, value, expected) from None
    if isinstance(value, bool) or not lo <= level <= hi or level != level:
        raise BadInput(field, value, expected)
    return level


def parse_count(text: str, field: str, *, minimum: int = 1) -> int:
    """A whole number >= ``minimum`` (underscores and 1e6-style exponents allowed)."""
    try:
        value = float(text.replace("_", "")) if isinstance(text, str) else float(text)
    except ValueError:
        raise BadInput(field, text, f"a whole number >= {minimum}") from None
    if not math.isfinite(value) or value != int(value) or value < minimum or value > 2**53:
        raise BadInput(field, text, f"a whole number >= {minimum}")
    return int(value)


def bounded_count(text: str, field: str, limit: int, what: str) -> int:
    """A whole number from 1 to ``limit`` (:func:`parse_count`'s forms: 1_000, 1e3)."""
    n = parse_count(text, field)
    within(field, n, limit, what, given=text)
    return n


def format_duration_ns(ns: int | float) -> str:
    """Compact human form used in tables: 5.00ms, 1.20s, 850us."""
    if ns != ns:  # NaN
        return "-"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.2f}s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f}ms"
    if a >= 1e3:
        return f"{ns / 1e3:.0f}us"
    return f"{ns:.0f}ns"


SLOW_FORM = "<share>x<factor>, e.g. 1%x10: one request in 100 is 10x slower"
STALL_FORM = "S/P, e.g. 1s/10s: a stall of S at the start of every period P"


def parse_slow_share(text: str, field: str, *, max_factor: float = math.inf) -> tuple[float, float]:
    """``"1%x10"`` -> (0.01, 10.0): a share of requests and how many times slower."""
    share, sep, k = text.partition("x") if isinstance(text, str) else ("", "", "")
    try:
        factor = float(k)
    except ValueError:
        factor = math.nan
    if not sep or not math.isfinite(factor) or not 1.0 <= factor <= max_factor:
        raise BadInput(field, text, SLOW_FORM)
    return parse_fraction(share, field), factor


def parse_stall_ns(
    text: str, field: str, *, default_period: str | None = None, allow_zero: bool = False
) -> tuple[int, int]:
    """``"1s/10s"`` -> (stall_ns, period_ns); ``"1s"`` alone only with a default period."""
    stall, sep, period = text.partition("/") if isinstance(text, str) else ("", "", "")
    if not sep and default_period is None:
        raise BadInput(field, text, STALL_FORM)
    stall_ns = parse_duration_ns(stall, field, allow_zero=allow_zero)
    period_ns = parse_duration_ns(period or str(default_period), field, allow_zero=False)
    if stall_ns >= period_ns:
        raise BadInput(field, text, STALL_FORM + ", with S shorter than P")
    return stall_ns, period_ns
