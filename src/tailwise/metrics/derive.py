"""Derived per-request values (DESIGN.md "Metric definitions"), as functions of records.

All return int64 nanoseconds with ``-1`` where the value does not exist for a
row (a request never sent has no service time; a failed one has no latency).
Which of them are metrics (a name in ``--slo``, a distribution in summary.json)
is said once, in :mod:`tailwise.metrics.catalog`.
"""

from __future__ import annotations

import numpy as np

from tailwise.records import I64, Records


def _diff(a: I64, b: I64, valid: np.ndarray) -> I64:
    out: I64 = np.where(valid & (a >= 0) & (b >= 0), a - b, -1)
    return out


def ok_mask(r: Records) -> np.ndarray:
    mask: np.ndarray = r.error == 0
    return mask


def latency_ns(r: Records) -> I64:
    """End-to-end latency from the *intended* send time: ``done - scheduled`` (ok rows)."""
    return _diff(r.done_ns, r.scheduled_ns, ok_mask(r))


def service_ns(r: Records) -> I64:
    """``done - sent``: what a tool timing from the actual send would report (ok rows)."""
    return _diff(r.done_ns, r.sent_ns, ok_mask(r))


def send_lag_ns(r: Records) -> I64:
    """``sent - scheduled``: generator lateness plus any wait for the in-flight cap."""
    return _diff(r.sent_ns, r.scheduled_ns, r.sent_ns >= 0)


def ttft_ns(r: Records) -> I64:
    """Time to first content token from the intended send time (ok rows with a token)."""
    return _diff(r.first_token_ns, r.scheduled_ns, ok_mask(r))


def service_ttft_ns(r: Records) -> I64:
    """Time to first content token from the actual send."""
    return _diff(r.first_token_ns, r.sent_ns, ok_mask(r))


def answer_tokens(r: Records) -> I64:
    """Output tokens that were the answer: a reasoning model's reasoning tokens taken out."""
    out: I64 = np.where(
        r.output_tokens >= 0, r.output_tokens - np.maximum(r.reasoning_tokens, 0), r.output_tokens
    )
    return out


def tpot_ns(r: Records) -> I64:
    """``(e2e - TTFT) / (answer_tokens - 1)`` for ok rows with at least two answer tokens.

    TTFT is the first *answer* token, so the span holds only the answer; a reasoning
    model's reasoning tokens (streamed before it) are not in the divisor either.
    """
    tokens = answer_tokens(r)
    valid = ok_mask(r) & (tokens > 1) & (r.first_token_ns >= 0)
    span = r.done_ns - r.first_token_ns
    out = np.full(len(r), -1, dtype=np.int64)
    out[valid] = span[valid] // (tokens[valid] - 1)
    return out


def ntpot_ns(r: Records) -> I64:
    """Normalized time per output token, ``e2e // output_tokens``, as inference-perf defines
    it (request latency over output tokens), for ok rows with at least one output token.

    e2e is from the intended send time, like every latency here; every output token
    counts (a reasoning model's too: the e2e spans them), so one slow first token
    weighs on a short answer more than on a long one, unlike TPOT.
    """
    e2e = latency_ns(r)
    valid = (e2e >= 0) & (r.output_tokens > 0)
    out = np.full(len(r), -1, dtype=np.int64)
    out[valid] = e2e[valid] // r.output_tokens[valid]
    return out


def itl_gaps_ns(r: Records, rows: np.ndarray) -> I64:
    """Every gap between consecutive content chunks of the ok rows among ``rows`` (row
    indices, in the order the gaps are wanted), pooled; within a request in stream order."""
    ok = ok_mask(r)
    gaps: list[np.ndarray] = []
    for i in np.asarray(rows, dtype=np.int64).tolist():
        times = r.chunk_times[i] if i < len(r.chunk_times) else None
        if ok[i] and times and len(times) > 1:
            gaps.append(np.diff(np.asarray(times, dtype=np.int64)))
    return np.concatenate(gaps) if gaps else np.zeros(0, dtype=np.int64)


def mean_itl_ns(r: Records) -> I64:
    """Per-request mean inter-chunk gap (for per-request ITL deadlines)."""
    out = np.full(len(r), -1, dtype=np.int64)
    ok = ok_mask(r)
    for i, times in enumerate(r.chunk_times):
        if ok[i] and times and len(times) > 1:
            out[i] = (times[-1] - times[0]) // (len(times) - 1)
    return out
