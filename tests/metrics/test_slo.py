"""SLO specs: the three kinds, and errors counted as misses."""

from __future__ import annotations

import numpy as np
import pytest

from tailwise.errors import BadInput
from tailwise.metrics.slo import evaluate, good_mask, parse_slo
from tailwise.records import Records
from tests.synthetic import make_records

MS = 1_000_000


def records(latencies_ms: list[float], errors: list[str] | None = None) -> Records:
    n = len(latencies_ms)
    sched = np.arange(n, dtype=np.int64) * 10 * MS
    lat = (np.array(latencies_ms) * MS).astype(np.int64)
    return make_records(sched, lat, errors or [""] * n, (0, 2**62))


def test_parse_kinds() -> None:
    d = parse_slo("latency<=200ms")
    assert (d.kind, d.metric, d.threshold, d.target) == ("deadline", "latency", 200 * MS, 0.99)
    assert parse_slo("latency<=200ms@99.9%").target == pytest.approx(0.999)
    o = parse_slo("p99.9(ttft)<=1s")
    assert (o.kind, o.stat, o.metric, o.threshold) == ("objective", "p99.9", "ttft", 10**9)
    assert parse_slo("mean(service)<=20ms").stat == "mean"
    r = parse_slo("error_rate<=1%")
    assert (r.kind, r.threshold) == ("rate", 0.01)
    assert parse_slo("goodput>=90/s").threshold == 90.0


@pytest.mark.parametrize(
    "bad",
    [
        "latency<200ms",
        "p99(latency)<=fast",
        "p101(latency)<=1s",
        "throughput<=5/s",
        "lat<=1s",
        "",
        "p99(latency)",
    ],
)
def test_bad_specs_name_the_flag(bad: str) -> None:
    with pytest.raises(BadInput, match="--slo"):
        parse_slo(bad)


def test_deadline_attainment_counts_errors_as_misses() -> None:
    r = records([10] * 97 + [300, 10, 10], [""] * 98 + ["http_5xx", "timeout"])
    slo = parse_slo("latency<=200ms")
    good = good_mask(r, [slo])
    assert good.sum() == 97  # one too slow, two failed
    [entry] = evaluate(r, [slo], {}, r.in_window)
    assert entry["attainment"] == pytest.approx(0.97)
    assert entry["passed"] is False


def test_percentile_objective_treats_failures_as_infinite() -> None:
    lat = [10.0] * 100
    ok = evaluate(records(lat), [parse_slo("p99(latency)<=20ms")], {}, np.ones(100, bool))[0]
    assert ok["passed"] and ok["value"] == pytest.approx(10.0)
    errs = [""] * 98 + ["reset", "reset"]  # 2% failures sit above the p99
    bad = evaluate(records(lat, errs), [parse_slo("p99(latency)<=20ms")], {}, np.ones(100, bool))[0]
    assert bad["passed"] is False and bad["value"] is None


def test_rate_objectives() -> None:
    r = records([1.0] * 10)
    rates = {"error_rate": 0.02, "attainment": 0.995, "goodput_rps": 80.0, "throughput_rps": 100.0}
    got = evaluate(
        r,
        [
            parse_slo("error_rate<=1%"),
            parse_slo("attainment>=99%"),
            parse_slo("goodput>=90/s"),
            parse_slo("throughput>=90/s"),
        ],
        rates,
        r.in_window,
    )
    assert [e["passed"] for e in got] == [False, True, False, True]


# ---- k6-style thresholds ------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "metric", "stat", "threshold_ns"),
    [
        ("p(99)<500ms", "latency", "p99", 500 * MS - 1),
        ("p(95)<=1s", "latency", "p95", 1000 * MS),
        ("avg<200", "latency", "mean", 200 * MS - 1),  # a bare number is ms, as in k6
        ("med<=15", "latency", "p50", 15 * MS),
        ("max<2s", "latency", "max", 2000 * MS - 1),
        ("p(99.9)<=250ms", "latency", "p99.9", 250 * MS),
        ("ttft:p(99)<1s", "ttft", "p99", 1000 * MS - 1),
        ("  p( 90 ) <= 30ms ", "latency", "p90", 30 * MS),
    ],
)
def test_k6_thresholds_are_objectives(spec: str, metric: str, stat: str, threshold_ns: int) -> None:
    slo = parse_slo(spec)
    assert (slo.kind, slo.metric, slo.stat, slo.threshold) == (
        "objective",
        metric,
        stat,
        threshold_ns,
    )


def test_k6_strict_less_than_fails_at_the_threshold() -> None:
    lat = [500.0] * 100  # every request takes exactly 500 ms
    strict = evaluate(records(lat), [parse_slo("p(99)<500ms")], {}, np.ones(100, bool))[0]
    loose = evaluate(records(lat), [parse_slo("p(99)<=500ms")], {}, np.ones(100, bool))[0]
    assert strict["passed"] is False and loose["passed"] is True


def test_k6_rate_is_the_error_rate() -> None:
    r = records([1.0] * 10)
    at = {"error_rate": 0.01}
    strict, loose, pct = (parse_slo(s) for s in ("rate<0.01", "rate<=0.01", "rate<=1%"))
    assert strict.kind == "rate" and strict.stat == "error_rate"
    got = evaluate(r, [strict, loose, pct], at, r.in_window)
    assert [e["passed"] for e in got] == [False, True, True]
    below = evaluate(r, [strict], {"error_rate": 0.0099}, r.in_window)
    assert below[0]["passed"] is True


@pytest.mark.parametrize(
    "bad",
    [
        "p(101)<1s",
        "p(0)<1s",
        "p(9.9.9)<1s",
        "p(99)>500ms",
        "p(99)<fast",
        "p(99)<500parsecs",
        "nonsense:p(99)<1s",
        "rate<0",
        "rate<2",
        "rate>0.01",
        "avg<0",
        "p(99)<500ms; rm -rf /",
        "<script>alert(1)</script>",
        "p(" + "9" * 5000 + ")<1s",
        "p(99)<1e999",
        "\x00p(99)<1s",
    ],
)
def test_k6_hostile_thresholds_are_one_line_errors(bad: str) -> None:
    with pytest.raises(BadInput, match="--slo") as exc:
        parse_slo(bad)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 1200
