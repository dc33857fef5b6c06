"""LatencyTracker: HdrHistogram-exact percentiles, the sliding window, SLOs as the CLI judges them.

Time is a fake clock (``FakeClock``), so every window and rate has an exact answer.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailwise.errors import BadInput
from tailwise.instrument import LatencyTracker
from tailwise.metrics import slo as cli_slo
from tailwise.metrics.histogram import new_histogram
from tests.instrument.conftest import FakeClock
from tests.synthetic import make_records

MS = 1_000_000
S = 1_000_000_000


def feed(tracker: LatencyTracker, clock: FakeClock, values_ns: np.ndarray, ok: np.ndarray) -> None:
    """Record values evenly over one second each 1000, starting at the clock's time."""
    for i, (v, good) in enumerate(zip(values_ns.tolist(), ok.tolist(), strict=True)):
        clock.now_ns = clock.start_ns + i * MS
        tracker.record(v, good)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=5 * 3600 * S), min_size=1, max_size=300),
    st.sampled_from([0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0]),
)
def test_percentiles_are_bit_identical_to_hdrhistogram(values: list[int], q: float) -> None:
    clock = FakeClock()
    tracker = LatencyTracker(window="1h", clock=clock)
    reference = new_histogram()
    for v in values:
        tracker.record(v)
        reference.record_value(min(v, reference.highest_trackable_value))
    s = tracker.stats()
    assert s.count == len(values)
    hdr_ns = reference.get_value_at_percentile(q)
    assert s.all.percentile_ns(q) == hdr_ns  # the same cells, the same arithmetic
    clamped_ns = min(max(hdr_ns, min(values)), max(values))  # a bucket's top may pass the max
    assert s.percentile_ms(q) == pytest.approx(clamped_ns / 1e6, abs=1e-6)
    assert s.max_ns == max(values)  # exact, not bucketed
    assert s.mean_ms * 1e6 == pytest.approx(sum(values) / len(values))
    h = s.all.to_hdr(s.min_ns, s.max_ns)
    assert h.get_total_count() == reference.get_total_count()
    assert h.get_value_at_percentile(q) == reference.get_value_at_percentile(q)


def test_window_slides_and_lifetime_keeps_everything() -> None:
    clock = FakeClock(1000 * S)  # bucket-aligned, so test seconds are buckets
    tracker = LatencyTracker(window="10s", bucket="1s", clock=clock)
    for second in range(30):  # 10 requests a second, latency = 1 ms x (second + 1)
        for j in range(10):
            clock.now_ns = clock.start_ns + second * S + j * 100 * MS
            tracker.record((second + 1) * MS)
    s = tracker.stats()
    assert s.count == 100  # seconds 20..29 only
    assert s.min_ns == 21 * MS and s.max_ns == 30 * MS
    assert s.duration_s == pytest.approx(9.9)  # from the oldest bucket's start to now
    assert tracker.stats(window="2s").count == 20
    assert tracker.lifetime().count == 300  # expired buckets were folded before they left
    assert tracker.lifetime().sum_ns == sum(10 * (k + 1) * MS for k in range(30))
    clock.now_ns += 60 * S
    assert tracker.stats().count == 0 and tracker.stats().percentile_ms(99) == 0.0
    assert tracker.lifetime().count == 300


