"""The charts of a shared sweep report, each titled with what its data shows.

Matplotlib comes through :mod:`tailwise.report.plot` (the one module that imports
it). Every function writes one PNG and returns a :class:`Chart`: its path, its
title and alt text (what a reader without the image, or a test, learns from it)
and the SLO thresholds it draws, so the page can list them as labelled elements.

Inputs are the sweep's rows (``sweep.json``) and, where a step directory is
still there, each step's :class:`Summary` (percentiles with their intervals)
and records (spectra, time series). A step that is ``invalid`` or
``inconclusive`` is drawn hollow and grey: its numbers are shown, not trusted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.errors import BadInput
from tailwise.metrics import derive
from tailwise.metrics.catalog import CATALOG
from tailwise.metrics.schema import Distribution, Summary
from tailwise.metrics.slo import SLO, parse_slo
from tailwise.records import Records
from tailwise.report.plot import SIZE_IN, SPECTRUM_Q, plain_ms, pyplot, save

UNTRUSTED = ("invalid", "inconclusive")
_PANEL_METRICS = {m.label: m.names for m in CATALOG if m.chart}  # panel -> its SLO names
_SLO_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:olive")


@dataclass
class Chart:
    path: Path
    title: str
    alt: str
    slo_lines: list[str] = field(default_factory=list)  # "p99(latency)<=50ms at 50 ms"


@dataclass
class StepData:
    """One sweep step as the charts need it: its row, and its files when present."""

    index: int
    row: dict[str, Any]
    summary: Summary | None
    records: Records | None

    @property
    def label(self) -> str:
        if self.row.get("concurrency"):
            return f"{self.row['concurrency']} users"
        return f"{self.row['offered_rps']:g}/s"

    @property
    def trusted(self) -> bool:
        return self.row.get("verdict") not in UNTRUSTED


def parsed_slos(specs: list[str]) -> list[SLO]:
    """The SLOs a chart can draw (a spec that no longer parses is skipped, not fatal)."""
    out = []
    for spec in specs:
        try:
            out.append(parse_slo(str(spec)))
        except BadInput:
            continue
    return out


def draw_slos(
    ax: Any, slos: list[SLO], panel: str, horizontal: bool = True, color: str | None = None
) -> list[str]:
    """Threshold lines of the SLOs on ``panel``'s metric, labelled; their descriptions."""
    drawn = []
    for k, slo in enumerate(s for s in slos if s.metric in _PANEL_METRICS.get(panel, ())):
        if slo.kind not in ("deadline", "objective"):
            continue
        ms = slo.threshold / 1e6
        label = f"SLO {slo.spec}"
        shade = color or _SLO_COLORS[k % len(_SLO_COLORS)]
        if horizontal:
            ax.axhline(ms, color=shade, linestyle="--", linewidth=1.2, label=label)
        else:
            ax.axvline(ms, color=shade, linestyle="--", linewidth=1.2, label=label)
        drawn.append(f"{slo.spec} at {ms:g} ms")
    return drawn


def _knee_band(steps: list[StepData], knee: float | None) -> tuple[float, float] | None:
    """Where the knee step and the next (failing) step sit on the x axis: what their
    schedules offered (x is measured offered load, not the rate asked for)."""
    at = [s for s in steps if knee is not None and s.row.get("offered_rps") == knee]
    if not at:
        return None
    above = [s for s in steps if (s.row.get("offered_rps") or 0) > (knee or 0)]
    x_knee = float(at[0].row["measured_offered_rps"])
    if not above:
        return (x_knee, x_knee)
    nxt = min(above, key=lambda s: s.row["offered_rps"])
    return (x_knee, float(nxt.row["measured_offered_rps"]))


def ms_text(value: float) -> str:
    """A time for a title: ``28.6 ms``, ``1.46 s``."""
    return f"{value / 1000:.3g} s" if value >= 1000 else f"{value:.3g} ms"


