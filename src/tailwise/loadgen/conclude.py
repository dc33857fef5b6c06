"""Stage 3 of a run: from what happened to its summary, verdict and output files.

The window is closed (at the plan's end, or where sending stopped), the
records are gathered from the engine's blocks, summarized and judged by
:mod:`tailwise.metrics.summary`, and ``summary.json`` and ``latency.hlog`` are
written beside the ``records.jsonl`` and ``run.json`` the run already wrote.
The scaled-out driver (:mod:`~tailwise.loadgen.scale`) concludes with the same
pieces over the workers' merged records.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.files import OutputError, atomic_write_text
from tailwise.loadgen.attack import Engine
from tailwise.loadgen.execute import Executed, Outcome
from tailwise.loadgen.prepare import Prepared, plan_window_end
from tailwise.metrics import derive
from tailwise.metrics.client import CLIENT_FILE, ClientLag, client_doc
from tailwise.metrics.histogram import interval_histograms, write_hlog
from tailwise.metrics.summary import RunInfo, summarize
from tailwise.metrics.verdict import exit_code
from tailwise.records import Records, write_jsonl


@dataclass
class RunResult:
    summary: dict[str, Any]
    records: Records
    directory: Path

    @property
    def exit_code(self) -> int:
        return exit_code(self.summary)


def window_end(p: Prepared, engine: Engine) -> int:
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


def conclude(p: Prepared, executed: Executed, directory: Path) -> RunResult:
    """Summarize and judge a single-process run; write its summary and histogram log."""
    out, rows_on_disk = executed.outcome, executed.rows_on_disk
    engine = out.engine
    end_ns = window_end(p, engine)
    if out.interrupted or out.stopped_early:
        end_ns = min(end_ns, max(out.stopped_at_ns, p.warmup_ns + 1))
    records = Records.from_blocks(engine.blocks, 0, (p.warmup_ns, end_ns))
    writer = writer_state(directory, records, rows_on_disk)
    rows_on_disk = writer["rows_on_disk"]
    info = run_info(
        p,
        (p.warmup_ns, end_ns),
        interrupted=(out.interrupted, out.note),
        stopped_early=out.stopped_early,
        rows_on_disk=rows_on_disk,
    )
    info.extra = token_source(out) if p.streaming else {}
    if writer["state"] != "ok":
        info.extra["records_writer"] = writer
    client_info(info, [client_part(out)])
    summary = summarize(records, info)
    write_outputs(directory, records, summary, out.t0_unix_s, (p.warmup_ns, end_ns), info)
    return RunResult(summary, records, directory)


def writer_state(directory: Path, records: Records, rows_on_disk: int | None) -> dict[str, Any]:
    """Check the records writer's count; if it died or stalled, rewrite from memory.

    Every row is still in memory at the end of a run (spilled blocks are restored),
    so a writer that was killed, stopped or starved loses no data: ``records.jsonl``
    is written again from memory, in plan order. The summary says what happened.
    """
    if rows_on_disk == len(records):
        return {"state": "ok", "rows_on_disk": rows_on_disk}
    state = "failed" if rows_on_disk is None else "short"
    try:
        written = write_jsonl(directory / "records.jsonl", records)
    except OutputError as exc:
        return {
            "state": state,
            "rows_on_disk": rows_on_disk,
            "note": f"records.jsonl could not be rewritten ({exc.reason})",
        }
    live = "an unknown number of" if rows_on_disk is None else str(rows_on_disk)
    return {
        "state": state,
        "rows_on_disk": written,
        "rows_written_live": rows_on_disk,
        "note": f"the records writer {'died or stalled' if rows_on_disk is None else 'fell short'}"
        f" after {live} rows; records.jsonl was rewritten from memory ({written} rows, plan order)",
    }


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


def client_part(out: Outcome) -> dict[str, Any]:
    """What one process knows of the client's side: its loop's lag, its CPU, failed connects."""
    failures = getattr(out.transport, "connect_failures", None) or {}
    return {"lag": out.lag, "load": out.load, "connect_failures": dict(failures)}


def client_info(info: RunInfo, parts: list[dict[str, Any] | None]) -> None:
    """The client's side of the run, from each process's part (None: a lost worker)."""
    info.client_lag = ClientLag([part["lag"] if part else None for part in parts])
    loads = [part["load"] for part in parts if part and part["load"]]
    if loads:
        # The busiest process speaks for the client: one starved worker can flip a verdict.
        info.client_load = max(loads, key=lambda d: d.get("cpu_share") or 0.0)
    failures: dict[str, int] = {}
    for part in parts:
        for why, n in (part or {}).get("connect_failures", {}).items():
            failures[why] = failures.get(why, 0) + n
    info.connect_failures = failures


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
    info: RunInfo,
) -> None:
    """summary.json, the client file and latency.hlog, each written whole or not at all.

    When ``directory`` cannot take them (disk full, made read-only mid-run), what was
    measured is not lost: the summary and every record still in memory go to a rescue
    directory under the system's temporary directory, and the one-line error names it.
    """
    try:
        _write_outputs(directory, records, summary, t0_unix_s, window, info)
    except OutputError as exc:
        raise OutputError(exc.path, exc.os_error, rescue(records, summary)) from None


def rescue(records: Records, summary: dict[str, Any]) -> str:
    """Save the summary and records where they can go; say where (or that nothing could)."""
    try:
        where = Path(tempfile.mkdtemp(prefix="tailwise-rescue-"))
        write_jsonl(where / "records.jsonl", records)
        atomic_write_text(where / "summary.json", json.dumps(summary, indent=2) + "\n")
    except (OSError, OutputError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        return f"no rescue copy could be written either ({reason})"
    return f"the summary and {len(records)} records were saved in {where} instead"


def _write_outputs(
    directory: Path,
    records: Records,
    summary: dict[str, Any],
    t0_unix_s: float,
    window: tuple[int, int],
    info: RunInfo,
) -> None:
    # The summary goes last: a summary.json on disk means the files beside it are whole.
    doc = client_doc(info.client_lag, info.client_load, info.connect_failures)
    atomic_write_text(directory / CLIENT_FILE, json.dumps(doc, separators=(",", ":")) + "\n")
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
    atomic_write_text(directory / "summary.json", json.dumps(summary, indent=2) + "\n")
