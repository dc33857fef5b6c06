"""OpenTelemetry export (extra ``otel``): a span per request and stage, and metrics.

::

    from tailwise.instrument.otel import instrument_otel
    instrument_otel(tracker)          # global tracer and meter providers by default

Every ``tracker.request()`` and ``tracker.stage()`` scope becomes a span, opened
as the current OpenTelemetry span, so stages nest under their request (and a
request under whatever span was current, e.g. an incoming HTTP server span)
and spans made by other libraries inside a stage nest under the stage. A
failed scope sets the span status to ERROR (and records the exception).

Metrics: histograms ``tailwise.request.duration`` and ``tailwise.stage.duration``
(seconds, one observation per scope), and an observable gauge
``tailwise.window.duration`` with the sliding window's percentiles per series
(attributes ``tailwise.tracker``, ``tailwise.stage``, ``quantile``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tailwise.errors import MissingExtra
from tailwise.instrument.stages import REQUEST
from tailwise.instrument.tracker import LatencyTracker

QUANTILES = (0.5, 0.9, 0.99, 0.999)


def _otel() -> tuple[Any, Any, Any]:
    try:
        from opentelemetry import context, metrics, trace
    except ImportError as exc:
        raise MissingExtra("opentelemetry", "otel", exc.name or "opentelemetry") from None
    return context, metrics, trace


@dataclass(frozen=True)
class _Open:
    span: Any
    token: Any
    tracker: str
    kind: str
    path: str


class OTelHook:
    """A :class:`~tailwise.instrument.stages.SpanHook` that makes spans and records durations."""

    def __init__(self, tracer: Any, meter: Any) -> None:
        self._context, _, self._trace = _otel()
        self._tracer = tracer
        self._durations = {
            kind: meter.create_histogram(
                f"tailwise.{kind}.duration", unit="s", description=f"Duration of each {kind}."
            )
            for kind in ("request", "stage")
        }

    def open(self, tracker: str, kind: str, path: str) -> object:
        leaf = path.rsplit("/", 1)[-1]
        span = self._tracer.start_span(leaf, attributes={"tailwise.tracker": tracker})
        if kind != REQUEST:
            span.set_attribute("tailwise.stage", path)
        token = self._context.attach(self._trace.set_span_in_context(span))
        return _Open(span, token, tracker, kind, path)

    def close(
        self,
        handle: object,
        duration_ns: int,
        ok: bool,
        error: BaseException | None,
        attributes: dict[str, Any],
    ) -> None:
        assert isinstance(handle, _Open)
        span = handle.span
        self._context.detach(handle.token)
        for key, value in attributes.items():
            span.set_attribute(key, value)
        route = attributes.get("http.route")
        if route:  # the HTTP semantic conventions' span name: "GET /items/{id}"
            span.update_name(f"{attributes.get('http.request.method', '')} {route}".strip())
        if error is not None:
            span.record_exception(error)
        if not ok:
            status = self._trace.Status(
                self._trace.StatusCode.ERROR, type(error).__name__ if error else None
            )
            span.set_status(status)
        span.end()
        labels = {"tailwise.tracker": handle.tracker}
        if handle.kind != REQUEST:
            labels["tailwise.stage"] = handle.path
        kind = "request" if handle.kind == REQUEST else "stage"
        self._durations[kind].record(duration_ns / 1e9, labels)


def instrument_otel(
    tracker: LatencyTracker,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    quantiles: Sequence[float] = QUANTILES,
) -> OTelHook:
    """Send ``tracker``'s scopes to OpenTelemetry as spans and metrics; returns the hook."""
    _, metrics, trace = _otel()
    tracer = trace.get_tracer("tailwise.instrument", tracer_provider=tracer_provider)
    meter = metrics.get_meter("tailwise.instrument", meter_provider=meter_provider)
    hook = OTelHook(tracer, meter)
    tracker.hooks.append(hook)

    def observe(options: Any) -> Iterable[Any]:
        return _window_observations(metrics, tracker, quantiles)

    meter.create_observable_gauge(
        "tailwise.window.duration",
        callbacks=[observe],
        unit="s",
        description="Duration percentiles over the tracker's sliding window.",
    )
    return hook


def _window_observations(
    metrics: Any, tracker: LatencyTracker, quantiles: Sequence[float]
) -> list[Any]:
    out = []
    series = [("", tracker.stats()), *((p, tracker.stage_stats(p)) for p in tracker.stage_paths)]
    for path, stats in series:
        if not stats.count:
            continue
        attrs = {"tailwise.tracker": tracker.name, "tailwise.stage": path or "(request)"}
        for q in quantiles:
            value_s = stats.percentile_ms(q * 100) / 1e3
            out.append(metrics.Observation(value_s, {**attrs, "quantile": f"{q:g}"}))
    return out
