"""One run, end to end: validate input, pace, send, write, summarize, judge.

Every user input is parsed before anything starts, so a mistake costs nothing
and gives one line naming the field (:class:`tailwise.errors.BadInput`). Once
started, a run always ends with a complete directory: ``records.jsonl``
(appended during the run), ``summary.json``, ``latency.hlog`` and ``run.json``
(the configuration, with header values left out), even when interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fcntl
import gc
import json
import os
import random
import re
import resource
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tailwise.arrivals import Schedule, expected_count, parse_schedule
from tailwise.clock import now_ns
from tailwise.errors import BadInput
from tailwise.loadgen import openai
from tailwise.loadgen.attack import ClosedLoop, Engine, OpenLoop
from tailwise.loadgen.http import HttpTransport
from tailwise.loadgen.results import Progress, RecordSink, pump
from tailwise.loadgen.spill import Spill
from tailwise.loadgen.targets import (
    Target,
    describe,
    parse_header,
    parse_method,
    parse_url,
    read_bodies_jsonl,
    read_body,
    render,
)
from tailwise.loadgen.transport import Transport
from tailwise.loadgen.watch import LossWatch
from tailwise.metrics import derive
from tailwise.metrics.histogram import interval_histograms, write_hlog
from tailwise.metrics.slo import SLO, parse_slo
from tailwise.metrics.summary import EXIT_CODES, RunInfo, summarize
from tailwise.records import Records, error_code
from tailwise.units import parse_count, parse_duration_ns, parse_fraction

WATCH_INTERVAL_S = 0.25
WATCH_MIN_WINDOW_NS = 1_000_000_000
PRECONNECT_PER_RPS = 100
PRECONNECT_MAX = 1024
START_LEAD_NS = 20_000_000  # the clock starts this long after setup, so t=0 is not late


@dataclass
class RunOptions:
    """Everything a run can be told, as the user wrote it (parsed in :func:`prepare`)."""

    urls: list[str]
    rate: str | None = None
    arrival: str = "poisson"
    duration: str | None = None
    requests: int | str | None = None
    warmup: str = "0s"
    seed: int = 0
    slo: list[str] = field(default_factory=list)
    attainment: str = "99%"
    max_in_flight: int | str | None = None
    concurrency: int | str | None = None
    think: str = "0s"
    timeout: str = "30s"
    connect_timeout: str = "5s"
    grace: str = "2s"
    max_send_lag: str = "5ms"
    method: str | None = None
    header: list[str] = field(default_factory=list)
    body: str | None = None
    bodies: str | None = None
    out: str | None = None
    name: str | None = None
    insecure: bool = False
    progress: bool | None = None
    # OpenAI-compatible LLM endpoints (see tailwise.loadgen.openai)
    api: str | None = None
    model: str | None = None
    max_tokens: int | str = 128
    input_tokens: int | str = 128
    api_key: str | None = None  # never written anywhere
    extra_body: str | None = None
    stream: bool = True
    prompts: str | None = None  # a JSONL dataset
    shared_prefix: int | str = 0
    tokenizer: str | None = None  # a tokenizer.json, for servers that report no usage
    # Knee trials: stop sending once an SLO is certainly lost (see loadgen.watch).
    stop_on_slo_loss: bool = False
    # Scale-out (see loadgen.scale): worker processes ("auto": one per core), and a
    # Ray cluster to spread them over.
    workers: int | str | None = None
    ray: str | None = None


@dataclass
class Prepared:
    opts: RunOptions
    targets: list[Target]
    payloads: list[list[bytes]]
    schedule: Schedule | None
    horizon_ns: int | None
    max_count: int | None
    warmup_ns: int
    slos: list[SLO]
    max_in_flight: int
    concurrency: int | None
    think_ns: int
    timeout_ns: int
    connect_timeout_ns: int
    grace_ns: int
    max_send_lag_ns: int
    method: str
    headers: list[tuple[str, str]]
    streaming: bool = False
    counter: openai.TokenCounter | None = None
    prompt_tokens: list[int] | None = None  # per request body, counted locally
    workers: int | None = None  # worker processes; None: one process, or Ray's CPU count
    share: tuple[int, int] = (0, 1)  # (index, count): this process's share of the plan


@dataclass
class RunResult:
    summary: dict[str, Any]
    records: Records
    directory: Path

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.summary["verdict"]]


def _fd_budget() -> int:
    """Raise the open-file soft limit as far as allowed; connections need one each."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 65_536 if hard == resource.RLIM_INFINITY else min(hard, 65_536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return max(16, soft - 64)


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


