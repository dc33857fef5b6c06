"""One latency series: a sliding window of time buckets, appended to cheaply.

The hot path (:meth:`Series.record`) takes a lock, reads the clock and appends
one integer to the current bucket's ``array('q')``: a few hundred nanoseconds.
A failed request is stored as ``~latency`` (negative), so one append carries
both the value and the outcome. Nothing is sorted or binned there (DESIGN
invariant 8, the hot path only appends).

Pending values are *folded* (binned into sparse HdrHistogram cells, summed,
counted against deadlines) lazily: when someone reads, or when a bucket leaves
the window unread (so the lifetime totals that Prometheus counters need never
miss a value). Each value is folded exactly once, and each fold is announced
to listeners (the burn-rate monitor) with its bucket's start time.

The window is the last ``n_buckets`` buckets including the current, partial
one; its covered span runs from the oldest bucket's start (or the series'
creation, if later) to now, so rates divide by time actually observed.
"""

from __future__ import annotations

import threading
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tailwise.instrument.hdr import Counts, Sparse

Clock = Callable[[], int]
Listener = Callable[[int, "Fold"], None]


@dataclass(frozen=True)
class Fold:
    """What one fold added: counts, exact sums, and requests within each deadline."""

    ok: Sparse
    failed: Sparse
    n_ok: int
    n_failed: int
    sum_ns: int
    max_ns: int
    min_ns: int
    within: dict[int, int]  # deadline ns -> ok requests at or under it
    le: np.ndarray  # per exposition bound (and one over the top): all requests

    @property
    def n(self) -> int:
        return self.n_ok + self.n_failed


def fold(raw: array[int], deadlines_ns: Sequence[int], le_ns: np.ndarray) -> Fold:
    """Bin a bucket's pending values (``~v`` marks a failed request of latency ``v``)."""
    v = np.frombuffer(raw, dtype=np.int64) if len(raw) else np.zeros(0, dtype=np.int64)
    ok_mask = v >= 0
    ok = v[ok_mask]
    failed = ~v[~ok_mask]
    every = np.concatenate([ok, failed])
    le = np.bincount(np.searchsorted(le_ns, every, side="left"), minlength=len(le_ns) + 1)
    return Fold(
        ok=Sparse.of(ok),
        failed=Sparse.of(failed),
        n_ok=len(ok),
        n_failed=len(failed),
        sum_ns=int(every.sum()),
        max_ns=int(every.max()) if len(every) else 0,
        min_ns=int(every.min()) if len(every) else 0,
        within={d: int((ok <= d).sum()) for d in deadlines_ns},
        le=le.astype(np.int64),
    )


@dataclass
class Bucket:
    """One time bucket: its raw pending values and everything folded so far."""

    slot: int
    pending: array[int] = field(default_factory=lambda: array("q"))
    ok: Sparse = field(default_factory=Sparse.empty)
    failed: Sparse = field(default_factory=Sparse.empty)
    n_ok: int = 0
    n_failed: int = 0
    sum_ns: int = 0
    max_ns: int = 0
    min_ns: int = 0
    within: dict[int, int] = field(default_factory=dict)

    def absorb(self, f: Fold) -> None:
        if f.n == 0:
            return
        self.min_ns = f.min_ns if self.n_ok + self.n_failed == 0 else min(self.min_ns, f.min_ns)
        self.ok, self.failed = self.ok.plus(f.ok), self.failed.plus(f.failed)
        self.n_ok += f.n_ok
        self.n_failed += f.n_failed
        self.sum_ns += f.sum_ns
        self.max_ns = max(self.max_ns, f.max_ns)
        for d, n in f.within.items():
            self.within[d] = self.within.get(d, 0) + n


@dataclass(frozen=True)
class Lifetime:
    """Totals since the series was created (what Prometheus counters need)."""

    count: int
    failed: int
    sum_ns: int
    le_ns: tuple[int, ...]
    le_counts: tuple[int, ...]  # per bound, not cumulative; one more for over the top


