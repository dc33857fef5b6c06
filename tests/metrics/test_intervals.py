"""Every number says how sure it is: intervals, ``decided`` and steady state in summary.json."""

from __future__ import annotations

import math

import numpy as np
from rich.console import Console

from tailwise.metrics.intervals import CI_KEYS, compose
from tailwise.metrics.percentiles import distribution_ms
from tailwise.metrics.slo import parse_slo
from tailwise.metrics.summary import RunInfo, summarize
from tailwise.report.text import render
from tests.synthetic import make_records

MS = 1_000_000
N = 20_000
MEAN_MS = 10.0  # exponential latencies: the true quantiles are known
TRUE = {
    "p50": MEAN_MS * math.log(2),
    "p90": MEAN_MS * math.log(10),
    "p95": MEAN_MS * math.log(20),
    "p99": MEAN_MS * math.log(100),
    "mean": MEAN_MS,
}


def _summary(
    lat_ns: np.ndarray, slos: list[str] | None = None, errors: list[str] | None = None
) -> dict:
    n = len(lat_ns)
    sched = np.arange(n, dtype=np.int64) * MS  # 1000/s, no warm-up
    window = (0, n * MS)
    records = make_records(sched, lat_ns, errors or [""] * n, window)
    info = RunInfo(
        "sim", "t", "open", {"process": "constant"}, window, [parse_slo(x) for x in slos or []]
    )
    return summarize(records, info)


def _exp_latencies(n: int = N, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.exponential(MEAN_MS, n) * MS).astype(np.int64) + 1


def _text(s: dict, width: int = 100) -> str:
    console = Console(width=width, record=True, highlight=False)
    console.print(render(s))
    return console.export_text()


def test_each_interval_holds_the_true_value_and_the_point_values_stay() -> None:
    lat = _exp_latencies()
    s = _summary(lat)
    assert s["confidence"] == 0.95
    d = s["latency_ms"]
    assert {k: d[k] for k in ("p50", "p99", "max", "mean")} == {
        k: distribution_ms(lat)[k] for k in ("p50", "p99", "max", "mean")
    }
    assert set(d["ci"]) == set(CI_KEYS) and d["ci_note"] == {}
    for key, true in TRUE.items():
        lo, hi = d["ci"][key]
        assert lo <= d[key] <= hi and lo < true < hi, (key, lo, true, hi)
    # 1000/s for 20 s: the rate's interval holds it, the shares are exact
    lo, hi = s["rates"]["ci"]["throughput_rps"]
    assert lo < 1000 < hi and hi - lo < 60
    assert s["rates"]["ci"]["error_rate"][0] == 0.0 and s["rates"]["ci"]["error_rate"][1] < 3e-4


def test_time_order_is_scheduled_order_whatever_the_row_order() -> None:
    n = 5000
    lat = _exp_latencies(n)
    sched = np.arange(n, dtype=np.int64) * MS
    window = (0, n * MS)
    info = RunInfo("sim", "t", "open", {}, window, [parse_slo("latency<=20ms")])
    ordered = summarize(make_records(sched, lat, [""] * n, window), info)
    perm = np.random.default_rng(3).permutation(n)
    shuffled = summarize(make_records(sched[perm], lat[perm], [""] * n, window), info)
    assert shuffled["latency_ms"] == ordered["latency_ms"]
    assert shuffled["rates"]["ci"] == ordered["rates"]["ci"]
    assert shuffled["slos"][0]["ci"] == ordered["slos"][0]["ci"]


def test_a_p99_of_50_requests_is_n_too_small() -> None:
    s = _summary(_exp_latencies(50))
    ci, note = s["latency_ms"]["ci"], s["latency_ms"]["ci_note"]
    assert ci["p99"] is None and ci["p999"] is None and "n too small" in note["p99"]
    assert ci["p50"] is not None  # 25 values either side of the median
    assert "n too small" in _text(s)
    assert "too few" in _text(s, width=80)  # the narrow layout keeps to 80 columns
    assert max(len(line) for line in _text(s, width=80).splitlines()) <= 80


def test_decided_pass_fail_and_inconclusive() -> None:
    lat = _exp_latencies()
    p99 = distribution_ms(lat)["p99"]
    slos = [
        "p99(latency)<=100ms",  # true p99 46 ms: certainly met
        "p99(latency)<=20ms",  # certainly missed
        f"p99(latency)<={p99}ms",  # at the sample's own p99: the sample cannot decide
        "error_rate<=1%",
        "max(latency)<=10s",  # a maximum never certainly passes
    ]
    s = _summary(lat, slos)
    decided = [e["decided"] for e in s["slos"]]
    assert decided == ["pass", "fail", "inconclusive", "pass", "pass"]
    assert [e["passed"] for e in s["slos"]] == [True, False, True, True, True]  # unchanged
    lo, hi = s["slos"][2]["ci"]
    assert lo < p99 < hi and s["slos"][4]["ci"] is None
    assert s["decided"] == "fail" and s["verdict"] == "fail"
    assert "cannot decide" in _text(s)

    s = _summary(lat, slos[:1] + slos[2:])
    assert s["decided"] == "inconclusive" and s["verdict"] == "inconclusive"
    assert s["verdict_cause"] == "undecided" and "p99(latency)<=46" in s["verdict_reason"]
    assert "? p99(latency)" in _text(s) and "need 99%: cannot decide" in _text(s)
    assert compose(["pass", "pass"]) == "pass" and compose([]) == "pass"


def test_deadline_and_failures_as_infinitely_slow() -> None:
    lat = _exp_latencies()
    errors = [""] * N
    for i in range(0, N, 50):  # 2% failures: the p99 with failures counted as +inf is unbounded
        errors[i] = "reset"
    att = _summary(lat, ["latency<=46ms"], errors)["slos"][0]["attainment"]  # about 0.970
    slos = [f"latency<=46ms@{100 * att:.4f}%", "latency<=30ms@90%", "p99(latency)<=1s"]
    s = _summary(lat, slos, errors)
    deadline_near, deadline_far, p99 = s["slos"]
    assert deadline_near["decided"] == "inconclusive" and deadline_far["decided"] == "pass"
    assert deadline_far["ci"][0] > 0.90
    assert p99["value"] is None and p99["decided"] in ("fail", "inconclusive")


def test_steady_state_flags_a_cold_start() -> None:
    base = _exp_latencies().astype(np.float64)
    warm = base + 200 * MS * np.exp(-np.arange(N) / 400.0)  # a cold start decaying over ~2000
    s = _summary(warm.astype(np.int64))
    st = s["steady_state"]
    assert 800 <= st["truncate_at"] <= 4000, st
    assert "MSER-5 would drop the window's first" in _text(s)
    assert s["requests"]["scheduled"] == N and s["latency_ms"]["count"] == N  # window unchanged
    calm = _summary(_exp_latencies())["steady_state"]
    assert calm == {"steady": True, "truncate_at": 0, "reason": ""}
    assert "steady" not in _text(_summary(_exp_latencies())).split("Little")[1].split("\n")[1]
