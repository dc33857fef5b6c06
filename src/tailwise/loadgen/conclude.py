"""Stage 3 of a run: from what happened to its summary, verdict and output files.

The window is closed (at the plan's end, or where sending stopped), the
records are gathered from the engine's blocks, summarized and judged by
:mod:`tailwise.metrics.summary`, and ``summary.json`` and ``latency.hlog`` are
written beside the ``records.jsonl`` and ``run.json`` the run already wrote.
The scaled-out driver (:mod:`~tailwise.loadgen.scale.driver`) concludes with the same
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
from tailwise.loadgen.engine.attack import Engine
from tailwise.loadgen.engine.sessions import SessionLoop, sessions_section
from tailwise.loadgen.execute.local import Executed, Outcome
from tailwise.loadgen.llm.answers import AnswerBook
from tailwise.loadgen.observe import server_view
from tailwise.loadgen.prepare import images
from tailwise.loadgen.prepare.plan import Prepared, plan_window_end
from tailwise.metrics import derive
from tailwise.metrics.client import CLIENT_FILE, ClientLag, client_doc
from tailwise.metrics.error_samples import ErrorSamples
from tailwise.metrics.histogram import interval_histograms, write_hlog
from tailwise.metrics.steady import auto_start_ns
from tailwise.metrics.summary import RunInfo, Summary, summarize
from tailwise.metrics.verdict import exit_code
from tailwise.records import ABSENT, Records, write_jsonl


@dataclass(frozen=True)
class RunResult:
    """A finished run: its summary (final), records and directory, and beside the summary
    what later stages need of the run that is no part of summary.json: the wall-clock
    instant of its time zero and its window in integer ns."""

    summary: Summary
    records: Records
    directory: Path
    t0_unix_s: float = 0.0
    window_ns: tuple[int, int] = (0, 0)

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
    if out.interrupted or out.stopped_early or out.settled:
        end_ns = min(end_ns, max(out.stopped_at_ns, p.warmup_ns + 1))
    records = Records.from_blocks(engine.blocks, 0, (p.warmup_ns, end_ns))
    decided = out.settled_start_ns if out.settled else None
    start_ns, warmup = auto_warmup(p, records, (p.warmup_ns, end_ns), decided)
    writer = writer_state(directory, records, rows_on_disk)
    rows_on_disk = writer["rows_on_disk"]
    if warmup.get("cut_requests") and writer["state"] == "ok":
        # The live writer flagged in_window by the planned window: flag the cut rows too.
        rows_on_disk = write_jsonl(directory / "records.jsonl", records)
    info = run_info(
        p,
        (start_ns, end_ns),
        interrupted=(out.interrupted, out.note),
        stopped_early=out.stopped_early,
        rows_on_disk=rows_on_disk,
    )
    info.extra = token_source(out) if p.streaming else {}
    info.extra["warmup"] = warmup
    if out.looks is not None:
        info.confidence = out.looks.confidence
        info.sequential = sequential_doc(out)
    if p.sessions is not None and isinstance(engine, SessionLoop):
        info.extra["sessions"] = sessions_section(p.sessions, records, engine.sessions_ended_early)
    info.extra.update(server_part(p, out, records, (start_ns, end_ns), directory))
    if p.images is not None:
        info.extra["images"] = image_figures(p, records)
    if writer["state"] != "ok":
        info.extra["records_writer"] = writer
    client_info(info, [client_part(out)])
    info.template_overhead = template_overhead(p, records, info.extra.get("tokens_counted_by", ""))
    summary = summarize(records, info)
    window = (start_ns, end_ns)
    summary = write_outputs(directory, records, summary, out.t0_unix_s, window, info)
    return RunResult(summary, records, directory, out.t0_unix_s, window)


def auto_warmup(
    p: Prepared, records: Records, window_ns: tuple[int, int], decided_start_ns: int | None = None
) -> tuple[int, dict[str, Any]]:
    """Where the window starts, and summary.json's ``warmup``: with ``--warmup auto`` past
    the transient MSER-5 finds (:func:`tailwise.metrics.steady.auto_start_ns`), else at
    the warm-up given. Only a steady open-loop rate is cut: a closed loop paces itself,
    and stages, ramps and traces change their load on purpose. A ``--duration auto`` run
    that settled starts where its deciding look did (``decided_start_ns``), so that the
    summary judges the sample the decision was made on, and not a cut of its own that
    could leave too few requests to decide. Sets ``records.in_window`` to match."""
    if not p.auto_warmup:
        return window_ns[0], {"mode": "fixed", "start_s": window_ns[0] / 1e9}
    if p.schedule is None or not p.schedule.steady:  # a closed loop, a shape or a trace
        return window_ns[0], {"mode": "auto", "start_s": window_ns[0] / 1e9, "cut_requests": 0}
    ok = records.error == 0
    s = records.scheduled_ns
    if decided_start_ns is not None:
        start_ns = max(decided_start_ns, window_ns[0])
        cut = int((ok & (s >= window_ns[0]) & (s < start_ns)).sum())
    else:
        start_ns, cut = auto_start_ns(s, derive.latency_ns(records), ok, window_ns)
    records.in_window = (s >= start_ns) & (s < window_ns[1])
    doc: dict[str, Any] = {"mode": "auto", "start_s": start_ns / 1e9, "cut_requests": cut}
    if decided_start_ns is not None:
        doc["from_look"] = True
    return start_ns, doc


def sequential_doc(out: Outcome) -> dict[str, Any]:
    """summary.json's ``sequential``: how a ``--duration auto`` run looked and why it ended."""
    assert out.looks is not None
    return {
        "looks_planned": out.looks.count,
        "looks_taken": out.looked + 1,  # the final summary is a look too
        "per_look_confidence": list(out.looks.confidences),
        "overall_confidence": out.looks.overall,
        "settled": out.settled or None,
        "decided": dict(out.settled_decisions) or None,  # per SLO spec, the deciding look's
        "reached_cap": not out.settled and not out.interrupted and not out.stopped_early,
    }


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
        # The directory cannot take them (disk full): the file keeps the whole lines the
        # writer got out, and every row goes to a rescue copy where there is room.
        where = rescue(records, None)
        return {
            "state": state,
            "rows_on_disk": rows_on_disk,
            "note": f"records.jsonl could not be rewritten ({exc.reason}); {where}",
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
        percentiles=p.percentiles,
        confidence=p.confidence,
    )