class Series:
    """A thread- and asyncio-safe sliding window of latencies (no awaits inside)."""

    def __init__(
        self,
        bucket_ns: int,
        n_buckets: int,
        clock: Clock,
        le_ns: Sequence[int],
        deadlines_ns: Sequence[int] = (),
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.bucket_ns = bucket_ns
        self.n_buckets = n_buckets
        self.created_ns = clock()
        self._le_ns = np.asarray(sorted(le_ns), dtype=np.int64)
        self._deadlines: tuple[int, ...] = tuple(sorted(set(deadlines_ns)))
        self._ring: deque[Bucket] = deque()
        self._cur = Bucket(self.created_ns // bucket_ns)
        self._ring.append(self._cur)
        self._next_ns = (self._cur.slot + 1) * bucket_ns
        self._listeners: list[Listener] = []
        self.on_rotate: list[Callable[[], None]] = []
        self._life_count = self._life_failed = self._life_sum_ns = 0
        self._life_le = np.zeros(len(self._le_ns) + 1, dtype=np.int64)

    # -- hot path ----------------------------------------------------------------

    def record(self, latency_ns: int, ok: bool = True) -> None:
        """Add one request's latency (ns, >= 0); ``ok=False`` marks it failed."""
        with self._lock:
            if self._clock() < self._next_ns:
                self._cur.pending.append(latency_ns if ok else ~latency_ns)
                return
            self._rotate()
            self._cur.pending.append(latency_ns if ok else ~latency_ns)
        for call in self.on_rotate:  # outside the lock: a callback may read this series
            call()

    def _rotate(self) -> None:
        """Open the bucket for now; fold buckets leaving the window that nobody read."""
        now_slot = self._clock() // self.bucket_ns
        self._cur = Bucket(now_slot)
        self._ring.append(self._cur)
        self._next_ns = (now_slot + 1) * self.bucket_ns
        while self._ring[0].slot <= now_slot - self.n_buckets:
            self._fold_bucket(self._ring.popleft())

    # -- folding (under the lock) ------------------------------------------------

    def _fold_bucket(self, b: Bucket) -> None:
        if not b.pending:
            return
        raw, b.pending = b.pending, array("q")
        f = fold(raw, self._deadlines, self._le_ns)
        b.absorb(f)
        self._life_count += f.n
        self._life_failed += f.n_failed
        self._life_sum_ns += f.sum_ns
        self._life_le += f.le
        start_ns = b.slot * self.bucket_ns
        for listen in self._listeners:
            listen(start_ns, f)

    def flush(self) -> None:
        """Fold every pending value (and so bring lifetime totals and listeners up to date)."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._clock() >= self._next_ns:
            self._rotate()
        for b in self._ring:
            self._fold_bucket(b)

    # -- reading -----------------------------------------------------------------

    def add_deadline(self, deadline_ns: int) -> None:
        """Count requests within ``deadline_ns`` from now on (values folded later)."""
        with self._lock:
            self._flush_locked()
            self._deadlines = tuple(sorted({*self._deadlines, deadline_ns}))

    def add_listener(self, listen: Listener) -> None:
        """``listen(bucket_start_ns, fold)`` for every fold from now on (under the lock)."""
        with self._lock:
            self._flush_locked()
            self._listeners.append(listen)

    def window(self, n_buckets: int | None = None) -> tuple[list[Bucket], int, int]:
        """Folded buckets of the last ``n_buckets`` (default: all), and the span they cover."""
        n = self.n_buckets if n_buckets is None else max(1, min(n_buckets, self.n_buckets))
        with self._lock:
            self._flush_locked()
            now_ns = self._clock()
            first_slot = self._cur.slot - n + 1
            buckets = [b for b in self._ring if b.slot >= first_slot]
            snapshot = [_frozen_copy(b) for b in buckets]
        start_ns = max(first_slot * self.bucket_ns, self.created_ns)
        return snapshot, start_ns, now_ns

    def lifetime(self) -> Lifetime:
        with self._lock:
            self._flush_locked()
            return Lifetime(
                self._life_count,
                self._life_failed,
                self._life_sum_ns,
                tuple(int(x) for x in self._le_ns),
                tuple(int(x) for x in self._life_le),
            )


def _frozen_copy(b: Bucket) -> Bucket:
    """A copy safe to read outside the lock (the Sparse arrays are never mutated)."""
    return Bucket(
        b.slot,
        array("q"),
        b.ok,
        b.failed,
        b.n_ok,
        b.n_failed,
        b.sum_ns,
        b.max_ns,
        b.min_ns,
        dict(b.within),
    )


def merge_counts(buckets: list[Bucket], failed: bool | None) -> Counts:
    """Dense counts of ok (``False``), failed (``True``) or all (``None``) requests."""
    parts: list[Sparse] = []
    for b in buckets:
        if failed is not True:
            parts.append(b.ok)
        if failed is not False:
            parts.append(b.failed)
    return Counts(parts)
