"""One worker of a scaled-out run: the ordinary open-loop engine on a share of the plan.

The driver (:mod:`tailwise.loadgen.scale.driver`, or a Ray actor on another host)
starts this module as a process, ``python -m tailwise.loadgen.scale.worker FD``,
with one end of a socket pair on file descriptor FD as a multiprocessing
``Connection``, and sends it a :class:`WorkerSpec`. The worker then runs the
single-process engine unchanged (same pacer, its own connection pool, its own
records writer process) with two hooks (:class:`PipeHooks`): a start barrier,
and a follower that reports to the driver every :data:`SNAPSHOT_S`.

Messages, pickled frozen dataclasses (:mod:`tailwise.loadgen.scale.messages`):

* worker -> driver: :class:`Ready` once its connections are open; a
  :class:`Snapshot` every :data:`SNAPSHOT_S`; :class:`Final` once at the end;
  :class:`Failed` instead of :class:`Ready` if it could not start.
* driver -> worker: :class:`Start` (the common start instant); :class:`Stop`
  (``"interrupt"``, ``"slo"`` or ``"hard"``). End of file from the driver is an
  interruption: the driver is gone (``Stop("gone")``).

A snapshot is coarse and mergeable: cumulative counts by error kind, and
HdrHistograms (encoded) of the latencies completed since the last snapshot,
one per (inside the window?, 1 s interval of completion time). Its cost is
batched numpy work between sends, as for the records pump, never per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.clock import now_ns
from tailwise.loadgen.conclude import client_part, token_source
from tailwise.loadgen.engine.attack import Engine
from tailwise.loadgen.engine.watch import LossWatch
from tailwise.loadgen.execute.local import Outcome, http_transport, run_engine
from tailwise.loadgen.execute.results import RecordSink
from tailwise.loadgen.prepare.plan import DEFAULT_MAX_IN_FLIGHT, Prepared, fd_budget, loss_watch
from tailwise.loadgen.scale.messages import (
    DriverMessage,
    EncodedHistogram,
    Failed,
    Final,
    Ready,
    Snapshot,
    Start,
    Stop,
    WorkerMessage,
)
from tailwise.metrics.histogram import HIGHEST_NS, counts_indices, new_histogram
from tailwise.records import BLOCK_SHIFT, ERROR_KINDS

SNAPSHOT_S = 0.5
INTERVAL_NS = 1_000_000_000  # histogram intervals, as in latency.hlog
SLICE_ROWS = 1_024  # rows folded per event-loop turn (~0.1 ms: the pacer waits for it)


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process needs (pickled to it, so files need not exist on its host)."""

    prepared: Prepared
    index: int
    count: int
    records_path: str
    max_in_flight: int | None = None  # its part of --max-in-flight; None: the per-process default
    scratch: bool = False  # records_path's folder is a relay's scratch space: remove if orphaned


def launch(spec: WorkerSpec) -> tuple[subprocess.Popen[bytes], Connection]:
    """Start a worker process; returns it and the driver's end of its connection.

    A plain subprocess (not multiprocessing's spawn, which re-imports the parent's
    main module: inside a Ray actor that is Ray's own worker script). Its own
    session: a Ctrl-C in the terminal reaches the driver alone, which relays it.
    """
    parent, child = Pipe(duplex=True)
    fd = child.fileno()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailwise.loadgen.scale.worker", str(fd)],
        pass_fds=(fd,),
        start_new_session=True,
    )
    child.close()
    parent.send(spec)
    return proc, parent


def worker_prepared(spec: WorkerSpec) -> Prepared:
    """The run as this worker runs it: its share of the plan, its cap, no progress line."""
    p = spec.prepared
    budget = fd_budget()  # raises this process's open-file limit, as a single run does
    cap = spec.max_in_flight or min(DEFAULT_MAX_IN_FLIGHT, budget)
    opts = dataclasses.replace(p.opts, progress=False, workers=None, ray=None)
    return dataclasses.replace(
        p,
        opts=opts,
        share=(spec.index, spec.count),
        max_in_flight=cap,
        workers=None,
        ray=None,
        progress=False,
    )


