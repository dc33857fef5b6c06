"""The records writer's compiled formatter writes the same text as the Python one.

:func:`tailwise.loadgen.execute.writer.format_frame` formats a frame with ``writer_c.rows``
where it is built; the reference is :func:`tailwise.loadgen.execute.writer._format`, that is
:func:`tailwise.records.format_rows`. Checked on generated frames (absent values,
extreme integers, every error kind, chunk times or none, the window's edges), on
frames that do not add up (the compiled path declines them, the Python path decides),
and end to end through the writer process.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailwise.loadgen.execute import writer
from tailwise.loadgen.transport.sse_fast import compiled_module
from tailwise.records import INT_COLUMNS, read_jsonl

_writer_c = compiled_module("execute.writer_c")
pytestmark = pytest.mark.skipif(_writer_c is None, reason="writer_c not built here")

WIDTH = writer.WIDTH


@pytest.fixture(autouse=True)
def kinds_kept() -> Iterator[None]:
    """The Python formatter adopts a frame's error-kind table (the writer process's own
    copy); in this process that table is the engine's, which other tests rely on."""
    saved = writer.ERROR_KINDS[:]
    yield
    writer.ERROR_KINDS[:] = saved


I64 = st.integers(-(2**63), 2**63 - 1)
KINDS = ["", "connect", "timeout", 'say "hi"\\', "caf\u00e9 \u2603", "http_5xx"]


def frame(matrix: np.ndarray, chunks: list[list[int] | None], kinds: list[str]) -> bytes:
    """A frame as the engine writes it (writer.pack), with its own error-kind table."""
    writer.ERROR_KINDS[:] = kinds
    return writer.pack(matrix, chunks)


def both(data: bytes, window: tuple[int, int]) -> tuple[str, str]:
    """(compiled, Python) text of one frame."""
    _, rows, n_values, n_kinds = writer.HEADER.unpack(data[: writer.HEADER.size])
    payload = data[writer.HEADER.size :]
    compiled = writer.format_frame(payload, n_kinds, rows, n_values, window)
    ints = np.frombuffer(payload, dtype="<i8", offset=n_kinds)
    matrix = ints[: rows * WIDTH].reshape(WIDTH, rows)
    counts = ints[rows * WIDTH : rows * WIDTH + rows]
    values = ints[rows * WIDTH + rows :]
    kinds = json.loads(payload[:n_kinds])
    return compiled, writer._format(matrix, counts, values, kinds, window)


@st.composite
def frames(draw: Any) -> tuple[bytes, tuple[int, int]]:
    rows = draw(st.integers(0, 12))
    kinds = KINDS[: draw(st.integers(1, len(KINDS)))]
    value = st.one_of(st.just(-1), st.integers(0, 10**12), I64)
    matrix = np.zeros((WIDTH, rows), dtype=np.int64)
    for i in range(len(INT_COLUMNS)):
        matrix[i] = draw(st.lists(value, min_size=rows, max_size=rows))
    matrix[WIDTH - 2] = draw(st.lists(st.integers(0, len(kinds) - 1), min_size=rows, max_size=rows))
    matrix[WIDTH - 1] = draw(st.lists(st.sampled_from([0, 1, 7, -1]), min_size=rows, max_size=rows))
    chunks = draw(
        st.lists(st.one_of(st.none(), st.lists(I64, max_size=5)), min_size=rows, max_size=rows)
    )
    sched = matrix[INT_COLUMNS.index("scheduled_ns")].tolist()
    edges = [*sched, 0, 10**9] if rows else [0, 10**9]
    lo, hi = sorted((draw(st.sampled_from(edges)), draw(st.sampled_from(edges))))
    return frame(matrix, chunks, kinds), (lo, hi)


@settings(max_examples=600, deadline=None)
@given(frames())
def test_compiled_text_is_the_python_text(case: tuple[bytes, tuple[int, int]]) -> None:
    data, window = case
    compiled, python = both(data, window)
    assert compiled == python


def test_one_llm_frame_and_one_http_frame() -> None:
    # The shapes a run writes: a stream's chunk times, and plain rows in a window.
    m = np.arange(WIDTH * 3, dtype=np.int64).reshape(WIDTH, 3) * 1_000_003
    m[INT_COLUMNS.index("parent")] = -1
    m[WIDTH - 2] = [0, 1, 0]
    m[WIDTH - 1] = [0, 0, 1]
    llm = frame(m, [[1, 2, 3], None, []], ["", "connect"])
    compiled, python = both(llm, (0, 10**18))
    assert compiled == python
    first = json.loads(compiled.splitlines()[0])
    assert first["chunk_times"] == [1, 2, 3] and first["parent"] is None
    assert first["in_window"] is True and first["capped"] is False


