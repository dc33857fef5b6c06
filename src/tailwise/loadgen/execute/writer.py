"""The records writer process: binary frames in on stdin, JSON Lines out, flushed per frame.

Formatting JSON costs a few microseconds per row; done on the engine's event
loop it delays the pacer (a 256-row slice held the loop ~1 ms in measurement).
So the engine only packs finished rows into a binary frame and writes it to
this process's stdin through a non-blocking pipe; this process formats and
appends ``records.jsonl``, flushing after every frame. If the engine process
dies, this one reads end-of-file, flushes what it has and exits.

Frame layout (little-endian)::

    b"TWF2" | uint32 rows | uint32 chunk_values | uint32 kinds_bytes
    | kinds JSON (the error-kind table) | int64[WIDTH, rows] (column-major: INT_COLUMNS,
    then error code, then capped) | int64[rows] chunk counts | int64[chunk_values] offsets
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import sys
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tailwise.loadgen.transport.sse_fast import compiled_module
from tailwise.records import COLUMNS, ERROR_KINDS, INT_COLUMNS, format_rows

MAGIC = b"TWF2"
HEADER = struct.Struct("<4sIII")
WIDTH = len(INT_COLUMNS) + 2  # the int columns, then the error code and the capped flag
READY = "ready"


def pack(matrix: np.ndarray, chunks: list[list[int] | None] | None) -> bytes:
    """One frame from an ``int64[WIDTH, rows]`` matrix and per-row chunk times (or None)."""
    rows = matrix.shape[1]
    if chunks is None:  # no streamed chunks in this batch: skip the per-row loop
        counts, values = np.zeros(rows, dtype=np.int64), []
    else:
        counts = np.array([0 if c is None else len(c) for c in chunks], dtype=np.int64)
        values = [v for c in chunks if c for v in c]
    kinds = json.dumps(ERROR_KINDS).encode()
    head = HEADER.pack(MAGIC, rows, len(values), len(kinds))
    body = np.ascontiguousarray(matrix, dtype="<i8").tobytes()
    return b"".join(
        (
            head,
            kinds,
            body,
            counts.astype("<i8").tobytes(),
            np.asarray(values, dtype="<i8").tobytes(),
        )
    )


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        part = stream.read(n - len(buf))
        if not part:
            return None
        buf += part
    return bytes(buf)


def _format(
    matrix: np.ndarray,
    counts: np.ndarray,
    values: np.ndarray,
    kinds: list[str],
    window: tuple[int, int],
) -> str:
    cols = {c: matrix[i] for i, c in enumerate(INT_COLUMNS)}
    codes = matrix[-2].tolist()
    capped = matrix[-1].tolist()
    ends = np.cumsum(counts)
    chunks: list[object] = [
        None if n == 0 else values[e - n : e].tolist()
        for n, e in zip(counts.tolist(), ends.tolist(), strict=True)
    ]
    sched = cols["scheduled_ns"]
    in_window = ((sched >= window[0]) & (sched < window[1])).tolist()
    ERROR_KINDS[:] = kinds  # the engine's table, which may have grown during the run
    return format_rows(cols, codes, chunks, in_window, capped)


def _field_plan() -> tuple[tuple[bytes, int, int], ...]:
    """What :mod:`tailwise.loadgen.execute.writer_c` writes, field by field, in the records' order:
    (text before the value, what the value is, its row of the frame's matrix)."""
    row = {c: i for i, c in enumerate(INT_COLUMNS)}
    special = {
        "error": (1, WIDTH - 2),
        "chunk_times": (2, 0),
        "in_window": (3, row["scheduled_ns"]),
        "capped": (4, WIDTH - 1),
    }
    return tuple(
        (f'{"," if k else "{"}"{name}":'.encode(), *special.get(name, (0, row.get(name, 0))))
        for k, name in enumerate(COLUMNS)
    )


# The frame's integers are little-endian; the compiled formatter reads native ones.
_COMPILED = compiled_module("execute.writer_c") if sys.byteorder == "little" else None
_PLAN = _field_plan()


def format_frame(
    payload: bytes, n_kinds: int, rows: int, n_values: int, window: tuple[int, int]
) -> str:
    """A frame's records as JSON Lines: compiled where built (~10x faster), else
    :func:`_format`; the same text either way."""
    kinds = json.loads(payload[:n_kinds])
    if _COMPILED is not None:
        encoded = tuple(json.dumps(k).encode() for k in kinds)
        ints = memoryview(payload)[n_kinds:]
        try:
            text: str = _COMPILED.rows(ints, rows, WIDTH, n_values, _PLAN, encoded, *window)
            return text
        except ValueError:  # a frame that does not add up: the general path decides
            pass
    ints_np = np.frombuffer(payload, dtype="<i8", offset=n_kinds)
    matrix = ints_np[: rows * WIDTH].reshape(WIDTH, rows)
    counts = ints_np[rows * WIDTH : rows * WIDTH + rows]
    values = ints_np[rows * WIDTH + rows :]
    return _format(matrix, counts, values, kinds, window)


def serve(stream: BinaryIO, out: Path, window: tuple[int, int]) -> int:
    """Append every frame's rows to ``out``; the rows written whole.

    A write that fails (disk full, a file-size limit) cuts the file back to the end of
    the last whole frame, so that it stays parseable line by line, and stops writing;
    the frames that follow are read and dropped (the engine holds every row and
    rewrites or rescues them: :func:`tailwise.loadgen.conclude.writer_state`).
    """
    rows_written = 0
    good = 0  # bytes of whole frames in the file
    failed = False
    with open(out, "wb", buffering=0) as fh:
        while (head := _read_exact(stream, HEADER.size)) is not None:
            magic, rows, n_values, n_kinds = HEADER.unpack(head)
            if magic != MAGIC:
                raise SystemExit("tailwise writer: corrupt frame")
            payload = _read_exact(stream, n_kinds + 8 * (rows * WIDTH + rows + n_values))
            if payload is None:
                break  # the engine died mid-frame: keep every complete frame
            if failed:
                continue
            data = format_frame(payload, n_kinds, rows, n_values, window).encode()
            try:
                view = memoryview(data)
                while view:
                    n = fh.write(view)
                    if not n:
                        raise OSError("nothing written")
                    view = view[n:]
            except OSError:
                failed = True
                with contextlib.suppress(OSError):
                    os.ftruncate(fh.fileno(), good)
                continue
            good += len(data)
            rows_written += rows
    return rows_written


def main() -> None:
    # The engine decides when the run ends; this process ends at end-of-file.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Lowest CPU priority: on a busy machine the pacer (and the target) come first;
    # this process catches up on the pipe's backlog when a core is free. SCHED_IDLE,
    # unlike nice 19, never preempts a normal task when it wakes (measured: a niced
    # writer still delayed the pacer by whole scheduler slices at 45k req/s).
    with contextlib.suppress(OSError, AttributeError):
        os.nice(19)
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    out, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # Started: the engine waits for this line before its clock starts, so that this
    # process's start-up (imports, at normal priority until the line above) never
    # competes with the pacer (measured: a 5 ms stall right after the first send).
    print(READY, flush=True)
    rows = serve(sys.stdin.buffer, Path(out), (start, end))
    # The engine compares this with the rows it sent (a killed engine reads nothing);
    # it reads the last line, after READY.
    with contextlib.suppress(BrokenPipeError):
        print(rows, flush=True)


if __name__ == "__main__":
    main()
