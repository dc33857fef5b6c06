"""The charts of one run: its percentile spectrum and its time series.

Drawn with the helpers of :mod:`tailwise.report.charts` (SLO lines, spectrum
axes, plain ms ticks); used for a run's report and for each step of a sweep's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tailwise.metrics import derive
from tailwise.metrics.catalog import CATALOG
from tailwise.metrics.schema import Summary
from tailwise.metrics.slo import SLO
from tailwise.records import Records
from tailwise.report.charts import Chart, draw_slos, ms_text, spectrum_axes, spectrum_points
from tailwise.report.plot import SIZE_IN, plain_ms, pyplot, save


def run_spectrum(r: Records, slos: list[SLO], llm: bool, path: Path) -> Chart:
    """One run's spectrum: latency, and TTFT and TPOT for an LLM run, with their SLO lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN)
    series = [
        (m.label, m.per_request_ns(r)) for m in CATALOG if m.chart and (llm or not m.llm_only)
    ]
    x_max, said, drawn = 10.0, [], []
    for name, v in series:
        v = v[r.in_window & (r.error == 0) & (v >= 0)] / 1e6
        x, y = spectrum_points(v)
        if len(x):
            (line,) = ax.plot(x, y, label=name)
            x_max = max(x_max, float(x[-1]))
            said.append(f"{name} p99 {ms_text(float(np.quantile(v, 0.99)))}")
            drawn += draw_slos(ax, slos, name, color=line.get_color())
    spectrum_axes(ax, x_max)
    ax.set_ylabel("ms")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    title = ", ".join(said) if said else "No successful request to draw"
    title += " (latency from the intended send time)" if said else ""
    ax.set_title(title, fontsize="medium")
    alt = f"Percentile spectrum. {title}."
    if drawn:
        alt += " SLO lines: " + "; ".join(drawn) + "."
    return Chart(save(fig, path), title, alt, drawn)


def over_time(r: Records, summary: Summary, slos: list[SLO], path: Path) -> Chart:
    """A run's latency (and TTFT) at each scheduled time, warm-up shaded, SLO lines, with
    requests in flight and the client's send lag below."""
    plt = pyplot()
    llm = summary.distribution("ttft_ms") is not None
    fig, (ax, low) = plt.subplots(
        2, 1, figsize=(SIZE_IN[0], 5.2), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]}
    )
    t_s = r.scheduled_ns / 1e9
    series = [("latency", derive.latency_ns(r))] + ([("TTFT", derive.ttft_ns(r))] if llm else [])
    positive = False  # a log axis needs a value above 0 (an empty records file has none)
    for name, v in series:
        ok = (v >= 0) & (r.error == 0)
        ax.scatter(t_s[ok], v[ok] / 1e6, s=3, alpha=0.4, label=name)
        positive = positive or bool((v[ok] > 0).any())
    failed = (r.error != 0) & (r.done_ns >= 0)
    positive = positive or bool(((r.done_ns - r.scheduled_ns)[failed] > 0).any())
    if failed.any():
        ax.scatter(
            t_s[failed],
            (r.done_ns - r.scheduled_ns)[failed] / 1e6,
            s=10,
            marker="x",
            color="tab:red",
            label="failed (at its end)",
        )
    drawn = []
    for name, _ in series:
        drawn += draw_slos(ax, slos, name)
    start = float(summary.window.start_s or 0.0)
    if start > 0:
        ax.axvspan(0, start, color="0.6", alpha=0.25, label="warm-up (excluded)")
    if positive:
        ax.set_yscale("log")
    ax.set_ylabel("ms")
    ax.legend(fontsize="x-small", loc="upper left")
    ax.grid(alpha=0.3, which="both")
    plain_ms(ax, "y")
    lag = derive.send_lag_ns(r)
    sent = lag >= 0
    low.plot(t_s[sent], lag[sent] / 1e6, ".", markersize=2, color="tab:gray", label="send lag")
    low.set_ylabel("send lag (ms)")
    twin = low.twinx()
    grid_s, flying = _in_flight(r)
    twin.step(grid_s, flying, where="post", color="tab:orange", label="in flight")
    twin.set_ylabel("in flight")
    twin.set_ylim(bottom=0)
    low.set_xlabel("scheduled time (s)")
    if start > 0:
        low.axvspan(0, start, color="0.6", alpha=0.25)
    p99 = summary.latency.p99 if summary.latency is not None else None
    shown = ms_text(p99) if p99 is not None else "none (no success)"
    title = f"Latency over time: p99 {shown} in the window"
    if start > 0:
        title += f", warm-up ({start:g} s) shaded"
    ax.set_title(title, fontsize="medium")
    alt = f"{title}. In flight and send lag below."
    if drawn:
        alt += " SLO lines: " + "; ".join(drawn) + "."
    return Chart(save(fig, path), title, alt, drawn)


def _in_flight(r: Records, points: int = 300) -> tuple[np.ndarray, np.ndarray]:
    done = np.where(r.done_ns >= 0, r.done_ns, r.scheduled_ns)
    if len(r) == 0:
        return np.zeros(1), np.zeros(1)
    grid = np.linspace(float(r.scheduled_ns.min()), float(done.max()), points)
    started = np.searchsorted(np.sort(r.scheduled_ns), grid, side="right")
    ended = np.searchsorted(np.sort(done), grid, side="right")
    return grid / 1e9, started - ended


