"""The record: one row per request attempt, shared by every producer.

Columns follow DESIGN.md. Times are integer nanoseconds relative to the run
start; ``-1`` marks "absent" in memory and ``null`` on disk. The error column
holds a kind (empty string for success); its category decides how the request
is accounted (see :func:`category_of`).

Two representations:

* :class:`RecordBlock` - the hot path's: fixed-size ``array.array`` columns
  (``setitem`` on them is several times cheaper than on NumPy arrays) that are
  allocated once and never resized, so NumPy views over them stay valid.
* :class:`Records` - everyone else's: NumPy columns, built by concatenating
  blocks or by reading ``records.jsonl``. Metrics, SLOs and reports use only this.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from array import array
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from tailwise.errors import BadInput
from tailwise.files import atomic_writer

I64 = npt.NDArray[np.int64]
# Small blocks: a new block is allocated (and its pages faulted in) on the event loop
# while requests are due; 4096 rows cost ~0.2 ms where 65536 cost ~6 ms (measured).
BLOCK_ROWS = 4_096
BLOCK_SHIFT = BLOCK_ROWS.bit_length() - 1  # block index of a seq: seq >> BLOCK_SHIFT
ABSENT = -1

# Error kinds, by code. Code 0 is success. New kinds are appended, never renumbered.
ERROR_KINDS: list[str] = [
    "",
    "connect",
    "tls",
    "reset",
    "timeout",
    "http_4xx",
    "http_5xx",
    "protocol",
    "cancelled",
    "not_sent:ended",
    "not_sent:interrupted",
    "truncated",
]
_CODE = {k: i for i, k in enumerate(ERROR_KINDS)}

# The int64 columns, in on-disk order (error, in_window and chunk_times are handled apart).
INT_COLUMNS = (
    "seq",
    "parent",
    "worker",
    "scheduled_ns",
    "sent_ns",
    "first_byte_ns",
    "first_token_ns",
    "done_ns",
    "status",
    "bytes_out",
    "bytes_in",
    "input_tokens",
    "output_tokens",
    "replica",
    # Reasoning models (LLM streams with reasoning_content): the first reasoning chunk's
    # arrival, and the reasoning tokens (the server's usage, else reasoning chunks).
    "first_reasoning_ns",
    "reasoning_tokens",
)
COLUMNS = (*INT_COLUMNS[:9], "error", *INT_COLUMNS[9:], "chunk_times", "in_window", "capped")


def error_code(kind: str) -> int:
    """The code of an error kind, registering a new kind on first use."""
    code = _CODE.get(kind)
    if code is None:
        code = len(ERROR_KINDS)
        ERROR_KINDS.append(kind)
        _CODE[kind] = code
    return code


def category_of(kind: str) -> str:
    """ok | timed_out | cancelled | not_sent | failed: the accounting bucket of a kind."""
    if not kind:
        return "ok"
    if kind == "timeout":
        return "timed_out"
    if kind == "cancelled":
        return "cancelled"
    if kind.startswith("not_sent"):
        return "not_sent"
    return "failed"


# The columns of a RecordBlock: (name, array typecode, initial value), in allocation order.
_BLOCK_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("scheduled_ns", "q", 0),
    ("sent_ns", "q", ABSENT),
    ("first_byte_ns", "q", ABSENT),
    ("first_token_ns", "q", ABSENT),
    ("done_ns", "q", ABSENT),
    ("status", "q", 0),
    ("error", "h", 0),
    ("bytes_out", "q", 0),
    ("bytes_in", "q", 0),
    ("input_tokens", "q", ABSENT),
    ("output_tokens", "q", ABSENT),
    ("parent", "q", ABSENT),
    ("replica", "q", ABSENT),
    ("first_reasoning_ns", "q", ABSENT),
    ("reasoning_tokens", "q", ABSENT),
    ("capped", "b", 0),
)
ARRAY_COLUMNS = tuple(name for name, _, _ in _BLOCK_COLUMNS)  # every array column of a block


class RecordBlock:
    """Up to :data:`BLOCK_ROWS` consecutive records, seq ``base .. base + rows - 1``.

    Columns are ``array.array`` (``q`` int64 unless noted in :data:`_BLOCK_COLUMNS`);
    ``capped`` is 1 when the request waited for the in-flight cap (internal, for the
    generator check), and ``chunk_times`` maps a seq-local index to the arrival
    offsets of its streamed chunks (LLM streams only).
    """

    __slots__ = (
        "base",
        "bytes_in",
        "bytes_out",
        "capped",
        "chunk_times",
        "done_ns",
        "error",
        "first_byte_ns",
        "first_reasoning_ns",
        "first_token_ns",
        "input_tokens",
        "output_tokens",
        "parent",
        "reasoning_tokens",
        "replica",
        "rows",
        "scheduled_ns",
        "sent_ns",
        "status",
    )
    base: int
    rows: int
    scheduled_ns: array[int]
    sent_ns: array[int]
    first_byte_ns: array[int]
    first_token_ns: array[int]
    done_ns: array[int]
    status: array[int]
    error: array[int]
    bytes_out: array[int]
    bytes_in: array[int]
    input_tokens: array[int]
    output_tokens: array[int]
    parent: array[int]
    replica: array[int]
    first_reasoning_ns: array[int]
    reasoning_tokens: array[int]
    capped: array[int]
    chunk_times: dict[int, list[int]]

    def __init__(self, base: int, rows: int) -> None:
        for _ in self.build_steps(base, rows):
            pass

    def build_steps(self, base: int, rows: int) -> Iterator[None]:
        """Allocate the columns one at a time, pausing after each (see :func:`block_steps`)."""
        self.base = base
        self.rows = rows
        for name, typecode, initial in _BLOCK_COLUMNS:
            column = array(typecode, [initial]) * rows
            setattr(self, name, column)
            yield
        self.chunk_times = {}

    def view(self, name: str) -> I64:
        """A zero-copy int64 NumPy view of an int64 column."""
        return np.frombuffer(getattr(self, name), dtype=np.int64)


def block_steps(base: int, rows: int) -> Generator[None, None, RecordBlock]:
    """Build a block one column per step: its result is the block.

    A new block's pages are faulted in as its columns are filled (~0.2 ms for
    4096 rows in a VM); the pacer builds the next block ahead in these small
    steps between its sends instead of in one pause when the block is needed.
    """
    block = RecordBlock.__new__(RecordBlock)
    yield from block.build_steps(base, rows)
    return block


@dataclass
class Records:
    """Columnar records. Every column has one entry per request attempt, in seq order."""

    seq: I64
    parent: I64
    worker: I64
    scheduled_ns: I64
    sent_ns: I64
    first_byte_ns: I64
    first_token_ns: I64
    done_ns: I64
    status: I64
    error: npt.NDArray[np.int16]
    bytes_out: I64
    bytes_in: I64
    input_tokens: I64
    output_tokens: I64
    replica: I64
    in_window: npt.NDArray[np.bool_]
    chunk_times: list[list[int] | None] = field(default_factory=list)
    # 1 if the request waited in the client for the in-flight cap (so its send lag is
    # the target's doing, not the generator's).
    capped: npt.NDArray[np.int8] | None = None
    # Absent (-1) on every row unless given: producers without reasoning leave them out.
    first_reasoning_ns: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    reasoning_tokens: I64 = field(default_factory=lambda: np.zeros(0, np.int64))

    def __post_init__(self) -> None:
        n = len(self.seq)
        for name in ("first_reasoning_ns", "reasoning_tokens"):
            if len(getattr(self, name)) != n:
                setattr(self, name, np.full(n, ABSENT, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def error_kinds(self) -> list[str]:
        return [ERROR_KINDS[c] for c in self.error.tolist()]

    def kind_mask(self, category: str) -> npt.NDArray[np.bool_]:
        """Boolean mask of rows in an accounting category (see :func:`category_of`)."""
        cats = np.array([category_of(k) == category for k in ERROR_KINDS], dtype=bool)
        return cats[self.error.astype(np.int64)]

    def to_pandas(self) -> Any:
        try:
            import pandas as pd  # type: ignore[import-untyped,unused-ignore]
        except ImportError:
            from tailwise.errors import MissingExtra

            raise MissingExtra("Records.to_pandas", "pandas", "pandas") from None
        data = {c: getattr(self, c) for c in INT_COLUMNS}
        data["error"] = self.error_kinds
        data["in_window"] = self.in_window
        data["chunk_times"] = self.chunk_times or [None] * len(self)
        return pd.DataFrame(data)

    @classmethod
    def from_blocks(
        cls, blocks: Sequence[RecordBlock], worker: int, window_ns: tuple[int, int]
    ) -> Records:
        def cat(name: str) -> I64:
            parts = [np.frombuffer(getattr(b, name), dtype=np.int64)[: b.rows] for b in blocks]
            return np.concatenate(parts).copy() if parts else np.zeros(0, np.int64)

        n = sum(b.rows for b in blocks)
        chunks: list[list[int] | None] = [None] * n
        for b in blocks:
            for j, times in b.chunk_times.items():
                chunks[b.base + j - (blocks[0].base if blocks else 0)] = times
        sched = cat("scheduled_ns")
        base = blocks[0].base if blocks else 0
        err = [np.frombuffer(b.error, dtype=np.int16)[: b.rows] for b in blocks]
        cap = [np.frombuffer(b.capped, dtype=np.int8)[: b.rows] for b in blocks]
        return cls(
            seq=np.arange(base, base + n, dtype=np.int64),
            parent=cat("parent"),
            worker=np.full(n, worker, dtype=np.int64),
            scheduled_ns=sched,
            sent_ns=cat("sent_ns"),
            first_byte_ns=cat("first_byte_ns"),
            first_token_ns=cat("first_token_ns"),
            done_ns=cat("done_ns"),
            status=cat("status"),
            error=np.concatenate(err).copy() if err else np.zeros(0, np.int16),
            bytes_out=cat("bytes_out"),
            bytes_in=cat("bytes_in"),
            input_tokens=cat("input_tokens"),
            output_tokens=cat("output_tokens"),
            replica=cat("replica"),
            in_window=(sched >= window_ns[0]) & (sched < window_ns[1]),
            chunk_times=chunks,
            capped=np.concatenate(cap).copy() if cap else np.zeros(0, np.int8),
            first_reasoning_ns=cat("first_reasoning_ns"),
            reasoning_tokens=cat("reasoning_tokens"),
        )

    @classmethod
    def from_block_rows(cls, block: RecordBlock, loc: np.ndarray) -> Records:
        """The rows ``loc`` (block-local indices) of one block, for a derived value of a
        few rows while the run goes on (the live line); worker 0, all in the window."""
        idx = np.asarray(loc, dtype=np.int64)
        n = len(idx)

        def col(name: str) -> I64:
            return np.frombuffer(getattr(block, name), dtype=np.int64)[idx]

        return cls(
            seq=block.base + idx,
            worker=np.zeros(n, dtype=np.int64),
            error=np.frombuffer(block.error, dtype=np.int16)[idx],
            in_window=np.ones(n, dtype=bool),
            chunk_times=[block.chunk_times.get(j) for j in idx.tolist()],
            capped=np.frombuffer(block.capped, dtype=np.int8)[idx],
            **{name: col(name) for name in _INT64_BLOCK_COLUMNS},
        )


_INT64_BLOCK_COLUMNS = tuple(n for n, code, _ in _BLOCK_COLUMNS if code == "q")


# ---- JSON Lines ---------------------------------------------------------------------


_FIELD_ORDER = COLUMNS


def _column_spec(name: str, values: Any) -> tuple[str, list[Any] | None]:
    """Template text for one field of a batch, and the per-row values it needs (if any).

    Fields that are uniform across the batch (all null, all true, one error kind)
    are baked into the template, so the per-row work is one C-level
    ``str % tuple``: about 1 us per row instead of 4.
    """
    if name == "error":
        kinds = [json.dumps(ERROR_KINDS[c]) for c in values]
        if len(set(kinds)) == 1:
            return f'"error":{kinds[0]}'.replace("%", "%%"), None
        return '"error":%s', kinds
    if name in ("in_window", "capped"):
        flags = [bool(v) for v in values]
        if all(flags) or not any(flags):
            return f'"{name}":{"true" if flags and flags[0] else "false"}', None
        return f'"{name}":%s', ["true" if w else "false" for w in flags]
    if name == "chunk_times":
        chunks = list(values)
        if all(c is None for c in chunks):
            return '"chunk_times":null', None
        dumped = ["null" if c is None else json.dumps(c, separators=(",", ":")) for c in chunks]
        return '"chunk_times":%s', dumped
    col = np.asarray(values, dtype=np.int64)
    absent = col < 0
    if absent.all():
        return f'"{name}":null', None
    if not absent.any():
        return f'"{name}":%d', col.tolist()
    strs: list[str] = col.astype(str).tolist()
    for i in np.flatnonzero(absent).tolist():
        strs[i] = "null"
    return f'"{name}":%s', strs


def format_rows(
    cols: dict[str, I64],
    errors: Iterable[int],
    chunks: Iterable[object],
    in_window: Iterable[bool],
    capped: Iterable[int] | None = None,
) -> str:
    """JSON Lines for a batch of rows given as equal-length int64 columns."""
    n = len(cols["seq"])
    if n == 0:
        return ""
    sources: dict[str, Any] = {
        **cols,
        "error": list(errors),
        "chunk_times": list(chunks),
        "in_window": list(in_window),
        "capped": [0] * n if capped is None else list(capped),
    }
    parts: list[str] = []
    per_row: list[list[Any]] = []
    for name in _FIELD_ORDER:
        text, values = _column_spec(name, sources[name])
        parts.append(text)
        if values is not None:
            per_row.append(values)
    template = "{" + ",".join(parts) + "}\n"
    if not per_row:
        return str(template % ()) * n
    return "".join(map(template.__mod__, zip(*per_row, strict=True)))


WRITE_BATCH = 8_192


def write_jsonl(path: Path, r: Records) -> int:
    """Write ``r`` as ``records.jsonl`` (the format the records writer produces), in its row
    order; returns the rows written. Used where rows are gathered after the run: a
    scaled-out run's merge, and a run whose records writer died or stalled."""
    capped = r.capped if r.capped is not None else np.zeros(len(r), dtype=np.int8)
    with atomic_writer(path) as fh:  # all rows or the file as it was, never half of them
        for i in range(0, len(r), WRITE_BATCH):
            part = slice(i, i + WRITE_BATCH)
            cols = {c: getattr(r, c)[part] for c in INT_COLUMNS}
            chunks = r.chunk_times[part] if r.chunk_times else [None] * len(cols["seq"])
            fh.write(
                format_rows(
                    cols,
                    r.error[part].tolist(),
                    chunks,
                    r.in_window[part].tolist(),
                    capped[part].tolist(),
                )
            )
    return len(r)


