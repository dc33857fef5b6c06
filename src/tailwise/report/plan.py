"""Plans and fitted models on a terminal: a title, aligned key/value lines, grids.

Shared by ``tailwise plan`` (closed forms and ``plan capacity``) and
``tailwise calibrate``: on a terminal as wide as the terminal, into a file or
pipe never wrapped, so pasted output keeps its columns.
"""

from __future__ import annotations

import math
from typing import Any

from tailwise.plan.schema import Plan


def fmt(v: Any) -> str:
    """A table cell: integers as they are, floats to 4 significant digits (at least)."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | str):
        return str(v)
    if isinstance(v, dict):
        return ", ".join(f"{k}={fmt(x)}" for k, x in v.items()) or "-"
    if isinstance(v, list):
        return ", ".join(fmt(x) for x in v) or "-"
    if not math.isfinite(v):
        return "unbounded" if v > 0 else "-"
    a = abs(v)
    if 0.99 < v < 1:  # a probability near 1: enough digits to see how near
        text = f"{v:.{min(12, math.ceil(-math.log10(1 - v)) + 2)}f}"
    elif a == 0 or a >= 1e4:
        text = f"{v:.1f}"
    elif a >= 100:
        text = f"{v:.2f}"
    else:
        return f"{v:.4g}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def render(plan: Plan) -> Any:
    """The plan as rich renderables: title, inputs and scalar outputs, grids, assumptions."""
    from rich.console import Group
    from rich.text import Text

    lines: list[tuple[str, str, str]] = []
    grids = []
    for section, values in (("input", plan.inputs), ("output", plan.outputs)):
        for key, value in values.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                grids.append(_grid(value))
            else:
                lines.append((section, key, fmt(value)))
                section = ""
    width = max((len(k) for _, k, _ in lines), default=0)
    parts: list[Any] = [Text(f"tailwise {plan.command} {plan.model}: {plan.title}", "bold")]
    for section, key, value in lines:
        parts.append(Text(f"{section:<8}", "dim") + Text(f"{key:<{width}}  {value}"))
    parts += grids
    parts += [Text(f"warning   {w}", "bold yellow") for w in plan.warnings]
    parts += [Text(f"assumes   {a}", "dim") for a in plan.assumptions]
    return Group(*parts)


def _grid(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    keys = [k for k in rows[0] if any(r.get(k) is not None for r in rows)]
    grid = Table(box=None, pad_edge=False, header_style="bold")
    for i, key in enumerate(keys):
        grid.add_column(key, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        grid.add_row(*(fmt(row.get(k)) for k in keys))
    return grid


def print_plan(plan: Plan) -> None:
    """On a terminal, as wide as the terminal; into a file or pipe, never wrapped."""
    from rich.console import Console

    console = Console(highlight=False)
    group = render(plan)
    if not console.is_terminal:
        wide = console.options.update_width(10_000)
        console.width = max(console.width, console.measure(group, options=wide).maximum)
    console.print(group)
