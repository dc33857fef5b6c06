"""The report of a knee search (``knee.json`` and its trial directories) as one page.

The page: metadata (command line, version, date, host), the knee, the band
and the rates left undecided; a chart of the trials over time (each trial's
rate at the moment it ran, coloured by its verdict, hollow when it only
steered, with the band shaded and the knee drawn); a table with one row per
trial (its number, phase, rate, verdict and, per SLO, the measured value with
its interval and the share within the threshold with its interval), each
linking to its own section below and to its files; then one section per trial
with its summary. Strings are escaped by :mod:`tailwise.report.html`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailwise.errors import BadInput
from tailwise.metrics.schema import SloEntry, Summary
from tailwise.metrics.shape import read_summary_or_none
from tailwise.metrics.uncertainty import CONFIDENCE
from tailwise.report.charts import Chart
from tailwise.report.html import esc, figure, meta_table, page, run_sections
from tailwise.report.workload import step_directory

_COLORS = {"pass": "tab:green", "fail": "tab:red", "inconclusive": "0.45", "invalid": "tab:orange"}


@dataclass
class TrialData:
    """One trial of knee.json with its directory's summary and start time, when on disk."""

    number: int
    row: dict[str, Any]
    directory: Path | None
    summary: Summary | None
    started_s: float | None  # wall-clock start (Unix seconds), from run.json

    @property
    def verdict(self) -> str:
        decided = str(self.row.get("decided") or "")
        return decided or ("pass" if self.row.get("passed") else "fail")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _started(directory: Path | None) -> float | None:
    run = _read(directory / "run.json") if directory is not None else None
    try:
        return dt.datetime.fromisoformat(str((run or {})["started_utc"])).timestamp()
    except (KeyError, ValueError):
        return None


def load_trials(doc: dict[str, Any], directory: Path) -> list[TrialData]:
    out = []
    for i, row in enumerate(r for r in doc.get("trials", []) if isinstance(r, dict)):
        where = step_directory(str(row.get("directory", "")), directory)
        summary = read_summary_or_none(where / "summary.json") if where is not None else None
        out.append(TrialData(i + 1, row, where, summary, _started(where)))
    return out


def trials_chart(trials: list[TrialData], doc: dict[str, Any], path: Path) -> Chart:
    """Each trial's rate against the time it started, by verdict; the band and the knee."""
    from tailwise.report.plot import SIZE_IN, pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN)
    starts = [t.started_s for t in trials]
    timed = all(s is not None for s in starts) and trials
    t0 = min(s for s in starts if s is not None) if timed else 0.0
    span_s = max((s or 0.0) - t0 for s in starts) if timed else 0.0
    unit_s, unit = (60.0, "minutes") if span_s > 120 else (1.0, "seconds")
    xs = [((t.started_s or 0.0) - t0) / unit_s if timed else float(t.number) for t in trials]
    ax.plot(xs, [t.row["rate_rps"] for t in trials], color="0.8", linewidth=1, zorder=1)
    for verdict, color in _COLORS.items():
        for firm in (True, False):
            group = [
                (x, t) for x, t in zip(xs, trials, strict=True)
                if t.verdict == verdict and bool(t.row.get("firm", True)) == firm
            ]  # fmt: skip
            if not group:
                continue
            label = verdict + ("" if firm else " (steering)")
            ax.scatter(
                [x for x, _ in group],
                [t.row["rate_rps"] for _, t in group],
                s=60,
                color=color if firm else "none",
                edgecolors=color,
                linewidths=1.5,
                label=label,
                zorder=3,
            )
    held, failed = (doc.get("band_rps") or [None, None])[:2]
    if held is not None:
        ax.axhline(held, color="tab:green", linestyle=":", label=f"shown to hold: {held:.4g}/s")
    if failed is not None:
        ax.axhline(failed, color="tab:red", linestyle=":", label=f"shown to fail: {failed:.4g}/s")
    if held is not None and failed is not None and failed > held:
        ax.axhspan(held, failed, color="tab:red", alpha=0.07, label="band")
    knee = doc.get("knee_rps")
    if knee is not None:
        ax.axhline(knee, color="tab:blue", linestyle="--", label=f"knee: {knee:.4g}/s")
    ax.set_xlabel(f"{unit} since the first trial started" if timed else "trial")
    ax.set_ylabel("offered rate (requests/s)")
    title = _chart_title(trials, doc)
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    alt = f"Knee trials over time: rate of each trial by verdict. {title}."
    return Chart(save(fig, path), title, alt)


