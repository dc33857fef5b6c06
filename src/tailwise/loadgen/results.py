"""Results leave the hot path here: JSON Lines written while the run goes, and progress.

Both run as periodic tasks on the engine's event loop and work in slices of
:data:`SLICE_ROWS` rows, yielding between slices, so formatting never holds
the loop (and so the pacer) for more than a fraction of a millisecond.
Records are flushed to disk at every pass, so a killed run keeps its data.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import TextIO

import numpy as np

from tailwise.clock import now_ns
from tailwise.loadgen.attack import Engine
from tailwise.metrics.percentiles import nearest_rank
from tailwise.records import INT_COLUMNS, RecordBlock, format_rows

SLICE_ROWS = 256
FLUSH_S = 0.1
_BLOCK_SHIFT = 16  # RecordBlock bases are multiples of 2**16 (BLOCK_ROWS)
_PER_BLOCK = (
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
    "parent",
    "replica",
)


class JsonlWriter:
    """Appends finished rows to ``records.jsonl`` in completion order."""

    def __init__(self, path: Path, window_ns: tuple[int, int], worker: int = 0) -> None:
        self.path = path
        self._fh: TextIO = open(path, "w", encoding="utf-8", buffering=1 << 20)  # noqa: SIM115
        self._window = window_ns
        self._worker = worker
        self.rows_written = 0
        self._warm_up()

    def _warm_up(self) -> None:
        """Pay first-call costs (NumPy's string formatting setup: ~8 ms) before the clock starts."""
        dummy = RecordBlock(0, 2)
        local = np.arange(2, dtype=np.int64)
        cols = {c: np.frombuffer(getattr(dummy, c), dtype=np.int64)[local] for c in _PER_BLOCK}
        cols["seq"] = cols["worker"] = local
        format_rows(cols, [0, 0], [None, [1, 2]], [True, False])
        np.unique(local >> _BLOCK_SHIFT)
        nearest_rank(np.sort(local.astype(np.float64)), 99.0)

    def write(self, blocks: list[RecordBlock], seqs: list[int]) -> None:
        if not seqs:
            return
        arr = np.asarray(seqs, dtype=np.int64)
        for b in np.unique(arr >> _BLOCK_SHIFT).tolist():
            mine = arr[(arr >> _BLOCK_SHIFT) == b]
            self._write_block(blocks[b], mine - blocks[b].base)
        self._fh.flush()
        self.rows_written += len(seqs)

    def _write_block(self, block: RecordBlock, local: np.ndarray) -> None:
        cols = {c: np.frombuffer(getattr(block, c), dtype=np.int64)[local] for c in _PER_BLOCK}
        cols["seq"] = local + block.base
        cols["worker"] = np.full(len(local), self._worker, dtype=np.int64)
        errors = np.frombuffer(block.error, dtype=np.int8)[local].tolist()
        chunks = [block.chunk_times.get(j) for j in local.tolist()]
        sched = cols["scheduled_ns"]
        in_window = ((sched >= self._window[0]) & (sched < self._window[1])).tolist()
        assert set(cols) == set(INT_COLUMNS)
        self._fh.write(format_rows(cols, errors, chunks, in_window))

    def close(self) -> None:
        self._fh.close()


async def pump(engine: Engine, writer: JsonlWriter, stop: asyncio.Event) -> None:
    """Write completions every :data:`FLUSH_S` until ``stop``; the caller drains the rest."""
    pos = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), FLUSH_S)
        end = len(engine.completed)
        while pos < end:
            nxt = min(pos + SLICE_ROWS, end)
            writer.write(engine.blocks, engine.completed[pos:nxt])
            pos = nxt
            await asyncio.sleep(0)
    writer.write(engine.blocks, engine.completed[pos:])


class Progress:
    """A live status line on stderr: elapsed, sent, in flight, errors, p99 of the last second."""

    def __init__(self, engine: Engine, total_s: float | None, stream: TextIO = sys.stderr) -> None:
        self.engine = engine
        self.total_s = total_s
        self.stream = stream
        self._pos = 0
        self._errors = 0
        self._sent = 0

    def line(self) -> str:
        e = self.engine
        new = e.completed[self._pos :]
        self._pos += len(new)
        p99 = "-"
        if new:
            arr = np.asarray(new, dtype=np.int64)
            lat: list[float] = []
            for b in np.unique(arr >> _BLOCK_SHIFT).tolist():
                blk = e.blocks[b]
                loc = arr[(arr >> _BLOCK_SHIFT) == b] - blk.base
                err = np.frombuffer(blk.error, dtype=np.int8)[loc]
                d = np.frombuffer(blk.done_ns, dtype=np.int64)[loc]
                s = np.frombuffer(blk.scheduled_ns, dtype=np.int64)[loc]
                self._errors += int((err != 0).sum())
                lat.extend((d - s)[err == 0].tolist())
            if lat:
                p99 = f"{nearest_rank(np.sort(np.asarray(lat)), 99.0) / 1e6:.1f}ms"
        elapsed = (now_ns() - e.t0) / 1e9
        total = f"/{self.total_s:.0f}s" if self.total_s else "s"
        return (
            f"  {max(elapsed, 0):5.1f}{total}  sent {e.sent:>8}  in flight {e.in_flight:>5}"
            f"  errors {self._errors:>6}  p99 (last 1s) {p99:>9}"
        )

    async def run(self, stop: asyncio.Event) -> None:
        tty = self.stream.isatty()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            text = self.line()
            self.stream.write(("\r" + text + "\x1b[K") if tty else text + "\n")
            self.stream.flush()
        if tty:
            self.stream.write("\n")
            self.stream.flush()