def _throughput_title(steps: list[StepData], per_request: bool) -> str:
    rows = [s.row for s in steps]
    peak = max(rows, key=lambda r: r["throughput_rps"])
    last = rows[-1]
    parts = []
    if last["throughput_rps"] < 0.9 * last["measured_offered_rps"]:
        parts.append(f"Throughput levels off near {peak['throughput_rps']:.0f}/s")
    else:
        parts.append(f"Throughput follows the offered load up to {last['throughput_rps']:.0f}/s")
    lost = [r for r in rows if r["goodput_rps"] < 0.95 * r["throughput_rps"]]
    if lost:
        parts.append(f"goodput falls below it from {lost[0]['measured_offered_rps']:.0f}/s")
    elif per_request:
        parts.append("goodput within 5% of it at every step")
    else:
        parts.append("goodput equals it (no per-request SLO)")
    return "; ".join(parts)


def _peak_text(steps: list[StepData]) -> str:
    last = steps[-1].row
    peak = max(s.row["throughput_rps"] for s in steps)
    if last["throughput_rps"] < 0.9 * last["measured_offered_rps"]:
        return f"levels off near {peak:.0f}/s"
    return f"keeps up to {last['throughput_rps']:.0f}/s"


def throughput_goodput(
    steps: list[StepData],
    knee: float | None,
    path: Path,
    other: list[StepData] | None = None,
    slos: list[SLO] | None = None,
) -> Chart:
    """Throughput and goodput against offered load, y = x, the knee and its band.

    Goodput is drawn thinner and dashed over throughput, so where they coincide both
    stay visible. ``other`` overlays a second sweep (compare's B) in another colour.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN)
    every = [s for group in (steps, other or []) for s in group]
    top = max(max(s.row["measured_offered_rps"], s.row["throughput_rps"]) for s in every) * 1.05
    ax.plot([0, top], [0, top], color="0.8", linestyle="--", label="offered (y = x)")
    sides = [("A " if other else "", steps, ("tab:blue", "tab:green"))]
    if other:
        sides.append(("B ", other, ("tab:orange", "tab:olive")))
    for prefix, group, (c_thr, c_good) in sides:
        x = [s.row["measured_offered_rps"] for s in group]
        ax.plot(
            x,
            [s.row["throughput_rps"] for s in group],
            "o-",
            color=c_thr,
            linewidth=3,
            alpha=0.55,
            label=f"{prefix}throughput",
        )
        ax.plot(
            x,
            [s.row["goodput_rps"] for s in group],
            "s--",
            color=c_good,
            linewidth=1.3,
            markersize=4,
            label=f"{prefix}goodput (meets every SLO)",
        )
        bad = [s for s in group if not s.trusted]
        if bad:
            ax.scatter(
                [s.row["measured_offered_rps"] for s in bad],
                [s.row["throughput_rps"] for s in bad],
                s=90,
                facecolors="none",
                edgecolors="0.4",
                linewidths=1.5,
                zorder=5,
                label=f"{prefix}invalid / inconclusive step",
            )
    band = _knee_band(steps, knee)
    if knee is not None and band:
        label = f"knee: {knee:g}/s asked, {band[0]:.1f}/s offered"
        ax.axvline(band[0], color="tab:red", linestyle=":", label=label)
        if band[1] > band[0]:
            ax.axvspan(band[0], band[1], color="tab:red", alpha=0.08, label="knee band")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("completed requests/s")
    if other:
        title = f"Throughput: A {_peak_text(steps)}, B {_peak_text(other)}"
    else:
        title = _throughput_title(steps, any(s.kind == "deadline" for s in slos or []))
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    plain_ms(ax, "y")
    alt = f"Throughput and goodput against offered load. {title}." + (
        f" Knee at {knee:g}/s." if knee is not None else " No knee."
    )
    return Chart(save(fig, path), title, alt)


def _dist(step: StepData, key: str) -> Distribution:
    """A step's distribution: the step summary's (with intervals) or the row's."""
    d = step.summary.distribution(key) if step.summary is not None else None
    return d if d is not None else Distribution.from_json(step.row.get(key))


def _ci_err(d: Distribution, q: str, value: float) -> tuple[float, float]:
    pair = (d.ci or {}).get(q)
    if not pair or pair[0] is None or pair[1] is None or math.isnan(value):
        return 0.0, 0.0
    return max(value - pair[0], 0.0), max(pair[1] - value, 0.0)


