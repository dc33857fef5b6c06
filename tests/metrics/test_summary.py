"""summary.json from synthetic records with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from tailwise.metrics.littles import littles_law
from tailwise.metrics.percentiles import distribution_ms, nearest_rank
from tailwise.metrics.slo import parse_slo
from tailwise.metrics.summary import SCHEMA, RunInfo, summarize
from tests.synthetic import make_records

MS = 1_000_000
S = 1_000_000_000


make = make_records


def info(window: tuple[int, int], slos: list[str] | None = None) -> RunInfo:
    return RunInfo(
        source="sim",
        target="t",
        mode="open",
        arrival={"process": "constant"},
        window_ns=window,
        slos=[parse_slo(s) for s in slos or []],
    )


def test_nearest_rank_definition() -> None:
    v = np.arange(1, 101, dtype=float)
    assert nearest_rank(v, 50) == 50 and nearest_rank(v, 99) == 99 and nearest_rank(v, 99.9) == 100
    assert distribution_ms(np.array([], dtype=np.int64))["p99"] is None


def test_accounting_windows_and_rates() -> None:
    n = 1000  # 100/s for 10 s; the first second is warm-up
    sched = np.arange(n, dtype=np.int64) * 10 * MS
    lat = np.full(n, 20 * MS, dtype=np.int64)
    errors = [""] * n
    errors[500], errors[501], errors[502], errors[503] = (
        "reset",
        "timeout",
        "cancelled",
        "not_sent:ended",
    )
    window = (1 * S, 10 * S)
    s = summarize(make(sched, lat, errors, window), info(window, ["latency<=10ms"]))
    assert s["schema"] == SCHEMA
    req = s["requests"]
    assert req["scheduled"] == 900 and req["warmup"]["scheduled"] == 100
    assert (req["ok"], req["failed"], req["timed_out"], req["cancelled"], req["not_sent"]) == (
        896,
        1,
        1,
        1,
        1,
    )
    assert req["accounted"] and req["errors"] == {
        "reset": 1,
        "timeout": 1,
        "cancelled": 1,
        "not_sent:ended": 1,
    }
    assert s["rates"]["offered_rps"] == pytest.approx(100.0)
    assert s["rates"]["goodput_rps"] == 0.0  # every request is slower than 10 ms
    assert s["verdict"] == "fail" and "latency<=10ms" in s["verdict_reason"]
    assert s["latency_ms"]["p50"] == pytest.approx(20.0)


def test_throughput_counts_completions_inside_the_window_only() -> None:
    # A target at 50/s capacity offered 100/s: completions fall behind the schedule.
    n = 1000
    sched = np.arange(n, dtype=np.int64) * 10 * MS
    done = np.arange(1, n + 1, dtype=np.int64) * 20 * MS
    window = (0, 10 * S)
    s = summarize(make(sched, done - sched, [""] * n, window), info(window))
    assert s["rates"]["offered_rps"] == pytest.approx(100.0)
    assert s["rates"]["throughput_rps"] == pytest.approx(50.0, rel=0.01)


def test_littles_law_on_a_steady_queue() -> None:
    n = 20_000
    sched = np.arange(n, dtype=np.int64) * 1 * MS  # 1000/s
    lat = np.random.default_rng(0).integers(1 * MS, 9 * MS, n)
    rec = make(sched, lat, [""] * n, (0, 20 * S))
    ll = littles_law(rec, 0, 20 * S)
    assert ll["l_measured"] == pytest.approx(5.0, rel=0.01)  # 1000/s x 5 ms
    assert ll["rel_gap"] < 0.01


def test_client_lag_invalidates_only_the_verdicts_it_could_flip() -> None:
    # The client sent every request 8 ms late; the server answered each in 1 ms.
    n = 1000
    sched = np.arange(n, dtype=np.int64) * MS
    lag = np.full(n, 8 * MS, dtype=np.int64)
    rec = make(sched, lag + MS, [""] * n, (0, S), lag=lag)
    # 9 ms measured vs a 5 ms objective: the server's share (1 ms) passes, so the
    # client decided it.
    flip = summarize(rec, info((0, S), ["p99(latency)<=5ms"]))
    assert flip["verdict"] == "invalid" and flip["verdict_cause"] == "client"
    assert flip["verdict_reason"].startswith("client lag could flip p99(latency)<=5ms")
    assert "send-lag p99 8.00 ms" in flip["verdict_reason"]
    bound = flip["slos"][0]["server_bound"]
    assert bound["client_could_flip"] and bound["lower"] == pytest.approx(1.0)
    # Against 20 ms the same lag changes nothing: the pass stands, with no bound at all.
    stands = summarize(rec, info((0, S), ["p99(latency)<=20ms"]))
    assert stands["verdict"] == "pass" and stands["generator"]["max_send_lag_ms"] is None
    # Against 0.5 ms even the server's share misses: a certain fail, not the client's.
    fails = summarize(rec, info((0, S), ["p99(latency)<=500us"]))
    assert fails["verdict"] == "fail" and fails["verdict_cause"] is None
    # An explicit --max-send-lag is the user's own bound, and still holds.
    strict = info((0, S), ["p99(latency)<=20ms"])
    strict.max_send_lag_ns = 5 * MS
    over = summarize(rec, strict)
    assert over["verdict"] == "invalid"
    assert over["verdict_reason"].startswith("send-lag p99 8.00 ms > --max-send-lag 5 ms")


def test_no_nan_reaches_json() -> None:
    window = (0, S)
    rec = make(np.array([10 * S], dtype=np.int64), np.array([MS]), [""], window)
    s = summarize(rec, info(window))
    assert s["verdict"] == "invalid"
    assert s["latency_ms"]["p99"] is None
