"""The sweep report and the comparison report: pages over several runs.

A sweep page: metadata, the knee, the steps' table (each rate links to its own
section; invalid and inconclusive steps are marked), the sweep's charts, then
one section per step with its summary, its errors and its time series. A
comparison page: both sides' metadata, the comparison table, and charts with
A and B overlaid. Strings are escaped by :mod:`tailwise.report.html`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tailwise.metrics.shape import read_summary_or_none
from tailwise.metrics.uncertainty import CONFIDENCE
from tailwise.records import read_jsonl
from tailwise.report.charts import Chart, StepData
from tailwise.report.html import (
    esc,
    figure,
    meta_table,
    ms,
    page,
    run_sections,
)
from tailwise.report.workload import step_directory


def load_steps(doc: dict[str, Any], directory: Path, records: bool = True) -> list[StepData]:
    """Each row of sweep.json with its step's summary and records, when still on disk."""
    out = []
    for i, row in enumerate(r for r in doc.get("steps", []) if isinstance(r, dict)):
        where = step_directory(str(row.get("directory", "")), directory)
        summary = read_summary_or_none(where / "summary.json") if where is not None else None
        recs = None
        if records and where is not None and (where / "records.jsonl").is_file():
            recs = read_jsonl(where / "records.jsonl")
        out.append(StepData(i + 1, row, summary, recs))
    return out


def _verdict_cell(row: dict[str, Any], knee: Any) -> str:
    verdict = str(row.get("verdict", "?"))
    mark = " ◀ knee" if knee is not None and row.get("offered_rps") == knee else ""
    warn = {"invalid": " ⚠ not trusted", "inconclusive": " ? undecided"}.get(verdict, "")
    return f"<td class='verdict {esc(verdict)}'>{esc(verdict)}{warn}{mark}</td>"


def steps_table(steps: list[StepData], knee: Any, llm: bool) -> str:
    dist, label = ("ttft_ms", "TTFT") if llm else ("latency_ms", "latency")
    head = (
        "<tr><th>step</th><th>offered</th><th>throughput</th><th>goodput</th>"
        f"<th>attainment</th><th>{label} p50</th><th>{label} p99</th><th>verdict</th></tr>"
    )
    rows = []
    for s in steps:
        row, d = s.row, s.row.get(dist) or {}
        cls = "untrusted" if not s.trusted else ""
        rows.append(
            f"<tr class='step-row {cls}' data-verdict='{esc(row.get('verdict'))}'>"
            f"<td><a class='step-link' href='#step-{s.index}'>{esc(s.label)}</a></td>"
            f"<td>{row['measured_offered_rps']:.1f}/s</td><td>{row['throughput_rps']:.1f}/s</td>"
            f"<td>{row['goodput_rps']:.1f}/s</td><td>{row['attainment']:.1%}</td>"
            f"<td>{ms(d.get('p50'))}</td><td>{ms(d.get('p99'))}</td>"
            f"{_verdict_cell(row, knee)}</tr>"
        )
    return f"<table id='sweep-table'>{head}{''.join(rows)}</table>"


def step_section(s: StepData, charts: list[Chart]) -> str:
    row = s.row
    verdict = str(row.get("verdict", "?"))
    parts = [
        f"<section class='step' id='step-{s.index}'>",
        f"<h2>Step {s.index}: {esc(s.label)} <span class='{esc(verdict)}'>{esc(verdict)}</span>"
        "</h2>",
    ]
    if verdict == "invalid":
        parts.append(
            f"<p class='warning'>This step is invalid: {esc(row.get('verdict_reason'))}</p>"
        )
    elif verdict == "inconclusive":
        parts.append(
            "<p class='note'>This step's sample could not decide: "
            f"{esc(row.get('verdict_reason'))}</p>"
        )
    if s.summary is not None:
        parts += run_sections(s.summary)
    else:
        parts.append(f"<p class='note'>{esc(row.get('verdict_reason'))} (step files not found)</p>")
    parts += [figure(c, f"chart-step-{s.index}-{c.path.stem}") for c in charts]
    parts.append("<p><a href='#sweep-table'>back to the steps</a></p></section>")
    return "".join(parts)


