"""Exact percentiles from stored arrays.

Percentiles use the nearest-rank definition (the smallest value such that at
least q% of values are <= it), which is what HdrHistogram reports and what a
"p99 latency" means to most readers: no interpolation between samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tailwise.errors import BadInput

QUANTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
MAX_PERCENTILES = 12
PERCENTILES_FORM = "a comma-separated list of percentiles in (0, 100], e.g. 50,90,99,99.9"


def percentile_key(q_percent: float) -> str:
    """The summary key of a percentile: the usual ones as always (``p999`` is 99.9),
    any other as written (``p75``, ``p99.99``)."""
    for key, q in QUANTILES.items():
        if q == q_percent:
            return key
    return f"p{q_percent:g}"


def parse_percentiles(text: str, field: str = "--percentiles") -> tuple[float, ...]:
    """``"50,90,99,99.9"`` -> (50.0, 90.0, 99.0, 99.9): sorted, distinct, at most 12."""
    parts = [p.strip().removeprefix("p") for p in str(text)[:400].split(",") if p.strip()]
    if not parts or len(parts) > MAX_PERCENTILES:
        raise BadInput(field, str(text)[:60], PERCENTILES_FORM)
    out = set()
    for p in parts:
        try:
            q = float(p)
        except ValueError:
            raise BadInput(field, p[:60], PERCENTILES_FORM) from None
        if not (0 < q <= 100) or len(p) > 12:
            raise BadInput(field, p[:60], PERCENTILES_FORM)
        out.add(q)
    return tuple(sorted(out))


def nearest_rank(sorted_values: np.ndarray, q_percent: float) -> float:
    """Value at percentile ``q_percent`` of an ascending array (inf allowed, empty -> nan)."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = max(1, math.ceil(q_percent / 100.0 * n - 1e-9))
    return float(sorted_values[min(rank, n) - 1])


def distribution_ms(values_ns: np.ndarray, extra: Sequence[float] = ()) -> dict[str, Any]:
    """``{p50 p90 p95 p99 p999 max mean count}`` in milliseconds (``None`` when empty),
    and any ``extra`` percentile under its :func:`percentile_key`."""
    v = np.sort(np.asarray(values_ns, dtype=np.int64))
    out: dict[str, Any] = {}
    wanted = {**QUANTILES, **{percentile_key(q): q for q in extra}}
    for key, q in wanted.items():
        out[key] = nearest_rank(v, q) / 1e6 if len(v) else None
    out["max"] = float(v[-1]) / 1e6 if len(v) else None
    out["mean"] = float(v.mean()) / 1e6 if len(v) else None
    out["count"] = len(v)
    return out
