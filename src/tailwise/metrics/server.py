"""The server's own view of a run: LLM server metrics read from Prometheus text.

vLLM, SGLang, TGI, llama.cpp (``--metrics``) and tailwise's demo LLM server
each export running and waiting requests, KV-cache use and latency histograms
under their own names. :func:`read_exposition` maps one scrape onto common
names (a :data:`Reading`); :func:`summarize_server` turns the scrapes of a run
into the ``server_metrics`` section of ``summary.json``:

* gauges (``running``, ``waiting``, ``kv_cache_usage``) as mean and max over
  the scrapes inside the measurement window;
* counters (preemptions, prefix-cache hits and queries, tokens) as the
  increase from the last scrape at or before the window's start to the first
  that began once the window had ended and its requests were answered (a
  counter that went down was reset: no value);
* histograms (the server's TTFT, queue and prefill time) as the same
  increase, with the mean exact (sum / count) and percentiles interpolated
  inside buckets, as Prometheus' ``histogram_quantile`` does (so a percentile
  is only as fine as the server's buckets).

The client's TTFT is measured from the intended send; the server's starts
when the server received the request. Their difference is what the server
never sees: the client's send lag, the network, HTTP handling in front of the
engine, and the client reading the stream (``ttft_split``).

Pure functions of their inputs: nothing here reads a clock or a socket.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tailwise.instrument.promtext import Sample, parse_samples

Reading = dict[str, Any]  # {"server": str, "values": {name: float}, "hists": {name: Hist}}
HIST_NAMES = ("ttft", "queue", "prefill")
RATIO_GAUGES = ("kv_cache_usage", "prefix_cache_hit_rate")  # averaged over series, not summed
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


@dataclass(frozen=True)
class Dialect:
    """One server's metric names: common name -> exposition names (the first present wins)."""

    server: str
    prefix: str
    names: dict[str, tuple[str, ...]]


DIALECTS = (
    Dialect(
        "vllm",
        "vllm:",
        {
            "running": ("vllm:num_requests_running",),
            "waiting": ("vllm:num_requests_waiting",),
            # A fraction in [0, 1] despite "perc"; gpu_cache_usage_perc is the older name.
            "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            "preemptions": ("vllm:num_preemptions_total",),
            "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
            "prefix_queries": (
                "vllm:prefix_cache_queries_total",
                "vllm:gpu_prefix_cache_queries_total",
            ),
            "prompt_tokens": ("vllm:prompt_tokens_total",),
            "generation_tokens": ("vllm:generation_tokens_total",),
            "ttft": ("vllm:time_to_first_token_seconds",),
            "queue": ("vllm:request_queue_time_seconds",),
            "prefill": ("vllm:request_prefill_time_seconds",),
        },
    ),
    Dialect(
        "sglang",
        "sglang:",
        {
            "running": ("sglang:num_running_reqs",),
            "waiting": ("sglang:num_queue_reqs",),
            "kv_cache_usage": ("sglang:token_usage",),
            # SGLang retracts (preempts) a request when the KV cache runs out.
            "preemptions": ("sglang:num_retracted_requests_total",),
            "prefix_cache_hit_rate": ("sglang:cache_hit_rate",),
            "prompt_tokens": ("sglang:prompt_tokens_total",),
            "generation_tokens": ("sglang:generation_tokens_total",),
            "ttft": ("sglang:time_to_first_token_seconds",),
            "queue": ("sglang:queue_time_seconds",),
        },
    ),
    Dialect(
        "tgi",
        "tgi_",
        {
            "running": ("tgi_batch_current_size",),
            "waiting": ("tgi_queue_size",),
            "queue": ("tgi_request_queue_duration",),  # TGI exports no TTFT histogram
        },
    ),
    Dialect(
        "llama.cpp",
        "llamacpp:",
        {
            "running": ("llamacpp:requests_processing",),
            "waiting": ("llamacpp:requests_deferred",),
            "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),  # older builds only
            "prompt_tokens": ("llamacpp:prompt_tokens_total",),
            "generation_tokens": ("llamacpp:tokens_predicted_total",),
        },
    ),
    Dialect(
        "tailwise-demo",
        "tailwise_demo_",
        {
            "running": ("tailwise_demo_running_seqs",),
            "waiting": ("tailwise_demo_queue_depth",),
            "kv_cache_usage": ("tailwise_demo_kv_cache_usage_ratio",),
            "preemptions": ("tailwise_demo_preemptions_total",),
            "prompt_tokens": ("tailwise_demo_prompt_tokens_total",),
            "generation_tokens": ("tailwise_demo_generation_tokens_total",),
            "ttft": ("tailwise_demo_time_to_first_token_seconds",),
            "queue": ("tailwise_demo_request_queue_time_seconds",),
        },
    ),
)
PREFIXES = tuple(d.prefix for d in DIALECTS)


