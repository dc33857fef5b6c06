"""Terminal rendering of simulation studies (``--replications``, ``--vary``): rows of
``mean ± 95% half-width`` in a rich table, and the progress bar the CLI shows."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tailwise.sim.study import POINT_FIELDS, REPLICATIONS_SCHEMA, Progress

# -- terminal rows (the CLI puts them in a rich table) -----------------------------------


_LABELS = {"littles_gap": "Little's gap", "error_rate": "error rate", "extra_load": "extra load"}


def _label(name: str) -> str:
    short = name.removesuffix("_ms").removesuffix("_rps").replace("p999", "p99.9")
    return _LABELS.get(name, short.replace("_", " "))


def _unit(name: str, mean: float) -> tuple[float, str]:
    if name.endswith("_rps"):
        return 1.0, "/s"
    if name.endswith("_ms"):
        return (1e-3, "s") if abs(mean) >= 1000 else (1.0, "ms")
    return 100.0, "%"  # attainment, error rate, Little's gap, extra load: shares


def _pm(name: str, stat: dict[str, Any]) -> str:
    """``mean ± half`` with the half-width to two significant digits and the mean to match."""
    mean, half = stat["mean"], stat["half"]
    if mean is None:
        return "-"
    scale, unit = _unit(name, mean)
    if half is None:  # as the run summary prints: 32.2ms, 5.93ms, 1.16s, 800.2/s, 99.50%
        digits = 1 if unit == "/s" or (unit == "ms" and abs(mean) >= 10) else 2
        return f"{mean * scale:.{digits}f}{unit}"
    h = half * scale
    digits = min(max(1 - math.floor(math.log10(h)), 0), 4) if h > 0 else 2
    return f"{mean * scale:.{digits}f} ± {h:.{digits}f}{unit}"


def _verdict_note(doc: dict[str, Any], counts: dict[str, int]) -> str:
    runs = sum(counts.values())
    return f"verdict   {doc['verdict'].upper()}  {counts.get('pass', 0)}/{runs} runs passed"


def table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    """(column names, rows, lines after the table) for a replications or vary document."""
    note = "± is the 95% confidence half-width (Student t, independent seeds)"
    if doc["schema"] == REPLICATIONS_SCHEMA:
        rows = [[_label(name), _pm(name, s), str(s["n"])] for name, s in doc["metrics"].items()]
        return ["metric", "mean ± 95%", "n"], rows, [note, _verdict_note(doc, doc["verdicts"])]
    points = doc["points"]
    # The redundancy's cost (hedging, k-of-n fan-out), when some point paid one.
    extra = [f for f in ("extra_load",) if any(p["metrics"].get(f, {}).get("mean") for p in points)]
    fields = [*POINT_FIELDS, *extra]
    none = {"mean": None}
    rows = [
        [p["value"], *[_pm(f, p["metrics"].get(f, none)) for f in fields], p["verdict"]]
        for p in points
    ]
    names = ["offered", "thruput", "goodput", "attain", "lat. p50", "lat. p99", *map(_label, extra)]
    counts: dict[str, int] = {}
    for p in points:
        for v, k in p["verdicts"].items():
            counts[v] = counts.get(v, 0) + k
    notes = [note] * (doc["replications"] > 1) + [_verdict_note(doc, counts)]
    return [doc["key"], *names, "verdict"], rows, notes


_STYLE = {"pass": "green", "fail": "red", "invalid": "yellow"}


def print_study(doc: dict[str, Any], lines: list[str], *, stderr: bool = False) -> None:
    """The study's table on the terminal (rich), then ``lines`` (where files were saved)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    head, rows, notes = table(doc)
    grid = Table(box=None, pad_edge=False, header_style="bold")
    for i, name in enumerate(head):
        left = i == 0 or name == "verdict"
        grid.add_column(name, justify="left" if left else "right", no_wrap=left)
    for row in rows:
        if head[-1] == "verdict":
            grid.add_row(*row[:-1], Text(row[-1], _STYLE.get(row[-1], "")))
        else:
            grid.add_row(*row)
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # a file or a pipe: the table's own width, never wrapped
        wide = console.options.update_width(10_000)
        console.width = max(console.width, console.measure(grid, options=wide).maximum)
    console.print(Text(doc["target"], "bold") + Text(f"  {_title(doc)}"))
    console.print(grid)
    for line in [*notes, *lines]:
        console.print(line, markup=False)


def _title(doc: dict[str, Any]) -> str:
    if doc["schema"] == REPLICATIONS_SCHEMA:
        seeds = doc["seeds"]
        return f"{doc['replications']} replications (seeds {seeds[0]}-{seeds[-1]})"
    runs, first = doc["replications"], doc["scenario"]["arrival"]["seed"]
    seeds = f"seeds {first}-{first + runs - 1}" if runs > 1 else f"seed {first}"
    each = f"{runs} runs each" if runs > 1 else "one run each"
    if doc["key"] != "arrival.seed":
        each += f", {seeds}"
    return f"vary {doc['key']} over {len(doc['values'])} values, {each}"


@contextmanager
def progress_bar(show: bool) -> Iterator[Progress | None]:
    """A rich progress bar on stderr fed by the study's callback; None when not shown."""
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress as Bar

    with Bar(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("simulating", total=None)

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield tick