def _latency_title(steps: list[StepData], key: str, name: str, slos: list[SLO]) -> str:
    p99: list[tuple[float, float]] = []
    for s in steps:
        value = _dist(s, key).get("p99")
        if value is not None:
            p99.append((float(s.row.get("measured_offered_rps", 0.0)), float(value)))
    if not p99:
        return f"No {name} was measured"
    (x0, v0), (x1, v1) = p99[0], p99[-1]
    title = f"{name} p99 goes from {ms_text(v0)} at {x0:.0f}/s to {ms_text(v1)} at {x1:.0f}/s"
    limits = [s.threshold / 1e6 for s in slos if s.metric in _PANEL_METRICS[name]]
    if limits:
        over = [x for x, v in p99 if v > min(limits)]
        title += f"; above the SLO from {over[0]:.0f}/s" if over else "; under the SLO throughout"
    return title


def latency_vs_load(steps: list[StepData], slos: list[SLO], llm: bool, path: Path) -> Chart:
    """p50/p90/p99 against offered load with their intervals, each SLO threshold drawn."""
    plt = pyplot()
    panels = [(m.summary_key, m.label) for m in CATALOG if m.chart and m.llm_only == llm]
    fig, axes = plt.subplots(1, len(panels), figsize=SIZE_IN, squeeze=False)
    x = np.array([s.row["measured_offered_rps"] for s in steps])
    drawn: list[str] = []
    titles = []
    for ax, (key, name) in zip(axes[0], panels, strict=True):
        for q, style in (("p50", "o-"), ("p90", "^-"), ("p99", "s-")):
            y = np.array([float(_dist(s, key).get(q) or np.nan) for s in steps])
            err = np.array([_ci_err(_dist(s, key), q, v) for s, v in zip(steps, y, strict=True)])
            ax.errorbar(x, y, yerr=err.T, fmt=style, capsize=3, label=f"{q} (95% CI)")
        drawn += draw_slos(ax, slos, name)
        for s in steps:
            if not s.trusted:
                ax.axvspan(
                    s.row["measured_offered_rps"] * 0.99,
                    s.row["measured_offered_rps"] * 1.01,
                    color="0.5",
                    alpha=0.3,
                )
        ax.set_yscale("log")
        ax.set_xlabel("offered load (requests/s)")
        ax.set_ylabel(f"{name} (ms)")
        ax.legend(fontsize="x-small")
        ax.grid(alpha=0.3, which="both")
        plain_ms(ax, "y")
        titles.append(_latency_title(steps, key, name, slos))
    title = "\n".join(titles)
    fig.suptitle(title, fontsize="medium")
    alt = f"{' and '.join(n for _, n in panels)} percentiles against offered load. "
    alt += "; ".join(titles) + "."
    if drawn:
        alt += " SLO lines: " + "; ".join(drawn) + "."
    return Chart(save(fig, path), title, alt, drawn)