# Samples of known servers' names read from one scrape: a real server has hundreds (vLLM,
# a few engines); 150,000 series took ~1 s of the interpreter per scrape beside the load.
MAX_SAMPLES = 20_000


def read_exposition(text: str, pace: Callable[[], None] | None = None) -> Reading | None:
    """One scrape on common names, or None when no known server's metrics are in it.

    ``pace``: called every few thousand lines (the scrape thread yields the interpreter
    lock there, so an 8 MB exposition does not hold the load generator's loop)."""
    samples, _ = parse_samples(text, max_samples=MAX_SAMPLES, prefixes=PREFIXES, pace=pace)
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s[0], []).append(s)
    best: tuple[int, Reading] | None = None
    for d in DIALECTS:
        reading = _read(d, by_name)
        found = len(reading["values"]) + len(reading["hists"])
        if found and (best is None or found > best[0]):
            best = (found, reading)
    return best[1] if best else None


def _read(d: Dialect, by_name: dict[str, list[Sample]]) -> Reading:
    values: dict[str, float] = {}
    hists: dict[str, dict[str, Any]] = {}
    for common, names in d.names.items():
        for name in names:
            if common in HIST_NAMES:
                hist = _histogram(by_name, name)
                if hist is not None:
                    hists[common] = hist
                    break
            elif name in by_name:
                vals = [v for _, _, v in by_name[name] if math.isfinite(v)]
                if vals:
                    total = sum(vals)
                    values[common] = total / len(vals) if common in RATIO_GAUGES else total
                    break
    return {"server": d.server, "values": values, "hists": hists}


def _histogram(by_name: dict[str, list[Sample]], name: str) -> dict[str, Any] | None:
    """Buckets summed over every series (engines, ranks, models): cumulative by ``le``."""
    buckets = by_name.get(name + "_bucket")
    if not buckets:
        return None
    cum: dict[float, float] = {}
    for _, labels, value in buckets:
        try:
            le = float(labels.get("le", ""))
        except ValueError:
            continue
        if math.isfinite(value):
            cum[le] = cum.get(le, 0.0) + value
    total = sum(v for _, _, v in by_name.get(name + "_sum", []) if math.isfinite(v))
    count = sum(v for _, _, v in by_name.get(name + "_count", []) if math.isfinite(v))
    bounds = sorted(cum)
    return {"le": bounds, "cum": [cum[b] for b in bounds], "sum": total, "count": count}


# -- a run's scrapes -> summary ------------------------------------------------


def summarize_server(
    rows: list[dict[str, Any]],
    window_ns: tuple[int, int],
    client_ttft_ms: dict[str, Any] | None = None,
    answered_ns: int | None = None,
) -> dict[str, Any]:
    """The ``server_metrics`` section from scrape rows: ``t_ns`` (run-relative start of the
    scrape), ``t_end_ns`` (its answer, optional) and ``reading`` (absent: it failed).
    ``answered_ns``: when the window's last request was answered (run-relative); the
    counters end at the first scrape begun after both it and the window's end."""
    ok = [r for r in rows if r.get("reading")]
    start, end = window_ns
    inside = [r for r in ok if start <= r["t_ns"] <= end]
    doc: dict[str, Any] = {
        "server": ok[-1]["reading"]["server"] if ok else None,
        "scrapes": len(rows),
        "scrapes_failed": len(rows) - len(ok),
        "scrapes_in_window": len(inside),
    }
    for name in ("running", "waiting", "kv_cache_usage", "prefix_cache_hit_rate"):
        vals = [r["reading"]["values"][name] for r in inside if name in r["reading"]["values"]]
        if vals:
            doc[name] = {"mean": round(sum(vals) / len(vals), 4), "max": round(max(vals), 4)}
    counted = (start, max(end, answered_ns)) if answered_ns is not None else window_ns
    first, last = _bracket(ok, counted)
    if first is not None and last is not None and first is not last:
        _counters(doc, first["reading"], last["reading"])
        for name in HIST_NAMES:
            dist = _hist_delta(
                first["reading"]["hists"].get(name), last["reading"]["hists"].get(name)
            )
            if dist is not None:
                doc[f"{name}_ms"] = dist
    if client_ttft_ms and client_ttft_ms.get("count"):
        doc["ttft_split"] = ttft_split(client_ttft_ms, doc)
    return doc