def _chart_title(trials: list[TrialData], doc: dict[str, Any]) -> str:
    knee = doc.get("knee_rps")
    head = f"{len(trials)} trials, knee {knee:.4g}/s" if knee is not None else "no knee"
    return head + _band_words(doc)


def _band_words(doc: dict[str, Any]) -> str:
    held, failed = (doc.get("band_rps") or [None, None])[:2]
    hold = f"holds at {held:.4g}/s" if held is not None else "no rate shown to hold"
    fail = f"fails at {failed:.4g}/s" if failed is not None else "no rate shown to fail"
    return f"; shown: {hold}, {fail}"


def _interval(ci: Any, fmt: str) -> str:
    pair = isinstance(ci, list | tuple) and len(ci) == 2
    if pair and all(isinstance(v, int | float) for v in ci):
        return f" ({fmt.format(ci[0])}-{fmt.format(ci[1])})"
    return ""


def _slo_cell(slo: SloEntry) -> str:
    """The value with its interval, and the share within the threshold with its own."""
    value, unit = slo.value, slo.unit or ""
    parts = []
    if value is not None:
        shown = f"{value:.4g} {unit}".strip()
        parts.append(shown + _interval(slo.ci, "{:.4g}"))
    elif slo.attainment is not None:
        parts.append(f"{slo.attainment:.2%}" + _interval(slo.ci, "{:.2%}"))
    within = slo.within
    if within is not None and within.share is not None:
        needed = within.needed
        need = f", {needed:.4g} needed" if needed is not None else ""
        need = f", {needed:.2%} needed" if isinstance(needed, float) and needed < 1 else need
        parts.append(f"within: {within.share:.2%}{_interval(within.ci, '{:.2%}')}{need}")
    decided = slo.decided or ""
    return (
        f"<td class='slo' data-decided='{esc(decided)}' data-spec='{esc(slo.spec)}'>"
        f"{'<br>'.join(esc(p) for p in parts) or '-'}</td>"
    )


def _files_link(t: TrialData, base: Path) -> str:
    if t.directory is None:
        return "<td>not on disk</td>"
    page = t.directory / "report.html"  # `tailwise report` on the trial's directory makes it
    href = os.path.relpath(page if page.is_file() else t.directory / "summary.json", base)
    return f"<td><a class='trial-files' href='{esc(href)}'>{esc(t.directory.name)}</a></td>"


def trials_table(trials: list[TrialData], specs: list[str], base: Path) -> str:
    head = (
        "<tr><th>trial</th><th>phase</th><th>rate</th><th>verdict</th>"
        + "".join(f"<th>{esc(s)}</th>" for s in specs)
        + "<th>requests</th><th>window</th><th>files</th></tr>"
    )
    rows = []
    for t in trials:
        row = t.row
        slos = {s.spec: s for s in (t.summary.slos if t.summary is not None else ())}
        cells = "".join(_slo_cell(slos[s]) if s in slos else "<td>-</td>" for s in specs)
        steer = "" if row.get("firm", True) else " (steering)"
        window = row.get("window_s")
        rows.append(
            f"<tr class='trial-row' data-verdict='{esc(t.verdict)}' "
            f"data-firm='{esc(bool(row.get('firm', True)))}'>"
            f"<td><a class='trial-link' href='#trial-{t.number}'>{t.number}</a></td>"
            f"<td>{esc(row.get('phase'))}</td><td>{row['rate_rps']:.4g}/s</td>"
            f"<td class='verdict {esc(t.verdict)}'>{esc(t.verdict)}{esc(steer)}</td>{cells}"
            f"<td>{esc(row.get('requests', '-'))}</td>"
            f"<td>{f'{window:.1f} s' if isinstance(window, int | float) else '-'}</td>"
            f"{_files_link(t, base)}</tr>"
        )
    return f"<table id='trials-table'>{head}{''.join(rows)}</table>"


