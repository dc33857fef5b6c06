"""The latency-budget report: where a request's time goes, and what speeding up a stage buys.

For each stage: count, p50, the budget percentile (p99 by default: budgets are
tail budgets, seed 001), mean, its *share* of the request time (stage time /
request time, summed over the window), its budget and whether the tail is
over it. For each top-level stage, Amdahl's law
(:func:`tailwise.capacity.amdahl_speedup`) gives the end-to-end speedup of the
mean latency if that stage alone became ``k`` times faster, and the ceiling if
it took no time at all: ``1 / (1 - share)``.

Assumptions, stated in the table's notes: top-level stages run one after
another (overlapping stages make shares add up to more than the request, and
Amdahl's serial model does not apply); the speedups are for the mean, since a
tail percentile is not additive over stages. ``(unattributed)`` is request
time outside every top-level stage, measured per request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tailwise.capacity import amdahl_speedup
from tailwise.errors import BadInput
from tailwise.instrument.stages import UNATTRIBUTED
from tailwise.instrument.stats import WindowStats

TOTAL = "total"  # the budgets key for the whole request


@dataclass(frozen=True)
class BudgetRow:
    stage: str
    depth: int  # 0: the request, 1: top-level stage, 2+: nested
    count: int
    p50_ms: float
    tail_ms: float  # at the report's percentile
    mean_ms: float
    share: float  # of the request time over the window
    budget_ms: float | None
    over: bool | None  # tail above budget
    speedup: float | None  # end-to-end mean speedup if this stage were k times faster
    ceiling: float | None  # ... if it took no time


@dataclass(frozen=True)
class BudgetReport:
    tracker: str
    percentile: float
    k: float
    window_s: float
    rows: list[BudgetRow]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for row in out["rows"]:
            for key in ("speedup", "ceiling"):  # JSON has no infinity
                if row[key] is not None and math.isinf(row[key]):
                    row[key] = None
        return out

    def markdown(self) -> str:
        """A Markdown table (readable as plain text too)."""
        q = f"p{self.percentile:g}"
        head = (
            f"| stage | count | p50 | {q} | mean | share | budget | {q} vs budget "
            f"| if {self.k:g}x faster | ceiling |\n"
            "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"
        )
        return "\n".join([head, *(_line(r) for r in self.rows)])


def budget_report(
    tracker: str,
    total: WindowStats,
    stages: Mapping[str, WindowStats],
    budgets: Mapping[str, int],
    k: float,
    percentile: float,
) -> BudgetReport:
    """One tracker's table from its window's stats: the requests, the stages by path.

    ``stages`` is in first-seen order; ``budgets`` are ns by stage path (``"total"``
    for the whole request).
    """
    if not (k > 0 and math.isfinite(k)):
        raise BadInput("speedup", k, "a finite factor > 0, e.g. 2")
    if not 0 < percentile <= 100:
        raise BadInput("percentile", percentile, "a percentile in (0, 100], e.g. 99")
    top = [p for p in stages if "/" not in p]
    total_ns = total.sum_ns or sum(stages[p].sum_ns for p in top)
    total_budget = budgets.get(TOTAL) or sum(budgets.get(p, 0) for p in top if p != UNATTRIBUTED)
    rows = [_row("request", 0, total, total_ns, total_budget or None, percentile, None)]
    for path in _tree_order(list(stages)):
        depth = path.count("/") + 1
        amdahl_k = k if depth == 1 else None
        rows.append(
            _row(path, depth, stages[path], total_ns, budgets.get(path), percentile, amdahl_k)
        )
    return BudgetReport(tracker, percentile, k, total.duration_s, rows)


def _tree_order(paths: list[str]) -> list[str]:
    """Children right after their parent, first-seen order otherwise; unattributed last."""
    order = {p: i for i, p in enumerate(paths)}

    def key(path: str) -> tuple[Any, ...]:
        parts = path.split("/")
        return (
            path == UNATTRIBUTED,
            *(order.get("/".join(parts[: i + 1]), 0) for i in range(len(parts))),
        )

    return sorted(paths, key=key)


def _row(
    name: str,
    depth: int,
    s: WindowStats,
    total_ns: int,
    budget_ns: int | None,
    percentile: float,
    k: float | None,
) -> BudgetRow:
    share = s.sum_ns / total_ns if total_ns else 0.0
    tail_ms = s.percentile_ms(percentile)
    speedup = ceiling = None
    if k is not None and 0 <= share <= 1:
        speedup = amdahl_speedup([share, 1 - share], [k, 1.0])
        ceiling = amdahl_speedup([share, 1 - share], [math.inf, 1.0])
    return BudgetRow(
        stage=name,
        depth=depth,
        count=s.count,
        p50_ms=s.percentile_ms(50),
        tail_ms=tail_ms,
        mean_ms=s.mean_ms,
        share=share,
        budget_ms=budget_ns / 1e6 if budget_ns else None,
        over=tail_ms > budget_ns / 1e6 if budget_ns and s.count else None,
        speedup=speedup,
        ceiling=ceiling,
    )


def _ms(value: float) -> str:
    return f"{value:.3g} ms" if value < 1000 else f"{value / 1000:.3g} s"


def _times(value: float | None) -> str:
    if value is None:
        return ""
    return "unbounded" if math.isinf(value) else f"{value:.2f}x"


def _line(r: BudgetRow) -> str:
    leaf = r.stage.rsplit("/", 1)[-1]
    name = f"**{leaf}**" if r.depth == 0 else "↳ " * (r.depth - 1) + leaf
    budget = _ms(r.budget_ms) if r.budget_ms else ""
    verdict = ""
    if r.over is not None and r.budget_ms:
        verdict = f"{'OVER' if r.over else 'ok'} ({r.tail_ms / r.budget_ms:.1%})"
    cells = [
        name,
        str(r.count),
        _ms(r.p50_ms),
        _ms(r.tail_ms),
        _ms(r.mean_ms),
        f"{r.share:.1%}",
        budget,
        verdict,
        _times(r.speedup),
        _times(r.ceiling),
    ]
    return "| " + " | ".join(cells) + " |"
