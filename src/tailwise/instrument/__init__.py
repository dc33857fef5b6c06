"""In-process instrumentation: the same honest numbers from inside a running service.

::

    tracker         LatencyTracker: sliding window of HdrHistograms, SLOs, stages
    ├── window      Series: the hot path (lock, clock, append) and lazy folding
    ├── stats       WindowStats: count, mean, max, percentiles, goodput, SLO verdicts
    ├── stages      Scope: request/stage timing via contextvars (sync, async, threads)
    ├── budget      per-stage budget table with Amdahl ceilings
    └── burn        BurnRateMonitor: multi-window, multi-burn-rate error-budget alerts
    asgi            LatencyMiddleware: per-route latency, in flight, Little's law, first chunk
    prometheus      text exposition, /metrics ASGI app, prometheus_client collector, push
    └── promtext    the Prometheus text format itself (the demo targets write it too)
    otel            spans per scope and metrics (extra ``otel``, imported on use)

Nothing here starts a thread or touches global state at import.
"""

from __future__ import annotations

from typing import Any

from tailwise.instrument.asgi import InFlight, LatencyMiddleware
from tailwise.instrument.budget import BudgetReport, BudgetRow
from tailwise.instrument.burn import DEFAULT_RULES, Alert, BurnRateMonitor, BurnRule
from tailwise.instrument.prometheus import exposition, metrics_app
from tailwise.instrument.stages import Scope, SpanHook
from tailwise.instrument.stats import WindowStats
from tailwise.instrument.tracker import LatencyTracker

__all__ = [
    "DEFAULT_RULES",
    "Alert",
    "BudgetReport",
    "BudgetRow",
    "BurnRateMonitor",
    "BurnRule",
    "InFlight",
    "LatencyMiddleware",
    "LatencyTracker",
    "Scope",
    "SpanHook",
    "WindowStats",
    "exposition",
    "instrument_otel",
    "metrics_app",
]


def __getattr__(name: str) -> Any:
    if name == "instrument_otel":  # the otel extra is imported only when asked for
        from tailwise.instrument.otel import instrument_otel

        return instrument_otel
    raise AttributeError(name)