def server_timeline(summary: Summary, path: Path) -> Chart | None:
    """The server's own metrics (``--server-metrics``) on the run's timeline, under the
    client's latency and TTFT (p50 between scrapes); None without two scrapes."""
    cols = summary.section("server_metrics").get("timeline") or {}
    t_s = cols.get("t_s") or []
    if len(t_s) < 2:
        return None
    plt = pyplot()
    fig, (ax, low) = plt.subplots(
        2, 1, figsize=(SIZE_IN[0], 5.2), sharex=True, gridspec_kw={"height_ratios": [2, 2]}
    )
    client = (("client_latency_p50_ms", "latency p50"), ("client_ttft_p50_ms", "TTFT p50"))
    for key, label in client:
        if key in cols:
            ax.plot(t_s, _floats(cols[key]), marker=".", label=f"client {label}")
    ax.set_ylabel("ms")
    ax.grid(alpha=0.3)
    plain_ms(ax, "y")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="x-small", loc="upper left")
    said = []
    for key, label in (("running", "running"), ("waiting", "waiting")):
        if key in cols:
            values = _floats(cols[key])
            low.step(t_s, values, where="post", label=label)
            said.append(f"{label} up to {np.nanmax(values):.0f}")
    low.set_ylabel("requests")
    low.set_ylim(bottom=0)
    low.set_xlabel("run time (s)")
    if "kv_cache_usage" in cols:
        kv = _floats(cols["kv_cache_usage"])
        twin = low.twinx()
        twin.plot(t_s, kv * 100, color="tab:purple", linestyle="--", label="KV cache")
        twin.set_ylabel("KV cache used (%)")
        twin.set_ylim(0, 100)
        said.append(f"KV cache up to {np.nanmax(kv) * 100:.0f}%")
    if low.get_legend_handles_labels()[0]:
        low.legend(fontsize="x-small", loc="upper left")
    title = "Server metrics beside the client's latency" + (": " + ", ".join(said) if said else "")
    ax.set_title(title, fontsize="medium")
    alt = f"{title}. Scraped from the server's /metrics during the run."
    return Chart(save(fig, path), title, alt, [])


def gpu_timeline(summary: Summary, path: Path) -> Chart | None:
    """GPU utilization and power (``--gpu-metrics``) on the run's timeline, under the
    client's TTFT (LLM) or latency, p50 between samples; None without two samples."""
    gpu = summary.section("gpu")
    cols = gpu.get("timeline") or {}
    t_s = cols.get("t_s") or []
    if len(t_s) < 2:
        return None
    plt = pyplot()
    fig, (ax, low) = plt.subplots(
        2, 1, figsize=(SIZE_IN[0], 5.2), sharex=True, gridspec_kw={"height_ratios": [2, 2]}
    )
    key, label = (
        ("client_ttft_p50_ms", "TTFT p50")
        if "client_ttft_p50_ms" in cols
        else ("client_latency_p50_ms", "latency p50")
    )
    if key in cols:
        ax.plot(t_s, _floats(cols[key]), marker=".", label=f"client {label}")
        ax.legend(fontsize="x-small", loc="upper left")
    ax.set_ylabel("ms")
    ax.grid(alpha=0.3)
    plain_ms(ax, "y")
    said = []
    if "util_pct" in cols:
        util = _floats(cols["util_pct"])
        low.step(t_s, util, where="post", color="tab:green", label="GPU utilization")
        said.append(f"utilization (up to {np.nanmax(util):.0f}%)")
    low.set_ylabel("utilization (%, mean of GPUs)")
    low.set_ylim(0, 130)  # room above 100% for the legend
    low.set_yticks([0, 25, 50, 75, 100])
    low.set_xlabel("run time (s)")
    handles = low.get_legend_handles_labels()
    if "power_w" in cols:
        power = _floats(cols["power_w"])
        twin = low.twinx()
        twin.plot(t_s, power, color="tab:red", label="power (W, all GPUs)")
        twin.set_ylabel("power (W, all GPUs)")
        twin.set_ylim(0, max(1.0, float(np.nanmax(power))) * 1.3)
        said.append(f"power (up to {np.nanmax(power):.0f} W)")
        extra = twin.get_legend_handles_labels()
        handles = (handles[0] + extra[0], handles[1] + extra[1])
    if handles[0]:
        low.legend(*handles, fontsize="x-small", loc="upper left")
    start = float(summary.window.start_s or 0.0)
    if start > 0:
        for axis in (ax, low):
            axis.axvspan(min(t_s[0], 0.0), start, color="0.6", alpha=0.25)
    title = f"Client {label} beside GPU " + " and ".join(said or ["samples"])
    ax.set_title(title, fontsize="medium")
    alt = f"{title}. Sampled every {gpu.get('interval_s', '?')} s."
    return Chart(save(fig, path), title, alt, [])


def _floats(values: list[Any]) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
