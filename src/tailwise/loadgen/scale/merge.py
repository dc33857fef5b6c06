"""Merging the workers' records into one run, as if a single process had run it.

Worker ``k`` of ``n`` ran the plan's offsets at positions ``k, k + n, ...``
(:meth:`tailwise.arrivals.Schedule.share_blocks`), numbering them ``0, 1, 2 ...``
locally; its row ``j`` is the plan's request ``j * n + k``. Times are already
relative to the common start (each worker ran its clock from it), so merging
is renumbering and concatenating, no rebasing. The plan is pure, so the
driver knows every row a worker owed even if the worker never reported it:

* a worker that died owes its share up to where the run stopped; rows that
  never reached the driver become ``not_sent:worker_lost`` (whether such a
  request reached the target is unknown, so it counts as not sent, a miss);
* a worker that finished but whose file lacks rows it measured has them
  marked ``lost`` (an accounting failure, never silently dropped).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.arrivals import Schedule
from tailwise.loadgen.engine.watch import LossWatch
from tailwise.loadgen.scale.messages import Snapshot
from tailwise.metrics.histogram import merged
from tailwise.metrics.percentiles import QUANTILES
from tailwise.records import (
    ABSENT,
    ERROR_KINDS,
    Records,
    category_of,
    error_code,
    read_jsonl,
)

WORKER_LOST = "not_sent:worker_lost"
SETTLE_S = 0.3  # a dead worker's writer process flushes its last frames within this
SETTLE_MAX_S = 5.0


def empty(n: int = 0) -> Records:
    """``n`` rows with every column absent (zeros where a column has no absent value)."""
    absent = np.full(n, ABSENT, dtype=np.int64)
    zeros = np.zeros(n, dtype=np.int64)
    return Records(
        seq=zeros.copy(),
        parent=absent.copy(),
        worker=zeros.copy(),
        scheduled_ns=zeros.copy(),
        sent_ns=absent.copy(),
        first_byte_ns=absent.copy(),
        first_token_ns=absent.copy(),
        done_ns=absent.copy(),
        status=zeros.copy(),
        error=np.zeros(n, dtype=np.int16),
        bytes_out=zeros.copy(),
        bytes_in=zeros.copy(),
        input_tokens=absent.copy(),
        output_tokens=absent.copy(),
        replica=absent.copy(),
        in_window=np.zeros(n, dtype=bool),
        chunk_times=[None] * n,
        capped=np.zeros(n, dtype=np.int8),
    )


def settle(path: Path) -> None:
    """Wait until a file stops growing: a killed worker's writer drains its pipe first."""
    deadline = time.monotonic() + SETTLE_MAX_S
    size = -1
    while time.monotonic() < deadline:
        now = path.stat().st_size if path.exists() else 0
        if now == size:
            return
        size = now
        time.sleep(SETTLE_S)


def worker_records(path: Path, index: int, count: int) -> Records:
    """One worker's file, renumbered into the plan's sequence numbers."""
    r = read_jsonl(path) if path.exists() else empty()
    r.seq = r.seq * count + index
    r.worker = np.full(len(r), index, dtype=np.int64)
    return r


def share_offsets(schedule: Schedule, index: int, count: int) -> np.ndarray:
    parts = list(schedule.share_blocks(index, count))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def owed_rows(
    r: Records,
    offsets: np.ndarray,
    owed: int,
    where: tuple[int, int],
    kind: str,
    gave_up_ns: int,
) -> Records:
    """Rows of the share ``where`` = (index, count) owed (local seq < ``owed``) but absent."""
    index, count = where
    have = (r.seq - index) // count
    missing = np.setdiff1d(np.arange(owed, dtype=np.int64), have)
    out = empty(len(missing))
    out.seq = missing * count + index
    out.worker[:] = index
    out.scheduled_ns = offsets[missing]
    out.done_ns = np.maximum(out.scheduled_ns, gave_up_ns)
    out.error[:] = error_code(kind)
    return out


