"""``LatencyTracker``: live latency, percentiles, goodput and SLOs from inside a service.

::

    tracker = LatencyTracker("rag", window="60s", slos=["latency<=800ms@99%"],
                             budgets={"embed": "30ms", "generate": "600ms"})
    with tracker.request():
        with tracker.stage("embed"):
            ...
    tracker.stats().percentile_ms(99)     # the last minute, HdrHistogram precision
    tracker.slo_report()                  # like summary.json's "slos"
    print(tracker.budget().markdown())    # per-stage budget table with Amdahl ceilings

One series holds the request latencies and one per stage path; each is a
sliding window of buckets (:mod:`tailwise.instrument.window`). Recording is a
lock, a clock read and an append; everything else happens when someone reads.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from tailwise.clock import now_ns
from tailwise.errors import BadInput
from tailwise.instrument.budget import BudgetReport, budget_report
from tailwise.instrument.burn import DEFAULT_RULES, Alert, BurnRateMonitor, BurnRule
from tailwise.instrument.stages import REQUEST, STAGE, Scope, SpanHook
from tailwise.instrument.stats import WindowStats, deadlines_of, evaluate, parse_slos
from tailwise.instrument.window import Clock, Lifetime, Series
from tailwise.units import parse_duration_ns

# Prometheus histogram bounds (seconds): 1 ms to 60 s, roughly 1-2.5-5 per decade.
DEFAULT_LE_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
MAX_BUCKETS = 100_000

Duration = str | float | int


def duration_ns(value: Duration, field: str) -> int:
    """``"250ms"`` or a number of seconds -> ns (> 0); BadInput otherwise."""
    if isinstance(value, bool):
        raise BadInput(field, value, "a duration such as 60s, or seconds as a number")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value <= 0:
            raise BadInput(field, value, "a positive duration")
        return round(value * 1e9)
    return parse_duration_ns(value, field, allow_zero=False)


MAX_LATENCY_NS = 2**62  # 146 years: past it a value is a bug in the caller, not a latency


def checked_ns(latency_ns: object) -> int:
    """A latency as whole ns, or BadInput: NaN, infinities, negatives, values past 2**62
    and non-numbers are refused here, before they can poison a histogram's percentiles."""
    if isinstance(latency_ns, int) and not isinstance(latency_ns, bool):
        value = latency_ns
    elif isinstance(latency_ns, float) and math.isfinite(latency_ns):
        value = round(latency_ns)
    else:
        raise BadInput("latency_ns", latency_ns, "a finite duration in ns >= 0")
    if not 0 <= value <= MAX_LATENCY_NS:
        raise BadInput("latency_ns", latency_ns, "a duration in ns from 0 to 2**62")
    return value


