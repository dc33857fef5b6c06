"""The option forms only ``tailwise plan`` uses: numbers, lists, NAME=VALUE pairs, targets.

Each parser raises :class:`BadInput` naming the CLI option on anything out of
range; durations and fractions use the forms of :mod:`tailwise.units`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TypeVar

from tailwise.errors import BadInput
from tailwise.units import parse_duration_ns, parse_fraction

T = TypeVar("T")

_NUMBER = re.compile(r"^\s*\$?\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*x?\s*$")
_LATENCY_SLO = re.compile(r"^\s*(p[0-9.]+|mean)\s*(?:\(\s*latency\s*\))?\s*<=\s*(.+?)\s*$")
SLO_FORM = "a latency target such as p99<=200ms, p99(latency)<=200ms or mean<=50ms"


def parse_positive(
    text: str, field: str, expected: str = "a positive number", *, allow_zero: bool = False
) -> float:
    """``"3"``, ``"$3"`` or ``"2x"`` -> a finite number > 0 (or >= 0 with ``allow_zero``)."""
    m = _NUMBER.match(text) if isinstance(text, str) else None
    value = float(m.group(1)) if m else math.nan
    if not (math.isfinite(value) and (value > 0 or (allow_zero and value == 0))):
        raise BadInput(field, text, expected)
    return value


def parse_list(text: str, field: str, parse: Callable[[str, str], T]) -> list[T]:
    """``"10,100,1000"`` -> one parsed value per comma-separated item."""
    items = [s.strip() for s in text.split(",")] if isinstance(text, str) else []
    if not items or not all(items):
        raise BadInput(field, text, "a comma-separated list, e.g. 10,100,1000")
    return [parse(s, field) for s in items]


def parse_pairs(items: tuple[str, ...], field: str) -> list[tuple[str, str]]:
    """``("model=70%", ...)`` -> ``[("model", "70%"), ...]``; names are unique."""
    pairs: list[tuple[str, str]] = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise BadInput(field, item, "NAME=VALUE, e.g. model=70% or model=1400ms")
        if name.strip() in (n for n, _ in pairs):
            raise BadInput(field, item, "each stage once")
        pairs.append((name.strip(), value.strip()))
    return pairs


def parse_utilizations(text: str, field: str = "--utilization") -> list[float]:
    """Queue utilizations: fractions strictly below 1 (a full queue never settles)."""
    levels = parse_list(text, field, parse_fraction)
    if any(u >= 1.0 for u in levels):
        raise BadInput(
            field, text, "utilizations below 100%: a queue at or over capacity grows forever"
        )
    return levels


def parse_offered_loads(text: str, field: str = "--utilization") -> list[float]:
    """Offered loads of a bounded queue (M/M/c/K): fractions >= 0, 100% and over allowed
    (arrivals beyond capacity are turned away, so the queue settles at any load)."""

    def one(item: str, where: str) -> float:
        body = item.strip()
        try:
            value = float(body[:-1]) / 100 if body.endswith("%") else float(body)
        except ValueError:
            value = -1.0
        if not (value >= 0 and math.isfinite(value)):
            raise BadInput(where, item, "an offered load such as 80% or 1.2 (>= 0)")
        return value

    return parse_list(text, field, one)


def parse_stages(items: tuple[str, ...]) -> tuple[list[tuple[str, float]], bool]:
    """``--stage`` values: all shares (``70%``, ``0.7``) or all times (``1400ms``)."""
    stages: list[tuple[str, float]] = []
    kinds = set()
    for name, value in parse_pairs(items, "--stage"):
        is_time = value[-1].isalpha()
        kinds.add(is_time)
        if is_time:
            stages.append((name, parse_duration_ns(value, "--stage", allow_zero=False) / 1e9))
        else:
            stages.append((name, parse_fraction(value, "--stage")))
    if len(kinds) > 1:
        raise BadInput("--stage", " ".join(items), "all shares (model=70%) or all times (1400ms)")
    return stages, kinds == {True}


def parse_speedup(text: str, field: str = "--speedup") -> float:
    """``"2"``, ``"10x"`` or ``"inf"`` (the stage vanishes)."""
    if text.strip().lower() in ("inf", "infinite"):
        return math.inf
    return parse_positive(text, field, "a speedup factor such as 2, 10x or inf")


def parse_latency_slo(text: str) -> tuple[str, float, float]:
    """``"p99<=200ms"`` -> ``("p99", 0.99, 0.2)``; ``"mean<=50ms"`` -> ``("mean", nan, 0.05)``."""
    m = _LATENCY_SLO.match(text) if isinstance(text, str) else None
    if m is None:
        raise BadInput("--slo", text, SLO_FORM)
    stat, value = m.groups()
    q = math.nan
    if stat != "mean":
        try:
            q = float(stat[1:]) / 100
        except ValueError:
            raise BadInput("--slo", text, SLO_FORM) from None
        if not 0 < q < 1:
            raise BadInput("--slo", text, "a percentile between p0 and p100 (exclusive), e.g. p99")
    return stat, q, parse_duration_ns(value, "--slo", allow_zero=False) / 1e9
