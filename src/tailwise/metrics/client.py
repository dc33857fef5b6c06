"""The client's own error, and whether it could change a verdict (DESIGN invariant 3).

Latency is measured from the intended send time, so it already contains the
client's lateness: a request sent late (send lag, ``sent - scheduled``,
including any wait for the in-flight cap) or read late (receive lag: the event
loop was busy when the response arrived) looks *slower* than the server made
it, never faster. So every time the client records is an upper bound of the
server's, and subtracting the client's lag gives a lower bound:

* point metrics (latency, e2e, service, TTFT) on the server's side are at least
  ``read - receive_lag(read) - sent``;
* gap metrics (TPOT, mean ITL: the time between two reads) can be off either
  way, by the receive lag at one end or the other:
  ``[gap - lag(later read), gap + lag(earlier read)]`` over the gap's length.

An SLO judged the same on both ends of that range stands, whatever the client
did; one judged differently on the two ends could be the client's doing, and
only then is a run invalid for the client's sake
(:func:`tailwise.metrics.catalog.bounds_view`; each metric's rule is named in its
catalog entry).

The receive lag of a read at run time ``t`` comes from a :class:`LagSeries`:
the loop's lateness, sampled by a periodic probe (see
:mod:`tailwise.loadgen.execute.looplag`), as the maximum per slice of run time. A read
at ``t`` is bounded by the slices around it plus one probe period.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailwise.records import I64, Records


@dataclass(frozen=True)
class LagSeries:
    """The client loop's lateness: the maximum per ``bucket_ns`` slice of run time."""

    bucket_ns: int
    period_ns: int  # the probe's period: a lateness under it may go unseen
    bucket_max_ns: np.ndarray
    samples: int = 0

    def at(self, t_ns: np.ndarray) -> I64:
        """Upper bound of the receive lag of a read at each run-relative instant (0 if t < 0).

        Each slice holds the worst lateness of any loop turn that spanned it (the probe
        books the whole span it waited through), so a read inside a long turn sees that
        turn. Not covered: a response that waited through two long turns in a row (one
        before it was polled, one before its callback ran) is bounded by the longer
        one only.
        """
        t = np.asarray(t_ns, dtype=np.int64)
        out = np.zeros(len(t), dtype=np.int64)
        valid = t >= 0
        if not valid.any():
            return out
        # The slice of the read, and one on each side: the probe that saw a stall may have
        # fired just before the read (same loop turn) or just after it (the next turn).
        padded = np.concatenate(([0], self.bucket_max_ns, [0, 0])).astype(np.int64)
        b = np.minimum(t[valid] // self.bucket_ns, len(self.bucket_max_ns)) + 1
        worst = np.maximum(np.maximum(padded[b - 1], padded[b]), padded[b + 1])
        out[valid] = worst + self.period_ns
        return out


@dataclass(frozen=True)
class ClientLag:
    """Receive-lag series per worker process (one for a single-process run)."""

    series: Sequence[LagSeries | None]

    def at(self, t_ns: np.ndarray, worker: np.ndarray) -> I64:
        """The bound for each read at ``t_ns`` by the worker that made it (0 where unknown)."""
        out = np.zeros(len(t_ns), dtype=np.int64)
        for k, s in enumerate(self.series):
            if s is None:
                continue
            rows = worker == k if len(self.series) > 1 else np.ones(len(t_ns), dtype=bool)
            out[rows] = s.at(np.asarray(t_ns)[rows])
        return out


def _recv(r: Records, lag: ClientLag | None, t_ns: np.ndarray) -> I64:
    if lag is None:
        return np.zeros(len(r), dtype=np.int64)
    return lag.at(t_ns, r.worker)


def receive_lag_ns(r: Records, lag: ClientLag | None) -> I64:
    """Per request: the bound on how late its completion was read (-1 where not done)."""
    out: I64 = np.where(r.done_ns >= 0, _recv(r, lag, r.done_ns), -1)
    return out


def _point_lower(r: Records, measured: I64, read_ns: np.ndarray, lag: ClientLag | None) -> I64:
    """``read - receive_lag - sent`` where the metric exists: the server's share, at least."""
    lower = np.maximum(read_ns - _recv(r, lag, read_ns) - r.sent_ns, 0)
    out: I64 = np.where(measured >= 0, lower, -1)
    return out


def _chunk_ends(r: Records) -> tuple[I64, I64, I64]:
    """First and last content-chunk times and the chunk count per request (-1/0 if none)."""
    first = np.full(len(r), -1, dtype=np.int64)
    last = np.full(len(r), -1, dtype=np.int64)
    count = np.zeros(len(r), dtype=np.int64)
    for i, times in enumerate(r.chunk_times):
        if times:
            first[i], last[i], count[i] = times[0], times[-1], len(times)
    return first, last, count


def _gap_bounds(
    r: Records, measured: I64, start: I64, end: I64, n: I64, lag: ClientLag | None
) -> tuple[I64, I64]:
    valid = measured >= 0
    steps = np.maximum(n, 1)
    lo = np.maximum(end - _recv(r, lag, end) - start, 0) // steps
    hi = (end - start + _recv(r, lag, start)) // steps
    return np.where(valid, lo, -1), np.where(valid, hi, -1)


# How the client's lag bounds a metric: (records, measured values, lag) -> (lower, upper)
# bound of the server's value per request, -1 where the metric has none. The metric
# catalog (tailwise.metrics.catalog) names one rule per metric.
BoundRule = Callable[[Records, I64, ClientLag | None], tuple[I64, I64]]
I64Of = Callable[[Records], I64]


def read_at(column: str) -> BoundRule:
    """A point metric that ends at a read of ``column`` (``done_ns``, ``first_token_ns``):
    the server's share is at least ``read - receive_lag(read) - sent``, at most as measured."""

    def rule(r: Records, measured: I64, lag: ClientLag | None) -> tuple[I64, I64]:
        return _point_lower(r, measured, getattr(r, column), lag), measured

    return rule


def token_gap(r: Records, measured: I64, lag: ClientLag | None) -> tuple[I64, I64]:
    """TPOT: the gap from the first token's read to the last read, over the tokens after it."""
    return _gap_bounds(r, measured, r.first_token_ns, r.done_ns, r.output_tokens - 1, lag)


def chunk_gap(r: Records, measured: I64, lag: ClientLag | None) -> tuple[I64, I64]:
    """Mean ITL: the gap from the first chunk's read to the last one's, over the gaps."""
    first, last, count = _chunk_ends(r)
    return _gap_bounds(r, measured, first, last, count - 1, lag)


def divided(rule: BoundRule, base: Callable[[Records], I64], count: I64Of) -> BoundRule:
    """A metric that is ``base`` (bounded by ``rule``) floor-divided per request by a count
    (NTPOT: latency over output tokens): both bounds divide, -1 where it has no value."""

    def bounds(r: Records, measured: I64, lag: ClientLag | None) -> tuple[I64, I64]:
        lo, hi = rule(r, base(r), lag)
        n = np.maximum(count(r), 1)
        has = measured >= 0
        return np.where(has, lo // n, -1), np.where(has, hi // n, -1)

    return bounds


def as_measured(r: Records, measured: I64, lag: ClientLag | None) -> tuple[I64, I64]:
    """The client's own number (send lag), judged as it is."""
    return measured, measured


CLIENT_FILE = "client.json"


def client_doc(
    lag: ClientLag | None, load: dict[str, Any] | None, failures: dict[str, int]
) -> dict[str, Any]:
    """What a run directory keeps of the client's side, so its summary can be recomputed.

    Lateness is stored per slice in whole microseconds, rounded up (a bound stays a bound).
    """
    series = [] if lag is None else list(lag.series)
    return {
        "schema": "tailwise.client/1",
        "workers": [
            None
            if s is None
            else {
                "bucket_ns": s.bucket_ns,
                "period_ns": s.period_ns,
                "samples": s.samples,
                "bucket_max_us": (-(-s.bucket_max_ns // 1000)).tolist(),  # a bound stays one
            }
            for s in series
        ],
        "load": load,
        "connect_failures": failures,
    }


def read_client_doc(
    doc: dict[str, Any],
) -> tuple[ClientLag, dict[str, Any] | None, dict[str, int]]:
    """The inverse of :func:`client_doc`: (receive-lag series, client load, connect failures)."""
    series = [
        None
        if w is None
        else LagSeries(
            int(w["bucket_ns"]),
            int(w["period_ns"]),
            np.asarray(w["bucket_max_us"], dtype=np.int64) * 1000,
            int(w.get("samples", 0)),
        )
        for w in doc.get("workers", [])
    ]
    return ClientLag(series), doc.get("load"), dict(doc.get("connect_failures") or {})
