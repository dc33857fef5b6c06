"""Finished record blocks leave memory during a run, so a long run's memory stays flat.

Every request's row lives in a :class:`~tailwise.records.RecordBlock` (about 100
bytes a row) and its sequence number in the engine's completion log. Kept for
the whole run, that grows without bound: 150 bytes a request was measured, or
180 MB for ten minutes at 2000/s. Yet once all rows of a block are finished and
written to ``records.jsonl``, nothing needs them until the summary at the end.

So the records pump (:func:`tailwise.loadgen.execute.results.pump`) hands such blocks
to :class:`Spill`, which writes their columns as raw bytes to an unlinked
temporary file in the run directory (nothing is left behind if the process
dies) and empties their arrays; the runner reads them back before summarizing.
Only the newest :data:`KEEP_BLOCKS` blocks stay resident whatever happens, so
the engine's current block (which may still grow or shrink) is never touched.

A write that fails (disk full) stops spilling: the block stays in memory, as do
the ones after it (memory then grows as in a run without spilling), and the
records on disk are :func:`tailwise.loadgen.conclude.writer_state`'s concern.

Spilling is used when the pump is the only reader of the completion log and
of old blocks: a single-process run without the SLO-loss watch (knee trials
are short) and without scale-out snapshots.
"""

from __future__ import annotations

import contextlib
import marshal
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tailwise.records import ARRAY_COLUMNS, BLOCK_SHIFT, RecordBlock

KEEP_BLOCKS = 2
CHUNK_PIECE_ROWS = 256  # rows of chunk times marshalled per step (~0.25 ms)
# Every array column of a block, in file order (chunk_times follows, marshalled in pieces).
_COLUMNS = ARRAY_COLUMNS


class Spill:
    """Blocks moved to disk: ``note_written`` as rows reach the writer, ``retire``, ``restore``."""

    def __init__(self, directory: Path) -> None:
        # Closed in restore(); unlinked at once, so a killed run leaves nothing behind.
        self._file = tempfile.TemporaryFile(dir=directory, prefix=".tailwise-spill-")  # noqa: SIM115
        self._written: dict[int, int] = {}  # block index -> rows handed to the writer
        self._where: dict[int, tuple[int, list[int]]] = {}  # block index -> (offset, part sizes)
        self.spilled_rows = 0
        self.failed = ""  # why spilling stopped (a write failed), if it did

    def note_written(self, seqs: list[int]) -> None:
        """Count rows handed to the records writer, per block."""
        if not seqs:
            return
        which = np.asarray(seqs, dtype=np.int64) >> BLOCK_SHIFT
        for b, n in enumerate(np.bincount(which).tolist()):
            if n:
                self._written[b] = self._written.get(b, 0) + n

    def retirable(self, blocks: list[RecordBlock]) -> list[int]:
        """Indices of blocks complete on disk and not among the newest :data:`KEEP_BLOCKS`."""
        last = len(blocks) - KEEP_BLOCKS
        return [
            b
            for b, n in self._written.items()
            if b < last and b not in self._where and n >= blocks[b].rows
        ]

    def retire_steps(self, blocks: list[RecordBlock], b: int) -> Iterator[None]:
        """Write block ``b``'s columns to the file, pausing after each, then free its arrays.

        In steps because a whole block in one go (~0.2-0.7 ms of copying and page
        cache faults) is a send-lag spike for the pacer sharing this event loop;
        a column is ~15 us. Rows and base stay; nothing touches a retirable block.
        """
        if self.failed:
            return
        block = blocks[b]
        self._file.seek(0, 2)
        offset = self._file.tell()
        sizes = []
        try:
            for name in _COLUMNS:
                column = getattr(block, name)
                self._file.write(column)
                sizes.append(column.itemsize * len(column))
                yield
            # Chunk times (LLM streams) in pieces: a whole block's marshalled at once held
            # the loop ~4 ms (4,096 rows of 33 times), a send-lag and receive-lag spike.
            times = list(block.chunk_times.items())
            for at in range(0, len(times), CHUNK_PIECE_ROWS):
                piece = marshal.dumps(dict(times[at : at + CHUNK_PIECE_ROWS]))
                self._file.write(piece)
                sizes.append(len(piece))
                yield
            self._file.flush()
        except OSError as exc:
            # Disk full (or a file-size limit): blocks stay in memory from here on, as in
            # a run without spilling; the part written is given back to the disk.
            self.failed = exc.strerror or type(exc).__name__
            with contextlib.suppress(OSError, ValueError):
                self._file.truncate(offset)
            return
        self._where[b] = (offset, sizes)
        for name in _COLUMNS:
            setattr(block, name, array(getattr(block, name).typecode))
        block.chunk_times = {}
        del self._written[b]
        self.spilled_rows += block.rows

    def restore(self, blocks: list[RecordBlock]) -> None:
        """Put every spilled block's columns back (before the summary), then drop the file."""
        self._file.flush()
        for b, (offset, sizes) in sorted(self._where.items()):
            self._file.seek(offset)
            block = blocks[b]
            for name, size in zip(_COLUMNS, sizes, strict=False):
                column = array(getattr(block, name).typecode)
                column.frombytes(self._file.read(size))
                setattr(block, name, column)
            for size in sizes[len(_COLUMNS) :]:
                block.chunk_times.update(marshal.loads(self._file.read(size)))
        self._where.clear()
        self._file.close()