class Snapshots:
    """Folds the engine's completions into counts and per-interval histogram buckets.

    Cheap on the event loop: a fold is numpy work on a slice of rows (bucket
    indices as :func:`~tailwise.metrics.histogram.counts_indices` computes them,
    so the result is bit-identical to recording each value), accumulated in plain
    arrays; one reusable HdrHistogram encodes them at each :meth:`take`.
    """

    def __init__(
        self, engine: Engine, t0_ns: int, window_ns: tuple[int, int], watch: LossWatch | None
    ) -> None:
        self.engine = engine
        self.t0_ns = t0_ns
        self.window_ns = window_ns
        self.watch = watch
        self.pos = 0  # completions folded so far
        self.kinds: Counter[str] = Counter()
        self._h = new_histogram()  # the encoder: counts copied in, encoded, cleared
        self._counts = np.ctypeslib.as_array(self._h.counts)
        self.bins: dict[int, list[Any]] = {}  # 2*interval + in_window -> [counts, n, min, max]

    def fold(self, seqs: np.ndarray) -> None:
        blocks = self.engine.blocks
        which = seqs >> BLOCK_SHIFT
        for b in _distinct(which):
            blk = blocks[b]
            local = seqs[which == b] - blk.base
            err = np.frombuffer(blk.error, np.int16)[local]
            for code, n in enumerate(np.bincount(err.astype(np.int64)).tolist()):
                if n:
                    self.kinds[ERROR_KINDS[code]] += n
            ok = err == 0
            sched = np.frombuffer(blk.scheduled_ns, np.int64)[local][ok]
            done = np.frombuffer(blk.done_ns, np.int64)[local][ok]
            self._record(sched, done)

    def _record(self, sched: np.ndarray, done: np.ndarray) -> None:
        if len(sched) == 0:  # a slice of failures only
            return
        start, end = self.window_ns
        inside = ((sched >= start) & (sched < end)).astype(np.int64)
        keys = (done // INTERVAL_NS) * 2 + inside
        latency = np.clip(done - sched, 0, HIGHEST_NS)
        for key in _distinct(keys):
            values = latency[keys == key]
            bins = self.bins.get(key)
            if bins is None:
                bins = self.bins[key] = [np.zeros(len(self._counts), np.int64), 0, HIGHEST_NS, 0]
            bins[0] += np.bincount(counts_indices(self._h, values), minlength=len(self._counts))
            bins[1] += len(values)
            bins[2] = min(bins[2], int(values.min()))
            bins[3] = max(bins[3], int(values.max()))

    def _encode(self, counts: np.ndarray, n: int, low: int, high: int) -> bytes:
        h = self._h
        self._counts[:] = counts
        h.total_count, h.min_value, h.max_value = n, low, high
        encoded: bytes = h.encode()
        self._counts[:] = 0
        return encoded

    async def catch_up(self) -> None:
        """Fold new completions a slice at a time, yielding to the pacer in between."""
        completed = self.engine.completed
        while self.pos < len(completed):
            end = min(self.pos + SLICE_ROWS, len(completed))
            self.fold(np.asarray(completed[self.pos : end], dtype=np.int64))
            self.pos = end
            await asyncio.sleep(0)

    def catch_up_now(self) -> None:
        completed = self.engine.completed
        if self.pos < len(completed):
            self.fold(np.asarray(completed[self.pos :], dtype=np.int64))
            self.pos = len(completed)

    def take(self) -> Snapshot:
        """A snapshot: cumulative counts, and the histograms filled since the last one."""
        e = self.engine
        at_ns = now_ns() - self.t0_ns
        hists: list[EncodedHistogram] = []
        for key, bins in self.bins.items():
            interval, inside = divmod(key, 2)
            hists.append((bool(inside), interval, self._encode(*bins)))
        self.bins = {}
        misses = self.watch.misses(e.blocks, at_ns) if self.watch and self.watch.limits else None
        return Snapshot(
            at_ns=at_ns,
            sent=e.sent,
            in_flight=e.in_flight,
            completed=self.pos,
            kinds=dict(self.kinds),
            hists=hists,
            misses=misses,
        )


def _distinct(values: np.ndarray) -> list[int]:
    """The distinct values of a small int array; usually there is one (np.unique sorts)."""
    low, high = int(values.min()), int(values.max())
    return [low] if low == high else [int(v) for v in np.unique(values)]


class PipeHooks:
    """The runner's hooks (:class:`~tailwise.loadgen.execute.local.WorkerHooks`) over the
    driver's connection."""

    def __init__(self, conn: Connection, spec: WorkerSpec, p: Prepared) -> None:
        self.conn = conn
        self.spec = spec
        self.p = p
        self.inbox: deque[DriverMessage] = deque()
        self.arrived: asyncio.Event | None = None
        self.slack_ns = 0  # how long before the common start the start message came
        self.snapshots: Snapshots | None = None
        self._engine: Engine | None = None
        self._interrupt: Callable[[str], None] | None = None
        self.orphaned = False  # the driver (or the Ray actor relaying for it) is gone
        # The driver told this worker to stop (a relayed signal, a lost driver): an
        # interruption without it came from a signal sent to this worker alone.
        self.told = False

    def send(self, msg: WorkerMessage) -> None:
        try:
            self.conn.send(msg)
        except OSError:  # the driver is gone: stop as if interrupted
            self.inbox.append(Stop("gone"))
            self.orphaned = True

    def _on_readable(self) -> None:
        try:
            while self.conn.poll():
                msg = self.conn.recv()
                if isinstance(msg, Start | Stop):  # nothing else comes from a driver
                    self.inbox.append(msg)
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
            self.inbox.append(Stop("gone"))
            self.orphaned = True
        if self.arrived is not None:
            self.arrived.set()
        self._obey()

    def _obey(self) -> None:
        """Apply stop messages (once the run is on; before that they wait in the inbox)."""
        engine, interrupt = self._engine, self._interrupt
        while engine is not None and interrupt is not None and self.inbox:
            match self.inbox.popleft():
                case Start():  # a start once the run is on: nothing to do
                    pass
                case Stop("slo"):  # lost SLO: stop sending, let what was sent finish
                    if not engine.finished_sending.is_set():
                        engine.stop()
                case Stop("hard"):  # the second signal at the driver: cancel in-flight now
                    self.told = True
                    interrupt("SIGINT at the driver")
                    interrupt("SIGINT at the driver")
                case Stop(reason):
                    self.told = True
                    interrupt("SIGINT at the driver" if reason == "interrupt" else "driver lost")

    async def barrier(self) -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        self.arrived = asyncio.Event()
        loop.add_reader(self.conn.fileno(), self._on_readable)
        self.send(self.ready())
        while not self.inbox:
            await self.arrived.wait()
            self.arrived.clear()
        first = self.inbox[0]
        # A stop before the start: start now, and the follower obeys it at once.
        t0_unix_ns = first.t0_unix_ns if isinstance(first, Start) else time.time_ns()
        if isinstance(first, Start):
            self.inbox.popleft()
        mono, wall = now_ns(), time.time_ns()
        # The common instant, from the driver's wall clock to this host's monotonic one.
        self.slack_ns = t0_unix_ns - wall
        return mono + self.slack_ns, t0_unix_ns / 1e9

    def ready(self) -> Ready:
        return Ready(host=socket.gethostname(), pid=os.getpid(), max_in_flight=self.p.max_in_flight)

    async def follow(
        self, engine: Engine, t0_ns: int, stop: asyncio.Event, interrupt: Callable[[str], None]
    ) -> None:
        start, end = self.p.warmup_ns, self.p.horizon_ns if self.p.horizon_ns is not None else 2**62
        snaps = self.snapshots = Snapshots(engine, t0_ns, (start, end), loss_watch(self.p))
        self._engine, self._interrupt = engine, interrupt
        self._obey()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SNAPSHOT_S)
            if stop.is_set():
                break
            await snaps.catch_up()
            self.send(snaps.take())
            self._obey()
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.conn.fileno())

    def final(self, out: Outcome, rows_on_disk: int | None) -> Final:
        """The last message: how the run ended here, with the last snapshot."""
        last: Snapshot | None = None
        if self.snapshots is not None:
            self.snapshots.catch_up_now()
            last = self.snapshots.take()
        return Final(
            interrupted=out.interrupted,
            # A signal at this worker alone (kill -TERM PID): the driver books it as a
            # lost worker, as if it had died, and the others go on.
            signalled=out.interrupted and not self.told and not self.orphaned,
            note=out.note,
            stopped_at_ns=out.stopped_at_ns,
            rows=sum(b.rows for b in out.engine.blocks),
            rows_on_disk=rows_on_disk,
            tokens=token_source(out) if self.p.streaming else {},
            slack_ns=self.slack_ns,
            snapshot=last,
            client=client_part(out),
        )


