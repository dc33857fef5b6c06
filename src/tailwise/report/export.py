"""Export a run's records as CSV (stdlib) or Parquet (the ``parquet`` extra, pyarrow).

One row per request attempt, in the order :func:`tailwise.records.read_jsonl`
gives (worker, seq). The stored columns come first, as on disk: times in
integer nanoseconds relative to the run start, ``error`` as a kind (empty for
success), absent values empty (CSV) or null (Parquet). Then the derived
columns (the catalog's metrics marked ``export``, :mod:`tailwise.metrics.catalog`),
in float milliseconds:

* ``latency_ms``  = done - scheduled (ok rows only)
* ``service_ms``  = done - sent (ok rows only)
* ``send_lag_ms`` = sent - scheduled (sent rows)
* ``ttft_ms``     = first content token - scheduled (ok rows with a token; LLM runs)

``chunk_times`` (token-chunk arrival offsets, ns) is a JSON list in CSV and a
list<int64> column in Parquet. Booleans are ``true``/``false`` in CSV.
"""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.errors import BadInput, MissingExtra
from tailwise.metrics.catalog import CATALOG
from tailwise.records import INT_COLUMNS, Records, read_jsonl

FORMATS = ("csv", "parquet")
DERIVED = {m.summary_key: m.per_request_ns for m in CATALOG if m.export}
_FLAGS = ("in_window", "capped")


def _ints(values: np.ndarray) -> list[int | None]:
    """int64 column -> Python ints, None where absent (negative)."""
    return [None if v < 0 else v for v in values.tolist()]


def _ms(values_ns: np.ndarray) -> list[float | None]:
    """int64 nanoseconds -> float milliseconds, None where absent (-1)."""
    return [None if v < 0 else v / 1e6 for v in values_ns.tolist()]


def columns(r: Records) -> dict[str, list[Any]]:
    """Column name -> one Python value per row: the stored columns, then the derived ones."""
    n = len(r)
    stored: dict[str, list[Any]] = {c: _ints(getattr(r, c)) for c in INT_COLUMNS}
    stored["error"] = r.error_kinds
    stored["chunk_times"] = list(r.chunk_times) if r.chunk_times else [None] * n
    stored["in_window"] = [bool(v) for v in r.in_window.tolist()]
    capped = r.capped if r.capped is not None else np.zeros(n, np.int8)
    stored["capped"] = [bool(v) for v in capped.tolist()]
    order = (*INT_COLUMNS[:9], "error", *INT_COLUMNS[9:], "chunk_times", *_FLAGS)
    out = {c: stored[c] for c in order}
    out.update({name: _ms(fn(r)) for name, fn in DERIVED.items()})
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)  # ints exactly; floats as repr (shortest round-tripping form)


def write_csv(cols: dict[str, list[Any]], out: Path) -> None:
    """A header row, then one row per record; absent values are empty cells."""
    with open(out, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(list(cols))
        for row in zip(*cols.values(), strict=True):
            writer.writerow([_cell(v) for v in row])


def _pyarrow() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, imported only when Parquet is asked for."""
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise MissingExtra("--format parquet", "parquet", "pyarrow") from None


def write_parquet(cols: dict[str, list[Any]], out: Path) -> None:
    """Typed columns: int64 (ns, counts), string (error), list<int64>, bool, float64 (ms)."""
    pa, pq = _pyarrow()

    def kind(name: str) -> Any:
        if name == "error":
            return pa.string()
        if name == "chunk_times":
            return pa.list_(pa.int64())
        if name in _FLAGS:
            return pa.bool_()
        return pa.float64() if name in DERIVED else pa.int64()

    schema = pa.schema([(name, kind(name)) for name in cols])
    pq.write_table(pa.table(cols, schema=schema), out)


def default_out(directory: Path, fmt: str) -> Path:
    return directory / f"records.{fmt}"


def export(directory: str | Path, fmt: str, out: str | Path | None = None) -> tuple[Path, int]:
    """Write ``directory``'s records.jsonl as ``fmt``; returns (file written, rows)."""
    if fmt not in FORMATS:
        raise BadInput("--format", fmt, " or ".join(FORMATS))
    if fmt == "parquet":
        _pyarrow()  # fail before reading anything
    run_dir = Path(directory)
    source = run_dir / "records.jsonl"
    if not source.is_file():
        raise BadInput("DIR", str(directory), "a run directory with records.jsonl")
    target = Path(out) if out else default_out(run_dir, fmt)
    cols = columns(read_jsonl(source))
    try:
        (write_parquet if fmt == "parquet" else write_csv)(cols, target)
    except OSError as exc:
        raise BadInput("--out", str(target), f"a writable file ({exc.strerror})") from None
    return target, len(cols["seq"])