def _window(o: RunOptions, warmup_ns: int) -> tuple[int | None, int | None]:
    """(horizon_ns, max_count): the schedule's bounds; warm-up is inside the horizon."""
    count = parse_count(str(o.requests), "--requests") if o.requests is not None else None
    if o.duration is not None:
        dur = parse_duration_ns(o.duration, "--duration", allow_zero=False)
        return warmup_ns + dur, count
    if count is None and not o.arrival.startswith(("stages", "trace")):
        return warmup_ns + 10_000_000_000, None  # the default: 10 s of measurement
    return None, count


def _llm_bodies(o: RunOptions) -> tuple[list[bytes], list[openai.Prompt]]:
    api = openai.check_api(o.api or "")
    if not o.model:
        raise BadInput("--model", None, f"the model name the server serves, for --api {api}")
    if o.body is not None or o.bodies is not None:
        raise BadInput(
            "--body", "with --api", "either --api (tailwise builds the bodies) or --body"
        )
    rng = random.Random(o.seed)
    prompts: list[openai.Prompt]
    if o.prompts:
        rows = openai.read_dataset(o.prompts)
        prompts = [p for p, _ in rows]
        drawn = openai.sample_lengths(str(o.max_tokens), "--max-tokens", len(rows), rng)
        max_tokens = [n if n is not None else d for (_, n), d in zip(rows, drawn, strict=True)]
    else:
        n = openai.N_PROMPTS
        lengths = openai.sample_lengths(str(o.input_tokens), "--input-tokens", n, rng)
        prefix = parse_count(str(o.shared_prefix), "--shared-prefix", minimum=0)
        prompts = list(openai.synthetic_prompts(lengths, o.seed, prefix))
        max_tokens = openai.sample_lengths(str(o.max_tokens), "--max-tokens", n, rng)
    extra = openai.parse_extra_body(o.extra_body)
    return openai.bodies(api, o.model, max_tokens, prompts, o.stream, extra), prompts


def _requests(
    o: RunOptions,
) -> tuple[list[Target], list[list[bytes]], str, list[tuple[str, str]], list[openai.Prompt]]:
    """Targets, rendered requests per target, method, headers, and the LLM prompts if any."""
    if not o.urls:
        raise BadInput("URL", "", "at least one target URL")
    urls = [openai.api_url(u, o.api) for u in o.urls] if o.api else o.urls
    targets = [parse_url(u) for u in urls]
    headers = [parse_header(h) for h in o.header]
    if o.api:
        headers += openai.auth_header(o.api_key)
    if o.body is not None and o.bodies is not None:
        raise BadInput("--body", "with --bodies", "one of --body or --bodies")
    bodies: list[bytes | None] = [None]
    prompts: list[openai.Prompt] = []
    if o.api:
        llm_bodies, prompts = _llm_bodies(o)
        bodies = list(llm_bodies)
    elif o.body is not None:
        bodies = [read_body(o.body)]
    elif o.bodies is not None:
        bodies = list(read_bodies_jsonl(o.bodies))
    method = parse_method(o.method) if o.method else ("POST" if bodies != [None] else "GET")
    payloads = [[render(t, method, headers, b) for b in bodies] for t in targets]
    return targets, payloads, method, headers, prompts


