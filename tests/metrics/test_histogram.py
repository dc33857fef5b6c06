"""The vectorized HdrHistogram fill is bit-identical to the library's own recording."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tailwise.metrics.histogram import (
    HIGHEST_NS,
    interval_histograms,
    merged,
    new_histogram,
    read_hlog,
    record_many,
    write_hlog,
)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, HIGHEST_NS), min_size=1, max_size=400))
def test_record_many_matches_record_value(values: list[int]) -> None:
    fast, slow = new_histogram(), new_histogram()
    record_many(fast, np.array(values, dtype=np.int64))
    for v in values:
        slow.record_value(v)
    assert fast.encode() == slow.encode()
    assert fast.get_total_count() == len(values)
    assert fast.get_max_value() == slow.get_max_value()
    assert fast.get_min_value() == slow.get_min_value()


def test_values_beyond_range_are_clamped_and_counted() -> None:
    h = new_histogram()
    assert record_many(h, np.array([5_000, HIGHEST_NS * 2], dtype=np.int64)) == 1
    assert h.get_total_count() == 2


def test_three_significant_digits() -> None:
    rng = np.random.default_rng(0)
    v = rng.lognormal(16, 1.5, 50_000).astype(np.int64)
    h = new_histogram()
    record_many(h, v)
    exact = np.sort(v)[int(np.ceil(0.99 * len(v))) - 1]
    assert abs(h.get_value_at_percentile(99.0) - exact) / exact < 1e-3


def test_hlog_round_trip_with_the_standard_reader(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    done = np.sort(rng.integers(0, 5_000_000_000, 20_000))
    lat = rng.integers(1_000_000, 50_000_000, 20_000)
    intervals = interval_histograms(done, lat)
    assert [i for i, _ in intervals] == [0, 1, 2, 3, 4]
    path = tmp_path / "latency.hlog"
    write_hlog(path, intervals, 1_800_000_000.0, comments=["[test]"])
    back = read_hlog(path)
    assert len(back) == 5
    total = merged(back)
    direct = new_histogram()
    record_many(direct, lat)
    assert total.get_total_count() == 20_000
    assert total.get_value_at_percentile(99) == direct.get_value_at_percentile(99)
    assert path.read_text().splitlines()[0] == "#[Histogram log format version 1.2]"
