"""Results leave the hot path here: records streamed to disk during the run, and progress.

Both run as periodic tasks on the engine's event loop. Finished rows go to a
writer process as binary frames, within :data:`FLUSH_MAX_NS` of finishing (JSON
formatting happens there, off the pacer's core); it appends and flushes
``records.jsonl`` per frame, so a killed run keeps all but its last ~0.1 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from tailwise.clock import now_ns
from tailwise.loadgen.engine.attack import Engine
from tailwise.loadgen.execute import live
from tailwise.loadgen.execute.spill import Spill
from tailwise.loadgen.execute.writer import WIDTH, pack
from tailwise.metrics.catalog import CATALOG, lookup
from tailwise.metrics.percentiles import nearest_rank
from tailwise.records import BLOCK_SHIFT, INT_COLUMNS, RecordBlock, Records

SLICE_ROWS = 1024
# Rows with stream chunk times cost ~2 us each to pack (a Python int per chunk):
# 64 of them hold the loop ~0.15 ms, where a 100 ms pass at 1,800 streams/s
# (~180 rows) was a ~1-2 ms send-lag spike every 100 ms.
STREAM_SLICE_ROWS = 64
# Often and small: each pass holds the loop while it packs its rows, and the pacer
# waits. At 65k req/s a 0.1 s period meant ~6,500 rows at once, a ~1 ms send-lag
# spike every 100 ms; at 10 ms a pass packs ~650 rows (~0.15 ms).
FLUSH_S = 0.01
# A pass also has a fixed cost (NumPy gathers, a frame, a pipe write: ~0.1 ms), so a
# few rows wait for more, up to FLUSH_MAX_NS: at an LLM run's rates (2k req/s, 20 rows
# per 10 ms) a pass every 10 ms was ~2% of the client's CPU.
MIN_FLUSH_ROWS = 256
FLUSH_MAX_NS = 100_000_000
WAIT_S = 20.0  # for the writer to finish after the run; past it, rows are rewritten from memory
READY_TIMEOUT_S = 30.0  # the writer imports NumPy: seconds on a cold, loaded machine


class RecordSink:
    """Streams finished rows to the writer process (:mod:`tailwise.loadgen.execute.writer`).

    On the event loop this only gathers integer columns into one matrix per
    pass (~0.1 ms per thousand rows) and queues it on a non-blocking pipe.
    """

    def __init__(self, path: Path, window_ns: tuple[int, int], worker: int = 0) -> None:
        self.path = path
        self._worker = worker
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tailwise.loadgen.execute.writer",
                str(path),
                str(window_ns[0]),
                str(window_ns[1]),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C in the terminal must not kill the writer
        )
        self._pipe: asyncio.WriteTransport | None = None
        self._lost: asyncio.Future[None] | None = None
        self.rows_written = 0
        pack_rows([RecordBlock(0, 2)], [0, 1], 0)  # first-call costs, before the clock starts

    async def open(self) -> None:
        self._await_ready()
        loop = asyncio.get_running_loop()
        lost: asyncio.Future[None] = loop.create_future()
        self._lost = lost

        class _Watch(asyncio.Protocol):
            def connection_lost(self, exc: Exception | None) -> None:
                if not lost.done():
                    lost.set_result(None)

        assert self.proc.stdin is not None
        transport, _ = await loop.connect_write_pipe(_Watch, self.proc.stdin)
        self._pipe = transport

    def _await_ready(self) -> None:
        """Block until the writer has started (nothing is on the clock yet).

        A writer that dies first is not an error here: the run goes on and
        :meth:`wait` reports it, as for a writer that dies later.
        """
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], READY_TIMEOUT_S)
        if ready:
            self.proc.stdout.readline()

    def write(self, blocks: list[RecordBlock], seqs: list[int]) -> None:
        if seqs and self._pipe is not None and not self._pipe.is_closing():
            self._pipe.write(pack_rows(blocks, seqs, self._worker))
            self.rows_written += len(seqs)

    def wake_writer(self) -> bool:
        """Give the writer a normal scheduling policy back; False where not permitted."""
        try:
            os.sched_setscheduler(self.proc.pid, os.SCHED_OTHER, os.sched_param(0))
        except (OSError, AttributeError):
            return False
        return True

    async def close(self) -> None:
        """Flush the pipe and let the writer finish the file.

        Every request is answered or given up by now, so the writer no longer needs to
        yield to the pacer: it gets a normal policy back (at nice 19 still) where this
        process may give it (root, or CAP_SYS_NICE). Beside four CPU-bound processes on 2
        cores a SCHED_IDLE writer got no CPU at all, and every run waited its
        :data:`WAIT_S` and then rewrote the file from memory."""
        self.wake_writer()
        if self._pipe is not None:
            self._pipe.close()
            assert self._lost is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost, 30)

    def wait(self) -> int | None:
        """Wait for the writer; the number of rows it wrote, or None if it failed.

        A writer that does not finish within :data:`WAIT_S` (stopped, or starved
        for CPU) is killed: the caller still holds every row and rewrites the
        file from memory, so waiting longer would only hold the run (a stopped
        writer used to hold it 120 s).
        """
        self.proc.stdin = None  # owned and closed by the loop's pipe transport
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        assert self.proc.stdout is not None
        out = self.proc.stdout.read().decode()  # one short line: no pipe-full deadlock
        self.proc.stdout.close()
        try:
            return int(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None


# Where the frame's rows come from: (frame row, block column, the column's NumPy type).
_GATHER = (
    *((i, c, np.int64) for i, c in enumerate(INT_COLUMNS) if c not in ("seq", "worker")),
    (WIDTH - 2, "error", np.int16),
    (WIDTH - 1, "capped", np.int8),
)
_SEQ, _WORKER = INT_COLUMNS.index("seq"), INT_COLUMNS.index("worker")


def pack_rows(blocks: list[RecordBlock], seqs: list[int], worker: int) -> bytes:
    """A writer frame for the rows ``seqs`` (global sequence numbers), in that order.

    Column-major, so that each column is one gather into a contiguous frame row:
    ~45 us for 650 rows of one block (the common case) where a row-major frame
    took ~135 us. Rows finishing across a block boundary take a masked gather.
    """
    arr = np.asarray(seqs, dtype=np.int64)
    m = np.empty((WIDTH, len(arr)), dtype=np.int64)
    m[_SEQ] = arr
    m[_WORKER] = worker
    which = arr >> BLOCK_SHIFT
    lo, hi = int(which.min()), int(which.max())
    any_chunks = False
    for b in range(lo, hi + 1):
        blk = blocks[b]
        sel = None if lo == hi else which == b
        if sel is not None and not sel.any():
            continue  # no row here (and the block may have left memory)
        local = (arr if sel is None else arr[sel]) - blk.base
        for i, name, dtype in _GATHER:
            column = np.frombuffer(getattr(blk, name), dtype=dtype)
            if sel is None:
                m[i] = column[local]
            else:
                m[i, sel] = column[local]
        any_chunks = any_chunks or bool(blk.chunk_times)
    chunks: list[list[int] | None] | None = None
    if any_chunks:  # LLM streams: rows one by one, at their (low) rates
        chunks = []
        for seq in seqs:
            blk = blocks[seq >> BLOCK_SHIFT]
            chunks.append(blk.chunk_times.get(seq - blk.base))
    return pack(m, chunks)


async def pump(
    engine: Engine,
    sink: RecordSink,
    stop: asyncio.Event,
    *,
    spill: Spill | None = None,
    progress: Progress | None = None,
) -> None:
    """Stream completions every :data:`FLUSH_S` (or once :data:`MIN_FLUSH_ROWS` are
    done, and at least every :data:`FLUSH_MAX_NS`) until ``stop``; then the rest.

    With a ``spill``, the pump is the completion log's only reader: it trims what
    it wrote from the log and moves finished blocks out of memory (see
    :mod:`tailwise.loadgen.execute.spill`), so memory stays flat however long the run.
    """
    pos = 0
    last_ns = now_ns()
    while not stop.is_set():
        await asyncio.sleep(FLUSH_S)  # not wait_for(stop.wait()): a task per pass
        end = len(engine.completed)
        t_ns = now_ns()
        if end - pos < MIN_FLUSH_ROWS and t_ns - last_ns < FLUSH_MAX_NS:
            continue
        last_ns = t_ns
        streams = pos < end and bool(
            engine.blocks[engine.completed[pos] >> BLOCK_SHIFT].chunk_times
        )
        slice_rows = STREAM_SLICE_ROWS if streams else SLICE_ROWS
        while pos < end:
            nxt = min(pos + slice_rows, end)
            _hand_over(engine, sink, engine.completed[pos:nxt], spill, progress)
            pos = nxt
            await asyncio.sleep(0)
        if spill is not None:
            del engine.completed[:pos]  # the engine only appends: positions shift by pos
            pos = 0
            for b in spill.retirable(engine.blocks):
                for _ in spill.retire_steps(engine.blocks, b):
                    await asyncio.sleep(0)
    _hand_over(engine, sink, engine.completed[pos:], spill, progress)


def _hand_over(
    engine: Engine,
    sink: RecordSink,
    seqs: list[int],
    spill: Spill | None,
    progress: Progress | None,
) -> None:
    if progress is not None:
        progress.observe(engine.blocks, seqs)
    sink.write(engine.blocks, seqs)
    if spill is not None:
        spill.note_written(seqs)


# SLO metrics the live line can show (catalog ``live``)
LIVE_METRICS = tuple(name for m in CATALOG if m.live for name in m.names)


def _live_metric(metric: str, blk: RecordBlock, loc: np.ndarray) -> np.ndarray:
    """One SLO metric (ns) of a block's completed rows ``loc``, for the rows where it exists:
    the catalog's derivation, as the summary computes it."""
    m = lookup(metric)
    rows = Records.from_block_rows(blk, loc)
    values = m.per_request_ns(rows)
    return np.asarray(values[m.population(rows, values)])


