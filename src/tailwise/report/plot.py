"""PNG charts with matplotlib (extra ``tailwise[plot]``), imported lazily, Agg backend.

This is the one module that imports matplotlib: :mod:`tailwise.report.charts`
draws the shared reports' charts through :func:`pyplot`, :func:`save` and
:func:`plain_ms`. Each chart function writes one PNG and returns its path.
Times on axes are milliseconds.
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


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (the one place matplotlib is imported)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never a window, never a display
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra("charts", "plot", "matplotlib") from None
    return plt


def save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
    return path


def plain_ms(ax: Any, axis: str = "y") -> None:
    """Ticks as plain numbers (``20``, ``15``), never ``2 x 10^1``, on linear and log axes;
    a log axis spanning less than a decade labels its minor ticks too."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    target.set_major_formatter(fmt)
    if target.get_scale() == "log":
        lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
        if lo > 0 and hi / lo < 10:
            target.set_minor_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
            target.set_minor_formatter(fmt)
        else:
            target.set_minor_formatter(NullFormatter())


def _series(r: Records, llm: bool) -> dict[str, np.ndarray]:
    window = r.in_window
    out = {"latency": derive.latency_ns(r)[window]}
    if llm:
        out["TTFT"] = derive.ttft_ns(r)[window]
        out["TPOT"] = derive.tpot_ns(r)[window]
    return {k: v[v >= 0] / 1e6 for k, v in out.items() if (v >= 0).any()}


def llm_distributions(r: Records, path: Path) -> Path:
    """Histograms of TTFT and TPOT (the two numbers LLM SLOs are written against)."""
    plt = pyplot()
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
    return save(fig, path)


def vary_p99_vs_throughput(doc: dict[str, Any], path: Path) -> Path:
    """vary.json: p99 latency against throughput, one labelled point per value of the key.

    Error bars are the 95% confidence half-widths when each value was replicated;
    the y axis turns logarithmic when the tails span more than 20x (overloaded points).
    """
    plt = pyplot()
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
    return save(fig, path)
