"""Prometheus exposition of trackers, the ASGI middleware and burn-rate monitors.

Two kinds of numbers, kept apart because Prometheus treats them differently:

* **histograms and counters** (``..._duration_seconds``, ``..._failures_total``)
  are cumulative since the process started, as Prometheus requires (``rate()``
  and ``histogram_quantile()`` work on them; a sliding window would make a
  counter go down);
* **window gauges** (``..._window_seconds{quantile="0.99"}``, mean, max,
  throughput, goodput, SLO attainment, burn rates) are over the tracker's
  sliding window, at HdrHistogram precision: the live p99 to alert on
  (seed 001: the p99, not the mean).

The text is produced without any dependency (:func:`exposition`,
:func:`metrics_app`, an ASGI app to mount at ``/metrics``). With the
``prometheus`` extra, :class:`Collector` puts the same families into a
``prometheus_client`` registry, and :func:`push` sends them to a Pushgateway.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tailwise.errors import MissingExtra
from tailwise.instrument.asgi import LatencyMiddleware, Receive, Send
from tailwise.instrument.burn import BurnRateMonitor
from tailwise.instrument.promtext import CONTENT_TYPE, Exposition, Labels
from tailwise.instrument.stats import WindowStats, evaluate
from tailwise.instrument.tracker import LatencyTracker
from tailwise.instrument.window import Lifetime

QUANTILES = (0.5, 0.9, 0.99, 0.999)
Source = LatencyTracker | LatencyMiddleware | BurnRateMonitor


def exposition(*sources: Source, prefix: str = "tailwise_") -> str:
    """The Prometheus text for every source (trackers, middleware, monitors)."""
    ex = Exposition(prefix)
    for source in sources:
        export(ex, source)
    return ex.render()


def export(ex: Exposition, source: Source, quantiles: Sequence[float] = QUANTILES) -> None:
    """Add one source's families to ``ex`` (families merge across sources)."""
    if isinstance(source, LatencyMiddleware):
        _export_middleware(ex, source, quantiles)
    elif isinstance(source, BurnRateMonitor):
        _export_monitor(ex, source, {})
    else:
        _export_tracker(ex, source, quantiles)


def _series(
    ex: Exposition,
    family: str,
    what: str,
    labels: Labels,
    life: Lifetime,
    stats: WindowStats,
    quantiles: Sequence[float],
) -> None:
    """A lifetime histogram, a failure counter and window gauges for one series."""
    bounds_s = [b / 1e9 for b in life.le_ns]
    ex.histogram(
        f"{family}_duration_seconds",
        bounds_s,
        list(life.le_counts[:-1]),
        life.count,
        life.sum_ns / 1e9,
        f"{what} duration since start.",
        labels,
    )
    ex.counter(f"{family}_failures", life.failed, f"{what}s that failed, since start.", labels)
    for q in quantiles:
        ex.gauge(
            f"{family}_window_seconds",
            stats.percentile_ms(q * 100) / 1e3,
            f"{what} duration percentile over the sliding window (HdrHistogram, 3 digits).",
            {**labels, "quantile": f"{q:g}"},
        )
    ex.gauge(f"{family}_window_mean_seconds", stats.mean_ms / 1e3, f"{what} mean, window.", labels)
    ex.gauge(f"{family}_window_max_seconds", stats.max_ms / 1e3, f"{what} max, window.", labels)
    ex.gauge(f"{family}_window_count", stats.count, f"{what}s finished in the window.", labels)


def _export_tracker(ex: Exposition, t: LatencyTracker, quantiles: Sequence[float]) -> None:
    labels = {"tracker": t.name}
    stats = t.stats()
    _series(ex, "request", "Request", labels, t.lifetime(), stats, quantiles)
    ex.gauge(
        "request_window_throughput_per_second",
        stats.throughput_rps,
        "Requests finished per second over the window.",
        labels,
    )
    _export_slos(ex, t, stats, labels)
    for path in t.stage_paths:
        stage_labels = {**labels, "stage": path}
        s = t.stage_stats(path)
        _series(ex, "stage", "Stage", stage_labels, t.lifetime(path), s, quantiles)
    for monitor in t.monitors:
        _export_monitor(ex, monitor, labels)