class Progress:
    """A live status line on stderr, once a second during the run.

    ``  3.0/10s  rate 100/s -> 99.2/s  in flight 4  errors 0  send-lag p99 0.21ms  p99 12.3ms``:
    elapsed of the planned window, the target rate against the send rate achieved over
    the last second, requests in flight, errors so far, and over the requests completed
    in the last second the send lag's p99 (the client's own lateness) and the latency's.
    With an SLO on another metric (``slo_metrics``: service, ttft, tpot), that
    metric's p99 follows too, and the latency's is labelled ``e2e p99``: a TTFT SLO
    reads beside its own metric, not beside the end-to-end latency of a whole answer.
    The records pump shows it each slice of completions (:meth:`observe`), so the
    pump stays the only reader of the engine's completion log.
    """

    def __init__(
        self,
        engine: Engine,
        total_s: float | None,
        stream: TextIO | None = None,  # sys.stderr as it is when the run starts
        *,
        target_rps: float | None = None,
        label: str = "",
        slo_metrics: tuple[str, ...] = (),
        echo: bool = True,
    ) -> None:
        self.engine = engine
        self.echo = echo  # write the line (else only publish the figures)
        # The SLOs' metrics the line shows beside the latency, in the SLOs' order
        self.extra = tuple(dict.fromkeys(m for m in slo_metrics if m in LIVE_METRICS))
        self._extra_ns: dict[str, list[np.ndarray]] = {m: [] for m in self.extra}
        self.total_s = total_s
        self.stream = stream if stream is not None else sys.stderr
        self.target_rps = target_rps
        self.label = label
        self._latency_ns: list[np.ndarray] = []  # successful requests since the last line
        self._lag_ns: list[np.ndarray] = []  # send lag of requests completed since then
        self._errors = 0
        self._sent_before = 0
        self._at_ns = 0

    def observe(self, blocks: list[RecordBlock], seqs: list[int]) -> None:
        if not seqs:
            return
        arr = np.asarray(seqs, dtype=np.int64)
        for b in np.unique(arr >> BLOCK_SHIFT).tolist():
            blk = blocks[b]
            loc = arr[(arr >> BLOCK_SHIFT) == b] - blk.base
            err = np.frombuffer(blk.error, dtype=np.int16)[loc]
            d = np.frombuffer(blk.done_ns, dtype=np.int64)[loc]
            s = np.frombuffer(blk.scheduled_ns, dtype=np.int64)[loc]
            x = np.frombuffer(blk.sent_ns, dtype=np.int64)[loc]
            self._errors += int((err != 0).sum())
            self._latency_ns.append((d - s)[err == 0])
            self._lag_ns.append((x - s)[x >= 0])
            for metric in self.extra:
                self._extra_ns[metric].append(_live_metric(metric, blk, loc))

    @staticmethod
    def _p99(parts: list[np.ndarray]) -> float | None:
        """The p99 (ms) of what completed since the last line; None for nothing."""
        values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return float(nearest_rank(np.sort(values), 99.0)) / 1e6 if len(values) else None

    @staticmethod
    def _ms(value: float | None) -> str:
        return f"{value:.2f}ms" if value is not None else "-"

    def _achieved(self) -> float:
        e, now = self.engine, now_ns()
        span_s = (now - max(self._at_ns, e.t0)) / 1e9
        achieved = (e.sent - self._sent_before) / span_s if span_s > 0 else 0.0
        self._sent_before, self._at_ns = e.sent, now
        return achieved

    def snapshot(self) -> dict[str, Any]:
        """The live figures since the last call (published to :mod:`.live`)."""
        e = self.engine
        snap: dict[str, Any] = {
            "label": self.label,
            "elapsed_s": max((now_ns() - e.t0) / 1e9, 0.0),
            "total_s": self.total_s,
            "target_rps": self.target_rps,
            "rate_rps": self._achieved(),
            "in_flight": e.in_flight,
            "errors": self._errors,
            "send_lag_p99_ms": self._p99(self._lag_ns),
            "p99_ms": self._p99(self._latency_ns),
        }
        for metric, parts in self._extra_ns.items():
            snap[f"{metric}_p99_ms"] = self._p99(parts)
        self._latency_ns, self._lag_ns = [], []
        self._extra_ns = {m: [] for m in self.extra}
        return snap

    def line(self) -> str:
        snap = self.snapshot()
        live.publish(snap)
        extra = "".join(f"  {m} p99 {self._ms(snap[f'{m}_p99_ms']):>9}" for m in self.extra)
        total = f"/{self.total_s:.0f}s" if self.total_s else "s"
        label = f"{self.label}  " if self.label else ""
        target = f"{self.target_rps:g}/s -> " if self.target_rps else ""
        return (
            f"  {label}{snap['elapsed_s']:5.1f}{total}  rate {target}{snap['rate_rps']:.1f}/s"
            f"  in flight {snap['in_flight']:>5}  errors {snap['errors']:>6}  send-lag p99 "
            f"{self._ms(snap['send_lag_p99_ms']):>7}  {'e2e ' if extra else ''}p99 "
            f"{self._ms(snap['p99_ms']):>9}{extra}"
        )

    async def run(self, stop: asyncio.Event) -> None:
        tty = self.stream.isatty()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            text = self.line()
            if not self.echo:  # only the dashboard listens
                continue
            self.stream.write(("\r" + text + "\x1b[K") if tty else text + "\n")
            self.stream.flush()
        if tty and self.echo:
            self.stream.write("\r\x1b[K")  # the step's own line replaces it
            self.stream.flush()
