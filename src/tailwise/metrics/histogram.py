"""HdrHistogram (3 significant digits) for merging, streaming and ``.hlog`` export.

The ``hdrhistogram`` package records one value per Python call; a run has
millions. :func:`record_many` computes the same bucket indices with NumPy and
adds a ``bincount`` to the histogram's counts array, so filling is vectorized
and the result is bit-identical to per-value ``record_value`` (a test checks).
Values are nanoseconds, tracked from 1 us to 1 hour; larger values are clamped
to the top (and counted) rather than dropped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.files import atomic_write_text

LOWEST_NS = 1_000
HIGHEST_NS = 3_600 * 1_000_000_000
SIGNIFICANT_DIGITS = 3
MAX_VALUE_UNIT_RATIO = 1e6  # the log's Interval_Max column is in ms, the readers' default


def new_histogram() -> Any:
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)


def counts_indices(h: Any, values: np.ndarray) -> np.ndarray:
    """Bucket indices of ``values`` exactly as ``HdrHistogram._counts_index_for``."""
    v = np.asarray(values, dtype=np.int64)
    masked = v | np.int64(h.sub_bucket_mask)
    # bit length of a positive int64 < 2**53 from the float exponent (exact in that range)
    bit_length = np.frexp(masked.astype(np.float64))[1].astype(np.int64)
    bucket = bit_length - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
    sub_bucket = v >> (bucket + h.unit_magnitude)
    base = (bucket + 1) << h.sub_bucket_half_count_magnitude
    index: np.ndarray = base + (sub_bucket - h.sub_bucket_half_count)
    return index


def record_many(h: Any, values_ns: np.ndarray) -> int:
    """Record every value; returns how many were clamped to the histogram's range."""
    v = np.asarray(values_ns, dtype=np.int64)
    v = v[v >= 0]
    if len(v) == 0:
        return 0
    clamped = int((v > HIGHEST_NS).sum())
    v = np.minimum(v, HIGHEST_NS)
    idx = counts_indices(h, v)
    binned = np.bincount(idx, minlength=h.counts_len)[: h.counts_len]
    counts = np.ctypeslib.as_array(h.counts)
    counts += binned.astype(counts.dtype)
    # The same bookkeeping record_value does, once per batch.
    h.total_count = int(h.total_count) + len(v)
    h.min_value = min(int(h.min_value), int(v.min()))
    h.max_value = max(int(h.max_value), int(v.max()))
    return clamped


def interval_histograms(
    done_ns: np.ndarray, values_ns: np.ndarray, interval_ns: int = 1_000_000_000
) -> list[tuple[int, Any]]:
    """One histogram per interval of completion time: ``[(interval_index, histogram)]``."""
    if len(done_ns) == 0:
        return []
    slot = np.asarray(done_ns, dtype=np.int64) // interval_ns
    order = np.argsort(slot, kind="stable")
    slot, vals = slot[order], np.asarray(values_ns)[order]
    bounds = np.flatnonzero(np.diff(slot)) + 1
    out = []
    for part_slots, part_vals in zip(np.split(slot, bounds), np.split(vals, bounds), strict=True):
        h = new_histogram()
        record_many(h, part_vals)
        out.append((int(part_slots[0]), h))
    return out


def write_hlog(
    path: Path,
    intervals: Iterable[tuple[int, Any]],
    start_unix_s: float,
    comments: Iterable[str] = (),
    interval_s: float = 1.0,
) -> None:
    """An HdrHistogram interval log (format 1.2), timestamps relative to the run start."""
    when = dt.datetime.fromtimestamp(start_unix_s, tz=dt.UTC).isoformat()
    lines = ["#[Histogram log format version 1.2]"]
    lines += [f"#{c}" for c in comments]
    lines.append(f"#[StartTime: {start_unix_s:.3f} (seconds since epoch), {when}]")
    lines.append(
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"'
    )
    for index, h in intervals:
        payload = h.encode().decode("ascii")
        max_ms = h.get_max_value() / MAX_VALUE_UNIT_RATIO
        lines.append(f"{index * interval_s:.3f},{interval_s:.3f},{max_ms:.3f},{payload}")
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_hlog(path: Path) -> list[Any]:
    """Every interval histogram of a log, with the standard ``hdrh`` log reader."""
    from hdrh.log import HistogramLogReader

    reader = HistogramLogReader(str(path), new_histogram())
    out = []
    while (h := reader.get_next_interval_histogram()) is not None:
        out.append(h)
    reader.close()
    return out


def merged(histograms: Iterable[Any]) -> Any:
    total = new_histogram()
    for h in histograms:
        total.add(h)
    return total
