"""Parsers of what users type: exact values for the documented forms, BadInput for anything else."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailwise.errors import BadInput
from tailwise.units import (
    format_duration_ns,
    parse_count,
    parse_duration_ns,
    parse_fraction,
    parse_rate_rps,
)


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("250ms", 250_000_000),
        ("30s", 30_000_000_000),
        ("1.5m", 90_000_000_000),
        ("500us", 500_000),
        ("2h", 7_200_000_000_000),
        ("0s", 0),
        (" 5 ms ", 5_000_000),
        ("1e3ms", 1_000_000_000),
        ("100ns", 100),
    ],
)
def test_duration_forms(text: str, ns: int) -> None:
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize(
    ("text", "rps"),
    [
        ("100/s", 100.0),
        ("6000/min", 100.0),
        ("50", 50.0),
        ("7200/h", 2.0),
        ("2.5/s", 2.5),
        ("30 per s", 30.0),
        ("40rps", 40.0),
    ],
)
def test_rate_forms(text: str, rps: float) -> None:
    assert parse_rate_rps(text) == pytest.approx(rps)


@pytest.mark.parametrize("bad", ["", "10", "ms", "-5s", "5 lightyears", "nan s", "1e400s"])
def test_bad_duration_names_field_and_form(bad: str) -> None:
    with pytest.raises(BadInput) as e:
        parse_duration_ns(bad, "--warmup")
    assert str(e.value).startswith("--warmup: got")
    assert "250ms" in str(e.value)


@pytest.mark.parametrize("bad", ["-5/s", "0/s", "fast", "5/fortnight", "inf"])
def test_bad_rate(bad: str) -> None:
    with pytest.raises(BadInput, match="--rate"):
        parse_rate_rps(bad, "--rate")


def test_zero_duration_refused_where_it_makes_no_sense() -> None:
    with pytest.raises(BadInput, match="greater than zero"):
        parse_duration_ns("0s", "--duration", allow_zero=False)


def test_fractions_and_counts() -> None:
    assert parse_fraction("99.9%", "f") == pytest.approx(0.999)
    assert parse_fraction("0.5", "f") == 0.5
    assert parse_count("1_000", "n") == 1000
    for bad in ("101%", "-1%", "x"):
        with pytest.raises(BadInput):
            parse_fraction(bad, "f")
    for bad in ("0", "1.5", "many"):
        with pytest.raises(BadInput):
            parse_count(bad, "n")


@given(st.text(max_size=30))
def test_parsers_are_total(text: str) -> None:
    """No input makes a parser raise anything but BadInput (never a traceback)."""
    for parse in (
        lambda t: parse_duration_ns(t, "d"),
        lambda t: parse_rate_rps(t, "r"),
        lambda t: parse_fraction(t, "f"),
        lambda t: parse_count(t, "c"),
    ):
        with contextlib.suppress(BadInput):
            parse(text)


@given(st.integers(min_value=0, max_value=10**8), st.sampled_from(["ns", "us", "ms", "s"]))
def test_duration_round_trip(value: int, unit: str) -> None:
    scale = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}[unit]
    assert parse_duration_ns(f"{value}{unit}") == value * scale


def test_format_duration() -> None:
    assert format_duration_ns(5_000_000) == "5.00ms"
    assert format_duration_ns(1_200_000_000) == "1.20s"
    assert format_duration_ns(850_000) == "850us"