def _bracket(
    ok: list[dict[str, Any]], window_ns: tuple[int, int]
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The last scrape that ended by the window's start and the first that began at or after
    its end (the nearest inside where the run has none outside). A scrape is a span, not an
    instant: the server wrote its text somewhere between the GET and the answer."""
    if not ok:
        return None, None
    start, end = window_ns
    before = [r for r in ok if r.get("t_end_ns", r["t_ns"]) <= start]
    after = [r for r in ok if r["t_ns"] >= end]
    return (before[-1] if before else ok[0]), (after[0] if after else ok[-1])


def _counters(doc: dict[str, Any], a: Reading, b: Reading) -> None:
    va, vb = a["values"], b["values"]
    deltas = {k: vb[k] - va[k] for k in vb if k in va and k not in _GAUGES}
    resets = sorted(k for k, v in deltas.items() if v < 0)
    if resets:
        doc["counter_resets"] = resets  # the server restarted: those increases are unknown
    d = {k: v for k, v in deltas.items() if v >= 0}
    if "preemptions" in d:
        doc["preemptions"] = int(d["preemptions"])
    if d.get("prefix_queries"):
        doc["prefix_cache_hit_rate"] = {
            "ratio": round(d.get("prefix_hits", 0.0) / d["prefix_queries"], 4),
            "queries": int(d["prefix_queries"]),
        }
    for k in ("prompt_tokens", "generation_tokens"):
        if k in d:
            doc[k] = int(d[k])


_GAUGES = ("running", "waiting", "kv_cache_usage", "prefix_cache_hit_rate")


def _hist_delta(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """A histogram's observations between two scrapes, in ms (None: none, or a reset)."""
    if b is None:
        return None
    count = b["count"] - (a["count"] if a else 0.0)
    total = b["sum"] - (a["sum"] if a else 0.0)
    base = dict(zip(a["le"], a["cum"], strict=True)) if a else {}
    cum = [c - base.get(le, 0.0) for le, c in zip(b["le"], b["cum"], strict=True)]
    if count <= 0 or any(c < 0 for c in cum):
        return None
    out: dict[str, Any] = {"mean": round(total / count * 1e3, 3), "count": int(count)}
    for key, q in QUANTILES:
        value = bucket_quantile(b["le"], cum, q)
        out[key] = None if value is None else round(value * 1e3, 3)
        # What the histogram really knows: the bucket the percentile fell in.
        out[f"{key}_bucket_ms"] = _bucket_of(b["le"], cum, q)
    return out


def _bucket_of(bounds: list[float], cumulative: list[float], q: float) -> list[float | None]:
    rank = q * cumulative[-1]
    lo = 0.0
    for bound, count in zip(bounds, cumulative, strict=True):
        if count >= rank:
            return [round(lo * 1e3, 3), None if math.isinf(bound) else round(bound * 1e3, 3)]
        lo = bound
    return [round(lo * 1e3, 3), None]


def bucket_quantile(bounds: list[float], cumulative: list[float], q: float) -> float | None:
    """Prometheus' ``histogram_quantile``: linear inside the bucket holding rank q.

    ``bounds`` are the ``le`` values ascending (``inf`` last), ``cumulative`` the
    counts at or below each. A rank in the ``+Inf`` bucket gives the highest finite
    bound (the histogram cannot say more). None when empty.
    """
    if not bounds or not cumulative or cumulative[-1] <= 0:
        return None
    rank = q * cumulative[-1]
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in zip(bounds, cumulative, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


def ttft_split(client: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The client's TTFT beside the server's, and the part the server never sees (means)."""
    split: dict[str, Any] = {"client_mean_ms": client.get("mean")}
    for key in ("p50", "p90", "p99"):
        split[f"client_{key}_ms"] = client.get(key)
    server = doc.get("ttft_ms")
    if server is not None:
        split["server_mean_ms"] = server["mean"]
        # Two populations: the client's requests were *scheduled* in the window, the server's
        # got their first token between the bracketing scrapes. Alike in a steady run; apart
        # when a queue grows (the server's then hold earlier, faster requests).
        split["counts"] = {"client": client.get("count"), "server": server["count"]}
        for key in ("p50", "p90", "p99"):
            split[f"server_{key}_ms"] = server.get(key)
        if client.get("mean") is not None:
            split["outside_server_mean_ms"] = round(client["mean"] - server["mean"], 3)
    for part in ("queue", "prefill"):
        if f"{part}_ms" in doc:
            split[f"server_{part}_mean_ms"] = doc[f"{part}_ms"]["mean"]
    return split


def text_lines(doc: dict[str, Any]) -> list[str]:
    """The terminal's lines for a run's ``server_metrics`` section."""
    if "scrapes" not in doc:
        return []  # the default scrape found no metrics at the target: nothing to say
    if not doc.get("scrapes_in_window") and not doc.get("ttft_ms"):
        why = f"{doc.get('scrapes_failed', 0)} of {doc['scrapes']} scrapes failed"
        return [f"server    {doc.get('url', '')}: no metrics in the window ({why})"]
    head = f"server    {doc.get('server')} metrics, {doc['scrapes_in_window']} scrapes"
    parts = []
    for key, label in (("running", "running"), ("waiting", "waiting")):
        if key in doc:
            parts.append(f"{label} {doc[key]['mean']:.1f} mean / {doc[key]['max']:g} max")
    if "kv_cache_usage" in doc:
        kv = doc["kv_cache_usage"]
        parts.append(f"KV cache {kv['mean']:.0%} mean / {kv['max']:.0%} max")
    lines = [head + ("  " + ", ".join(parts[:2]) if parts else "")]
    more = parts[2:]
    if "preemptions" in doc:
        more.append(f"preemptions {doc['preemptions']}")
    hit = doc.get("prefix_cache_hit_rate")
    if isinstance(hit, dict):
        more.append(f"prefix-cache hits {hit.get('ratio', hit.get('mean', 0)):.1%}")
    if more:
        lines.append("          " + ", ".join(more))
    split = doc.get("ttft_split")
    if split and split.get("server_mean_ms") is not None:
        counts = split["counts"]
        lines.append(
            f"          TTFT mean: client {split['client_mean_ms']:.1f}ms = server "
            f"{split['server_mean_ms']:.1f}ms + outside it {split['outside_server_mean_ms']:.1f}ms"
            f" (n {counts['client']} vs {counts['server']})"
        )
    if split:
        inside = [
            f"{part} {split[f'server_{part}_mean_ms']:.1f}ms"
            for part in ("queue", "prefill")
            if f"server_{part}_mean_ms" in split
        ]
        if inside:
            lines.append("          the server's mean " + ", ".join(inside))
    return lines + timeline_lines(doc.get("timeline") or {})


SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 60


def timeline_lines(cols: dict[str, list[Any]]) -> list[str]:
    """One sparkline per column over the run (each scaled to its own max), with its max."""
    times = cols.get("t_s") or []
    if len(times) < 2:
        return []
    lines = [f"timeline  {times[0]:.1f}s to {times[-1]:.1f}s, one mark per scrape (or several):"]
    names = (
        ("running", "running"),
        ("waiting", "waiting"),
        ("kv_cache_usage", "KV cache"),
        ("client_ttft_p50_ms", "TTFT p50"),
        ("client_latency_p50_ms", "lat p50"),
    )
    for key, label in names:
        if key in cols:
            lines.append(f"  {label:<9}{sparkline(cols[key])}")
    return lines


def sparkline(values: list[float | None], width: int = SPARK_WIDTH) -> str:
    """``▁▃█ max 12``; a gap (no value) is a space; at most ``width`` marks (max per group)."""
    step = max(1, -(-len(values) // width))
    groups = [values[i : i + step] for i in range(0, len(values), step)]
    merged = [max((v for v in g if v is not None), default=None) for g in groups]
    top = max((v for v in merged if v is not None), default=None)
    if top is None:
        return "(no values)"
    marks = "".join(
        " "
        if v is None
        else SPARKS[0]
        if top <= 0
        else SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1) + 0.5))]
        for v in merged
    )
    return f"{marks}  max {top:.3g}"