def prepare(o: RunOptions) -> Prepared:
    targets, payloads, method, headers, prompts = _requests(o)
    streaming = bool(o.api in openai.STREAMING_APIS and o.stream)
    counter = openai.TokenCounter(o.tokenizer) if o.tokenizer else None
    prompt_tokens = [counter.count_prompt(p) for p in prompts] if counter and prompts else None
    warmup_ns = parse_duration_ns(o.warmup, "--warmup")
    horizon_ns, max_count = _window(o, warmup_ns)
    attain = parse_fraction(o.attainment, "--attainment")
    slos = [parse_slo(s, attain) for s in o.slo]
    for s in slos:
        if s.needs_llm and not streaming:
            raise BadInput(
                "--slo", s.spec, "a metric an HTTP run measures (latency, e2e, service, send_lag)"
            )
    if not slos:
        slos = [SLO("error_rate<=1%", "rate", "error_rate", 0.01, stat="error_rate", implicit=True)]
    concurrency = parse_count(str(o.concurrency), "--concurrency") if o.concurrency else None
    schedule = None
    if concurrency is None:
        schedule = parse_schedule(
            o.arrival, o.rate, seed=o.seed, horizon_ns=horizon_ns, max_count=max_count
        )
        if horizon_ns is None:
            horizon_ns = schedule.horizon_ns  # stages bound the run themselves
    elif o.rate is not None:
        raise BadInput(
            "--rate", o.rate, "no rate with --concurrency (closed loop sets its own pace)"
        )
    elif horizon_ns is None and max_count is None:
        raise BadInput("--duration", None, "a duration or --requests for a closed-loop run")
    workers = _scale_out(o, concurrency)
    budget = _fd_budget()
    cap = (
        parse_count(str(o.max_in_flight), "--max-in-flight")
        if o.max_in_flight
        else min(10_000, budget)
    )
    return Prepared(
        opts=o,
        targets=targets,
        payloads=payloads,
        schedule=schedule,
        horizon_ns=horizon_ns,
        max_count=max_count,
        warmup_ns=warmup_ns,
        slos=slos,
        max_in_flight=concurrency or cap,
        concurrency=concurrency,
        think_ns=parse_duration_ns(o.think, "--think"),
        timeout_ns=parse_duration_ns(o.timeout, "--timeout", allow_zero=False),
        connect_timeout_ns=parse_duration_ns(
            o.connect_timeout, "--connect-timeout", allow_zero=False
        ),
        grace_ns=parse_duration_ns(o.grace, "--grace"),
        max_send_lag_ns=parse_duration_ns(o.max_send_lag, "--max-send-lag", allow_zero=False),
        method=method,
        headers=headers,
        streaming=streaming,
        counter=counter,
        prompt_tokens=prompt_tokens,
        workers=workers,
    )


def _scale_out(o: RunOptions, concurrency: int | None) -> int | None:
    """Worker processes asked for (None: a single process, or as many as Ray has CPUs)."""
    if o.workers is None and not o.ray:
        return None
    from tailwise.loadgen.scale import parse_workers

    if concurrency is not None:
        given = o.workers or f"--ray {o.ray}"
        raise BadInput("--workers", given, "one process for --concurrency (closed loop)")
    return parse_workers(o.workers, ray=bool(o.ray))


def run_directory(o: RunOptions, target: Target) -> Path:
    if o.out:
        path = Path(o.out)
    else:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        name = o.name or re.sub(r"[^A-Za-z0-9.]+", "-", f"{target.host}-{target.port}").strip("-")
        path = Path("runs") / f"{stamp}-{name}"
        n = 2
        while path.exists():
            path = Path("runs") / f"{stamp}-{name}-{n}"
            n += 1
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(
            "--out", str(path), f"a directory that can be created ({exc.strerror})"
        ) from None
    return path


def _engine(p: Prepared, transport: Transport) -> Engine:
    if p.concurrency is not None:
        return ClosedLoop(transport, p.concurrency, p.think_ns, p.horizon_ns, p.max_count)
    assert p.schedule is not None
    index, count = p.share
    blocks = p.schedule.blocks() if count == 1 else p.schedule.share_blocks(index, count)
    return OpenLoop(transport, blocks, p.max_in_flight)


def _window_end(p: Prepared, engine: Engine) -> int:
    n = sum(b.rows for b in engine.blocks)
    last = max(
        (
            int(np.frombuffer(b.scheduled_ns, np.int64)[: b.rows].max())
            for b in engine.blocks
            if b.rows
        ),
        default=0,
    )
    return plan_window_end(p, n, last)


