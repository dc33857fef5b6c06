"""Multi-window, multi-burn-rate error-budget alerts (Google SRE workbook, "Alerting on SLOs").

An SLO with target 99.9% has an error budget of 0.1% of requests. The *burn
rate* over a window is the bad share in that window divided by the budget: 1
spends the budget exactly over the SLO period, 14.4 spends 2% of a 30-day
budget in one hour. A rule fires when both its long window (significance: a
real budget spent) and its short window (recency: still happening, so the
alert resets soon after a fix) burn faster than its factor. The defaults are
the workbook's table: page at 14.4 over 1 h and 5 m, page at 6 over 6 h and
30 m, ticket at 1 over 3 d and 6 h.

``scale`` multiplies every window (``scale=1/360`` turns 1 h into 10 s), for
tests and demos. The SLO is a CLI string: a deadline (``latency<=300ms@99.9%``:
bad = failed or slower) or ``error_rate<=0.1%`` (bad = failed).

Counts arrive from the tracker's folds, stamped with their tracker bucket's
start, into the monitor's own coarser buckets (a tenth of the shortest
window), so the windows are resolved to the larger of the two bucket sizes.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tailwise.errors import BadInput
from tailwise.instrument.window import Clock, Fold, Series
from tailwise.metrics.slo import parse_slo

BURN_FORM = "a deadline SLO such as latency<=300ms@99.9%, or error_rate<=0.1%"


@dataclass(frozen=True)
class BurnRule:
    """Fire when both windows burn faster than ``factor`` (windows in seconds, unscaled)."""

    long_s: float
    short_s: float
    factor: float
    severity: str = "page"

    def __post_init__(self) -> None:
        if not (0 < self.short_s <= self.long_s and math.isfinite(self.long_s)):
            raise BadInput("rule", self, "0 < short_s <= long_s, finite")
        if not (self.factor > 0 and math.isfinite(self.factor)):
            raise BadInput("rule.factor", self.factor, "a burn-rate factor > 0")


DEFAULT_RULES = (
    BurnRule(3600, 300, 14.4, "page"),
    BurnRule(6 * 3600, 1800, 6.0, "page"),
    BurnRule(3 * 86400, 6 * 3600, 1.0, "ticket"),
)


@dataclass(frozen=True)
class Alert:
    """One rule's state at one check. Windows are the scaled ones, in seconds."""

    slo: str
    severity: str
    factor: float
    long_s: float
    short_s: float
    burn_long: float
    burn_short: float
    firing: bool
    at_ns: int


class BurnRateMonitor:
    """Error-budget burn of one SLO over several windows; ``on_alert`` hears every change."""

    def __init__(
        self,
        slo: str,
        rules: Sequence[BurnRule] = DEFAULT_RULES,
        *,
        scale: float = 1.0,
        on_alert: Callable[[Alert], None] | None = None,
    ) -> None:
        if not (scale > 0 and math.isfinite(scale)):
            raise BadInput("scale", scale, "a positive factor on every window, e.g. 1/360")
        if not rules:
            raise BadInput("rules", rules, "at least one BurnRule")
        self.spec, self.deadline_ns, self.budget = _parse(slo)
        self.rules = tuple(rules)
        self.scale = scale
        self.on_alert = on_alert
        windows = {round(w * scale * 1e9) for r in self.rules for w in (r.long_s, r.short_s)}
        self.windows_ns = sorted(windows)
        self.bucket_ns = max(self.windows_ns[0] // 10, 1)
        self._counts: dict[int, list[int]] = {}  # monitor slot -> [total, bad]
        self._lock = threading.Lock()
        self._check_lock = threading.Lock()  # one check at a time: each change heard once
        self._firing = [False] * len(self.rules)
        self._series: Series | None = None
        self._clock: Clock | None = None
        self._last_check_ns = -(2**62)

    def attach(self, series: Series, clock: Clock) -> None:
        """Count ``series``'s requests from now on; check (at most once a bucket) as it rotates."""
        if self.deadline_ns is not None:
            series.add_deadline(self.deadline_ns)
        series.add_listener(self._add)
        series.on_rotate.append(self._maybe_check)
        self._series, self._clock = series, clock

    def _add(self, start_ns: int, f: Fold) -> None:
        good = f.n_ok if self.deadline_ns is None else f.within.get(self.deadline_ns, 0)
        slot = start_ns // self.bucket_ns
        with self._lock:
            cell = self._counts.setdefault(slot, [0, 0])
            cell[0] += f.n
            cell[1] += f.n - good
            horizon = slot - self.windows_ns[-1] // self.bucket_ns - 2
            if len(self._counts) > self.windows_ns[-1] // self.bucket_ns + 4:
                for old in [s for s in self._counts if s < horizon]:
                    del self._counts[old]

    def burn_rate(self, window_ns: int, now_ns: int | None = None) -> float:
        """Bad share over the last ``window_ns`` divided by the error budget (0 when idle)."""
        if now_ns is None:
            now_ns = self._now()
        first = now_ns // self.bucket_ns - max(-(-window_ns // self.bucket_ns), 1) + 1
        with self._lock:
            total = bad = 0
            for slot, (n, b) in self._counts.items():
                if slot >= first:
                    total += n
                    bad += b
        return bad / total / self.budget if total else 0.0

    def burn_rates(self) -> dict[int, float]:
        """Window ns -> burn rate, for every window of every rule (after a flush)."""
        self._flush()
        now_ns = self._now()
        return {w: self.burn_rate(w, now_ns) for w in self.windows_ns}

    def check(self) -> list[Alert]:
        """Every rule judged now; ``on_alert`` is called for each that started or stopped firing."""
        with self._check_lock:
            return self._check()

    def _check(self) -> list[Alert]:
        rates = self.burn_rates()
        now_ns = self._now()
        self._last_check_ns = now_ns
        out = []
        for i, rule in enumerate(self.rules):
            long_ns, short_ns = (round(w * self.scale * 1e9) for w in (rule.long_s, rule.short_s))
            burn_long, burn_short = rates[long_ns], rates[short_ns]
            firing = burn_long > rule.factor and burn_short > rule.factor
            alert = Alert(
                self.spec,
                rule.severity,
                rule.factor,
                long_ns / 1e9,
                short_ns / 1e9,
                burn_long,
                burn_short,
                firing,
                now_ns,
            )
            out.append(alert)
            if firing != self._firing[i]:
                self._firing[i] = firing
                if self.on_alert is not None:
                    self.on_alert(alert)
        return out

    def _maybe_check(self) -> None:
        if self._now() - self._last_check_ns >= self.bucket_ns:
            self.check()

    def _flush(self) -> None:
        if self._series is not None:
            self._series.flush()

    def _now(self) -> int:
        if self._clock is None:
            raise BadInput("monitor", self.spec, "a monitor attached to a tracker")
        return self._clock()


def _parse(spec: str) -> tuple[str, int | None, float]:
    """(spec, deadline ns or None for error_rate, error budget as a share)."""
    slo = parse_slo(spec) if isinstance(spec, str) else None
    if slo is None:
        raise BadInput("slo", spec, BURN_FORM)
    if slo.kind == "deadline" and slo.metric in ("latency", "e2e", "service"):
        budget, deadline = 1.0 - slo.target, int(slo.threshold)
    elif slo.kind == "rate" and slo.stat == "error_rate":
        budget, deadline = slo.threshold, None
    else:
        raise BadInput("slo", spec, BURN_FORM)
    if not budget > 0:
        raise BadInput("slo", spec, "a target below 100% (a zero error budget cannot burn)")
    return slo.spec, deadline, budget
