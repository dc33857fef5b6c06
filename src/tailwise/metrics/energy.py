"""A run's GPU samples -> the ``gpu`` section of ``summary.json``: use, power, energy.

**Energy over the window** ``[start, end)``, per GPU, by the first that works:

* ``counter``: the GPU's own energy counter (NVML's total energy, DCGM's
  ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, mJ), read at each sample and
  interpolated linearly to the window's edges. The counter is monotone, so
  the window's energy surely lies between the increase over the samples
  inside the window and over the two that bracket it: ``bounds``, the
  measurement's resolution in joules.
* ``power_integral``: the trapezoid integral of the sampled power. As good as
  the sampling: a spike between two samples is missed (no bounds).

A GPU whose samples do not reach both edges of the window gets no energy. The
window ends at the last sample where that comes first (the sampler's last
sample follows the run's last answer, which may come before the window's
planned end): ``window_s`` is the span measured.
The total is the sum over the GPUs that have one (``gpus_with_energy``).

**Per unit of work.** ``per_output_token_j`` (an LLM run) divides the window's
energy by the output tokens produced *inside the window*: each successful
request's output tokens are spread evenly over ``[first token, end]`` and
counted for the part that overlaps the window, so both numerator and
denominator cover the same span of time. ``per_request_j`` divides by the
successful requests that completed in the window (throughput's population),
``per_good_request_j`` by those that also met every SLO (goodput's).

**Interval** (the ratio of a steady process, not of this window alone): the
window is cut into up to 40 equal time slices of at least two sample periods
each; per slice ``E_k`` joules and ``T_k`` units. The ratio estimator
``R = sum E / sum T`` (the point value above) has the residuals
``d_k = E_k - R T_k``; their mean's variance comes from
:func:`tailwise.metrics.uncertainty.batch_means` (slices merged 40 -> 20 -> 10
until their lag-1 correlation passes, with its AR(1) allowance), and the
interval is ``R +- t(k-1) sqrt(var(mean d)) / mean T``. Fewer than 10 slices
(a window under 20 sample periods): no interval, "n too small".
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from tailwise.metrics.slo import SLO, good_mask
from tailwise.metrics.uncertainty import (
    CONFIDENCE,
    MIN_BATCHES,
    START_BATCHES,
    batch_means,
    t_quantile,
)
from tailwise.records import Records

SAMPLES_PER_SLICE = 2
GAUGES = ("util_pct", "power_w", "mem_used_mib", "sm_clock_mhz", "mem_clock_mhz")
INTERVAL_METHOD = (
    "ratio estimator over equal time slices of the window, batch means of its residuals "
    "(lag-1 checked), Student t"
)

Series = tuple[np.ndarray, np.ndarray]  # (times in s, cumulative joules)


def summarize_gpu(
    rows: list[dict[str, Any]],
    window_ns: tuple[int, int],
    records: Records,
    slos: list[SLO],
    llm: bool,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """The ``gpu`` section from sample rows: ``t_ns`` (run-relative), ``gpus`` or ``error``."""
    ok = sorted((r for r in rows if r.get("gpus")), key=lambda r: r["t_ns"])
    start, end = window_ns
    inside = [r for r in ok if start <= r["t_ns"] <= end]
    doc: dict[str, Any] = {
        "samples": len(rows),
        "samples_failed": sum(1 for r in rows if "error" in r),
        "samples_in_window": len(inside),
    }
    per_gpu: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for r in ok:
        for g in r["gpus"]:
            per_gpu.setdefault(g["key"], []).append((r["t_ns"] / 1e9, g))
    a_s = start / 1e9
    # A run ends when its last answer does, which can be a little before the planned
    # window's end: no token is made after the last sample, so the span stops there.
    b_s = min(end / 1e9, ok[-1]["t_ns"] / 1e9) if ok else end / 1e9
    gpus, series = [], []
    for samples in per_gpu.values():
        entry, cum = _one_gpu(samples, a_s, b_s)
        gpus.append(entry)
        if cum is not None:
            series.append(cum)
    doc["gpus"] = gpus
    repeated = max((g.get("repeated_share", 0.0) for g in gpus), default=0.0)
    if repeated >= 0.5:
        doc["note"] = (
            f"{repeated:.0%} of one GPU's samples repeated the one before: the source refreshes "
            "its values less often than it was sampled (dcgm-exporter's own --collect-interval, "
            "30 s by default: run it with -c 500); energy is as coarse as that"
        )
    totals = [sum(g.get("power_w", 0.0) for g in r["gpus"]) for r in inside]
    if any("power_w" in g for r in inside for g in r["gpus"]):
        doc["power_w"] = {"mean": _r(float(np.mean(totals))), "max": _r(max(totals))}
    if series:
        doc.update(_energy_and_ratios(doc, gpus, series, (a_s, b_s), records, slos, llm))
        doc["confidence"] = confidence
        _intervals(doc, series, (a_s, b_s), len(inside), records, slos, llm, confidence)
    return doc


def _one_gpu(
    samples: list[tuple[float, dict[str, Any]]], a_s: float, b_s: float
) -> tuple[dict[str, Any], Series | None]:
    last = samples[-1][1]
    entry: dict[str, Any] = {k: last[k] for k in ("key", "id", "uuid", "name", "host") if k in last}
    inside = [g for t, g in samples if a_s <= t <= b_s]
    for name in GAUGES:
        vals = [g[name] for g in inside if name in g]
        if vals:
            entry[name] = {"mean": _r(sum(vals) / len(vals)), "max": _r(max(vals))}
    if len(inside) >= 4:  # a source that serves a cached value: the same reading again
        values = [{k: v for k, v in g.items() if isinstance(v, float)} for g in inside]
        same = sum(1 for a, b in itertools.pairwise(values) if a == b and a)
        if any(values):
            entry["repeated_share"] = _r(same / (len(values) - 1))
    totals = [g["mem_total_mib"] for _, g in samples if "mem_total_mib" in g]
    if totals:
        entry["mem_total_mib"] = _r(max(totals))
    cum, method, bounds = energy_series(samples, a_s, b_s)
    if cum is not None:
        value = at(cum, b_s) - at(cum, a_s)
        entry["energy_j"] = {"value": _r(value), "method": method}
        if bounds is not None:
            entry["energy_j"]["bounds"] = [_r(bounds[0]), _r(bounds[1])]
    return entry, cum


def energy_series(
    samples: list[tuple[float, dict[str, Any]]], a_s: float, b_s: float
) -> tuple[Series | None, str, tuple[float, float] | None]:
    """Cumulative joules over the samples' times: from the energy counter when it is read
    at every sample and never goes down, else the power's trapezoid integral; None when
    the samples do not reach both edges of the window."""
    for method in ("counter", "power_integral"):
        field = "energy_mj" if method == "counter" else "power_w"
        pts = [(t, g[field]) for t, g in samples if field in g]
        if len(pts) < 2 or pts[0][0] > a_s or pts[-1][0] < b_s:
            continue
        t = np.array([p[0] for p in pts])
        v = np.array([p[1] for p in pts], dtype=np.float64)
        if method == "counter":
            if len(pts) != len(samples) or np.any(np.diff(v) < 0):
                continue  # a counter missing at some samples, or reset: integrate power
            cum = (v - v[0]) / 1e3
            inner = [c for tt, c in zip(t, cum, strict=True) if a_s <= tt <= b_s]
            lo = inner[-1] - inner[0] if len(inner) >= 2 else 0.0
            hi = cum[np.searchsorted(t, b_s)] - cum[np.searchsorted(t, a_s, side="right") - 1]
            return (t, cum), method, (float(lo), float(hi))
        cum = np.concatenate(([0.0], np.cumsum(np.diff(t) * (v[1:] + v[:-1]) / 2)))
        return (t, cum), method, None
    return None, "", None


def at(series: Series, t_s: float | np.ndarray) -> Any:
    """Cumulative joules at ``t_s``, linear between samples."""
    return np.interp(t_s, series[0], series[1])


def _energy_and_ratios(
    doc: dict[str, Any],
    gpus: list[dict[str, Any]],
    series: list[Series],
    span: tuple[float, float],
    records: Records,
    slos: list[SLO],
    llm: bool,
) -> dict[str, Any]:
    with_energy = [g["energy_j"] for g in gpus if "energy_j" in g]
    methods = sorted({e["method"] for e in with_energy})
    total = sum(at(s, span[1]) - at(s, span[0]) for s in series)
    energy: dict[str, Any] = {
        "value": _r(total),
        "method": methods[0] if len(methods) == 1 else "mixed",
        "window_s": _r(span[1] - span[0]),
        "gpus_with_energy": len(with_energy),
    }
    if all("bounds" in e for e in with_energy):
        energy["bounds"] = [
            _r(sum(e["bounds"][0] for e in with_energy)),
            _r(sum(e["bounds"][1] for e in with_energy)),
        ]
    out: dict[str, Any] = {"energy_j": energy, "interval_method": INTERVAL_METHOD}
    for key, units in _units(records, slos, llm, np.array(span)).items():
        count = float(units[1] - units[0])
        out[key] = {"value": _r(total / count) if count > 0 else None, "units": _r(count)}
    return out


def _units(r: Records, slos: list[SLO], llm: bool, edges_s: np.ndarray) -> dict[str, np.ndarray]:
    """Cumulative units at each edge (s): tokens produced (LLM) or requests completed, and
    good requests completed."""
    edges_ns = edges_s * 1e9
    ok = (r.error == 0) & (r.done_ns >= 0)
    out: dict[str, np.ndarray] = {}
    if llm:
        out["per_output_token_j"] = tokens_by(r, ok, edges_ns)
    else:
        out["per_request_j"] = _done_by(r.done_ns[ok], edges_ns)
    good = good_mask(r, slos) & ok
    out["per_good_request_j"] = _done_by(r.done_ns[good], edges_ns)
    return out


def tokens_by(r: Records, ok: np.ndarray, edges_ns: np.ndarray) -> np.ndarray:
    """Output tokens produced by each edge: a request's tokens spread evenly over
    ``[first token, done]`` (at ``done`` when it has no first-token time)."""
    rows = ok & (r.output_tokens > 0)
    n = r.output_tokens[rows].astype(np.float64)
    done = r.done_ns[rows].astype(np.float64)
    first = r.first_token_ns[rows].astype(np.float64)
    first = np.where((first >= 0) & (first < done), first, done)
    span = done - first
    out = np.empty(len(edges_ns))
    for i, e in enumerate(edges_ns):
        share = np.where(span > 0, np.clip((e - first) / np.where(span > 0, span, 1), 0, 1), 0)
        share = np.where((span <= 0) & (done <= e), 1.0, share)
        out[i] = float(n @ share)
    return out


def _done_by(done_ns: np.ndarray, edges_ns: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.sort(done_ns), edges_ns, side="left").astype(np.float64)


def _intervals(
    doc: dict[str, Any],
    series: list[Series],
    span: tuple[float, float],
    samples_inside: int,
    records: Records,
    slos: list[SLO],
    llm: bool,
    confidence: float,
) -> None:
    slices = min(START_BATCHES, samples_inside // SAMPLES_PER_SLICE)
    keys: list[str] = [
        k for k in ("per_output_token_j", "per_request_j", "per_good_request_j") if k in doc
    ]
    if slices < MIN_BATCHES:
        need = MIN_BATCHES * SAMPLES_PER_SLICE
        for k in keys:
            doc[k].update(
                ci=None,
                reason=f"n too small: {samples_inside} samples in the window, an interval "
                f"needs {need} ({MIN_BATCHES} time slices of {SAMPLES_PER_SLICE})",
            )
        return
    edges = np.linspace(span[0], span[1], slices + 1)
    energy = np.diff(sum(at(s, edges) for s in series))
    for k, cum in _units(records, slos, llm, edges).items():
        ci, used, reason = ratio_ci(energy, np.diff(cum), confidence)
        doc[k].update(ci=ci, slices=used)
        if reason:
            doc[k]["reason"] = reason


def ratio_ci(
    energy: np.ndarray, units: np.ndarray, confidence: float
) -> tuple[list[float] | None, int, str]:
    """The interval of ``sum(energy) / sum(units)`` from time slices (module docstring)."""
    total = float(units.sum())
    if total <= 0:
        return None, 0, "no units in the window"
    ratio = float(energy.sum()) / total
    b = batch_means(energy - ratio * units, start=len(units))
    if not b.independent:
        return None, b.count, f"time slices still correlated at {b.count} (lag-1 {b.lag1:.2f})"
    half = t_quantile(1 - (1 - confidence) / 2, b.count - 1) * math.sqrt(b.variance_of_mean())
    half /= total / len(units)
    return [_r(max(0.0, ratio - half)), _r(ratio + half)], b.count, ""


def _r(v: float) -> float:
    return float(f"{float(v):.6g}")
