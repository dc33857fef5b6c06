"""Stage 2 of a run: execute a :class:`~tailwise.loadgen.prepare.plan.Prepared` plan in one process.

The engine (:mod:`~tailwise.loadgen.engine.attack`) paces the plan over a transport
on its own event loop, while the records pump streams rows to the writer
process. This module owns what surrounds it: the clock's start (or a worker's
start barrier, through :class:`WorkerHooks`), signals (a first Ctrl-C stops
sending and drains for ``--grace``, a second cancels what is in flight), the
drain after sending, the SLO-loss watch of knee trials, and the safety net that
closes every row the engine left open (invariant 2). It returns an
:class:`Outcome`; :mod:`~tailwise.loadgen.conclude` turns that into a summary.

A scaled-out worker (:mod:`~tailwise.loadgen.scale.worker`) runs this same
code through :func:`run_engine` with its own hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import json
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tailwise.arrivals import expected_count
from tailwise.clock import now_ns
from tailwise.files import SpaceReserve, atomic_write_text
from tailwise.loadgen.engine.attack import ClosedLoop, Engine, OpenLoop
from tailwise.loadgen.engine.sessions import SessionLoop, TurnPayloads
from tailwise.loadgen.engine.watch import Looks, LossWatch, Sequential, judge_from_ns
from tailwise.loadgen.execute import live
from tailwise.loadgen.execute.looplag import LoopLag
from tailwise.loadgen.execute.results import Progress, RecordSink, pump
from tailwise.loadgen.execute.spill import Spill
from tailwise.loadgen.llm import apis
from tailwise.loadgen.llm.answers import AnswerBook
from tailwise.loadgen.prepare.plan import Prepared, loss_watch, run_json, sequential
from tailwise.loadgen.transport import Transport
from tailwise.loadgen.transport.http import HttpTransport
from tailwise.metrics.client import LagSeries
from tailwise.records import error_code

WATCH_INTERVAL_S = 0.25
PRECONNECT_PER_RPS = 100
PRECONNECT_MAX = 1024
START_LEAD_NS = 20_000_000  # the clock starts this long after setup, so t=0 is not late


def reserve_fd_table(fds: int) -> int:
    """Grow this process's descriptor table to hold ``fds`` now, before the clock starts.

    Linux doubles the table when a new descriptor does not fit (64, 128, ... 1024),
    and in a process with more than one thread (NumPy's BLAS starts one) each
    doubling waits for an RCU grace period: measured 2-14 ms blocked in the
    ``socket()`` of a new connection at 70k req/s, while the pool grew past 512
    and 1024 connections. A descriptor opened at ``fds - 1`` or above (the lowest
    free one there: an open descriptor is never touched) and closed again leaves
    the table that large for the rest of the process (it never shrinks). Returns
    the size reserved (0 if the open-file limit refused it).
    """
    fds = min(fds, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    if fds <= 64:
        return 0
    src = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.close(fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, fds - 1))
    except OSError:
        return 0
    finally:
        os.close(src)
    return fds


def _engine(p: Prepared, transport: Transport) -> Engine:
    if p.sessions is not None:
        assert p.schedule is not None
        return SessionLoop(
            transport, p.schedule.offsets_ns(), p.sessions, p.max_in_flight, p.horizon_ns
        )
    if p.concurrency is not None:
        return ClosedLoop(transport, p.concurrency, p.think_ns, p.horizon_ns, p.max_count)
    assert p.schedule is not None
    index, count = p.share
    blocks = p.schedule.blocks() if count == 1 else p.schedule.share_blocks(index, count)
    return OpenLoop(transport, blocks, p.max_in_flight)


@dataclass
class Outcome:
    """How the engine's part of a run ended."""

    engine: Engine
    interrupted: bool
    note: str
    stopped_at_ns: int  # run-relative instant sending stopped (the signal, or the plan's end)
    t0_unix_s: float  # wall-clock label of the run's time zero
    transport: Transport | None = None
    stopped_early: str = ""  # why an SLO was already lost, when the run stopped for it
    lag: LagSeries | None = None  # the loop's receive lag, sampled through the run
    load: dict[str, Any] = field(default_factory=dict)  # the client's CPU use and the load
    settled: str = ""  # --duration auto: why the run stopped once every SLO was decided
    looks: Looks | None = None  # --duration auto: the looks planned, and their level
    looked: int = 0  # --duration auto: looks taken before the run stopped
    settled_start_ns: int | None = None  # --warmup auto: where the deciding look's window began
    settled_decisions: dict[str, str] = field(default_factory=dict)  # the deciding look's


class WorkerHooks(Protocol):
    """How one worker process of a scaled-out run joins it (see ``loadgen.scale.driver``)."""

    async def barrier(self) -> tuple[int, float]:
        """Wait for the common start; return it as (monotonic ns here, unix seconds)."""
        ...

    async def follow(
        self, engine: Engine, t0_ns: int, stop: asyncio.Event, interrupt: Callable[[str], None]
    ) -> None:
        """Report progress and obey the driver during the run; return once ``stop`` is set."""
        ...


def _install_signals(
    loop: asyncio.AbstractEventLoop, on_signal: Callable[[str], None]
) -> list[signal.Signals]:
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (Python API in a thread): no signal handling
    return installed


async def _drain(
    engine: Engine, p: Prepared, interrupted: asyncio.Event, hard_stop: asyncio.Event
) -> None:
    """After sending: wait for in-flight requests, at most a timeout (or a grace if interrupted)."""
    idle = asyncio.ensure_future(engine.idle.wait())
    hard = asyncio.ensure_future(hard_stop.wait())
    intr = asyncio.ensure_future(interrupted.wait())
    try:
        if not interrupted.is_set():
            await asyncio.wait(
                [idle, hard, intr],
                timeout=p.timeout_ns / 1e9 + 1.0,
                return_when=asyncio.FIRST_COMPLETED,
            )
        if interrupted.is_set() and not engine.idle.is_set() and not hard_stop.is_set():
            engine.stop()
            await asyncio.wait(
                [idle, hard], timeout=p.grace_ns / 1e9, return_when=asyncio.FIRST_COMPLETED
            )
    finally:
        for t in (idle, hard, intr):
            t.cancel()


async def _execute(
    p: Prepared,
    transport: Transport,
    sink: RecordSink,
    on_engine: Callable[[Engine], None] | None = None,
    hooks: WorkerHooks | None = None,
) -> Outcome:
    loop = asyncio.get_running_loop()
    engine = _engine(p, transport)
    if on_engine:
        on_engine(engine)
    interrupted, hard_stop = asyncio.Event(), asyncio.Event()
    note: list[str] = []
    t0 = 0

    def on_signal(name: str) -> None:
        if interrupted.is_set():
            hard_stop.set()  # a second Ctrl-C: cancel in-flight requests now
            return
        started = t0 and now_ns() >= t0
        note.append(
            f"{name} after {(now_ns() - t0) / 1e9:.1f}s" if started else f"{name} at start-up"
        )
        if not engine.finished_sending.is_set():
            engine.stop()
        interrupted.set()

    installed = _install_signals(loop, on_signal)
    lost: list[str] = []
    stop_io = asyncio.Event()
    watch = _loss_watch(p)
    decider = sequential(p) if p.share[1] == 1 else None
    settled: list[str] = []
    # Old blocks may leave memory only while the pump is their only reader.
    spill = Spill(sink.path.parent) if hooks is None and watch is None and decider is None else None
    await sink.open()
    # Each in-flight request holds a connection: room for them all, plus the idle ones.
    reserve_fd_table(p.max_in_flight + 1024)
    engine.prepare()
    await transport.start(engine.on_done)
    if hooks is None:
        t0 = now_ns() + START_LEAD_NS
        t0_unix = time.time() + START_LEAD_NS / 1e9
    else:
        t0, t0_unix = await hooks.barrier()
    transport.set_origin(t0)
    probe = LoopLag(p.horizon_ns or 10**10)
    cpu = ClientLoad()
    engine.on_busy = probe.resume  # the probe pauses while nothing is in flight
    engine.begin(t0)
    probe.start(t0, busy=lambda: engine.in_flight > 0)
    show = p.progress if p.progress is not None else sys.stderr.isatty()
    progress = _progress(p, engine, show) if show or live.active() else None
    tasks = [loop.create_task(pump(engine, sink, stop_io, spill=spill, progress=progress))]
    if hooks is not None:
        tasks.append(loop.create_task(hooks.follow(engine, t0, stop_io, on_signal)))
    if progress is not None:
        tasks.append(loop.create_task(progress.run(stop_io)))
    if watch is not None:

        def on_loss(reason: str) -> None:
            # Stop sending, but let what was sent finish (up to --timeout): most
            # servers keep working on abandoned requests, and the next trial must
            # not start against a backlog this one left behind.
            lost.append(reason)
            engine.stop()

        tasks.append(loop.create_task(_watch_loop(watch, engine, t0, stop_io, on_loss)))
    if decider is not None:

        def on_decided(reason: str) -> None:
            settled.append(reason)
            engine.stop()  # what was sent still finishes, as after a loss

        tasks.append(loop.create_task(_decide_loop(decider, engine, t0, stop_io, on_decided)))
    sending = asyncio.ensure_future(engine.finished_sending.wait())
    await asyncio.wait([sending], return_when=asyncio.FIRST_COMPLETED)
    stopped_at = engine.stopped_rel_ns if engine.stopped_rel_ns is not None else now_ns() - t0
    await _drain(engine, p, interrupted, hard_stop)
    probe.stop()
    engine.end("not_sent:interrupted" if interrupted.is_set() else "not_sent:ended")
    _finalize_lost(engine)  # before the last flush, so lost rows reach the file too
    stop_io.set()
    await asyncio.gather(*tasks)
    await transport.close()
    await sink.close()
    for sig in installed:
        loop.remove_signal_handler(sig)
    if spill is not None:
        spill.restore(engine.blocks)  # the summary needs every row again
    return Outcome(
        engine,
        interrupted.is_set(),
        note[0] if note else "",
        stopped_at,
        t0_unix,
        transport,
        lost[0] if lost and not note else "",
        probe.series(),
        cpu.measure(),
        settled[0] if settled and not lost and not note else "",
        decider.looks if decider is not None else None,
        decider.looked if decider is not None else 0,
        decider.start_ns if decider is not None and decider.auto_warmup else None,
        decider.decided if decider is not None and settled and not lost and not note else {},
    )


def _progress(p: Prepared, engine: Engine, echo: bool = True) -> Progress:
    return Progress(
        engine,
        (p.horizon_ns or 0) / 1e9 or None,
        target_rps=p.schedule.rate_rps if p.schedule is not None else None,
        label=p.label,
        slo_metrics=tuple(s.metric for s in p.slos),
        echo=echo,
    )


class ClientLoad:
    """This process's CPU time over the run, and the machine's load: is the client starved?"""

    def __init__(self) -> None:
        self.wall0_ns = now_ns()
        self.cpu0_s = _cpu_s()

    def measure(self) -> dict[str, Any]:
        wall_s = (now_ns() - self.wall0_ns) / 1e9
        cpu_s = _cpu_s() - self.cpu0_s
        try:
            load_1m: float | None = os.getloadavg()[0]
        except OSError:
            load_1m = None
        return {
            "cpu_s": round(cpu_s, 3),
            "cpu_share": round(cpu_s / wall_s, 3) if wall_s > 0 else None,
            "load_avg_1m": load_1m,
            "cores": os.cpu_count() or 1,
        }


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _loss_watch(p: Prepared) -> LossWatch | None:
    """A watch for knee trials: open loop at a steady rate with a known window only."""
    return loss_watch(p) if p.stop_on_slo_loss and p.share[1] == 1 else None


async def _watch_loop(
    watch: LossWatch,
    engine: Engine,
    t0: int,
    stop: asyncio.Event,
    on_loss: Callable[[str], None],
) -> None:
    first_ns = judge_from_ns(watch.window_ns)
    while not stop.is_set() and not engine.finished_sending.is_set():
        await asyncio.sleep(WATCH_INTERVAL_S)
        if now_ns() - t0 < first_ns:
            continue
        reason = watch.check(engine.blocks, now_ns() - t0)
        if reason and not engine.finished_sending.is_set():
            on_loss(reason)
            return


async def _decide_loop(
    decider: Sequential,
    engine: Engine,
    t0: int,
    stop: asyncio.Event,
    on_decided: Callable[[str], None],
) -> None:
    """Look (cheaply: most calls only count rows) until every SLO is decided.

    A look gathers and sorts the window's columns (O(n log n), a few hundred ms at
    millions of rows): it runs in a worker thread, on a snapshot of the block list, so
    the loop keeps sending on time (NumPy's sorts and copies release the GIL)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set() and not engine.finished_sending.is_set():
        await asyncio.sleep(WATCH_INTERVAL_S)
        reason = await loop.run_in_executor(None, decider.look, list(engine.blocks), now_ns() - t0)
        if reason and not engine.finished_sending.is_set():
            on_decided(reason)
            return


def _event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    except ImportError:
        return asyncio.new_event_loop


def _finalize_lost(engine: Engine) -> int:
    """Safety net for invariant 2: a row the engine never closed is reported as ``lost``."""
    lost = 0
    code = error_code("lost")
    for b in engine.blocks:
        done = np.frombuffer(b.done_ns, np.int64)[: b.rows]
        for j in np.flatnonzero(done < 0).tolist():
            b.error[j] = code
            b.done_ns[j] = b.scheduled_ns[j]
            engine.completed.append(b.base + j)
            lost += 1
    return lost


def _preconnect(p: Prepared) -> int:
    """Connections to open per target before the clock starts: ~1 per 100 req/s offered.

    Opening them during the run costs the pacer its schedule, and each one opened
    late feeds the next burst. Measured at 70k req/s against nginx: with 1 per
    1000 req/s the pool grew from 70 to ~1,000 connections in the first second
    (send lag up to 8-35 ms in the warm-up); with 700 open at the start it stayed
    under ~850 and the warm-up's worst lag was 1-4 ms.
    """
    if p.concurrency is not None:
        return min(p.concurrency, 256)
    assert p.schedule is not None
    span_s = (p.horizon_ns or 10**9) / 1e9
    rate = expected_count(p.schedule, span_s) / span_s if span_s else 0.0
    per_target = rate / p.share[1] / PRECONNECT_PER_RPS / len(p.targets)
    return int(min(p.max_in_flight, max(4, min(PRECONNECT_MAX, per_target))))


def run_engine(
    p: Prepared, tr: Transport, sink: RecordSink, hooks: WorkerHooks | None = None
) -> Outcome:
    # The hot path makes no reference cycles; pausing the cyclic collector removes
    # its occasional multi-millisecond pauses from the send schedule.
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        with asyncio.Runner(loop_factory=_event_loop_factory()) as runner:
            return runner.run(_execute(p, tr, sink, hooks=hooks))
    finally:
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()


def http_transport(p: Prepared) -> Transport:
    payloads: list[Any] = p.payloads
    if p.sessions is not None:  # bodies rendered as each turn comes due
        payloads = [TurnPayloads(p.sessions, t) for t in p.targets]
    return HttpTransport(
        p.targets,
        payloads,
        timeout_ns=p.timeout_ns,
        connect_timeout_ns=p.connect_timeout_ns,
        insecure=p.insecure,
        preconnect=_preconnect(p),
        nonce=p.nonce,
        nonce_stream=p.share[0],  # a worker numbers its requests from 0: its own nonces
        answers=answer_book(p),
    )


def answer_book(p: Prepared) -> AnswerBook | None:
    """How the run's answers are read and counted: None for plain HTTP (no API, no stream)."""
    if not p.api and not p.streaming:
        return None
    return AnswerBook(
        apis.get(p.api) if p.api else None,  # a worker lacking it: bad input
        streams=p.streaming,
        counter=p.counter,
        prompt_tokens=p.prompt_tokens,
        on_answer=p.sessions.answered if p.sessions is not None else None,
    )


@dataclass
class Executed:
    """A single-process run as it ended: the engine's outcome and the rows on disk."""

    outcome: Outcome
    rows_on_disk: int | None  # None: the writer could not say


@contextlib.contextmanager
def no_interrupts() -> Iterator[None]:
    """From the end of sending until the outputs are written, Ctrl-C and SIGTERM must not
    leave a half-written run behind: they are ignored (the work left is bounded)."""
    try:
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def execute_local(p: Prepared, directory: Path, transport: Transport | None = None) -> Executed:
    """Run the whole plan in this process, writing ``run.json`` and ``records.jsonl``."""
    started_unix = time.time()
    tr = transport or http_transport(p)
    atomic_write_text(
        directory / "run.json", json.dumps(run_json(p, started_unix), indent=2) + "\n"
    )
    provisional = p.horizon_ns if p.horizon_ns is not None else 2**62
    reserve = SpaceReserve(directory)  # room for the summary if the disk fills meanwhile
    sink = RecordSink(directory / "records.jsonl", (p.warmup_ns, provisional))
    try:
        out = run_engine(p, tr, sink)
    finally:
        # The loop's own signal handlers are gone: from here to the summary, a signal
        # must not cost the run its outputs (runner.execute holds the same guard).
        with no_interrupts():
            rows_on_disk = sink.wait()
            reserve.release()
    return Executed(out, rows_on_disk)
