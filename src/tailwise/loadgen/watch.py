"""Stop a run once an SLO can no longer pass (used by knee trials to save time).

A latency or TTFT SLO with target ``t`` (a deadline at attainment ``t``, or a
``p(100t)`` objective) tolerates at most ``(1 - t) * N`` misses among the ``N``
requests scheduled in the window. A request is a certain miss once it failed,
finished slower than the threshold, or has been out longer than the threshold
without finishing (it can only finish later). ``N`` is not known until the
schedule ends, so the watch uses a generous upper bound, the expected count
plus three standard deviations of a Poisson count, and declares the SLO lost
only when the certain misses exceed the budget even for that ``N``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tailwise.metrics.slo import SLO
from tailwise.records import ABSENT, RecordBlock

WATCHED_METRICS = ("latency", "e2e", "ttft")


@dataclass(frozen=True)
class _Limit:
    spec: str
    metric: str
    threshold_ns: int
    budget: float  # misses allowed among the (upper bound of) window requests


def _target(slo: SLO) -> float | None:
    if slo.kind == "deadline":
        return slo.target
    if slo.kind == "objective" and slo.stat.startswith("p"):
        return float(slo.stat[1:]) / 100.0
    return None


class LossWatch:
    def __init__(self, slos: list[SLO], window_ns: tuple[int, int], expected: float) -> None:
        self.window_ns = window_ns
        n_upper = expected + 3.0 * math.sqrt(max(expected, 1.0))
        self.limits = []
        for slo in slos:
            target = _target(slo)
            if target is not None and slo.metric in WATCHED_METRICS:
                budget = (1.0 - target) * n_upper
                self.limits.append(_Limit(slo.spec, slo.metric, int(slo.threshold), budget))
        self._final: dict[int, list[int]] = {}  # id(block) -> misses, once all rows finished

    def check(self, blocks: list[RecordBlock], now_ns: int) -> str:
        """Why the run is already lost at run-relative ``now_ns`` ('' while it is not)."""
        return self.judge(self.misses(blocks, now_ns)) if self.limits else ""

    def misses(self, blocks: list[RecordBlock], now_ns: int) -> list[int]:
        """Certain misses per limit so far. Counts add up across workers of one plan.

        It runs on the load generator's event loop, so it must stay cheap: a
        block whose rows are all finished has its misses counted once and
        cached; each call scans only the blocks still in play.
        """
        misses = [0] * len(self.limits)
        for block in blocks:
            counted = self._final.get(id(block))
            if counted is None:
                counted, final = self._block_misses(block, now_ns)
                if final:
                    self._final[id(block)] = counted
            misses = [m + c for m, c in zip(misses, counted, strict=True)]
        return misses

    def judge(self, misses: list[int]) -> str:
        """Why certain misses (per limit) already lose the window ('' while they do not)."""
        for lim, n in zip(self.limits, misses, strict=True):
            if n > lim.budget:
                return (
                    f"{lim.spec}: {n} certain misses exceed the {lim.budget:.0f} "
                    f"the whole window could tolerate"
                )
        return ""

    def _block_misses(self, block: RecordBlock, now_ns: int) -> tuple[list[int], bool]:
        """Certain misses per limit in one block, and whether that count can no longer change."""
        sched, done, first, err = _columns(block)
        start, end = self.window_ns
        window = (sched >= start) & (sched < end) & (sched <= now_ns)
        failed = (err != 0) & (done != ABSENT)
        out = []
        for lim in self.limits:
            end_col = first if lim.metric == "ttft" else done
            finished = end_col != ABSENT
            slow = finished & (end_col - sched > lim.threshold_ns)
            overdue = ~finished & (done == ABSENT) & (now_ns - sched > lim.threshold_ns)
            out.append(int((window & (slow | overdue | failed)).sum()))
        final = bool((done != ABSENT).all()) and bool((sched <= now_ns).all())
        return out, final


def _columns(b: RecordBlock) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = b.rows
    return (
        np.frombuffer(b.scheduled_ns, dtype=np.int64, count=n),
        np.frombuffer(b.done_ns, dtype=np.int64, count=n),
        np.frombuffer(b.first_token_ns, dtype=np.int64, count=n),
        np.frombuffer(b.error, dtype=np.int16, count=n),
    )