def client_part(out: Outcome) -> dict[str, Any]:
    """What one process knows of the client's side: its loop's lag, its CPU, failed connects."""
    failures = getattr(out.transport, "connect_failures", None) or {}
    samples = getattr(out.transport, "samples", None)
    return {
        "lag": out.lag,
        "load": out.load,
        "connect_failures": dict(failures),
        "error_samples": samples.doc() if isinstance(samples, ErrorSamples) else [],
    }


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
    for part in parts:
        info.error_samples.merge((part or {}).get("error_samples"))


def image_figures(p: Prepared, records: Records) -> dict[str, Any]:
    """The images the window's sent requests carried (summary.json's ``images``)."""
    assert p.images is not None
    rows = records.in_window & (records.sent_ns != ABSENT)
    return images.figures(p.images, records.seq[rows])


def template_overhead(p: Prepared, records: Records, counted_by: str) -> dict[str, Any] | None:
    """Prompt tokens the server counted beyond the prompt's own (its chat template, BOS):
    the server's usage minus the local tokenizer's count, per window request. Only where
    both exist: a tokenizer counted the prompts and the server reported usage."""
    if not p.prompt_tokens or counted_by != "server usage":
        return None
    rows = (records.error == 0) & records.in_window & (records.input_tokens >= 0)
    if not rows.any():
        return None
    local = np.asarray(p.prompt_tokens, dtype=np.int64)[records.seq[rows] % len(p.prompt_tokens)]
    extra = records.input_tokens[rows] - local
    return {
        "p50": float(np.median(extra)),
        "min": int(extra.min()),
        "max": int(extra.max()),
        "mean": float(extra.mean()),
        "prompt_tokens_mean": float(local.mean()),
        "count": int(rows.sum()),
    }


