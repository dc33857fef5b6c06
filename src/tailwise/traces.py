"""Request traces: when each request came, and for LLM traces how long it was.

``--arrival trace:FILE`` reads one of three forms, told apart by the file's
first line and name:

* **offsets**: one per line, seconds or a duration (``0.25``, ``250ms``), ``#``
  comments; offsets are used as written;
* **CSV** with a header (the Azure LLM inference traces:
  ``TIMESTAMP,ContextTokens,GeneratedTokens``): a timestamp column (a date
  and time, ``2023-11-16 18:15:46.6805900``, or seconds), and optionally an
  input and an output length column;
* **JSON Lines** (Mooncake's traces: ``{"timestamp": 27482, "input_length":
  6955, "output_length": 52, "hash_ids": [...]}``, ``timestamp`` in ms).

Timestamps of CSV and JSONL rows become offsets from the first row. The speed
factor (``--trace-speed 2x``) divides every offset. Hostile files are
bounded: at most :data:`MAX_BYTES` and :data:`MAX_ROWS`, lengths at most
:data:`MAX_LENGTH`, timestamps in order; a bad row is a one-line error naming
the file, the line and the field. Pure: nothing here reads a clock.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from tailwise.errors import BadInput
from tailwise.files import read_bounded_utf8
from tailwise.units import parse_duration_ns

NS = 1_000_000_000
MAX_BYTES = 256 << 20
MAX_ROWS = 2_000_000
MAX_LENGTH = 10_000_000  # tokens
MAX_HASH_IDS = 100_000  # per row
MAX_OFFSET_S = 10 * 365 * 86400.0
FIELD = "--arrival trace"

TIME_COLUMNS = ("timestamp", "time", "arrival_time", "timestamp_s")
INPUT_COLUMNS = ("contexttokens", "input_length", "input_tokens", "prompt_tokens", "input_len")
OUTPUT_COLUMNS = (
    "generatedtokens",
    "output_length",
    "output_tokens",
    "completion_tokens",
    "output_len",
)


@dataclass(frozen=True)
class Trace:
    """Offsets in ns (non-decreasing), and per-row lengths when the file has them."""

    offsets_ns: tuple[int, ...]
    input_lengths: tuple[int, ...] | None = None
    output_lengths: tuple[int, ...] | None = None
    hash_ids: tuple[tuple[int, ...], ...] | None = None  # Mooncake's shared prompt blocks
    form: str = "offsets"

    def sped_up(self, factor: float) -> Trace:
        if factor == 1.0:
            return self
        span_s = (self.offsets_ns[-1] if self.offsets_ns else 0) / NS / factor
        if span_s > MAX_OFFSET_S:  # slowed down past what the clock and a plan can hold
            raise BadInput(
                "--trace-speed",
                f"{factor:g}x",
                f"a speed that keeps the trace within {MAX_OFFSET_S / 86400 / 365:.0f} years "
                f"(it would span {span_s / 86400 / 365:.3g} years)",
            )
        offsets = tuple(round(t / factor) for t in self.offsets_ns)
        return Trace(offsets, self.input_lengths, self.output_lengths, self.hash_ids, self.form)


def parse_speed(text: str | float | None) -> float:
    """``--trace-speed``: ``2x``, ``0.5x`` or a plain number; 1 when not given."""
    if text is None:
        return 1.0
    raw = str(text).strip().lower().removesuffix("x")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0.001 <= value <= 1000):
        raise BadInput("--trace-speed", text, "a factor from 0.001x to 1000x, e.g. 2x")
    return value


def read_trace(path: str) -> Trace:
    """The trace in ``path``, in whichever of the three forms it is written."""
    text = _read_text(path)
    head = text.lstrip()[:1]
    first_line = text.lstrip().split("\n", 1)[0]
    if head == "{" or path.endswith((".jsonl", ".json")):
        return _read_jsonl(path, text)
    worded = re.search(r"[A-Za-z_]{3,}", first_line.split("#", 1)[0])  # a header, not "250ms"
    if (path.endswith(".csv") or worded) and "," in first_line:
        return _read_csv(path, text)
    return Trace(_read_offsets(path, text))


def _read_text(path: str) -> str:
    # Bounded whatever the file is (a device such as /dev/zero claims no size); a UTF-8
    # BOM at its start (spreadsheets write one) is not part of the first column's name.
    return read_bounded_utf8(path, FIELD, MAX_BYTES)


def _read_offsets(path: str, text: str) -> tuple[int, ...]:
    out: list[int] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            seconds = float(line)
        except ValueError:
            ns = parse_duration_ns(line, f"{path}:{lineno}")  # bounded to ten years there too
        else:
            if not abs(seconds) <= MAX_OFFSET_S:  # also NaN and inf
                raise BadInput(f"{path}:{lineno}", line, "an offset of at most ten years")
            ns = round(seconds * NS)
        if ns < 0 or (out and ns < out[-1]):
            raise BadInput(f"{path}:{lineno}", line, "non-negative offsets in non-decreasing order")
        out.append(ns)
        _count(path, len(out))
    if not out:
        raise BadInput(FIELD, path, "a file with at least one offset")
    return tuple(out)


def _count(path: str, n: int) -> None:
    if n > MAX_ROWS:
        raise BadInput(FIELD, path, f"at most {MAX_ROWS:,} rows (cut the file)")


class _Rows:
    """Accumulates rows, checking order and bounds; ``where`` names a row in errors."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.times_ns: list[int] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.hashes: list[tuple[int, ...]] = []

    def add(self, where: str, t_ns: int, inp: int | None, out: int | None) -> None:
        if self.times_ns and t_ns < self.times_ns[-1]:
            raise BadInput(where, t_ns / NS, "timestamps in non-decreasing order")
        self.times_ns.append(t_ns)
        if inp is not None:
            self.inputs.append(inp)
        if out is not None:
            self.outputs.append(out)
        _count(self.path, len(self.times_ns))

    def trace(self, form: str) -> Trace:
        if not self.times_ns:
            raise BadInput(FIELD, self.path, "a trace with at least one row")
        t0 = self.times_ns[0]
        offsets = tuple(t - t0 for t in self.times_ns)
        n = len(offsets)
        if offsets[-1] > MAX_OFFSET_S * NS:  # past int64 nanoseconds long before 10^4 years
            span = f"{offsets[-1] / NS / 86400 / 365:.3g} years from first to last row"
            years = MAX_OFFSET_S / 86400 / 365
            raise BadInput(
                FIELD, f"{self.path} ({span})", f"a trace spanning at most {years:.0f} years"
            )
        for what, got in (("an input length", self.inputs), ("an output length", self.outputs)):
            if 0 < len(got) < n:
                raise BadInput(FIELD, self.path, f"{what} on every row or on none")
        inputs = tuple(self.inputs) if len(self.inputs) == n else None
        outputs = tuple(self.outputs) if len(self.outputs) == n else None
        hashes = tuple(self.hashes) if len(self.hashes) == n and any(self.hashes) else None
        return Trace(offsets, inputs, outputs, hashes, form)


