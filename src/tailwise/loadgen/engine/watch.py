"""Stop a run once an SLO can no longer pass, or once every SLO is decided.

:class:`LossWatch` (knee trials, to save time) and :class:`Sequential`
(``--duration auto``: a run that lasts until the sample decides, up to a cap).

A latency or TTFT SLO with target ``t`` (a deadline at attainment ``t``, or a
``p(100t)`` objective) tolerates at most ``(1 - t) * N`` misses among the ``N``
requests scheduled in the window. A request is a certain miss once it failed,
finished slower than the threshold, or has been out longer than the threshold
without finishing (it can only finish later). ``N`` is not known until the
schedule ends, so the watch uses a generous upper bound, the expected count
plus three standard deviations of a Poisson count, and declares the SLO lost
only when the certain misses exceed the budget even for that ``N``.

With ``--warmup auto`` the summary judges the window past MSER-5's transient, which
may cut up to half of the window's successful requests: a miss in that part could be
cut, and counting it would stop a trial as lost that its own summary passes (a slow
cold start). There the watch counts only requests scheduled after the ``N/2``-th
successful one, which no cut can reach (:meth:`LossWatch.kept_after`), and so can
stop a trial only in its second half.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tailwise.metrics.catalog import CATALOG, lookup
from tailwise.metrics.fifo import FifoQueue, fifo_queue
from tailwise.metrics.slo import SLO
from tailwise.metrics.steady import auto_start_ns
from tailwise.metrics.tail import idle_on_arrival, regeneration
from tailwise.metrics.uncertainty import CONFIDENCE, decide_within, decision_level
from tailwise.records import ABSENT, BLOCK_ROWS, RecordBlock

# SLO metrics the watch can judge early: those ending at a column it reads (catalog
# ``watch_end``), measured from the scheduled time.
WATCHED_METRICS = tuple(name for m in CATALOG if m.watch_end for name in m.names)
WATCH_COLUMNS = ("done_ns", "first_token_ns")
WATCH_MIN_WINDOW_NS = 1_000_000_000  # a watch judges after this much window (see judge_from_ns)


def judge_from_ns(window_ns: tuple[int, int]) -> int:
    """When a loss watch may first judge, in one process or across workers: after a
    second of window (or half of a shorter one). The loss may be certain sooner, but
    the run's own checks (send lag, Little) need samples."""
    start_ns, end_ns = window_ns
    return start_ns + min(WATCH_MIN_WINDOW_NS, (end_ns - start_ns) // 2)


def _end_column(metric: str, done: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The column whose arrival ends ``metric`` (its catalog ``watch_end``)."""
    end = lookup(metric).watch_end
    return first if end == "first_token_ns" else done


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
    def __init__(
        self,
        slos: list[SLO],
        window_ns: tuple[int, int],
        expected: float,
        *,
        auto_warmup: bool = False,
    ) -> None:
        self.window_ns = window_ns
        n_upper = expected + 3.0 * math.sqrt(max(expected, 1.0))
        # --warmup auto: a cut keeps every successful request from the (S/2)-th on, S
        # the window's successful requests (steady.auto_start_ns; S <= n_upper).
        self.uncut_rank = math.ceil(n_upper / 2) if auto_warmup else 0
        self.limits = []
        for slo in slos:
            target = _target(slo)
            if target is not None and slo.metric in WATCHED_METRICS:
                budget = (1.0 - target) * n_upper
                self.limits.append(_Limit(slo.spec, slo.metric, int(slo.threshold), budget))
        self._final: dict[int, list[int]] = {}  # id(block) -> misses, once all rows finished
        # --warmup auto: id(block) -> (window successes, last scheduled instant), once full
        # and finished (kept_after walks every block at each check: these cost nothing)
        self._ok: dict[int, tuple[int, int]] = {}

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
        after_ns = self.kept_after(blocks) if self.uncut_rank else None
        if self.uncut_rank and after_ns is None:
            return misses  # no request is past every possible cut yet
        for block in blocks:
            done_ok = self._ok.get(id(block))
            if after_ns is not None and done_ok is not None and done_ok[1] <= after_ns:
                continue  # wholly where a cut may reach
            counted = self._final.get(id(block))
            if counted is None:
                counted, final = self._block_misses(block, now_ns, after_ns)
                if final:
                    self._final[id(block)] = counted
            misses = [m + c for m, c in zip(misses, counted, strict=True)]
        return misses

    def kept_after(self, blocks: list[RecordBlock]) -> int | None:
        """``--warmup auto``: the scheduled instant of the ``uncut_rank``-th successful
        window request in scheduled order (None: not that many yet). Requests scheduled
        after it are in the summary's window whatever MSER-5 cuts. Counting only the
        successes known now, the instant is no earlier than the final one: safe."""
        seen = 0
        for block in blocks:
            done_ok = self._ok.get(id(block))
            ok = None
            if done_ok is None:
                sched, done, _, err = _columns(block)
                ok = self._succeeded(sched, done, err)
                count = int(ok.sum())
                if _full_and_finished(block, done):
                    self._ok[id(block)] = (count, int(sched.max()))
            else:
                count = done_ok[0]
            if seen + count >= self.uncut_rank:
                if ok is None:  # a cached block: its columns are read only here
                    sched, done, _, err = _columns(block)
                    ok = self._succeeded(sched, done, err)
                at = sched[ok]
                if len(at) > 1 and not bool(np.all(at[1:] >= at[:-1])):
                    at = np.sort(at)
                return int(at[self.uncut_rank - seen - 1])
            seen += count
        return None

    def _succeeded(self, sched: np.ndarray, done: np.ndarray, err: np.ndarray) -> np.ndarray:
        start, end = self.window_ns
        ok: np.ndarray = (sched >= start) & (sched < end) & (done != ABSENT) & (err == 0)
        return ok

    def judge(self, misses: list[int]) -> str:
        """Why certain misses (per limit) already lose the window ('' while they do not)."""
        for lim, n in zip(self.limits, misses, strict=True):
            if n > lim.budget:
                return (
                    f"{lim.spec}: {n} certain misses exceed the {lim.budget:.0f} "
                    f"the whole window could tolerate"
                )
        return ""

    def _block_misses(
        self, block: RecordBlock, now_ns: int, after_ns: int | None = None
    ) -> tuple[list[int], bool]:
        """Certain misses per limit in one block (scheduled after ``after_ns`` where given),
        and whether that count can no longer change."""
        sched, done, first, err = _columns(block)
        start, end = self.window_ns
        window = (sched >= start) & (sched < end) & (sched <= now_ns)
        if after_ns is not None:
            window &= sched > after_ns
        failed = (err != 0) & (done != ABSENT)
        out = []
        for lim in self.limits:
            end_col = _end_column(lim.metric, done, first)
            finished = end_col != ABSENT
            slow = finished & (end_col - sched > lim.threshold_ns)
            overdue = ~finished & (done == ABSENT) & (now_ns - sched > lim.threshold_ns)
            out.append(int((window & (slow | overdue | failed)).sum()))
        final = _full_and_finished(block, done) and bool((sched <= now_ns).all())
        if after_ns is not None and not (block.rows and int(sched.min()) > after_ns):
            final = False  # a later, earlier after_ns would count more of it
        return out, final


def _full_and_finished(block: RecordBlock, done: np.ndarray) -> bool:
    """No row will be added to the block (the engine fills one at a time) or change."""
    return block.rows == BLOCK_ROWS and bool((done != ABSENT).all())


def _columns(b: RecordBlock) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = b.rows
    return (
        np.frombuffer(b.scheduled_ns, dtype=np.int64, count=n),
        np.frombuffer(b.done_ns, dtype=np.int64, count=n),
        np.frombuffer(b.first_token_ns, dtype=np.int64, count=n),
        np.frombuffer(b.error, dtype=np.int16, count=n),
    )


# -- sequential trials: stop once every SLO is decided ---------------------------------------

FIRST_LOOK = 128  # window requests at the first look; each later look doubles the count
OVERALL_CONFIDENCE = CONFIDENCE  # a sequential run's overall level, unless told


@dataclass(frozen=True)
class Looks:
    """When a sequential run looks (window-request counts) and at what level each look
    decides: ``confidences`` holds one level per look, then the final summary's.

    A run that looks ``L`` times (the final summary counts as one) and stops at the
    first decided look would, at 95% per look, decide wrongly more often than 5%. Each
    look spends a share of the run's error ``1 - overall`` (at the level
    :func:`~tailwise.metrics.uncertainty.decision_level` decides on), in proportion to the requests
    it has seen, and the shares add up to it (Bonferroni's bound, unequally split): the
    early looks, which can only decide a clear case, spend little; the final summary,
    which judges the most requests, spends the most (about half). An equal split gave
    every look ``(1 - overall) / L``: a 0.4% error where the final summary now has 2.4%,
    and a clear pass (0 misses of a 1% allowance) needed 40% more requests to show.
    Looks at doubling counts keep ``L`` small (``log2`` of the cap over 128) while
    costing at most half the run's length."""

    sizes: tuple[int, ...]
    confidences: tuple[float, ...]
    overall: float = OVERALL_CONFIDENCE

    @property
    def count(self) -> int:
        return len(self.sizes) + 1

    @property
    def confidence(self) -> float:
        """The final summary's level (the run's summary.json ``confidence``)."""
        return self.confidences[-1]


def plan_looks(expected_cap: float, overall: float = OVERALL_CONFIDENCE) -> Looks:
    """Looks at 128, 256, ... window requests below the cap's expected count, each
    spending the run's error in proportion to its size (the cap's count for the final)."""
    sizes: list[int] = []
    n = FIRST_LOOK
    while n < expected_cap:
        sizes.append(n)
        n *= 2
    weights = [float(k) for k in sizes] + [max(float(expected_cap), 1.0)]
    total = sum(weights)
    error = 1.0 - overall
    return Looks(tuple(sizes), tuple(1.0 - error * w / total for w in weights), overall)


@dataclass(frozen=True)
class _Share:
    spec: str
    metric: str
    threshold_ns: int
    needed: float  # F(threshold) must reach this share


class Sequential:
    """Decide at each look whether every SLO is already settled (pass or fail).

    Only latency, e2e and TTFT objectives (percentiles) and deadlines can be judged
    while the run goes on; any other SLO keeps the run to its cap. At a look a request
    still out counts as a miss for the pass test (it may end slower than the threshold)
    and, unless already overdue, as a hit for the fail test: each side is decided only
    when it holds whatever the outstanding requests do."""

    def __init__(
        self,
        slos: list[SLO],
        window_ns: tuple[int, int],
        looks: Looks,
        *,
        auto_warmup: bool = False,
    ) -> None:
        self.window_ns = window_ns
        self.looks = looks
        # --warmup auto: each look judges the window past MSER-5's transient, as the
        # summary does (judged with it, a cold start delayed a clear pass past the cap);
        # start_ns is where the latest look began, and a settled run's summary starts there.
        self.auto_warmup = auto_warmup
        self.start_ns = window_ns[0]
        self.shares = [
            _Share(s.spec, s.metric, int(s.threshold), t)
            for s in slos
            if (t := _target(s)) is not None and s.metric in WATCHED_METRICS
        ]
        self.judgeable = bool(slos) and len(self.shares) == len(slos)
        self.next = 0  # index of the next look in looks.sizes
        self.looked = 0
        self.decided: dict[str, str] = {}  # spec -> pass | fail, once a look decided all

    def look(self, blocks: list[RecordBlock], now_ns: int) -> str:
        """Why the run is already decided ('' while it is not, or no look is due)."""
        if not self.judgeable or self.next >= len(self.looks.sizes):
            return ""
        # Most calls end here: rows issued so far bound the window's count from above, and
        # the columns are gathered (O(n)) only at the few looks (about log2 of the cap).
        if sum(b.rows for b in blocks) < self.looks.sizes[self.next]:
            return ""
        sched, done, first, err = _window_rows(blocks, self.window_ns, now_ns)
        n = len(sched)
        if n < self.looks.sizes[self.next]:
            return ""
        while self.next < len(self.looks.sizes) and self.looks.sizes[self.next] <= n:
            self.next += 1
        confidence = self.looks.confidences[self.next - 1]  # the largest look n reached
        self.looked += 1
        if self.auto_warmup:
            sched, done, first, err = self._past_transient(sched, done, first, err)
            n = len(sched)
        decided = {}
        for share in self.shares:
            end = _end_column(share.metric, done, first)
            d = _decide(share, sched, end, done, err, now_ns, confidence)
            if d == "inconclusive":
                return ""
            decided[share.spec] = d
        self.decided = decided
        outcomes = ", ".join(f"{spec} {d}" for spec, d in decided.items())
        return f"decided after {n} requests (look {self.looked}): {outcomes}"

    def _past_transient(
        self, sched: np.ndarray, done: np.ndarray, first: np.ndarray, err: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The look's rows from where the summary's ``--warmup auto`` would start the
        window (MSER-5 on the answered rows; see :func:`auto_start_ns`)."""
        answered = done != ABSENT
        self.start_ns, _ = auto_start_ns(
            sched[answered], (done - sched)[answered], (err == 0)[answered], self.window_ns
        )
        keep = sched >= self.start_ns
        return sched[keep], done[keep], first[keep], err[keep]


def _window_rows(
    blocks: list[RecordBlock], window_ns: tuple[int, int], now_ns: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Columns of the rows scheduled in the window up to ``now_ns``, in scheduled order."""
    cols = [_columns(b) for b in blocks if b.rows]
    if not cols:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, np.zeros(0, dtype=np.int16)
    sched, done, first, err = (np.concatenate(c) for c in zip(*cols, strict=True))
    keep = (sched >= window_ns[0]) & (sched < window_ns[1]) & (sched <= now_ns)
    sched, done, first, err = sched[keep], done[keep], first[keep], err[keep]
    if len(sched) > 1 and not bool(np.all(sched[1:] >= sched[:-1])):
        order = np.argsort(sched, kind="stable")
        sched, done, first, err = sched[order], done[order], first[order], err[order]
    return sched, done, first, err


def _look_fifo(
    share: _Share, sched: np.ndarray, done: np.ndarray, err: np.ndarray
) -> FifoQueue | None:
    """The look's answered rows read as one FIFO server (:mod:`tailwise.metrics.fifo`):
    for a latency SLO with no failure, up to the first request still out (a FIFO server
    answers in order: what follows it is still out too)."""
    if share.metric != "latency" or bool(np.any((err != 0) & (done != ABSENT))):
        return None
    out = np.flatnonzero(done == ABSENT)
    upto = int(out[0]) if len(out) else len(done)
    return fifo_queue(sched[:upto], done[:upto])


def _decide(
    share: _Share,
    sched: np.ndarray,
    end: np.ndarray,
    done: np.ndarray,
    err: np.ndarray,
    now_ns: int,
    confidence: float,
) -> str:
    finished = (end != ABSENT) & (err == 0)
    failed = (err != 0) & (done != ABSENT)
    overdue = ~finished & (now_ns - sched > share.threshold_ns)
    value = (end - sched).astype(np.float64)
    as_miss = np.where(finished, value, math.inf)
    as_hit = np.where(finished, value, np.where(failed | overdue, math.inf, 0.0))
    t = float(share.threshold_ns)
    level = decision_level(confidence)  # what a verdict at the look's confidence decides on
    regen = regeneration(idle_on_arrival(sched, done), as_miss)
    queue = _look_fifo(share, sched, done, err)
    if decide_within(as_miss, t, share.needed, level, regen, queue)[2] == "pass":
        return "pass"
    if decide_within(as_hit, t, share.needed, level, fifo=queue)[2] == "fail":
        return "fail"
    return "inconclusive"