def read_jsonl(path: str | Path) -> Records:
    """Load ``records.jsonl`` (any row order) into seq-ordered columns.

    A partial last line (a run killed mid-write) is skipped; any other bad line is
    an error naming the line.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                # A device (/dev/zero) or a pipe never ends: a records file is a file.
                raise OSError(errno.EINVAL, "not a regular file")
            rows = list(_parse_lines(fh, str(path)))
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise BadInput("records", str(path), f"a readable records.jsonl ({reason})") from None

    def col(name: str) -> I64:
        return np.array([ABSENT if r.get(name) is None else r[name] for r in rows], dtype=np.int64)

    def kind(row: dict[str, Any]) -> int:
        value = row.get("error") or ""
        if not isinstance(value, str):
            raise TypeError("error kind")
        return error_code(value)

    # A file written by hand or by another tool may hold anything: checked where it is
    # converted (no cost per row on the common path), reported as one BadInput.
    try:
        rows.sort(key=lambda r: (r.get("worker") or 0, r["seq"]))
        ints = {c: col(c) for c in INT_COLUMNS}
        errors = np.array([kind(r) for r in rows], dtype=np.int16)
        chunks = [r.get("chunk_times") for r in rows]
        if not all(c is None or isinstance(c, list) for c in chunks):
            raise TypeError("chunk_times")
    except (TypeError, ValueError, OverflowError):
        raise BadInput("records", str(path), _RECORD_FORM) from None
    return Records(
        seq=ints["seq"],
        parent=ints["parent"],
        worker=ints["worker"],
        scheduled_ns=ints["scheduled_ns"],
        sent_ns=ints["sent_ns"],
        first_byte_ns=ints["first_byte_ns"],
        first_token_ns=ints["first_token_ns"],
        done_ns=ints["done_ns"],
        status=ints["status"],
        error=errors,
        bytes_out=ints["bytes_out"],
        bytes_in=ints["bytes_in"],
        input_tokens=ints["input_tokens"],
        output_tokens=ints["output_tokens"],
        replica=ints["replica"],
        in_window=np.array([bool(r.get("in_window")) for r in rows], dtype=bool),
        chunk_times=chunks,
        capped=np.array([bool(r.get("capped")) for r in rows], dtype=np.int8),
        first_reasoning_ns=ints["first_reasoning_ns"],
        reasoning_tokens=ints["reasoning_tokens"],
    )


_RECORD_FORM = (
    "records with whole-number (or null) times, counts and ids, a text error kind "
    "and a list (or null) of chunk times"
)


def _parse_lines(fh: IO[str], name: str) -> Iterator[dict[str, Any]]:
    lines = fh.read().split("\n")
    complete = lines[:-1]  # text after the last newline is an unfinished line
    for lineno, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise BadInput(f"{name}:{lineno}", line[:60], "one JSON record per line") from None
        if not isinstance(row, dict) or not isinstance(row.get("seq"), int):
            raise BadInput(f"{name}:{lineno}", line[:60], "a JSON object with an integer seq")
        yield row