@pytest.mark.parametrize(
    "spoil",
    [
        "count_below_zero",
        "counts_over_values",
        "code_outside_kinds",
        "negative_code",
    ],
)
def test_frames_that_do_not_add_up_are_declined(spoil: str) -> None:
    m = np.ones((WIDTH, 2), dtype=np.int64)
    m[WIDTH - 2] = [0, 1]
    data = bytearray(frame(m, [[5, 6], [7]], ["", "reset"]))
    _, rows, n_values, n_kinds = writer.HEADER.unpack(data[: writer.HEADER.size])
    payload = bytearray(data[writer.HEADER.size :])
    ints = np.frombuffer(payload, dtype="<i8", offset=n_kinds)  # a view: edits go to payload
    counts_at = rows * WIDTH
    if spoil == "count_below_zero":
        ints[counts_at : counts_at + 2] = [-1, 4]
    elif spoil == "counts_over_values":
        ints[counts_at] = 3
    elif spoil == "code_outside_kinds":
        ints[(WIDTH - 2) * rows] = 2
    else:
        ints[(WIDTH - 2) * rows] = -1
    assert _writer_c is not None
    with pytest.raises(ValueError):
        _writer_c.rows(
            memoryview(bytes(payload))[n_kinds:], rows, WIDTH, n_values, writer._PLAN,
            (b'""', b'"reset"'), 0, 10,
        )  # fmt: skip
    # The writer then formats it in Python, as it did before there was a compiled path
    # (which may read what it can, or fail: either way the compiled path decided nothing).
    try:
        python: str | None = writer.format_frame(bytes(payload), n_kinds, rows, n_values, (0, 10))
    except (IndexError, ValueError):
        python = None
    if python is not None:
        matrix = ints[: rows * WIDTH].reshape(WIDTH, rows)
        counts = ints[counts_at : counts_at + rows]
        values = ints[counts_at + rows :]
        kinds = json.loads(bytes(payload[:n_kinds]))
        assert python == writer._format(matrix, counts, values, kinds, (0, 10))


@pytest.mark.parametrize("cut", [1, 8, 100])
def test_a_short_buffer_is_declined(cut: int) -> None:
    m = np.ones((WIDTH, 3), dtype=np.int64)
    data = frame(m, [[1], [2], [3]], [""])
    _, rows, n_values, n_kinds = writer.HEADER.unpack(data[: writer.HEADER.size])
    payload = data[writer.HEADER.size : -cut]
    assert _writer_c is not None
    with pytest.raises(ValueError):
        _writer_c.rows(memoryview(payload)[n_kinds:], rows, WIDTH, n_values, writer._PLAN,
                       (b'""',), 0, 10)  # fmt: skip


def test_the_writer_process_writes_what_it_was_sent(tmp_path: Path) -> None:
    # End to end: frames through a real writer process's stdin, then the file read back.
    m = np.arange(WIDTH * 4, dtype=np.int64).reshape(WIDTH, 4)
    m[WIDTH - 2] = 0
    out = tmp_path / "records.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailwise.loadgen.execute.writer", str(out), "0", str(10**9)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == writer.READY.encode()
    # The writer makes itself SCHED_IDLE (it must never delay the pacer), so beside
    # CPU-bound processes it gets no CPU at all and outlived a 30 s wait (a run kills it
    # after WAIT_S and rewrites from memory). What it writes is the question here:
    # give it back a normal policy (at nice 19 still) where this process may.
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(proc.pid, os.SCHED_OTHER, os.sched_param(0))
    proc.stdin.write(writer.pack(m, [[1, 2], None, [3], None]))
    later = m + 100
    later[WIDTH - 2] = 0
    proc.stdin.write(writer.pack(later, None))
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert int(proc.stdout.read().split()[-1]) == 8
    r = read_jsonl(out)
    assert len(r) == 8
    seq = INT_COLUMNS.index("seq")
    assert sorted(r.seq.tolist()) == sorted([*m[seq].tolist(), *(m[seq] + 100).tolist()])
    assert r.chunk_times is not None and [1, 2] in r.chunk_times
