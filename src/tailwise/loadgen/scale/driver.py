"""Scale-out load generation: one global plan, many workers, one run directory.

The driver (this module) prepares the run once, as a single process would,
then starts ``n`` workers (:mod:`tailwise.loadgen.scale.worker`): processes on
this machine (``--workers N``), or one per Ray actor across a cluster
(``--ray``, :mod:`tailwise.loadgen.scale.ray_workers`). Worker ``k`` runs the plan's
offsets ``k, k + n, ...``, so the union of the workers' intended send times is
the single-process plan for the same seed. The run goes:

1. **ready**: every worker has its share, its own connection pool (opened),
   its own records writer; it says ``ready``.
2. **start barrier**: the driver picks a common start instant on its wall
   clock, a lead ahead, and sends it; each worker converts it once to its own
   monotonic clock and paces from it (docs/scale.md: the clock assumptions).
3. **during the run**: each worker sends a coarse snapshot every 0.5 s (counts,
   encoded per-interval HdrHistograms, certain SLO misses); the driver merges
   them losslessly (histograms add), prints progress, and judges the SLOs on
   the merged view (``--stop-on-slo-loss`` stops every worker once one is lost).
   Records stream to a file per worker (on this machine, or shipped by the Ray
   actor with each snapshot), flushed as they come, so a dead worker's rows
   survive up to its last flush.
4. **merge**: one ``records.jsonl`` in plan order, ``summary.json`` computed by
   the single-process code from the merged records, ``latency.hlog``, and a
   ``workers`` section (per-worker counts) in summary.json and run.json.

A worker that dies mid-run, or is stopped by a signal sent to it alone (its
process, not the driver's): the others go on; its share's rows that never
arrived are ``not_sent:worker_lost``; the run is marked interrupted (verdict
``invalid``), naming the worker and the count.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from tailwise.errors import BadInput, WorkerStartFailed
from tailwise.files import OutputError, SpaceReserve, atomic_write_text
from tailwise.loadgen.conclude import (
    RunResult,
    auto_warmup,
    client_info,
    run_info,
    write_outputs,
)
from tailwise.loadgen.engine.watch import judge_from_ns
from tailwise.loadgen.execute import live
from tailwise.loadgen.execute.local import no_interrupts
from tailwise.loadgen.prepare.plan import Prepared, loss_watch, plan_window_end, run_json
from tailwise.loadgen.scale import merge
from tailwise.loadgen.scale.messages import (
    Died,
    DriverMessage,
    Failed,
    Final,
    Ready,
    Snapshot,
    Start,
    Stop,
    WorkerMessage,
    unknown,
)
from tailwise.loadgen.scale.pool import LocalPool, Pool
from tailwise.loadgen.scale.worker import WorkerSpec
from tailwise.metrics.summary import summarize
from tailwise.records import Records, write_jsonl

PROGRESS_S = 1.0
READY_TIMEOUT_S = 120.0  # workers import, open connections; Ray may start processes
KILL_AFTER_S = 10.0  # past the deadline, a worker that still has not finished is killed


@dataclass
class WorkerState:
    index: int
    host: str = ""
    pid: int = 0
    max_in_flight: int = 0
    final: Final | None = None
    died: str = ""  # why, if it died
    died_at_ns: int = 0  # run-relative instant the driver learned of it
    last: Snapshot | None = None  # its latest snapshot

    @property
    def over(self) -> bool:
        return self.final is not None or bool(self.died)


@contextlib.contextmanager
def _signals(on_signal: Callable[[str], None]) -> Iterator[None]:
    """SIGINT/SIGTERM go to ``on_signal`` while workers run (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in saved:
        signal.signal(s, lambda signum, _frame: on_signal(signal.Signals(signum).name))
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


class Driver:
    """Runs one scaled-out run end to end on a :class:`Pool`."""

    def __init__(self, p: Prepared, directory: Path, pool: Pool, count: int) -> None:
        self.p = p
        self.directory = directory
        self.pool = pool
        self.count = count
        self.states = [WorkerState(k) for k in range(count)]
        self.view = merge.LiveView(loss_watch(p))
        self.t0_unix_ns = 0
        self.t0_mono_ns = 0
        self.signals: list[str] = []
        self.note = ""  # the driver's own interruption
        self.stopped_early = ""
        self.slo_lost = ""
        self.deadline_ns = self._deadline_ns()
        self.judge_from_ns = judge_from_ns((p.warmup_ns, p.horizon_ns or p.warmup_ns))
        self.hard_sent = False
        self.started_unix = time.time()
        self.reserve = SpaceReserve(directory)  # room for the summary if the disk fills
        stream: TextIO = sys.stderr
        self.stream = stream
        show = p.progress
        self.show = stream.isatty() if show is None else show
        self._next_progress = time.monotonic() + PROGRESS_S

    # -- setup -------------------------------------------------------------------------

    def specs(self) -> list[WorkerSpec]:
        caps = _split_cap(self.p, self.count)
        return [
            WorkerSpec(self.p, k, self.count, str(self.pool.records_path(k)), caps[k])
            for k in range(self.count)
        ]

    def _deadline_ns(self) -> int:
        """When every worker should have finished: the plan's end, a timeout, the grace."""
        p = self.p
        end = p.horizon_ns
        if end is None:
            assert p.schedule is not None
            end = max((int(b[-1]) for b in p.schedule.blocks() if len(b)), default=0)
        return end + p.timeout_ns + p.grace_ns + 5_000_000_000

    def await_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = set(range(self.count))
        while waiting:
            if time.monotonic() > deadline:
                raise WorkerStartFailed(
                    _flag(self.pool), f"{len(waiting)} workers", "workers that start"
                )
            for k, msg in self.pool.poll(0.5):
                w = self.states[k]
                match msg:
                    case Ready(host, pid, max_in_flight):
                        w.host, w.pid, w.max_in_flight = host, pid, max_in_flight
                        waiting.discard(k)
                    case Failed(why) | Died(why):
                        raise WorkerStartFailed(
                            _flag(self.pool), f"worker {k}: {why}", "workers that start"
                        )
                    case Snapshot() | Final():  # none comes before the start: ignored
                        pass
                    case _:
                        unknown(k, msg)

    def start(self) -> None:
        self.t0_unix_ns = time.time_ns() + int(self.pool.lead_s * 1e9)
        self.t0_mono_ns = time.monotonic_ns() + (self.t0_unix_ns - time.time_ns())
        for k in range(self.count):
            self.pool.send(k, Start(self.t0_unix_ns))

    # -- during the run ----------------------------------------------------------------

    def now_ns(self) -> int:
        return time.monotonic_ns() - self.t0_mono_ns

    def follow(self) -> None:
        with _signals(self.signals.append):
            while not all(w.over for w in self.states):
                for k, msg in self.pool.poll(self.pool.poll_s):
                    self.on_message(k, msg)
                self.on_tick()
        if self.show:
            self.stream.write("\n" if self.stream.isatty() else "")
            self.stream.flush()

    def on_message(self, k: int, msg: WorkerMessage) -> None:
        w = self.states[k]
        match msg:
            case Snapshot():
                w.last = msg
                self.view.add(msg)
            case Final():
                w.final = msg
                if msg.snapshot is not None:
                    w.last = msg.snapshot
                    self.view.add(msg.snapshot)
                if msg.signalled and not self.note:
                    # A signal sent to this worker alone: a worker lost, as if it had died
                    # there; its share from then on is owed, the others go on.
                    w.died, w.died_at_ns = f"stopped by {msg.note}", msg.stopped_at_ns
            case Died(why) | Failed(why):
                w.died, w.died_at_ns = why, self.now_ns()
            case Ready():  # every worker was ready before the start: not again
                pass
            case _:
                unknown(k, msg)

    def on_tick(self) -> None:
        if self.signals:
            self._obey_signals()
        misses = [w.last.misses if w.last else None for w in self.states]
        lost = self.view.loss(misses) if self.now_ns() >= self.judge_from_ns else ""
        if lost and not self.slo_lost:
            self.slo_lost = lost
            if self.p.stop_on_slo_loss and not self.note:
                self.stopped_early = lost
                self._tell_all(Stop("slo"))
        now = self.now_ns()
        if now > self.deadline_ns and not self.hard_sent:
            self.hard_sent = True
            self._tell_all(Stop("hard"))
        if now > self.deadline_ns + KILL_AFTER_S * 1e9:
            for w in self.states:
                if not w.over:
                    self.pool.kill(w.index)
        if (self.show or live.active()) and time.monotonic() >= self._next_progress:
            self._next_progress = time.monotonic() + PROGRESS_S
            self._progress(now)

    def _obey_signals(self) -> None:
        if not self.note:
            self.note = f"{self.signals[0]} after {max(self.now_ns(), 0) / 1e9:.1f}s"
            self._tell_all(Stop("interrupt"))
        if len(self.signals) > 1 and not self.hard_sent:
            self.hard_sent = True
            self._tell_all(Stop("hard"))

    def _tell_all(self, msg: DriverMessage) -> None:
        for w in self.states:
            if not w.over:
                self.pool.send(w.index, msg)

    def _progress(self, now_ns: int) -> None:
        snaps = [w.last for w in self.states if w.last]
        sent = sum(s.sent for s in snaps)
        in_flight = sum(s.in_flight for s in snaps)
        errors = sum(n for s in snaps for kind, n in s.kinds.items() if kind)
        p99 = self.view.p99_ms(int(now_ns // 1_000_000_000) - 1)
        alive = sum(1 for w in self.states if not w.died)
        total = (self.p.horizon_ns or 0) / 1e9
        live.publish(
            {
                "label": self.p.label,
                "elapsed_s": max(now_ns, 0) / 1e9,
                "total_s": total or None,
                "sent": sent,
                "in_flight": in_flight,
                "errors": errors,
                "p99_ms": p99,
                "workers": alive,
            }
        )
        if not self.show:
            return
        line = (
            f"  {max(now_ns, 0) / 1e9:5.1f}{f'/{total:.0f}s' if total else 's'}  sent {sent:>8}"
            f"  in flight {in_flight:>5}  errors {errors:>6}"
            f"  p99 (last 1s) {'-' if p99 is None else f'{p99:.1f}ms':>9}"
            f"  workers {alive}/{self.count}"
            + (f"  SLO lost: {self.slo_lost.split(':')[0]}" if self.slo_lost else "")
        )
        tty = self.stream.isatty()
        self.stream.write(("\r" + line + "\x1b[K") if tty else line + "\n")
        self.stream.flush()

    # -- the end -----------------------------------------------------------------------

    def conclude(self) -> RunResult:
        p = self.p
        self.reserve.release()
        records = self.merged_records()
        end_ns = plan_window_end(p, len(records), int(records.scheduled_ns.max(initial=0)))
        interrupted = self.sending_stopped()
        if interrupted or self.stopped_early:  # the window ends where sending stopped
            end_ns = min(end_ns, max(self._stop_ns(), p.warmup_ns + 1))
        records.in_window = (records.scheduled_ns >= p.warmup_ns) & (records.scheduled_ns < end_ns)
        start_ns, warmup = auto_warmup(p, records, (p.warmup_ns, end_ns))
        try:
            rows: int | None = write_jsonl(self.directory / "records.jsonl", records)
        except OutputError:
            rows = None  # write_outputs fails the same way and rescues the records
        notes = self._notes(records)
        info = run_info(
            p,
            (start_ns, end_ns),
            interrupted=(interrupted or any(w.died for w in self.states), "; ".join(notes)),
            stopped_early=self.stopped_early,
            rows_on_disk=rows,
        )
        info.max_in_flight = sum(w.max_in_flight for w in self.states)
        section = self.workers_section(records)
        info.extra = {"workers": section, "warmup": warmup}
        if p.streaming:
            info.extra.update(next((w.final.tokens for w in self.states if w.final), {}))
        client_info(info, [w.final.client if w.final else None for w in self.states])
        summary = summarize(records, info)
        t0_unix_s, window = self.t0_unix_ns / 1e9, (start_ns, end_ns)
        summary = write_outputs(self.directory, records, summary, t0_unix_s, window, info)
        self.write_run_json(section)
        shutil.rmtree(self.directory / "workers", ignore_errors=True)
        return RunResult(summary, records, self.directory, t0_unix_s, window)

    def merged_records(self) -> Records:
        p = self.p
        assert p.schedule is not None
        stop_ns = self._stop_ns()
        lost_kind = merge.WORKER_LOST
        parts = []
        for w in self.states:
            path = self.pool.records_path(w.index)
            if w.died:
                merge.settle(path)
            r = merge.worker_records(path, w.index, self.count)
            offsets = merge.share_offsets(p.schedule, w.index, self.count)
            if w.final is not None and not w.died:
                owed, kind, at = w.final.rows, "lost", w.final.stopped_at_ns
            else:
                owed, kind, at = int(np.searchsorted(offsets, stop_ns)), lost_kind, w.died_at_ns
            where = (w.index, self.count)
            parts += [r, merge.owed_rows(r, offsets, owed, where, kind, at)]
        return merge.concat(parts, (p.warmup_ns, 2**62))

    def sending_stopped(self) -> bool:
        """Interrupted: by a signal at the driver, or at a worker (not a worker's death)."""
        return bool(self.note) or any(self._interrupted(w) for w in self.states)

    def _stop_ns(self) -> int:
        """Where the plan stopped for everyone: a dead worker owes rows due before it."""
        if self.sending_stopped() or self.stopped_early:
            stops = [w.final.stopped_at_ns for w in self.states if w.final and not w.died]
            return int(min(stops, default=self.now_ns()))
        return 2**62

    def _notes(self, records: Records) -> list[str]:
        notes = [self.note] if self.note else []
        for w in self.states:
            if w.final and self._interrupted(w) and not self.note:
                notes.append(f"worker {w.index}: {w.final.note}")
            if w.died:
                lost = int(((records.worker == w.index) & _kind(records, merge.WORKER_LOST)).sum())
                notes.append(
                    f"worker {w.index} of {self.count} lost after {w.died_at_ns / 1e9:.1f}s"
                    f" ({w.died}): {lost} requests {merge.WORKER_LOST}"
                )
        return notes

    def workers_section(self, records: Records) -> dict[str, Any]:
        rows = merge.per_worker(records, self.count)
        for row, w in zip(rows, self.states, strict=True):
            row.update(host=w.host, pid=w.pid, max_in_flight=w.max_in_flight)
            row.update(self.pool.describe(w.index))
            row["state"] = "lost" if w.died else "interrupted" if self._interrupted(w) else "done"
            row["note"] = w.died or (w.final.note if w.final else "")
            row["start_slack_ms"] = w.final.slack_ns / 1e6 if w.final else None
        hosts = sorted({w.host for w in self.states if w.host})
        return {
            "mode": self.pool.kind,
            "count": self.count,
            "hosts": len(hosts),
            "lost": sum(1 for w in self.states if w.died),
            "start_unix_s": self.t0_unix_ns / 1e9,
            "clock": "one host: one monotonic clock"
            if len(hosts) <= 1
            else "per-host monotonic clocks, aligned once on the driver's wall-clock start",
            "hdr_latency_ms": merge.hdr_summary_ms(self.view.window_histogram()),
            "per_worker": rows,
        }

    @staticmethod
    def _interrupted(w: WorkerState) -> bool:
        """Stopped by the driver's word (a lost worker, even one signalled, is not)."""
        return bool(w.final and w.final.interrupted and not w.died)

    def write_run_json(self, section: dict[str, Any] | None = None) -> None:
        doc = run_json(self.p, self.started_unix)
        doc["workers"] = section or {
            "mode": self.pool.kind,
            "count": self.count,
            "per_worker": [
                {"worker": w.index, "host": w.host, "pid": w.pid, **self.pool.describe(w.index)}
                for w in self.states
            ],
        }
        atomic_write_text(self.directory / "run.json", json.dumps(doc, indent=2) + "\n")


def _kind(r: Records, kind: str) -> np.ndarray:
    from tailwise.records import ERROR_KINDS

    if kind not in ERROR_KINDS:
        return np.zeros(len(r), dtype=bool)
    result: np.ndarray = r.error == ERROR_KINDS.index(kind)
    return result


def _split_cap(p: Prepared, count: int) -> list[int | None]:
    """A user's --max-in-flight is for the whole run: split it; the default is per process."""
    if not p.cap_given:
        return [None] * count
    total = p.max_in_flight
    if total < count:
        raise BadInput("--max-in-flight", total, f"at least one per worker ({count})")
    return [total // count + (1 if k < total % count else 0) for k in range(count)]


def _flag(pool: Pool) -> str:
    return "--ray" if pool.kind == "ray" else "--workers"


def make_pool(p: Prepared, directory: Path) -> tuple[Pool, int]:
    """The pool the options ask for, and how many workers it runs."""
    if p.ray:
        from tailwise.loadgen.scale.ray_workers import RayPool

        pool = RayPool(p.ray, p.workers, directory)
        return pool, pool.count
    assert p.workers is not None
    return LocalPool(directory), p.workers


def execute_scaled(p: Prepared, directory: Path) -> RunResult:
    """The scaled-out counterpart of :func:`tailwise.loadgen.execute.local.execute_local`."""
    try:
        pool, count = make_pool(p, directory)
    except BadInput:
        with contextlib.suppress(OSError):
            directory.rmdir()  # nothing was sent: leave no empty run directory behind
        raise
    driver = Driver(p, directory, pool, count)
    try:
        driver.write_run_json()
        pool.launch(driver.specs())
        driver.await_ready()
        driver.write_run_json()  # now with each worker's host and pid
        driver.start()
        driver.follow()
    except BaseException:
        pool.close(abort=True)
        raise
    pool.close()
    with no_interrupts():
        return driver.conclude()


def workers_line(w: Mapping[str, Any]) -> str:
    """One line for the terminal (a summary's ``workers``): how many workers ran where,
    and any that were lost."""
    if not w:
        return ""
    what = "Ray actors" if w["mode"] == "ray" else "processes"
    line = f"workers   {w['count']} {what} on {w['hosts']} host{'s' if w['hosts'] != 1 else ''}"
    lost = [r for r in w["per_worker"] if r["state"] == "lost"]
    if lost:
        line += "; LOST " + ", ".join(
            f"worker {r['worker']} ({r['note']}, {r['worker_lost']} requests)" for r in lost
        )
    return line