def serve(conn: Connection, spec: WorkerSpec) -> None:
    """The worker's whole life: set up, report ready, run on the common clock, report."""
    try:
        p = worker_prepared(spec)
        transport = http_transport(p)
        path = Path(spec.records_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        end = p.horizon_ns if p.horizon_ns is not None else 2**62
        sink = RecordSink(path, (p.warmup_ns, end), worker=spec.index)
    except Exception as exc:  # anything: the driver names it and stops the run
        conn.send(Failed(f"{type(exc).__name__}: {exc}"))
        return
    hooks = PipeHooks(conn, spec, p)
    try:
        out = run_engine(p, transport, sink, hooks)
    finally:
        rows_on_disk = sink.wait()
    hooks.send(hooks.final(out, rows_on_disk))
    if hooks.orphaned and spec.scratch:  # nobody will ship these records any more
        shutil.rmtree(path.parent, ignore_errors=True)


def main() -> None:
    conn = Connection(int(sys.argv[1]))
    spec = conn.recv()
    if not isinstance(spec, WorkerSpec):
        raise SystemExit("tailwise worker: expected a WorkerSpec")
    serve(conn, spec)
    conn.close()


if __name__ == "__main__":
    # Run as the package module, not as __main__: the spec unpickles to *its* classes.
    from tailwise.loadgen.scale.worker import main as package_main

    package_main()