class LatencyTracker:
    """Thread- and asyncio-safe live latency of one kind of request and its stages."""

    def __init__(
        self,
        name: str = "request",
        *,
        window: Duration = "60s",
        bucket: Duration = "1s",
        slos: Sequence[str] = (),
        budgets: Mapping[str, Duration] | None = None,
        le_s: Sequence[float] = DEFAULT_LE_S,
        clock: Clock = now_ns,
    ) -> None:
        self.name = name
        self.clock = clock
        self.bucket_ns = duration_ns(bucket, "bucket")
        window_ns = duration_ns(window, "window")
        self.n_buckets = _buckets(window_ns, self.bucket_ns)
        self.slos = parse_slos(list(slos))
        self.budgets_ns = {k: duration_ns(v, f"budgets[{k}]") for k, v in (budgets or {}).items()}
        self._le_ns = _bounds(le_s)
        self._main = self._series(deadlines_of(self.slos))
        self._stages: dict[str, Series] = {}
        self._stages_lock = threading.Lock()
        self.hooks: list[SpanHook] = []
        self.monitors: list[BurnRateMonitor] = []

    def _series(self, deadlines_ns: Sequence[int] = ()) -> Series:
        return Series(self.bucket_ns, self.n_buckets, self.clock, self._le_ns, deadlines_ns)

    # -- recording ---------------------------------------------------------------

    def record(self, latency_ns: int, ok: bool = True) -> None:
        """One finished request: its latency in ns (>= 0) and whether it succeeded."""
        self._main.record(checked_ns(latency_ns), ok)

    def record_stage(self, path: str, latency_ns: int, ok: bool = True) -> None:
        """One finished stage (by name, or ``parent/child`` path) of ``latency_ns``."""
        series = self._stages.get(path)
        if series is None:
            with self._stages_lock:
                series = self._stages.setdefault(path, self._series())
        series.record(checked_ns(latency_ns), ok)

    def request(self, name: str = "") -> Scope:
        """Times one request into this tracker; stages inside nest under it."""
        return Scope(self, REQUEST, name)

    def stage(self, name: str) -> Scope:
        """Times one stage: ``with tracker.stage("embed"):`` or ``@tracker.stage("embed")``."""
        if not name or "/" in name:
            raise BadInput("stage", name, "a non-empty stage name without '/'")
        return Scope(self, STAGE, name)

    # -- reading -----------------------------------------------------------------

    def _window_buckets(self, window: Duration | None) -> int | None:
        if window is None:
            return None
        return _buckets(duration_ns(window, "window"), self.bucket_ns)

    def stats(self, window: Duration | None = None) -> WindowStats:
        """Requests over the last ``window`` (default: the whole sliding window)."""
        return WindowStats(*self._main.window(self._window_buckets(window)))

    @property
    def stage_paths(self) -> list[str]:
        """Stage paths in the order they were first seen."""
        with self._stages_lock:
            return list(self._stages)

    def stage_stats(self, path: str, window: Duration | None = None) -> WindowStats:
        series = self._stages.get(path)
        if series is None:
            raise BadInput("stage", path, f"a recorded stage ({', '.join(self.stage_paths)})")
        return WindowStats(*series.window(self._window_buckets(window)))

    def lifetime(self, path: str | None = None) -> Lifetime:
        """Totals since creation, for the requests (``None``) or a stage path."""
        return (self._main if path is None else self._stages[path]).lifetime()

    def slo_report(self, window: Duration | None = None) -> list[dict[str, Any]]:
        """Each SLO judged over the window, in summary.json's ``slos`` shape."""
        return evaluate(self.stats(window), self.slos)

    def budget(
        self, speedup: float = 2.0, percentile: float = 99.0, window: Duration | None = None
    ) -> BudgetReport:
        """Per-stage p50/p99, share of the request time, budget vs. actual, Amdahl ceilings."""
        total = self.stats(window)
        stages = {p: self.stage_stats(p, window) for p in self.stage_paths}
        return budget_report(self.name, total, stages, self.budgets_ns, speedup, percentile)

    def burn_monitor(
        self,
        slo: str,
        rules: Sequence[BurnRule] | None = None,
        *,
        scale: float = 1.0,
        on_alert: Any = None,
    ) -> BurnRateMonitor:
        """Attach a multi-window burn-rate monitor for ``slo`` (see :mod:`.burn`)."""
        monitor = BurnRateMonitor(slo, rules or DEFAULT_RULES, scale=scale, on_alert=on_alert)
        monitor.attach(self._main, self.clock)
        self.monitors.append(monitor)
        return monitor

    def alerts(self) -> list[Alert]:
        """Every attached monitor checked now; the alerts firing."""
        return [a for m in self.monitors for a in m.check() if a.firing]


def _buckets(window_ns: int, bucket_ns: int) -> int:
    n = -(-window_ns // bucket_ns)
    if n > MAX_BUCKETS:
        raise BadInput("window", window_ns, f"at most {MAX_BUCKETS} buckets (a larger bucket)")
    return max(n, 1)


def _bounds(le_s: Sequence[float]) -> list[int]:
    bounds = [round(float(b) * 1e9) for b in le_s]
    if not bounds or any(b <= 0 for b in bounds) or bounds != sorted(set(bounds)):
        raise BadInput("le_s", le_s, "increasing positive bucket bounds in seconds")
    return bounds
