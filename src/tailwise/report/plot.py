"""PNG charts with matplotlib (extra ``tailwise[plot]``), imported lazily, Agg backend.

Run charts read records and summary.json; sweep charts read sweep.json. Each
function writes one PNG and returns its path. Times on axes are milliseconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tailwise.errors import MissingExtra
from tailwise.metrics import derive
from tailwise.records import Records

DPI = 110
SIZE_IN = (7.5, 4.2)
# Quantiles for the percentile spectrum: 1/(1-q) from 2 (p50) to 10^5 (p99.999).
SPECTRUM_Q = 1.0 - np.logspace(np.log10(0.5), -5, 120)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never a window, never a display
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra("charts", "plot", "matplotlib") from None
    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _pyplot().close(fig)
    return path


def _step_values(steps: list[dict[str, Any]], dist: str, q: str) -> list[float]:
    return [float((s.get(dist) or {}).get(q, np.nan) or np.nan) for s in steps]


def sweep_throughput(doc: dict[str, Any], path: Path) -> Path:
    """Throughput and goodput against offered load, y = x for reference, the knee marked."""
    plt = _pyplot()
    steps = doc["steps"]
    # x is what each step's schedule really offered in its window (a Poisson
    # count varies around the rate asked for), so y = x means "kept up".
    offered = [s["measured_offered_rps"] for s in steps]
    fig, ax = plt.subplots(figsize=SIZE_IN)
    top = max(max(offered), max(s["throughput_rps"] for s in steps)) * 1.05
    ax.plot([0, top], [0, top], color="0.8", linestyle="--", label="offered (y = x)")
    ax.plot(offered, [s["throughput_rps"] for s in steps], "o-", label="throughput")
    ax.plot(offered, [s["goodput_rps"] for s in steps], "s-", label="goodput (meets every SLO)")
    knee = doc.get("knee_rps")
    at_knee = [s["measured_offered_rps"] for s in steps if s["offered_rps"] == knee]
    if knee is not None and at_knee:
        label = f"knee: {knee:g}/s asked, {at_knee[0]:.1f}/s offered"
        ax.axvline(at_knee[0], color="tab:red", linestyle=":", label=label)
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("completed requests/s")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_title("Goodput collapses past the knee while throughput stays flat")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def sweep_latency(doc: dict[str, Any], path: Path) -> Path:
    """p50/p90/p99 against offered load (TTFT and TPOT for LLM sweeps), log y."""
    plt = _pyplot()
    steps = doc["steps"]
    offered = [s["measured_offered_rps"] for s in steps]  # as in sweep_throughput
    llm = any("ttft_ms" in s for s in steps)
    dists = ("ttft_ms", "tpot_ms") if llm else ("latency_ms",)
    fig, axes = plt.subplots(1, len(dists), figsize=SIZE_IN, squeeze=False)
    for ax, dist in zip(axes[0], dists, strict=True):
        for q, style in (("p50", "o-"), ("p90", "^-"), ("p99", "s-")):
            ax.plot(offered, _step_values(steps, dist, q), style, label=q)
        at_knee = [
            s["measured_offered_rps"] for s in steps if s["offered_rps"] == doc.get("knee_rps")
        ]
        if doc.get("knee_rps") is not None and at_knee:  # closed loop has none
            ax.axvline(at_knee[0], color="tab:red", linestyle=":")
        ax.set_yscale("log")
        ax.set_xlabel("offered load (requests/s)")
        ax.set_ylabel(f"{dist.removesuffix('_ms').upper()} (ms)" if llm else "latency (ms)")
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3, which="both")
    fig.suptitle("Tail latency against load")
    return _save(fig, path)


def _series(r: Records, llm: bool) -> dict[str, np.ndarray]:
    window = r.in_window
    out = {"latency": derive.latency_ns(r)[window]}
    if llm:
        out["TTFT"] = derive.ttft_ns(r)[window]
        out["TPOT"] = derive.tpot_ns(r)[window]
    return {k: v[v >= 0] / 1e6 for k, v in out.items() if (v >= 0).any()}


def percentile_spectrum(r: Records, llm: bool, path: Path) -> Path:
    """HdrHistogram-style: value at quantile q against 1/(1-q) on a log axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN)
    x = 1.0 / (1.0 - SPECTRUM_Q)
    x_max, lows, highs = 100.0, [], []
    for name, values in _series(r, llm).items():
        keep = x <= len(values)  # no quantile finer than the sample supports
        y = np.quantile(values, SPECTRUM_Q[keep])
        ax.plot(x[keep], y, label=name)
        if keep.any():
            x_max = max(x_max, float(x[keep][-1]))
            lows.append(float(y.min()))
            highs.append(float(y.max()))
    if lows and min(lows) > 0 and max(highs) / min(lows) > 20:
        ax.set_yscale("log")  # TPOT in ms beside latency in seconds: both stay readable
    ax.set_xscale("log")
    ticks = [t for t in (2, 10, 100, 1000, 10_000, 100_000) if t <= x_max * 1.01]
    names = ["p50", "p90", "p99", "p99.9", "p99.99", "p99.999"]
    ax.set_xticks(ticks, names[: len(ticks)])
    ax.set_xlim(2, x_max)
    ax.set_xlabel("percentile")
    ax.set_ylabel("ms")
    ax.set_title("Latency by percentile (measured from the intended send time)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


def latency_over_time(r: Records, path: Path) -> Path:
    """Each request's latency at its scheduled time, with the in-flight count beside it."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN)
    lat = derive.latency_ns(r)
    ok = lat >= 0
    t_s = r.scheduled_ns / 1e9
    ax.scatter(t_s[ok], lat[ok] / 1e6, s=3, alpha=0.4, label="latency (ok)")
    failed = (~ok) & (r.done_ns >= 0)
    if failed.any():
        y_ms = max(float(np.median(lat[ok])) / 1e6, 1.0) if ok.any() else 1.0
        ax.scatter(
            t_s[failed],
            np.full(int(failed.sum()), y_ms),
            s=8,
            marker="x",
            color="tab:red",
            label="failed (drawn at the median)",
        )
    ax.set_yscale("log")
    ax.set_xlabel("scheduled time (s)")
    ax.set_ylabel("latency (ms)")
    twin = ax.twinx()
    grid_s, in_flight = _in_flight(r)
    twin.step(grid_s, in_flight, where="post", color="tab:orange", alpha=0.8, label="in flight")
    twin.set_ylabel("requests in flight")
    twin.set_ylim(bottom=0)
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper left", fontsize="small")
    ax.set_title("Latency over time")
    return _save(fig, path)


def _in_flight(r: Records, points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Requests between scheduled and done, sampled on a grid (s, count)."""
    done = np.where(r.done_ns >= 0, r.done_ns, r.scheduled_ns)
    if len(r) == 0:
        return np.zeros(1), np.zeros(1)
    grid = np.linspace(float(r.scheduled_ns.min()), float(done.max()), points)
    started = np.searchsorted(np.sort(r.scheduled_ns), grid, side="right")
    ended = np.searchsorted(np.sort(done), grid, side="right")
    return grid / 1e9, started - ended


def llm_distributions(r: Records, path: Path) -> Path:
    """Histograms of TTFT and TPOT (the two numbers LLM SLOs are written against)."""
    plt = _pyplot()
    series = _series(r, llm=True)
    fig, axes = plt.subplots(1, 2, figsize=SIZE_IN)
    for ax, name in zip(axes, ("TTFT", "TPOT"), strict=True):
        values = series.get(name)
        if values is not None and len(values):
            ax.hist(values, bins=40, color="tab:blue", alpha=0.8)
            for q, style in ((0.5, "--"), (0.99, ":")):
                v = float(np.quantile(values, q))
                ax.axvline(v, color="tab:red", linestyle=style, label=f"p{q * 100:g} {v:.1f} ms")
            ax.legend(fontsize="small")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("requests")
    fig.suptitle("Time to first token and time per output token")
    return _save(fig, path)


def run_charts(r: Records, summary: dict[str, Any], out_dir: Path) -> list[Path]:
    llm = bool(summary.get("ttft_ms"))
    paths = [
        percentile_spectrum(r, llm, out_dir / "percentiles.png"),
        latency_over_time(r, out_dir / "latency_over_time.png"),
    ]
    if llm:
        paths.append(llm_distributions(r, out_dir / "ttft_tpot.png"))
    return paths


def sweep_charts(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    return [
        sweep_throughput(doc, out_dir / "throughput_goodput.png"),
        sweep_latency(doc, out_dir / "latency_vs_load.png"),
    ]


def vary_p99_vs_throughput(doc: dict[str, Any], path: Path) -> Path:
    """vary.json: p99 latency against throughput, one labelled point per value of the key.

    Error bars are the 95% confidence half-widths when each value was replicated;
    the y axis turns logarithmic when the tails span more than 20x (overloaded points).
    """
    plt = _pyplot()
    points = [p for p in doc["points"] if p.get("latency_p99_ms") is not None]
    x = [p["throughput_rps"] for p in points]
    y = [p["latency_p99_ms"] for p in points]
    halves = [p.get("half_width") or {} for p in points]
    fig, ax = plt.subplots(figsize=SIZE_IN)
    ax.plot(x, y, color="0.75", linewidth=1, zorder=1)
    ax.errorbar(
        x,
        y,
        xerr=[h.get("throughput_rps") or 0.0 for h in halves],
        yerr=[h.get("latency_p99_ms") or 0.0 for h in halves],
        fmt="none",
        ecolor="0.3",
        capsize=3,
        zorder=2,
    )
    leaf = doc["key"].rsplit(".", 1)[-1]
    for p, xi, yi in zip(points, x, y, strict=True):
        passed = p["verdict"] == "pass"
        ax.scatter(xi, yi, color="tab:green" if passed else "tab:red", zorder=3)
        label = f"{leaf}={p['value']}"
        ax.annotate(label, (xi, yi), xytext=(5, 5), textcoords="offset points", fontsize=8)
    ax.scatter([], [], color="tab:green", label="every run met its SLOs")
    ax.scatter([], [], color="tab:red", label="an SLO failed")
    ax.legend(fontsize="small", loc="best")
    if y and min(y) > 0 and max(y) / min(y) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("p99 latency (ms)")
    reps = doc.get("replications", 1)
    extra = f", mean of {reps} runs ± 95% CI" if reps > 1 else ""
    ax.set_title(f"p99 latency against throughput, by {doc['key']}{extra}", fontsize="medium")
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)