def _export_slos(ex: Exposition, t: LatencyTracker, stats: WindowStats, labels: Labels) -> None:
    for entry in evaluate(stats, t.slos):
        slo_labels = {**labels, "slo": entry["spec"]}
        if entry["kind"] == "deadline":
            ex.gauge("slo_attainment", entry["attainment"], "Share of good requests.", slo_labels)
        elif entry["kind"] == "objective":
            value = entry["value"] / 1e3 if entry["value"] is not None else math.inf
            ex.gauge("slo_objective_seconds", value, "The SLO's statistic.", slo_labels)
        else:
            ex.gauge("slo_rate", entry["value"], "The SLO's rate (share or per s).", slo_labels)
        ex.gauge("slo_passed", int(entry["passed"]), "1 if the SLO holds.", slo_labels)


def _export_middleware(ex: Exposition, mw: LatencyMiddleware, quantiles: Sequence[float]) -> None:
    _export_tracker(ex, mw.tracker, quantiles)
    for route, rs in sorted(mw.routes.items()):
        labels = {"route": route}
        _series(
            ex,
            "http_request",
            "HTTP request",
            labels,
            rs.latency.lifetime(),
            rs.latency.stats(),
            quantiles,
        )
        chunk = rs.first_chunk.lifetime()
        if chunk.count:
            what = "Time to first body chunk (streaming)"
            _series(ex, "http_first_chunk", what, labels, chunk, rs.first_chunk.stats(), quantiles)
    ex.gauge("http_requests_in_flight", mw.in_flight.level, "HTTP requests in flight now.")
    law = mw.littles_law()
    ex.gauge("http_littles_l", law["l_measured"], "Time-averaged requests in flight, window.")
    ex.gauge("http_littles_lambda_w", law["lambda_w"], "Throughput x mean latency, window.")
    ex.gauge("http_littles_rel_gap", law["rel_gap"], "|L - lambda W| / max(L, lambda W).")


def _export_monitor(ex: Exposition, m: BurnRateMonitor, labels: Labels) -> None:
    base = {**labels, "slo": m.spec}
    for window_ns, rate in m.burn_rates().items():
        ex.gauge(
            "slo_burn_rate",
            rate,
            "Bad share over the window / error budget (1: spent exactly over the period).",
            {**base, "window": _seconds(window_ns)},
        )
    for alert in m.check():
        rule = {
            "severity": alert.severity,
            "long": _seconds(round(alert.long_s * 1e9)),
            "short": _seconds(round(alert.short_s * 1e9)),
            "factor": f"{alert.factor:g}",
        }
        ex.gauge(
            "slo_burn_alert",
            int(alert.firing),
            "1 while both windows burn faster than the factor.",
            {**base, **rule},
        )


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:g}s"


# -- serving and pushing --------------------------------------------------------


def metrics_app(*sources: Source) -> Any:
    """A pure ASGI app answering every GET with the exposition (mount it at ``/metrics``)."""

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = exposition(*sources).encode()
        headers = [(b"content-type", CONTENT_TYPE.encode()), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def _client() -> Any:
    try:
        import prometheus_client
        import prometheus_client.parser
    except ImportError as exc:
        raise MissingExtra("prometheus", "prometheus", exc.name or "prometheus_client") from None
    return prometheus_client


class Collector:
    """A ``prometheus_client`` collector of these sources (``registry.register(Collector(t))``)."""

    def __init__(self, *sources: Source) -> None:
        self.parser = _client().parser
        self.sources = sources

    def collect(self) -> Any:
        # One source of truth: the text above, parsed into prometheus_client's families.
        yield from self.parser.text_string_to_metric_families(exposition(*self.sources))


def push(gateway: str, job: str, *sources: Source, timeout_s: float = 10.0) -> None:
    """Replace ``job``'s metrics on a Pushgateway (``host:port`` or URL) with these sources."""
    client = _client()
    registry = client.CollectorRegistry()
    registry.register(Collector(*sources))
    client.push_to_gateway(gateway, job=job, registry=registry, timeout=timeout_s)


def serve(port: int, *sources: Source, addr: str = "127.0.0.1") -> Any:
    """Serve ``/metrics`` from a background thread (``prometheus_client``); returns the server."""
    client = _client()
    registry = client.CollectorRegistry()
    registry.register(Collector(*sources))
    server, _thread = client.start_http_server(port, addr=addr, registry=registry)
    return server
