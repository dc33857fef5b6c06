"""What a window of one series says: counts, mean, max, percentiles, goodput, SLOs.

SLOs use the CLI's syntax (:func:`tailwise.metrics.slo.parse_slo`) and its
rules (DESIGN, metric definitions): a request is *good* when it succeeded and
met every deadline; objectives (``p99(latency)<=200ms``) count failed requests
as infinitely slow; rates divide by the time the window actually covers.
In-process there is one duration per request, so the metrics ``latency``,
``e2e`` and ``service`` all name it; the client-only metrics (TTFT, TPOT,
ITL, send lag) are refused.
"""

from __future__ import annotations

import math
from typing import Any

from tailwise.errors import BadInput
from tailwise.instrument.hdr import Counts, target_rank
from tailwise.instrument.window import Bucket, merge_counts
from tailwise.metrics.slo import SLO, parse_slo

IN_PROCESS_METRICS = frozenset({"latency", "e2e", "service"})


def parse_slos(specs: list[str] | tuple[str, ...], field: str = "slo") -> list[SLO]:
    """CLI-syntax SLO strings that an in-process tracker can judge (BadInput otherwise)."""
    out = []
    for spec in specs:
        slo = parse_slo(spec) if isinstance(spec, str) else None
        if slo is None:
            raise BadInput(field, spec, "an SLO string such as 'p99(latency)<=200ms'")
        if slo.kind != "rate" and slo.metric not in IN_PROCESS_METRICS:
            raise BadInput(field, spec, "a latency SLO (in-process there is no TTFT, TPOT, ITL)")
        out.append(slo)
    return out


def deadlines_of(slos: list[SLO]) -> list[int]:
    return [int(s.threshold) for s in slos if s.kind == "deadline"]


class WindowStats:
    """A read-only summary of one series over a window (all durations in ns inside)."""

    def __init__(self, buckets: list[Bucket], start_ns: int, end_ns: int) -> None:
        self.start_ns, self.end_ns = start_ns, end_ns
        self.ok = sum(b.n_ok for b in buckets)
        self.failed = sum(b.n_failed for b in buckets)
        self.count = self.ok + self.failed
        self.sum_ns = sum(b.sum_ns for b in buckets)
        self.max_ns = max((b.max_ns for b in buckets), default=0)
        nonempty = [b.min_ns for b in buckets if b.n_ok + b.n_failed]
        self.min_ns = min(nonempty, default=0)
        self._within: dict[int, int] = {}
        for b in buckets:
            for d, n in b.within.items():
                self._within[d] = self._within.get(d, 0) + n
        self.all: Counts = merge_counts(buckets, None)
        self.ok_counts: Counts = merge_counts(buckets, False)

    @property
    def duration_s(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e9

    @property
    def mean_ms(self) -> float:
        return self.sum_ns / self.count / 1e6 if self.count else 0.0

    @property
    def max_ms(self) -> float:
        return self.max_ns / 1e6

    def percentile_ms(self, q: float, ok_only: bool = False) -> float:
        """Percentile ``q`` (0-100) at HdrHistogram precision (0 when empty).

        Over every finished request by default: a fast error is still a
        response someone waited for. ``ok_only`` gives the load generator's
        definition (summary.json's ``latency_ms`` is over successful requests).
        The histogram reports a bucket's top, which can lie above the exact
        maximum, so the value is clamped to the window's exact min and max.
        """
        if not 0 <= q <= 100:
            raise BadInput("percentile", q, "a number from 0 to 100")
        counts = self.ok_counts if ok_only else self.all
        if counts.total == 0:
            return 0.0
        return min(max(counts.percentile_ns(q), self.min_ns), self.max_ns) / 1e6

    def percentiles_ms(self, qs: tuple[float, ...] = (50, 90, 95, 99, 99.9)) -> dict[str, float]:
        return {_key(q): self.percentile_ms(q) for q in qs}

    @property
    def throughput_rps(self) -> float:
        return self.count / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def error_rate(self) -> float:
        return self.failed / self.count if self.count else 0.0

    def good(self, deadline_ns: int | None) -> int:
        """Requests that succeeded and finished within ``deadline_ns`` (None: any time)."""
        if deadline_ns is None:
            return self.ok
        if deadline_ns not in self._within:
            raise BadInput("deadline", deadline_ns, "a deadline the tracker was built with")
        return self._within[deadline_ns]

    def goodput_rps(self, deadline_ns: int | None) -> float:
        return self.good(deadline_ns) / self.duration_s if self.duration_s > 0 else 0.0

    def attainment(self, deadline_ns: int | None) -> float:
        return self.good(deadline_ns) / self.count if self.count else 0.0

    def objective_ns(self, stat: str) -> float:
        """``p99``/``mean``/``max`` with failed requests as infinitely slow (inf if reached)."""
        if self.count == 0:
            return math.inf
        if stat in ("mean", "max"):
            if self.failed:
                return math.inf
            return self.sum_ns / self.count if stat == "mean" else float(self.max_ns)
        rank = target_rank(float(stat[1:]), self.count)
        if rank > self.ok:  # the failed requests sit above every ok one
            return math.inf
        return float(min(self.ok_counts.value_at_rank_ns(rank), self.max_ns))

    def as_dict(self) -> dict[str, Any]:
        """The summary.json distribution keys (ms), plus window, rates and counts."""
        out: dict[str, Any] = self.percentiles_ms()
        out.update(max=self.max_ms, mean=self.mean_ms, count=self.count)
        out.update(ok=self.ok, failed=self.failed, window_s=self.duration_s)
        out.update(throughput_rps=self.throughput_rps, error_rate=self.error_rate)
        return out


def _key(q: float) -> str:
    """50 -> "p50", 99.9 -> "p999", as summary.json names them."""
    return "p" + f"{q:g}".replace(".", "")


def good_deadline(slos: list[SLO]) -> int | None:
    """Meeting every deadline SLO (all on the one in-process duration) = meeting the tightest."""
    deadlines = deadlines_of(slos)
    return min(deadlines) if deadlines else None


def evaluate(stats: WindowStats, slos: list[SLO]) -> list[dict[str, Any]]:
    """One entry per SLO, shaped like summary.json's ``slos``: spec, kind, value, passed."""
    strictest = good_deadline(slos)
    out: list[dict[str, Any]] = []
    for s in slos:
        entry: dict[str, Any] = {"spec": s.spec, "kind": s.kind}
        if s.kind == "deadline":
            att = stats.attainment(int(s.threshold))
            entry.update(
                attainment=att, target=s.target, passed=stats.count > 0 and att >= s.target
            )
        elif s.kind == "objective":
            value = stats.objective_ns(s.stat)
            finite = math.isfinite(value)
            entry.update(
                value=value / 1e6 if finite else None,
                unit="ms",
                passed=finite and value <= s.threshold,
            )
        else:
            value = _rate(stats, s.stat, strictest)
            ok = value <= s.threshold if s.stat == "error_rate" else value >= s.threshold
            entry.update(value=value, passed=stats.count > 0 and ok)
        out.append(entry)
    return out


def _rate(stats: WindowStats, name: str, strictest: int | None) -> float:
    if name == "error_rate":
        return stats.error_rate
    if name == "attainment":
        return stats.attainment(strictest)
    if name == "goodput":
        return stats.goodput_rps(strictest)
    return stats.throughput_rps
