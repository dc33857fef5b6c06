"""Re-render a run, sweep or comparison from its saved files: PNG charts and an HTML page.

A run's summary.json is read once, as a :class:`Summary`
(:func:`~tailwise.metrics.shape.read_summary`); sweep.json and knee.json are documents
of their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tailwise.errors import BadInput, MissingExtra
from tailwise.files import atomic_write_text
from tailwise.metrics.schema import Summary
from tailwise.metrics.shape import read_summary
from tailwise.records import Records, read_jsonl

DIR_FORM = (
    "a run directory (with summary.json), a sweep directory (with sweep.json) or a knee "
    "directory (with knee.json)"
)


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise BadInput("DIR", str(path), f"a readable {path.name} ({exc})") from None
    if not isinstance(doc, dict):
        raise BadInput("DIR", str(path), f"{path.name} holding a JSON object")
    return doc


def kind_of(directory: Path) -> str:
    if (directory / "sweep.json").is_file():
        return "sweep"
    if (directory / "knee.json").is_file():
        return "knee"
    if (directory / "summary.json").is_file():
        return "run"
    raise BadInput("DIR", str(directory), DIR_FORM)


def run_meta(directory: Path, summary: Summary) -> dict[str, Any]:
    """A run's metadata: ``meta.json`` (the CLI writes it) and ``run.json``'s start time."""
    meta: dict[str, Any] = {}
    for name in ("meta.json", "run.json"):
        path = directory / name
        if path.is_file():
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError, RecursionError):
                continue
            if isinstance(doc, dict) and name == "meta.json":
                meta.update(doc)
            elif isinstance(doc, dict) and doc.get("started_utc"):
                meta.setdefault("date_utc", str(doc["started_utc"]))
    meta.setdefault(
        "cpus", summary.generator.load.get("cores") if summary.generator is not None else None
    )
    meta.setdefault("tool_version", summary.tool_version)
    return meta


def _run_charts(r: Records, s: Summary, out_dir: Path, prefix: str = "") -> list[Any]:
    from tailwise.report import charts, plot, run_charts

    slos = charts.parsed_slos([x.spec for x in s.slos])
    llm = s.distribution("ttft_ms") is not None
    out = [
        run_charts.run_spectrum(r, slos, llm, out_dir / f"{prefix}percentiles.png"),
        run_charts.over_time(r, s, slos, out_dir / f"{prefix}latency_over_time.png"),
    ]
    if llm:
        path = plot.llm_distributions(r, out_dir / f"{prefix}ttft_tpot.png")
        title = "Time to first token and time per output token"
        out.append(charts.Chart(path, title, f"Histograms of TTFT and TPOT. {title}."))
    server = run_charts.server_timeline(s, out_dir / f"{prefix}server_metrics.png")
    if server is not None:
        out.append(server)
    gpu = run_charts.gpu_timeline(s, out_dir / f"{prefix}gpu_metrics.png")
    if gpu is not None:
        out.append(gpu)
    return out


def render_sweep(directory: Path) -> list[Path]:
    from tailwise.report import charts, run_charts
    from tailwise.report.sweep_page import load_steps, sweep_page

    doc = _load(directory / "sweep.json")
    steps = load_steps(doc, directory)
    if not steps:
        raise BadInput("DIR", str(directory), "a sweep.json with at least one step")
    slos = charts.parsed_slos([str(x) for x in doc.get("slos", [])])
    llm = any("ttft_ms" in s.row for s in steps)
    made = [
        charts.throughput_goodput(
            steps, doc.get("knee_rps"), directory / "throughput_goodput.png", slos=slos
        ),
        charts.latency_vs_load(steps, slos, llm, directory / "latency_vs_load.png"),
    ]
    with_records = [(s.label, s.records) for s in steps if s.records is not None]
    if with_records:
        made.append(charts.spectra([("", with_records)], slos, llm, directory / "spectra.png"))
    if llm:
        made.append(charts.frontier(steps, directory / "frontier.png"))
    per_step = {}
    for s in steps:
        if s.records is not None and s.summary is not None:
            path = directory / f"step-{s.index:02d}-over-time.png"
            per_step[s.index] = [run_charts.over_time(s.records, s.summary, slos, path)]
    out = directory / "report.html"
    atomic_write_text(out, sweep_page(doc, steps, made, per_step))
    return [*(c.path for c in made), *(c.path for cs in per_step.values() for c in cs), out]


def render_directory(directory: Path, summary: Summary | None = None) -> list[Path]:
    """Writes the charts and report.html into ``directory``; returns the files written.
    A run's ``summary`` when the caller has read it already, else it is read here."""
    from tailwise.report import html

    kind = kind_of(directory)
    if kind == "sweep":
        return render_sweep(directory)
    if kind == "knee":
        from tailwise.report.knee_page import render_knee

        return render_knee(directory)
    if summary is None:
        summary = read_summary(directory / "summary.json", "DIR")
    records_path = directory / "records.jsonl"
    if not records_path.is_file():
        raise BadInput("DIR", str(directory), "a run directory with records.jsonl")
    made = _run_charts(read_jsonl(records_path), summary, directory)
    out = directory / "report.html"
    atomic_write_text(out, html.run_page(summary, made, run_meta(directory, summary)))
    return [*(c.path for c in made), out]