def trial_section(t: TrialData) -> str:
    parts = [
        f"<section class='trial' id='trial-{t.number}'>",
        f"<h2>Trial {t.number}: {t.row['rate_rps']:.4g}/s, {esc(t.row.get('phase'))} "
        f"<span class='{esc(t.verdict)}'>{esc(t.verdict)}</span></h2>",
    ]
    if t.summary is not None:
        parts += run_sections(t.summary)
    else:
        parts.append(
            f"<p class='note'>{esc(t.row.get('verdict_reason'))} (trial files not found)</p>"
        )
    parts.append("<p><a href='#trials-table'>back to the trials</a></p></section>")
    return "".join(parts)


def knee_page(doc: dict[str, Any], trials: list[TrialData], charts: list[Chart], base: Path) -> str:
    target = doc.get("target") or next(
        (_target(t.summary) for t in trials if t.summary is not None), None
    )
    specs = [str(s) for s in doc.get("slos", [])]
    meta = {**(doc.get("meta") or {}), "target": target, "slos": specs}
    knee = doc.get("knee_rps")
    level = f"{100 * float(doc.get('confidence') or CONFIDENCE):.4g}%"
    held, failed = (doc.get("band_rps") or [None, None])[:2]
    body = [
        f"<h1>tailwise knee: {esc(target)}</h1>",
        meta_table(meta),
        f"<p id='knee'>knee: <b>{esc(f'{knee:.4g}/s' if knee is not None else 'none found')}"
        f"</b> ({len(trials)} trials, {esc(doc.get('knee_method') or 'bisection')})</p>",
        f"<p id='band'>band: shown to hold at "
        f"{esc(f'{held:.4g}/s' if held is not None else 'no rate tried')}, shown to fail at "
        f"{esc(f'{failed:.4g}/s' if failed is not None else 'no rate tried')} (decided at "
        f"{esc(level)} confidence)</p>",
    ]
    if doc.get("undecided_rps"):
        rates = ", ".join(f"{r:.4g}" for r in doc["undecided_rps"])
        body.append(f"<p class='note'>not decided at the band's confidence: {esc(rates)} /s</p>")
    if doc.get("note"):
        body.append(f"<p class='note'>{esc(doc['note'])}</p>")
    body += [
        "<h2>Trials</h2>",
        trials_table(trials, specs, base),
        "<h2>Charts</h2>",
        *(figure(c, f"chart-{c.path.stem}") for c in charts),
        *(trial_section(t) for t in trials),
    ]
    return page(f"tailwise knee {target}", body)


def _target(s: Summary) -> str | list[str]:
    """The trial's target as its summary.json holds it (a list for several)."""
    return list(s.target) if isinstance(s.target, tuple) else s.target


def render_knee(directory: Path) -> list[Path]:
    """knee_trials.png and report.html in a knee directory; the files written."""
    doc = _read(directory / "knee.json")
    if doc is None:
        raise BadInput("DIR", str(directory / "knee.json"), "a readable knee.json")
    trials = load_trials(doc, directory)
    if not trials:
        raise BadInput("DIR", str(directory), "a knee.json with at least one trial")
    chart = trials_chart(trials, doc, directory / "knee_trials.png")
    out = directory / "report.html"
    out.write_text(knee_page(doc, trials, [chart], directory), encoding="utf-8")
    return [chart.path, out]