def concat(parts: list[Records], window_ns: tuple[int, int]) -> Records:
    """All parts in plan order, with ``in_window`` set for the run's window."""
    if not parts:
        return empty()
    order = np.argsort(np.concatenate([p.seq for p in parts]), kind="stable")
    cols: dict[str, object] = {}
    for f in dataclasses.fields(Records):
        if f.name == "chunk_times":
            chunks = [c for p in parts for c in (p.chunk_times or [None] * len(p))]
            cols[f.name] = [chunks[i] for i in order.tolist()]
        elif f.name == "capped":
            joined = np.concatenate([_capped(p) for p in parts])
            cols[f.name] = joined[order]
        else:
            cols[f.name] = np.concatenate([getattr(p, f.name) for p in parts])[order]
    r = Records(**cols)  # type: ignore[arg-type]
    r.in_window = (r.scheduled_ns >= window_ns[0]) & (r.scheduled_ns < window_ns[1])
    return r


def _capped(r: Records) -> np.ndarray:
    return r.capped if r.capped is not None else np.zeros(len(r), dtype=np.int8)


def per_worker(r: Records, count: int) -> list[dict[str, Any]]:
    """Each worker's requests in the window, by the summary's accounting buckets."""
    cats = np.array([category_of(k) for k in ERROR_KINDS])
    lost_code = ERROR_KINDS.index(WORKER_LOST) if WORKER_LOST in ERROR_KINDS else -1
    out = []
    for k in range(count):
        mine = r.worker == k
        win = mine & r.in_window
        kinds = cats[r.error[win].astype(np.int64)]
        row: dict[str, Any] = {"worker": k, "rows": int(mine.sum()), "scheduled": int(win.sum())}
        row["sent"] = int((r.sent_ns[win] >= 0).sum())
        for cat in ("ok", "failed", "timed_out", "cancelled", "not_sent"):
            row[cat] = int((kinds == cat).sum())
        row["worker_lost"] = int((r.error[win] == lost_code).sum())
        out.append(row)
    return out


# ---- during the run: snapshots merge as they come ----


class LiveView:
    """The merged view during the run: counts add, histograms add, misses add."""

    def __init__(self, watch: LossWatch | None) -> None:
        from hdrh.histogram import HdrHistogram

        self._decode = HdrHistogram.decode
        self.watch = watch
        self.hists: dict[tuple[bool, int], Any] = {}  # (in window?, 1 s interval) -> histogram

    def add(self, snapshot: Snapshot) -> None:
        for inside, interval, encoded in snapshot.hists:
            h = self._decode(encoded)
            key = (bool(inside), int(interval))
            if key in self.hists:
                self.hists[key].add(h)
            else:
                self.hists[key] = h

    def window_histogram(self) -> Any:
        return merged(h for (inside, _), h in self.hists.items() if inside)

    def p99_ms(self, interval: int) -> float | None:
        hs = [h for (_, i), h in self.hists.items() if i == interval]
        if not hs:
            return None
        return hdr_percentile_ns(merged(hs), 99.0) / 1e6

    def loss(self, misses: list[list[int] | None]) -> str:
        """Why an SLO is already lost, judged on every worker's certain misses together."""
        if self.watch is None or not self.watch.limits:
            return ""
        total = [0] * len(self.watch.limits)
        for mine in misses:
            total = [a + b for a, b in zip(total, mine or [0] * len(total), strict=True)]
        return self.watch.judge(total)


def hdr_percentile_ns(h: Any, q_percent: float) -> int:
    """Nearest-rank percentile of a histogram, as :func:`~tailwise.metrics.percentiles.nearest_rank`
    defines it (hdrh's own rounds the rank), reported as its bucket's highest value.

    So it is never below the exact value and above it by less than one bucket
    (1/1024 of the value at 3 significant digits).
    """
    counts = np.ctypeslib.as_array(h.counts)[: h.counts_len]
    cumulative = np.cumsum(counts)
    rank = max(1, math.ceil(q_percent / 100.0 * int(cumulative[-1]) - 1e-9))
    index = int(np.searchsorted(cumulative, rank))
    return int(h.get_highest_equivalent_value(h.get_value_from_index(index)))


def hdr_summary_ms(h: Any) -> dict[str, Any]:
    """Percentiles of a merged histogram, in ms, as the summary's distributions name them."""
    n = int(h.get_total_count())
    if n == 0:
        return {"count": 0}
    out: dict[str, Any] = {key: hdr_percentile_ns(h, q) / 1e6 for key, q in QUANTILES.items()}
    out["max"] = hdr_percentile_ns(h, 100.0) / 1e6
    out["count"] = n
    return out