def _read_csv(path: str, text: str) -> Trace:
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except (StopIteration, csv.Error):
        raise BadInput(FIELD, path, "a CSV file with a header row") from None
    t_col = _column(header, TIME_COLUMNS)
    if t_col is None:
        want = "a timestamp column (TIMESTAMP, timestamp, time, arrival_time)"
        raise BadInput(f"{path}:1", ",".join(header)[:80], want)
    in_col, out_col = _column(header, INPUT_COLUMNS), _column(header, OUTPUT_COLUMNS)
    rows = _Rows(path)
    try:
        for lineno, cells in enumerate(reader, 2):
            if not cells or all(not c.strip() for c in cells):
                continue
            where = f"{path}:{lineno}"
            if len(cells) != len(header):
                raise BadInput(where, ",".join(cells)[:80], f"{len(header)} columns")
            t_ns = _timestamp_ns(cells[t_col], where, header[t_col])
            inp = _length(cells[in_col], where, header[in_col]) if in_col is not None else None
            out = _length(cells[out_col], where, header[out_col]) if out_col is not None else None
            rows.add(where, t_ns, inp, out)
    except csv.Error as exc:
        raise BadInput(FIELD, path, f"well-formed CSV ({exc})") from None
    return rows.trace("csv")


def _column(header: list[str], names: tuple[str, ...]) -> int | None:
    for name in names:
        if name in header:
            return header.index(name)
    return None


_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


def _timestamp_ns(cell: str, where: str, column: str) -> int:
    """A date and time (UTC, sub-second digits kept to the ns) or a number of seconds."""
    text = cell.strip()
    m = _DATETIME.fullmatch(text.removesuffix("Z").removesuffix("+00:00"))
    if m:
        try:
            day = dt.date.fromisoformat(m.group(1))
        except ValueError:
            raise BadInput(f"{where} {column}", text, "a date YYYY-MM-DD") from None
        whole = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
        seconds = int(whole.timestamp()) + int(m[2]) * 3600 + int(m[3]) * 60 + int(m[4])
        frac = (m.group(5) or "").ljust(9, "0")
        return seconds * NS + int(frac)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 1e11):
        raise BadInput(f"{where} {column}", text[:40], "a date-time or seconds (>= 0)")
    return round(value * NS)


def _length(cell: Any, where: str, column: str) -> int:
    try:
        value = float(cell) if not isinstance(cell, bool) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and 0 <= value <= MAX_LENGTH):
        raise BadInput(f"{where} {column}", str(cell)[:40], f"a token count from 0 to {MAX_LENGTH}")
    return int(value)


def _read_jsonl(path: str, text: str) -> Trace:
    rows = _Rows(path)
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            raise BadInput(where, raw[:40], "a JSON object per line") from None
        if not isinstance(row, dict):
            raise BadInput(where, raw[:40], "a JSON object per line")
        rows.add(where, _json_time_ns(row, where), *_json_lengths(row, where))
        hashes = row.get("hash_ids")
        rows.hashes.append(_hash_ids(hashes, where) if hashes is not None else ())
    return rows.trace("jsonl")


def _json_time_ns(row: dict[str, Any], where: str) -> int:
    if "timestamp" in row:  # Mooncake: milliseconds
        key, scale = "timestamp", 1e6
    elif "timestamp_s" in row:
        key, scale = "timestamp_s", 1e9
    else:
        raise BadInput(where, sorted(row)[:6], "a 'timestamp' (ms) or 'timestamp_s' field")
    value = row[key]
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    number = float(value) if ok else math.nan
    if not (math.isfinite(number) and 0 <= number * scale <= MAX_OFFSET_S * NS):
        raise BadInput(f"{where} {key}", value, "a non-negative number")
    return round(number * scale)


def _json_lengths(row: dict[str, Any], where: str) -> tuple[int | None, int | None]:
    found: list[int | None] = []
    for names in (INPUT_COLUMNS, OUTPUT_COLUMNS):
        key = next((k for k in row if k.lower() in names), None)
        found.append(_length(row[key], where, key) if key is not None else None)
    return found[0], found[1]


def _hash_ids(value: Any, where: str) -> tuple[int, ...]:
    ok = isinstance(value, list) and len(value) <= MAX_HASH_IDS
    if ok and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise BadInput(f"{where} hash_ids", str(value)[:40], "a list of integers")