def server_part(
    p: Prepared, out: Outcome, records: Records, window_ns: tuple[int, int], directory: Path
) -> dict[str, Any]:
    """Reconnects of any HTTP run; for an LLM run, what its server said (server_view)."""
    reconnects = getattr(out.transport, "reconnects", None)
    if not isinstance(reconnects, int):
        return {}
    strays = getattr(out.transport, "stray_answers", 0)
    stray = {"stray_answers": strays} if strays else {}
    if not p.api:
        return {"reconnects": reconnects, **stray}
    book = getattr(out.transport, "answers", None)
    notes = book.server_notes if isinstance(book, AnswerBook) else {}
    server_view.write_notes(directory, notes)
    part = server_view.sections(
        records,
        window_ns,
        notes,
        reconnects=reconnects,
        streamed=p.streaming,
        reuse_asked=p.reuse_asked,
    )
    return {**part, **stray}


def token_source(out: Outcome) -> dict[str, Any]:
    """Say how output tokens were counted: the server's usage, or one per content chunk."""
    book = getattr(out.transport, "answers", None)
    if isinstance(book, AnswerBook):
        return {"tokens_counted_by": book.counted_by()}
    return {"tokens_counted_by": "content chunks (approximation)"}


def write_outputs(
    directory: Path,
    records: Records,
    summary: Summary,
    t0_unix_s: float,
    window: tuple[int, int],
    info: RunInfo,
) -> Summary:
    """summary.json, the client file and latency.hlog, each written whole or not at all;
    the summary as written (with ``outputs_missing`` when a file could not be).

    When ``directory`` cannot take them (disk full, made read-only mid-run), what was
    measured is not lost: the summary and every record still in memory go to a rescue
    directory under the system's temporary directory, and the one-line error names it.
    """
    try:
        return _write_outputs(directory, records, summary, t0_unix_s, window, info)
    except OutputError as exc:
        raise OutputError(exc.path, exc.os_error, rescue(records, summary)) from None


def write_summary(directory: Path, summary: Summary) -> None:
    """``summary.json``: the summary's JSON form, written whole or not at all."""
    atomic_write_text(directory / "summary.json", json.dumps(summary.to_json(), indent=2) + "\n")


def rescue(records: Records, summary: Summary | None) -> str:
    """Save the records (and the summary, if given) where they can go, under the system's
    temporary directory; say where (or that nothing could)."""
    try:
        where = Path(tempfile.mkdtemp(prefix="tailwise-rescue-"))
        write_jsonl(where / "records.jsonl", records)
        if summary is not None:
            write_summary(where, summary)
    except (OSError, OutputError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        return f"no rescue copy could be written either ({reason})"
    what = "the summary and " if summary is not None else "all "
    return f"{what}{len(records)} records were saved in {where} instead"


def _write_outputs(
    directory: Path,
    records: Records,
    summary: Summary,
    t0_unix_s: float,
    window: tuple[int, int],
    info: RunInfo,
) -> Summary:
    # The summary goes last: it names any file beside it that could not be written (a
    # full disk), so a summary.json on disk says which of them are there, whole.
    doc = client_doc(info.client_lag, info.client_load, info.connect_failures)
    doc["error_samples"] = info.error_samples.doc()
    missing: dict[str, str] = {}
    try:
        atomic_write_text(directory / CLIENT_FILE, json.dumps(doc, separators=(",", ":")) + "\n")
    except OutputError as exc:
        missing[CLIENT_FILE] = exc.reason
    ok = records.error == 0
    lat = derive.latency_ns(records)
    try:
        write_hlog(
            directory / "latency.hlog",
            interval_histograms(records.done_ns[ok], lat[ok]),
            t0_unix_s,
            comments=[
                f"[tailwise: latency from intended send time, ns; window {window[0] / 1e9:.3f}"
                f"s-{window[1] / 1e9:.3f}s; warm-up intervals included; intervals by "
                "completion time]"
            ],
        )
    except OutputError as exc:
        missing["latency.hlog"] = exc.reason
    if missing:
        summary = summary.with_sections(outputs_missing=missing)
    write_summary(directory, summary)
    return summary
