"""Re-render a run or sweep directory from its saved files: PNG charts and report.html."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tailwise.errors import BadInput, MissingExtra
from tailwise.records import read_jsonl

DIR_FORM = "a run directory (with summary.json) or a sweep directory (with sweep.json)"


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput("DIR", str(path), f"a readable {path.name} ({exc})") from None
    if not isinstance(doc, dict):
        raise BadInput("DIR", str(path), f"{path.name} holding a JSON object")
    return doc


def kind_of(directory: Path) -> str:
    if (directory / "sweep.json").is_file():
        return "sweep"
    if (directory / "summary.json").is_file():
        return "run"
    raise BadInput("DIR", str(directory), DIR_FORM)


def render_directory(directory: Path) -> list[Path]:
    """Writes the charts and report.html into ``directory``; returns the files written."""
    from tailwise.report import html, plot

    if kind_of(directory) == "sweep":
        doc = _load(directory / "sweep.json")
        charts = plot.sweep_charts(doc, directory)
        page = html.sweep_page(doc, charts)
    else:
        summary = _load(directory / "summary.json")
        records_path = directory / "records.jsonl"
        if not records_path.is_file():
            raise BadInput("DIR", str(directory), "a run directory with records.jsonl")
        charts = plot.run_charts(read_jsonl(records_path), summary, directory)
        page = html.run_page(summary, charts)
    out = directory / "report.html"
    out.write_text(page, encoding="utf-8")
    return [*charts, out]


def sweep_report(directory: Path) -> str:
    """Charts and report.html for a sweep or knee directory: its path, or a hint naming
    the missing extra when matplotlib is not installed (the sweep itself is complete)."""
    try:
        render_directory(directory)
    except MissingExtra as exc:
        return f"no charts: {exc.expected}"
    return str(directory / "report.html")