def sweep_report(directory: Path) -> str:
    """Charts and report.html for a sweep or knee directory: its path, or a hint naming
    the missing extra when matplotlib is not installed (the sweep itself is complete)."""
    try:
        render_directory(directory)
    except MissingExtra as exc:
        return f"no charts: {exc.expected}"
    return str(directory / "report.html")


def render_compare(a: Path, b: Path, comparison: dict[str, Any], out: Path) -> Path:
    """compare's HTML: the comparison with A and B overlaid on the same charts, at ``out``
    (its charts beside it, named after it)."""
    from tailwise.report import charts
    from tailwise.report.sweep_page import compare_page, load_steps

    stem = out.with_suffix("")
    made = []
    metas: list[dict[str, Any]]
    if comparison.get("kind") == "sweep":
        doc_a, doc_b = _load(a / "sweep.json"), _load(b / "sweep.json")
        steps_a, steps_b = load_steps(doc_a, a), load_steps(doc_b, b)
        slos = charts.parsed_slos([str(x) for x in doc_a.get("slos", [])])
        llm = any("ttft_ms" in s.row for s in steps_a)
        path = Path(f"{stem}-throughput.png")
        made.append(charts.throughput_goodput(steps_a, doc_a.get("knee_rps"), path, steps_b, slos))
        made.append(
            charts.p99_overlay([("A", steps_a), ("B", steps_b)], slos, llm, Path(f"{stem}-p99.png"))
        )
        groups = [
            (p, [(s.label, r) for s in st if (r := s.records) is not None])
            for p, st in (("A ", steps_a), ("B ", steps_b))
        ]
        made.append(charts.spectra(groups, slos, llm, Path(f"{stem}-spectra.png")))
        metas = [
            {**(d.get("meta") or {}), "target": d.get("target"), "slos": d.get("slos")}
            for d in (doc_a, doc_b)
        ]
    else:
        sa, sb = read_summary(a / "summary.json", "A"), read_summary(b / "summary.json", "B")
        slos = charts.parsed_slos([x.spec for x in sa.slos])
        llm = sa.distribution("ttft_ms") is not None and sb.distribution("ttft_ms") is not None
        groups = [
            (name, [("", read_jsonl(d / "records.jsonl"))])
            for name, d in (("A", a), ("B", b))
            if (d / "records.jsonl").is_file()
        ]
        made.append(charts.spectra(groups, slos, llm, Path(f"{stem}-spectra.png")))
        metas = [
            {
                **run_meta(d, s),
                "target": list(s.target) if isinstance(s.target, tuple) else s.target,
                "slos": [x.spec for x in s.slos],
            }
            for d, s in ((a, sa), (b, sb))
        ]
    atomic_write_text(out, compare_page(comparison, (metas[0], metas[1]), made))
    return out
