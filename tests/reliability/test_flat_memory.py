"""Long runs keep flat memory: finished blocks leave for disk and come back, bit for bit.

The records of a run that spilled blocks (:mod:`tailwise.loadgen.execute.spill`) must be
exactly those of ``records.jsonl`` and of a run kept whole in memory, with
stream chunk times, an interruption, and the closed loop. The soak benchmark
(``benchmarks/soak.py``) measures the memory itself over ten minutes.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailwise.loadgen.execute import spill
from tailwise.loadgen.runner import RunOptions, RunResult, execute, prepare
from tailwise.loadgen.transport import FakeTransport
from tailwise.records import COLUMNS, RecordBlock, Records, read_jsonl

pytestmark = pytest.mark.reliability
MS = 1_000_000


class ChunkyTransport(FakeTransport):
    """Answers after 1 ms with a few stream chunk times, like an LLM stream."""

    def __init__(self) -> None:
        super().__init__(lambda seq: (MS, 200, "" if seq % 97 else "http_5xx"))

    def _finish(self, block: RecordBlock, j: int, status: int, kind: str) -> None:
        block.chunk_times[j] = [block.base + j, block.base + j + 1]
        super()._finish(block, j, status, kind)


@pytest.fixture
def spills(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Block indices retired to disk during the run (the real method still runs)."""
    seen: list[int] = []
    real = spill.Spill.retire_steps

    def retire_steps(self: spill.Spill, blocks: list[RecordBlock], b: int) -> Iterator[None]:
        seen.append(b)
        yield from real(self, blocks, b)

    monkeypatch.setattr(spill.Spill, "retire_steps", retire_steps)
    return seen


def run(tmp_path: Path, **kw: Any) -> RunResult:
    tmp_path.mkdir(parents=True, exist_ok=True)
    kw.setdefault("warmup", "0s")  # every planned request counted: no transient cut
    opts = RunOptions(urls=["http://127.0.0.1:9/x"], out=str(tmp_path), **kw)
    return execute(prepare(opts), tmp_path, transport=ChunkyTransport())


def same(a: Records, b: Records) -> None:
    for name in COLUMNS:
        if name == "chunk_times":
            assert a.chunk_times == b.chunk_times
        else:
            assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_spilled_blocks_come_back_exactly(tmp_path: Path, spills: list[int]) -> None:
    res = run(tmp_path, rate="20000/s", arrival="constant", duration="1s")
    assert len(spills) >= 2  # 20k rows are 5 blocks: all but the newest two left memory
    assert res.summary["requests"]["accounted"] and len(res.records) == 20_000
    same(res.records, read_jsonl(tmp_path / "records.jsonl"))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tailwise-spill")] == []


def test_spilling_changes_nothing_in_the_records(
    tmp_path: Path, spills: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fixed (zero) warm-up: --warmup auto would cut by the latencies, which differ.
    kept = run(
        tmp_path / "a", rate="20000/s", arrival="constant", duration="1s", seed=3, warmup="0s"
    )
    assert spills
    monkeypatch.setattr(spill.Spill, "retirable", lambda self, blocks: [])
    whole = run(
        tmp_path / "b", rate="20000/s", arrival="constant", duration="1s", seed=3, warmup="0s"
    )
    # Times differ run to run; what the plan and the answers decide must not.
    for name in ("seq", "scheduled_ns", "status", "error", "in_window"):
        assert np.array_equal(getattr(kept.records, name), getattr(whole.records, name)), name
    assert kept.summary["requests"] == whole.summary["requests"]


def _interrupt_once_spilled(spills: list[int], limit_s: float = 8.0) -> None:
    """SIGINT as soon as a block has gone to disk (a loaded machine may take longer than
    any fixed delay to send that many), or at ``limit_s`` whatever happened."""
    deadline = time.monotonic() + limit_s
    while not spills and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGINT)


def test_interrupted_run_with_spilled_blocks(tmp_path: Path, spills: list[int]) -> None:
    threading.Thread(target=_interrupt_once_spilled, args=(spills,), daemon=True).start()
    res = run(tmp_path, rate="20000/s", arrival="constant", duration="10s", grace="200ms")
    s = res.summary
    assert s["interrupted"] and s["requests"]["accounted"] and spills
    same(res.records, read_jsonl(tmp_path / "records.jsonl"))


def test_closed_loop_spills_too(tmp_path: Path, spills: list[int]) -> None:
    res = run(tmp_path, concurrency=32, duration="1s")
    assert res.summary["requests"]["accounted"]
    if len(res.records) > 3 * 4096:  # enough blocks on this machine to leave memory
        assert spills
    same(res.records, read_jsonl(tmp_path / "records.jsonl"))


def test_stream_chunk_times_leave_in_short_steps(tmp_path: Path) -> None:
    # A block of LLM rows: its chunk times leave in pieces of CHUNK_PIECE_ROWS rows, one
    # piece per step (a whole block in one step held the event loop ~4 ms), and come back
    # whole.
    rows = 600
    blk = RecordBlock(0, rows)
    blk.sent_ns[:] = type(blk.sent_ns)("q", range(rows))
    for j in range(rows):
        blk.chunk_times[j] = [j * 1000 + k for k in range(33)]
    want = {j: list(v) for j, v in blk.chunk_times.items()}
    blocks = [blk, RecordBlock(rows, 1), RecordBlock(rows + 1, 1)]
    s = spill.Spill(tmp_path)
    s.note_written(list(range(rows)))
    assert s.retirable(blocks) == [0]
    steps = sum(1 for _ in s.retire_steps(blocks, 0))
    pieces = -(-rows // spill.CHUNK_PIECE_ROWS)
    assert steps == len(spill.ARRAY_COLUMNS) + pieces == len(spill.ARRAY_COLUMNS) + 3
    assert blk.chunk_times == {} and len(blk.sent_ns) == 0  # out of memory
    s.restore(blocks)
    assert blk.chunk_times == want
    assert list(blk.sent_ns) == list(range(rows))
