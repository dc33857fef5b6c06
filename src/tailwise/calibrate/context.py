"""The step law's context term: how much a step costs per KV token it attends to.

A decode step costs ``a + c N + k x KV`` (:mod:`tailwise.laws.llm`), N the
sequences it decodes and KV the tokens they attend to: the sequence making
its j-th token attends to ``P + j - 1``, P its prompt. One request's gaps
alone do not give k: who shares its steps depends on it (requests that
arrived during a long prompt's prefill join its first decodes). So the
steps themselves are rebuilt from the streams: every token of one step
reaches the client at about the same instant (the server emits them
together, and the delay outside the engine is common to all), so the
clients' token instants of a run, sorted, fall in clusters a step apart.
A cluster whose every token continues its request from the cluster just
before (none is a first token, none came after a gap) is a decode step that
followed another at once; its duration is the time between the two
clusters, its N and KV are read off its members (and both clusters must be whole:
each member's next token lies in the cluster right after, so a step the client read
in two bursts is not mistaken for a smaller one). The least-squares plane of
the durations over (N, KV), outliers trimmed at 3.5 robust deviations, gives
k as the KV slope (a and c come with it, unused here). Every step of a sweep
counts, saturated ones too: the law does not depend on the load, and full
batches widen the range of N and KV.

Not identified (the term is left at 0, and a note says why) when the runs
carry no per-token times (or not one chunk per token), or when KV hardly
varies apart from N (one prompt length and short outputs: each sequence's
context is then about the same). A slope within two standard errors of 0 is
0. Steps that also prefill a chunk (chunked prefill) cost more than the
plane says; they are mostly trimmed.
"""

from __future__ import annotations

import numpy as np

from tailwise.calibrate.steps import Step

MIN_SPREAD_TOKENS = 8  # KV's spread apart from N below which k is not looked for
MIN_STEPS = 50


def _run_steps(step: Step) -> np.ndarray:
    """Rows (duration ms, N, KV tokens) of the run's back-to-back decode steps."""
    r = step.records
    times: list[np.ndarray] = []
    ctx: list[np.ndarray] = []
    for i, ts in enumerate(r.chunk_times):
        if ts and len(ts) >= 1:
            times.append(np.asarray(ts, dtype=np.float64))
            ctx.append(int(r.input_tokens[i]) + np.arange(len(ts), dtype=np.float64))
    if not times:
        return np.zeros((0, 3))
    t, kv = np.concatenate(times), np.concatenate(ctx)
    first = np.zeros(len(t), dtype=bool)
    first[np.cumsum([0, *map(len, times[:-1])])] = True  # each request's first token
    gaps = np.concatenate([np.diff(x) for x in times if len(x) > 1] or [np.zeros(0)])
    tol = max(0.25 * float(np.median(gaps)), 2e5) if len(gaps) else 2e5  # ns
    order = np.argsort(t, kind="stable")
    cid_sorted = np.concatenate([[0], np.cumsum(np.diff(t[order]) > tol)])
    cid = np.empty(len(t), dtype=np.int64)
    cid[order] = cid_sorted
    prev = np.concatenate([[-1], cid[:-1]])  # the cluster of the request's previous token
    follows = ~first & (prev == cid - 1)
    size = np.bincount(cid).astype(np.float64)
    good = np.bincount(cid, weights=follows.astype(np.float64)) == size
    center = np.bincount(cid, weights=t) / size
    kv_sum = np.bincount(cid, weights=kv)
    # A busy client may read one step's tokens in two bursts: the early part would
    # pass as a step with too few sequences but the whole step's duration. So every
    # member of a kept cluster, and of the one before it, must continue (or end) in
    # the cluster right after: a fragment's members skip one.
    last = np.concatenate([first[1:], [True]])  # each request's last token
    nxt = np.concatenate([cid[1:], [-1]])
    onward = np.bincount(cid, weights=(last | (nxt == cid + 1)).astype(np.float64)) == size
    good &= onward & np.concatenate([[False], onward[:-1]])
    idx = np.flatnonzero(good)
    dur = (center[idx] - center[idx - 1]) / 1e6
    return np.column_stack([dur, size[idx], kv_sum[idx]])


def _plane(rows: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(a, c, k), k's standard error, KV's spread apart from N: trimmed least squares."""
    y = rows[:, 0]
    x = np.column_stack([np.ones(len(rows)), rows[:, 1], rows[:, 2]])
    keep = np.ones(len(y), dtype=bool)
    floor = 0.01 * float(np.median(np.abs(y)))  # identical steps deviate by 0
    for _ in range(4):
        coef = np.linalg.lstsq(x[keep], y[keep], rcond=None)[0]
        resid = y - x @ coef
        mad = float(np.median(np.abs(resid[keep] - np.median(resid[keep])))) * 1.4826
        keep = np.abs(resid) <= 3.5 * max(mad, floor)
    xs, ys = x[keep], y[keep]
    coef = np.linalg.lstsq(xs, ys, rcond=None)[0]
    resid = ys - xs @ coef
    # KV apart from N: its residual on (1, N)
    kv_on_n = np.linalg.lstsq(xs[:, :2], xs[:, 2], rcond=None)[0]
    # per sequence: the N contexts of a step vary independently
    per_seq = np.sqrt(max(float(xs[:, 1].mean()), 1.0))
    spread = float(np.std(xs[:, 2] - xs[:, :2] @ kv_on_n)) / per_seq
    sigma2 = float((resid**2).sum()) / max(len(ys) - 3, 1)
    try:
        cov = np.linalg.inv(xs.T @ xs) * sigma2
        se = float(np.sqrt(max(cov[2, 2], 0.0)))
    except np.linalg.LinAlgError:
        se = float("inf")
    return coef, se, spread


def fit_context(steps: list[Step]) -> tuple[float, list[str]]:
    """(ms per KV token, notes) from the decode steps rebuilt from the runs' streams."""
    rows = np.concatenate([_run_steps(s) for s in steps] or [np.zeros((0, 3))])
    if len(rows) < MIN_STEPS:
        return 0.0, [
            "no per-token times (stream the runs, one chunk per token): the context "
            "term kv_per_token is not identified (left 0)"
        ]
    coef, se, spread = _plane(rows)
    if spread < MIN_SPREAD_TOKENS:
        return 0.0, [
            f"the sequences' contexts vary by only {spread:.0f} tokens apart from the "
            "batch size: the context term kv_per_token is not identified (left 0); sweep "
            "with --input-tokens uniform:A-B or long --output-tokens"
        ]
    k = float(coef[2])
    if k <= 2 * se:
        return 0.0, [
            f"context term: {k * 1e3:.2g} +/- {2 * se * 1e3:.2g} us per KV token over "
            f"{len(rows)} decode steps, not above 0 (left 0)"
        ]
    return k, []


def context_share_ms(kv_ms: float, batch: float, prompt: float, output: float) -> float:
    """What the context term adds to a decode step of ``batch`` sequences on average:
    each attends to its prompt plus, on average, half its output."""
    return kv_ms * batch * (prompt + output / 2)
