"""HdrHistogram counts as NumPy arrays: sparse per time bucket, dense per window.

A sliding window holds one histogram per bucket (60 of them for a minute in
1 s buckets). Dense ``hdrh`` count arrays are 24,576 int64 each (192 KiB), so
a bucket keeps only its non-zero cells (:class:`Sparse`) and a window read
adds them into one dense array (:class:`Counts`). Bucket indices come from
:func:`tailwise.metrics.histogram.counts_indices` and percentiles follow
``hdrh``'s own rules (target count rounded half up, highest equivalent value),
so every number here is bit-identical to ``HdrHistogram.record_value`` followed
by ``get_value_at_percentile`` (a test checks), just without a Python loop
over 24,576 cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tailwise.metrics.histogram import HIGHEST_NS, counts_indices, new_histogram

_TEMPLATE = new_histogram()  # holds the geometry; never recorded into
COUNTS_LEN: int = int(_TEMPLATE.counts_len)
_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Sparse:
    """The non-zero cells of one histogram: ``counts[index[i]] == count[i]``."""

    index: np.ndarray
    count: np.ndarray

    @staticmethod
    def empty() -> Sparse:
        return Sparse(_EMPTY, _EMPTY)

    @staticmethod
    def of(values_ns: np.ndarray) -> Sparse:
        """Histogram cells of non-negative values; values over the top are clamped to it."""
        if len(values_ns) == 0:
            return Sparse.empty()
        clamped = np.minimum(np.asarray(values_ns, dtype=np.int64), HIGHEST_NS)
        index, count = np.unique(counts_indices(_TEMPLATE, clamped), return_counts=True)
        return Sparse(index.astype(np.int64), count.astype(np.int64))

    def plus(self, other: Sparse) -> Sparse:
        if len(other.index) == 0:
            return self
        if len(self.index) == 0:
            return other
        index = np.concatenate([self.index, other.index])
        count = np.concatenate([self.count, other.count])
        merged_index, where = np.unique(index, return_inverse=True)
        return Sparse(merged_index, np.bincount(where, weights=count).astype(np.int64))


class Counts:
    """A dense count array over a window, with ``hdrh``'s percentile arithmetic."""

    def __init__(self, parts: list[Sparse]) -> None:
        index = np.concatenate([p.index for p in parts]) if parts else _EMPTY
        count = np.concatenate([p.count for p in parts]) if parts else _EMPTY
        dense = np.bincount(index, weights=count, minlength=COUNTS_LEN)
        # float64 weights are exact below 2**53 observations
        self.dense: np.ndarray = dense.astype(np.int64)
        self.cumulative: np.ndarray = np.cumsum(self.dense)
        self.total = int(self.cumulative[-1]) if len(self.cumulative) else 0

    def value_at_rank_ns(self, rank: int, lowest: bool = False) -> int:
        """The value of the ``rank``-th smallest observation (1-based), as ``hdrh`` reports it."""
        if self.total == 0 or rank < 1:
            return 0
        index = int(np.searchsorted(self.cumulative, min(rank, self.total), side="left"))
        value = _TEMPLATE.get_value_from_index(index)
        if lowest:
            return int(_TEMPLATE.get_lowest_equivalent_value(value))
        return int(_TEMPLATE.get_highest_equivalent_value(value))

    def percentile_ns(self, q: float) -> int:
        """``HdrHistogram.get_value_at_percentile(q)`` for these counts (0 when empty)."""
        return self.value_at_rank_ns(target_rank(q, self.total), lowest=q == 0)

    def to_hdr(self, min_ns: int, max_ns: int) -> Any:
        """A real ``hdrh`` histogram with these counts (for ``.hlog`` export or merging)."""
        h = new_histogram()
        if self.total:
            np.ctypeslib.as_array(h.counts)[:] = self.dense.astype(np.uint64)
            h.total_count = self.total
            h.min_value = min_ns
            h.max_value = max_ns
        return h


def target_rank(q: float, total: int) -> int:
    """``hdrh``'s count at a percentile: ``q`` percent of ``total``, rounded half up, >= 1."""
    return max(int(min(q, 100.0) * total / 100 + 0.5), 1)