def p99_overlay(
    sides: list[tuple[str, list[StepData]]], slos: list[SLO], llm: bool, path: Path
) -> Chart:
    """compare: p99 latency (TTFT for LLM) against offered load, A solid and B dashed,
    with each side's interval as error bars and the SLO thresholds drawn."""
    plt = pyplot()
    key, name = ("ttft_ms", "TTFT") if llm else ("latency_ms", "latency")
    fig, ax = plt.subplots(figsize=SIZE_IN)
    ends = []
    for g, (prefix, steps) in enumerate(sides):
        x = np.array([s.row["measured_offered_rps"] for s in steps])
        y = np.array([float(_dist(s, key).get("p99") or np.nan) for s in steps])
        err = np.array([_ci_err(_dist(s, key), "p99", v) for s, v in zip(steps, y, strict=True)])
        ax.errorbar(
            x,
            y,
            yerr=err.T,
            fmt="o--" if g else "s-",
            capsize=3,
            color=f"C{g}",
            label=f"{prefix} p99",
        )
        finite = y[np.isfinite(y)]
        if len(finite):
            ends.append(f"{prefix} {ms_text(float(finite[-1]))}")
    drawn = draw_slos(ax, slos, name)
    ax.set_yscale("log")
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel(f"{name} p99 (ms)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    plain_ms(ax, "y")
    title = f"{name} p99 against load; at the highest rate: " + ", ".join(ends)
    ax.set_title(title, fontsize="medium")
    alt = f"{name} p99 against offered load, A and B overlaid. {title}."
    if drawn:
        alt += " SLO lines: " + "; ".join(drawn) + "."
    return Chart(save(fig, path), title, alt, drawn)


def spectrum_points(values_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = 1.0 / (1.0 - SPECTRUM_Q)
    keep = x <= len(values_ms)
    if not keep.any():
        return np.zeros(0), np.zeros(0)
    return x[keep], np.quantile(values_ms, SPECTRUM_Q[keep])


def spectrum_axes(ax: Any, x_max: float) -> None:
    ax.set_xscale("log")
    ticks = [t for t in (2, 10, 100, 1000, 10_000, 100_000) if t <= x_max * 1.01]
    names = ["p50", "p90", "p99", "p99.9", "p99.99", "p99.999"]
    ax.set_xticks(ticks, names[: len(ticks)])
    ax.set_xlim(2, max(x_max, 10))
    ax.set_xlabel("percentile")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    plain_ms(ax, "y")


def spectra(
    groups: list[tuple[str, list[tuple[str, Records]]]], slos: list[SLO], llm: bool, path: Path
) -> Chart:
    """Latency (TTFT for LLM) by percentile, one line per step (or per run), overlaid.

    ``groups`` is ``[(prefix, [(label, records)])]``: one group for a sweep, two (A, B)
    for a comparison, drawn solid and dashed.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN)
    name = "TTFT" if llm else "latency"
    x_max, tails = 10.0, []
    cmap = plt.get_cmap("viridis")
    for g, (prefix, runs) in enumerate(groups):
        for i, (label, r) in enumerate(runs):
            v = derive.ttft_ns(r) if llm else derive.latency_ns(r)
            v = v[r.in_window & (r.error == 0) & (v >= 0)] / 1e6
            x, y = spectrum_points(v)
            if not len(x):
                continue
            color = cmap(i / max(len(runs) - 1, 1)) if len(groups) == 1 else f"C{g}"
            ax.plot(x, y, "--" if g else "-", color=color, label=f"{prefix}{label}")
            x_max = max(x_max, float(x[-1]))
            tails.append((f"{prefix}{label}", float(np.quantile(v, 0.99))))
    drawn = draw_slos(ax, slos, name)
    spectrum_axes(ax, x_max)
    ax.set_ylabel(f"{name} (ms)")
    ax.legend(fontsize="x-small", ncol=2)
    if tails:
        lo, hi = min(tails, key=lambda t: t[1]), max(tails, key=lambda t: t[1])
        title = f"{name} p99 ranges from {ms_text(lo[1])} ({lo[0]}) to {ms_text(hi[1])} ({hi[0]})"
    else:
        title = f"No successful request to draw a {name} spectrum"
    ax.set_title(title, fontsize="medium")
    alt = f"{name} percentile spectra, overlaid. {title}."
    if drawn:
        alt += " SLO lines: " + "; ".join(drawn) + "."
    return Chart(save(fig, path), title, alt, drawn)


def frontier(steps: list[StepData], path: Path) -> Chart:
    """LLM: output tokens/s of the server against tokens/s each user sees (1 / TPOT p50)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN)
    pts = []
    for s in steps:
        tpot = _dist(s, "tpot_ms").get("p50")
        tps = s.row.get("output_tps")
        if tpot and tps:
            pts.append((1000.0 / tpot, tps, s))
    for per_user, total, s in pts:
        ax.scatter(per_user, total, color="tab:blue" if s.trusted else "0.6", zorder=3)
        ax.annotate(
            s.label, (per_user, total), xytext=(4, 4), textcoords="offset points", fontsize=8
        )
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color="0.7", zorder=1)
        best = max(pts, key=lambda p: p[1])
        title = (
            f"Server output peaks at {best[1]:.0f} tok/s when each user gets {best[0]:.0f} tok/s"
        )
    else:
        title = "No step reported output tokens and TPOT"
    ax.set_xlabel("tokens/s per user (1 / TPOT p50)")
    ax.set_ylabel("output tokens/s (server)")
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3)
    return Chart(save(fig, path), title, f"Throughput-latency frontier. {title}.")