def test_slo_verdicts_match_the_cli_on_the_same_requests(clock: FakeClock) -> None:
    rng = np.random.default_rng(7)
    n = 4000
    lat = rng.lognormal(np.log(40 * MS), 0.6, n).astype(np.int64)
    errors = ["http_5xx" if rng.random() < 0.004 else "" for _ in range(n)]
    ok = np.array([not e for e in errors])
    specs = [
        "latency<=60ms@95%",
        "latency<=100ms",
        "p99(latency)<=150ms",
        "p50(latency)<=50ms",
        "mean(latency)<=50ms",
        "error_rate<=1%",
        "attainment>=90%",
    ]
    tracker = LatencyTracker(window="10s", slos=specs, clock=clock)
    feed(tracker, clock, lat, ok)
    clock.now_ns = clock.start_ns + n * MS  # exactly 4 s covered
    sched = np.arange(n, dtype=np.int64) * MS
    records = make_records(sched, lat, errors, (0, n * MS))
    slos = [cli_slo.parse_slo(s) for s in specs]
    rates = {"error_rate": (~ok).mean(), "attainment": 0.0, "goodput_rps": 0.0}
    truth = cli_slo.evaluate(records, slos, rates, records.in_window)
    ours = tracker.slo_report()
    for mine, cli in zip(ours, truth, strict=True):
        assert mine["spec"] == cli["spec"] and mine["passed"] == cli["passed"], (mine, cli)
        if cli["kind"] == "deadline":
            assert mine["attainment"] == cli["attainment"]  # exact: counted at fold time
        elif cli["kind"] == "objective" and cli["value"] is not None:
            # HdrHistogram: rank rounded half up, value the bucket's top (3 digits)
            assert mine["value"] == pytest.approx(cli["value"], rel=2e-3)
    good = ok & (lat <= 60 * MS)
    s = tracker.stats()
    assert s.goodput_rps(60 * MS) == pytest.approx(good.sum() / 4.0)
    assert s.throughput_rps == pytest.approx(n / 4.0)
    assert ours[-1]["value"] == pytest.approx(good.sum() / n)  # attainment: tightest deadline


def test_failed_requests_reach_the_objective_as_infinitely_slow(clock: FakeClock) -> None:
    tracker = LatencyTracker(slos=["p99(latency)<=10ms", "max(latency)<=1s"], clock=clock)
    for i in range(100):
        tracker.record(1 * MS, ok=i >= 2)  # 2% failed, all fast
    report = tracker.slo_report()
    assert report[0]["value"] is None and report[0]["passed"] is False
    assert report[1]["passed"] is False
    s = tracker.stats()
    assert s.percentile_ms(99) == pytest.approx(1.0, rel=1e-3)  # the plain percentile: all fast
    assert s.error_rate == pytest.approx(0.02)
    assert math.isinf(s.objective_ns("p99"))
    assert s.objective_ns("p97") == pytest.approx(1 * MS, rel=1e-3)


def test_concurrent_threads_lose_nothing() -> None:
    tracker = LatencyTracker(window="1h")
    threads, per_thread = 4, 20_000
    start = threading.Barrier(threads)

    def work(k: int) -> None:
        start.wait()
        for i in range(per_thread):
            tracker.record(k * 1000 + i % 7, ok=i % 10 != 0)

    pool = [threading.Thread(target=work, args=(k + 1,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    s = tracker.stats()
    assert s.count == threads * per_thread
    assert s.failed == threads * per_thread // 10
    expected_sum = sum(
        (k + 1) * 1000 * per_thread + sum(i % 7 for i in range(per_thread)) for k in range(threads)
    )
    assert s.sum_ns == expected_sum


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"slos": ["p99(ttft)<=1s"]}, "slo"),
        ({"slos": ["latency<200ms"]}, "--slo"),
        ({"window": "0s"}, "window"),
        ({"bucket": -1}, "bucket"),
        ({"window": "2h", "bucket": "1ms"}, "window"),
        ({"le_s": [0.1, 0.05]}, "le_s"),
        ({"budgets": {"embed": "fast"}}, "budgets[embed]"),
    ],
)
def test_bad_configuration_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(BadInput) as caught:
        LatencyTracker(**kwargs)
    assert caught.value.field == field


def test_bad_readings_name_the_field(clock: FakeClock) -> None:
    tracker = LatencyTracker(clock=clock)
    with pytest.raises(BadInput):
        tracker.record(-1)
    with pytest.raises(BadInput):
        tracker.stats().percentile_ms(101)
    with pytest.raises(BadInput):
        tracker.stage_stats("never-ran")
    with pytest.raises(BadInput):
        tracker.stage("a/b")
