"""Pipeline stages: Amdahl's law over their shares, and a latency budget per stage.

``speedup = 1 / sum(share_i / s_i)`` when stage i is made s_i times faster;
the ceiling is the limit as the sped-up stages become free. Stage budgets are
compared with measured stage times (slack) and with a total budget (margin).
"""

from __future__ import annotations

import math
from typing import Any

from tailwise import capacity as cap
from tailwise.errors import BadInput
from tailwise.plan.schema import Plan

AMDAHL_TITLE = "Amdahl's law: speedup = 1 / sum(share_i / s_i)"
AMDAHL_ASSUMPTIONS = (
    "stages run one after another; a request's latency is the sum of its stage times",
    "a stage's speedup divides its own time only; the other stages are unchanged",
    "ceiling: the limit as the sped-up stages become free, 1 / (share of the rest)",
    "shares given as percentages that add up to less than 100% leave a (rest) stage",
)


def amdahl(
    *,
    stages: list[tuple[str, float]],
    times: bool = False,
    speedups: dict[str, float] | None = None,
    budgets: dict[str, float] | None = None,
    total_budget_s: float | None = None,
) -> Plan:
    """Amdahl's law over pipeline stages, and a latency budget (stage budgets vs measured)."""
    speedups, budgets = speedups or {}, budgets or {}
    if not stages and not budgets:
        raise BadInput("--stage", "nothing", "at least one --stage NAME=SHARE|TIME, or --budget")
    names = [n for n, _ in stages]
    for opt, named in (("--speedup", speedups), ("--budget", budgets if stages else {})):
        for n in named:
            if n not in names:
                raise BadInput(opt, n, f"a stage named in --stage ({', '.join(names)})")
    inputs: dict[str, Any] = {}
    if stages:
        key, scale = ("stage_ms", 1e3) if times else ("stage_shares", 1.0)
        inputs[key] = {n: v * scale for n, v in stages}
    if speedups:
        inputs["speedups"] = dict(speedups)
    if budgets:
        inputs["budgets_ms"] = {n: v * 1e3 for n, v in budgets.items()}
    if total_budget_s is not None:
        inputs["total_budget_ms"] = total_budget_s * 1e3
    outputs: dict[str, Any] = {}
    rows = _amdahl_rows(stages, times, speedups, outputs) if stages else []
    if budgets or total_budget_s is not None:
        rows = _budget_rows(rows, budgets, total_budget_s, outputs)
    outputs = {"stages": rows, **outputs}
    return Plan("amdahl", AMDAHL_TITLE, inputs, outputs, AMDAHL_ASSUMPTIONS)


def _amdahl_rows(
    stages: list[tuple[str, float]], times: bool, speedups: dict[str, float], out: dict[str, Any]
) -> list[dict[str, Any]]:
    total = math.fsum(v for _, v in stages)
    if times:
        shares = [(n, v / total) for n, v in stages]
    elif total > 1 + 1e-9:
        raise BadInput(
            "--stage", f"shares adding up to {total:.4g}", "shares that add up to <= 100%"
        )
    else:
        shares = list(stages) + ([("(rest)", 1.0 - total)] if total < 1 - 1e-9 else [])
    factors = [speedups.get(n, 1.0) for n, _ in shares]
    speedup = cap.amdahl_speedup([p for _, p in shares], factors)
    rest = math.fsum(p for n, p in shares if n not in speedups)
    out["speedup"] = speedup
    out["ceiling"] = (1.0 / rest if rest > 0 else math.inf) if speedups else None
    if times:
        out["latency_ms"] = total * 1e3
        out["latency_after_ms"] = total / speedup * 1e3
    left = math.fsum(p / s for (_, p), s in zip(shares, factors, strict=True))
    rows = []
    for (name, share), s in zip(shares, factors, strict=True):
        row: dict[str, Any] = {"stage": name}
        if times:
            row["measured_ms"] = share * total * 1e3
        row |= {
            "share": share,
            "speedup": s,
            "share_after": share / s / left if left > 0 else None,
            "ceiling_if_free": 1.0 / (1.0 - share) if share < 1 else math.inf,
        }
        rows.append(row)
    return rows


def _budget_rows(
    rows: list[dict[str, Any]],
    budgets: dict[str, float],
    total_budget_s: float | None,
    out: dict[str, Any],
) -> list[dict[str, Any]]:
    if not rows:
        rows = [{"stage": n} for n in budgets]
    for row in rows:
        b = budgets.get(row["stage"])
        row["budget_ms"] = None if b is None else b * 1e3
        measured = row.get("measured_ms")
        row["slack_ms"] = None if b is None or measured is None else b * 1e3 - measured
    out["budget_sum_ms"] = math.fsum(budgets.values()) * 1e3
    if total_budget_s is not None:
        out["margin_ms"] = total_budget_s * 1e3 - out["budget_sum_ms"]
        if "latency_ms" in out:
            out["total_slack_ms"] = total_budget_s * 1e3 - out["latency_ms"]
    return rows