def plan_window_end(p: Prepared, rows: int, last_scheduled_ns: int) -> int:
    """The window's end for a plan that produced ``rows`` rows, the last due at the given offset."""
    n, last = rows, last_scheduled_ns
    count_ran_out = p.max_count is not None and n >= p.max_count
    if p.horizon_ns is not None and not count_ran_out:
        return p.horizon_ns
    # Count-bounded: the window closes one mean gap after the last intended instant.
    end = last + (last // max(n - 1, 1) if n > 1 else 1)
    return min(end, p.horizon_ns) if p.horizon_ns is not None else end


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


class WorkerHooks(Protocol):
    """How one worker process of a scaled-out run joins it (see :mod:`tailwise.loadgen.scale`)."""

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
        note.append(f"{name} after {(now_ns() - t0) / 1e9:.1f}s")
        if not engine.finished_sending.is_set():
            engine.stop()
        interrupted.set()

    installed = _install_signals(loop, on_signal)
    lost: list[str] = []
    stop_io = asyncio.Event()
    watch = _loss_watch(p)
    # Old blocks may leave memory only while the pump is their only reader.
    spill = Spill(sink.path.parent) if hooks is None and watch is None else None
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
    engine.begin(t0)
    show = p.opts.progress if p.opts.progress is not None else sys.stderr.isatty()
    progress = Progress(engine, (p.horizon_ns or 0) / 1e9 or None) if show else None
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
    sending = asyncio.ensure_future(engine.finished_sending.wait())
    await asyncio.wait([sending], return_when=asyncio.FIRST_COMPLETED)
    stopped_at = now_ns() - t0
    await _drain(engine, p, interrupted, hard_stop)
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
    )


def _loss_watch(p: Prepared) -> LossWatch | None:
    """A watch for knee trials: open loop at a steady rate with a known window only."""
    return loss_watch(p) if p.opts.stop_on_slo_loss and p.share[1] == 1 else None


def loss_watch(p: Prepared) -> LossWatch | None:
    """The SLO-loss watch of a run (None where it cannot judge: not a steady open-loop rate)."""
    if p.schedule is None or p.horizon_ns is None:
        return None
    described = p.schedule.describe()
    rate = described.get("rate_rps")
    if not isinstance(rate, int | float) or not rate or described.get("profile"):
        return None
    expected = float(rate) * (p.horizon_ns - p.warmup_ns) / 1e9
    watch = LossWatch(p.slos, (p.warmup_ns, p.horizon_ns), expected)
    return watch if watch.limits else None