def sweep_page(
    doc: dict[str, Any],
    steps: list[StepData],
    charts: list[Chart],
    step_charts: dict[int, list[Chart]],
) -> str:
    knee = doc.get("knee_rps")
    llm = any("ttft_ms" in s.row for s in steps)
    meta = {**(doc.get("meta") or {}), "target": doc.get("target"), "slos": doc.get("slos")}
    meta.setdefault("tool_version", doc.get("tool_version"))
    probe = doc.get("probe")
    body = [
        f"<h1>tailwise sweep: {esc(doc.get('target'))}</h1>",
        meta_table(meta),
        f"<p id='knee'>knee: <b>{esc(f'{knee:g}/s' if knee is not None else 'none')}</b>, "
        "the highest rate at which this step and every lower one met every SLO</p>",
    ]
    if isinstance(probe, dict) and isinstance(probe.get("throughput_rps"), int | float):
        body.append(
            f"<p class='note'>rates chosen by a closed-loop probe ({esc(probe.get('users'))} "
            f"users): at most {probe['throughput_rps']:.1f}/s</p>"
        )
    if doc.get("note"):
        body.append(f"<p class='note'>{esc(doc['note'])}</p>")
    band = doc.get("band_rps") or [None, None]
    level = f"{100 * float(doc.get('confidence') or CONFIDENCE):.4g}%"
    held = f"up to {band[0]:g}/s" if band[0] is not None else "at no rate"
    failed = f"from {band[1]:g}/s" if band[1] is not None else "at no rate"
    body.append(
        f"<p id='band'>band: shown to hold {esc(held)}, shown to fail {esc(failed)} "
        f"(decided at {esc(level)} confidence)</p>"
    )
    invalid = [s for s in steps if s.row.get("verdict") == "invalid"]
    if invalid:
        names = ", ".join(s.label for s in invalid)
        body.append(f"<p class='warning'>Steps not to be trusted (invalid): {esc(names)}</p>")
    undecided = [s for s in steps if s.row.get("verdict") == "inconclusive"]
    if undecided:
        names = ", ".join(s.label for s in undecided)
        body.append(
            f"<p class='note'>Steps whose sample could not decide (inconclusive; their numbers "
            f"are as measured): {esc(names)}</p>"
        )
    body += [
        "<h2>Steps</h2>",
        steps_table(steps, knee, llm),
        "<h2>Charts</h2>",
        *(figure(c, f"chart-{c.path.stem}") for c in charts),
        *(step_section(s, step_charts.get(s.index, [])) for s in steps),
    ]
    return page(f"tailwise sweep {doc.get('target')}", body)


def compare_page(
    comparison: dict[str, Any],
    metas: tuple[dict[str, Any], dict[str, Any]],
    charts: list[Chart],
) -> str:
    """The comparison (``Comparison.to_json()``), both sides' metadata, overlaid charts."""
    rows = []
    for m in comparison.get("metrics", []):
        mark = "regression" if m.get("regressed") else ("✓" if m.get("gated") else "")
        cls = "fail" if m.get("regressed") else ("pass" if m.get("gated") else "")
        rel = m.get("rel_delta")
        rows.append(
            f"<tr><td>{esc(m.get('label'))}</td><td>{esc(_value(m.get('a'), m))}</td>"
            f"<td>{esc(_value(m.get('b'), m))}</td>"
            f"<td>{esc('-' if rel is None else f'{100 * rel:+.1f}%')}</td>"
            f"<td class='{cls}'>{esc(mark)}</td></tr>"
        )
    body = [
        f"<h1>tailwise compare: {esc(comparison.get('b'))} against {esc(comparison.get('a'))}</h1>"
    ]
    body += [f"<p class='warning'>{esc(w)}</p>" for w in comparison.get("warnings", [])]
    body += [f"<p class='warning'>{esc(w)}</p>" for w in comparison.get("invalid", [])]
    body += [f"<p class='note'>{esc(n)}</p>" for n in comparison.get("notes", [])]
    for name, meta in zip(("A", "B"), metas, strict=True):
        body += [f"<h2>{name}</h2>", meta_table(meta)]
    body += [
        "<h2>Comparison</h2>",
        "<table id='comparison'><tr><th></th><th>A</th><th>B</th><th>Δ%</th><th></th></tr>"
        + "".join(rows)
        + "</table>",
        "<h2>Charts (A solid, B dashed)</h2>",
        *(figure(c, f"chart-{c.path.stem}") for c in charts),
    ]
    return page("tailwise compare", body)


def _value(v: Any, m: dict[str, Any]) -> str:
    if v is None:
        return "-"
    unit = m.get("unit")
    if unit == "ms":
        return ms(v)
    if unit == "share":
        return f"{100 * v:.2f}%"
    return f"{v:.1f}/s"
