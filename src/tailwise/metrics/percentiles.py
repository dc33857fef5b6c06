"""Exact percentiles from stored arrays.

Percentiles use the nearest-rank definition (the smallest value such that at
least q% of values are <= it), which is what HdrHistogram reports and what a
"p99 latency" means to most readers: no interpolation between samples.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

QUANTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def nearest_rank(sorted_values: np.ndarray, q_percent: float) -> float:
    """Value at percentile ``q_percent`` of an ascending array (inf allowed, empty -> nan)."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = max(1, math.ceil(q_percent / 100.0 * n - 1e-9))
    return float(sorted_values[min(rank, n) - 1])


def distribution_ms(values_ns: np.ndarray) -> dict[str, Any]:
    """``{p50 p90 p95 p99 p999 max mean count}`` in milliseconds (``None`` when empty)."""
    v = np.sort(np.asarray(values_ns, dtype=np.int64))
    out: dict[str, Any] = {}
    for key, q in QUANTILES.items():
        out[key] = nearest_rank(v, q) / 1e6 if len(v) else None
    out["max"] = float(v[-1]) / 1e6 if len(v) else None
    out["mean"] = float(v.mean()) / 1e6 if len(v) else None
    out["count"] = len(v)
    return out