async def _watch_loop(
    watch: LossWatch,
    engine: Engine,
    t0: int,
    stop: asyncio.Event,
    on_loss: Callable[[str], None],
) -> None:
    start, end = watch.window_ns
    # Judge only after a second of window (or half of a shorter one): the loss may
    # be certain sooner, but the run's own checks (send lag, Little) need samples.
    first_ns = start + min(WATCH_MIN_WINDOW_NS, (end - start) // 2)
    while not stop.is_set() and not engine.finished_sending.is_set():
        await asyncio.sleep(WATCH_INTERVAL_S)
        if now_ns() - t0 < first_ns:
            continue
        reason = watch.check(engine.blocks, now_ns() - t0)
        if reason and not engine.finished_sending.is_set():
            on_loss(reason)
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


def _run_engine(
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


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """While outputs are written, Ctrl-C must not leave a half-written run behind."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def http_transport(p: Prepared) -> Transport:
    return HttpTransport(
        p.targets,
        p.payloads,
        timeout_ns=p.timeout_ns,
        connect_timeout_ns=p.connect_timeout_ns,
        insecure=p.opts.insecure,
        preconnect=_preconnect(p),
        streaming=p.streaming,
        counter=p.counter,
        prompt_tokens=p.prompt_tokens,
    )


def execute(p: Prepared, directory: Path, transport: Transport | None = None) -> RunResult:
    if (p.workers is not None and p.workers > 1) or p.opts.ray:
        from tailwise.loadgen.scale import execute_scaled

        if transport is not None:
            raise BadInput("transport", "given", "the HTTP transport with --workers or --ray")
        return execute_scaled(p, directory)
    started_unix = time.time()
    tr = transport or http_transport(p)
    (directory / "run.json").write_text(json.dumps(run_json(p, started_unix), indent=2) + "\n")
    provisional = p.horizon_ns if p.horizon_ns is not None else 2**62
    sink = RecordSink(directory / "records.jsonl", (p.warmup_ns, provisional))
    try:
        out = _run_engine(p, tr, sink)
    finally:
        rows_on_disk = sink.wait()
    with _no_interrupts():
        return _conclude(p, out, directory, rows_on_disk)


def _conclude(p: Prepared, out: Outcome, directory: Path, rows_on_disk: int | None) -> RunResult:
    engine = out.engine
    end_ns = _window_end(p, engine)
    if out.interrupted or out.stopped_early:
        end_ns = min(end_ns, max(out.stopped_at_ns, p.warmup_ns + 1))
    records = Records.from_blocks(engine.blocks, 0, (p.warmup_ns, end_ns))
    info = run_info(
        p,
        (p.warmup_ns, end_ns),
        interrupted=(out.interrupted, out.note),
        stopped_early=out.stopped_early,
        rows_on_disk=rows_on_disk,
    )
    info.extra = token_source(out) if p.streaming else {}
    summary = summarize(records, info)
    write_outputs(directory, records, summary, out.t0_unix_s, (p.warmup_ns, end_ns))
    return RunResult(summary, records, directory)


def run_info(
    p: Prepared,
    window_ns: tuple[int, int],
    *,
    interrupted: tuple[bool, str],
    stopped_early: str,
    rows_on_disk: int | None,
) -> RunInfo:
    """What the summary needs to know besides the records (one process or many).

    ``interrupted`` is (whether, the note saying by what).
    """
    return RunInfo(
        source="loadgen",
        target=[t.url for t in p.targets] if len(p.targets) > 1 else p.targets[0].url,
        mode="open" if p.concurrency is None else "closed",
        arrival=p.schedule.describe()
        if p.schedule
        else {"process": "closed-loop", "think_ms": p.think_ns / 1e6},
        window_ns=window_ns,
        slos=p.slos,
        max_send_lag_ns=p.max_send_lag_ns,
        max_in_flight=p.max_in_flight if p.concurrency is None else None,
        concurrency=p.concurrency,
        interrupted=interrupted[0],
        interrupt_note=interrupted[1],
        stopped_early=stopped_early,
        rows_on_disk=rows_on_disk,
        llm=p.streaming,
    )


def token_source(out: Outcome) -> dict[str, Any]:
    """Say how output tokens were counted: the server's usage, or one per content chunk."""
    usage_rows = getattr(out.transport, "usage_rows", 0)
    counted_rows = getattr(out.transport, "tokenizer_rows", 0)
    counter = getattr(out.transport, "counter", None)
    if usage_rows:
        how = "server usage"
    elif counted_rows and counter is not None:
        how = f"tokenizer {counter.name}"
    else:
        how = "content chunks (approximation)"
    return {"tokens_counted_by": how}


def write_outputs(
    directory: Path,
    records: Records,
    summary: dict[str, Any],
    t0_unix_s: float,
    window: tuple[int, int],
) -> None:
    (directory / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    ok = records.error == 0
    lat = derive.latency_ns(records)
    write_hlog(
        directory / "latency.hlog",
        interval_histograms(records.done_ns[ok], lat[ok]),
        t0_unix_s,
        comments=[
            f"[tailwise: latency from intended send time, ns; window {window[0] / 1e9:.3f}s"
            f"-{window[1] / 1e9:.3f}s; warm-up intervals included; intervals by completion time]"
        ],
    )


def run_json(p: Prepared, started_unix: float) -> dict[str, Any]:
    opts = asdict(p.opts)
    opts.pop("header", None)  # header values may carry credentials: never written
    opts.pop("api_key", None)
    if opts.get("body") and not str(opts["body"]).startswith("@"):
        opts["body"] = f"<{len(str(opts['body']).encode())} bytes, not saved>"
    opts["urls"] = [t.url for t in p.targets]
    return {
        "started_utc": dt.datetime.fromtimestamp(started_unix, dt.UTC).isoformat(),
        "options": opts,
        "requests": describe(p.targets, p.method, p.headers),
        "window_ns": [p.warmup_ns, p.horizon_ns],
        "slos": [s.spec for s in p.slos],
    }


def run(url: str | list[str], **options: Any) -> RunResult:
    """Python API: ``tailwise.run("http://...", rate="100/s", duration="10s", slo=[...])``."""
    urls = [url] if isinstance(url, str) else list(url)
    if isinstance(options.get("rate"), int | float):
        options["rate"] = f"{options['rate']}/s"
    o = RunOptions(urls=urls, **options)
    p = prepare(o)
    directory = run_directory(o, p.targets[0])
    return execute(p, directory)
