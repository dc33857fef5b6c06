"""One FIFO server, read off the timestamps: a latency bound from its service times.

Counting misses decides a pass slowly because a queue's misses come in clusters: an
M/M/1 server at 56% load, ``p99 <= 300 ms`` (its true p99 210 ms), needs about 8,000
requests before the share within the threshold shows 99% (the validation grid's
``to decide`` columns; the default knee's low end spent its 300 s cap there). Yet the
queue's law is in plain sight when the target is **one server that answers in order**
(a model server with one worker, llama-server with one slot): request ``n`` leaves at
``D_n = max(A_n, D_{n-1}) + S_n``, so every request's own service time

    S_n = D_n - max(A_n, D_{n-1})

is read from its intended send time ``A_n`` and the answers' times, and those are
independent draws, not clustered excursions. For such a queue (GI/G/1) Kingman's
exponential bound holds at every load: the waiting time ``W`` has
``P(W > w) <= exp(-theta w)`` for every ``theta`` with ``M_S(theta) M_A(-theta) <= 1``
(``M`` the moment generating functions of the service and of the gaps between sends),
so a request's latency ``W + S'`` (``S'`` its service plus the network's part, what a
request that found the server free measured) has

    P(latency > T) <= M_S'(theta) exp(-theta T).

Each ``M`` is a mean of ``exp(theta X)`` over independent draws, bounded from above by
its normal interval; ``theta`` runs over :data:`THETAS` values and the bound is the
least over those the data certify, each test at the error split over all of them
(Bonferroni): a bound at one-sided level ``1 - alpha`` that holds whichever ``theta``
wins. At 56% load it shows ``p99 <= 300 ms`` from about 2,000 requests.

**When it may decide** (:func:`fifo_queue` says why not): every request answered; the
answers in the order of the sends (an answer overtaking an earlier request by more
than :data:`OVERTAKE_S` means several servers or shared processing, where this
recursion does not hold: a processor-sharing server's tail falls off far slower than
FIFO's); the requests that queued served like those that found the server free, but for
the network's offset (:data:`QUEUED_MEAN`, :data:`SPREAD`: two servers with answers in
order would show it, the second absorbing the queue);
the service times light-tailed (:func:`tailwise.metrics.tail.service_heaviness` under
:data:`HEAVY`: the moment generating function of a
lognormal or Pareto service is infinite, and a sample's finite one would bound
nothing) and not drifting together (lag-1 autocorrelation under :data:`MAX_LAG1`: a
server that slows for a while queues more than independent draws say). It only ever
passes: a failure is shown by the misses themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tailwise.metrics import tail

NS_PER_S = 1e9
MIN_REQUESTS = 500  # fewer answers: no service law to read
MIN_EACH = 100  # requests that queued, and that found the server free, at least
OVERTAKE_S = 0.001  # an answer this much before an earlier request's: not one FIFO server
MAX_OVERTAKES = 0.005  # ... tolerated share (answers close in time, reordered on the way)
# A request that found the server free measured its service plus the network's and the
# server's own part (an offset: 3.5 ms on a 20 ms loopback service beside other work);
# one that queued measured its service alone. So the two read alike but for a shift:
# the queued ones' mean at least QUEUED_MEAN of the free ones' (a far server, whose
# offset dwarfs the service, is refused), their spread within SPREAD of the free ones'.
# Two servers whose answers leave in order fail both: a fixed 20 ms service read 10 ms
# queued (the second server absorbs the queue) against a spread of ~0 when free.
QUEUED_MEAN = 0.6
SPREAD = (0.8, 1.25)
MAX_LAG1 = 0.2  # service times' lag-1 autocorrelation: above it they drift together
# Service heaviness (tail.service_heaviness, at both depths) from which the model does not
# decide: stricter than the tail model's 1.0, as its bound rests on the generating function
# of the service itself, and stricter still for a short run, whose top values read it
# noisily. Service times read under 0.9 / under 0.8 (M/G/1 at 70% load, 1,000 runs each):
# exponential 91% / 69% at 1,024 requests, 97% / 69% at 2,048; Pareto (2.5) 4.2% / 1.0%,
# 0.8% / 0.1%; lognormal sigma 1 3.4% / 0.8%, 0.4% / 0. The Pareto runs read light passed
# p99 <= 0.95x its truth in 2.1% of 1,024-request runs under 0.9, 0.7% under 0.8.
HEAVY = 0.9
HEAVY_SHORT = 0.8  # ... under SHORT requests
SHORT = 2048
SHARES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # exponents tried, as shares of the estimated one
TESTS = 2 * len(SHARES)  # bounds each exponent needs: the error is split over them all
BISECTIONS = 30  # the exponent's root to 2^-30 of its bracket
EXP_CAP = 300.0  # exp() argument cap: its square stays finite (float64 ends at ~e^709)


@dataclass(frozen=True)
class FifoQueue:
    """A run read as one FIFO server: per request its own service time (seconds),
    whether it found the server free, and the gaps between intended sends; ``why_not``
    is "" when the run reads that way (then :func:`miss_bound` may decide)."""

    service_s: np.ndarray
    free: np.ndarray
    gaps_s: np.ndarray
    why_not: str = ""
    decay: float | None = None  # Kingman's exponent, estimated (:func:`decay_rate`)


def fifo_queue(scheduled_ns: np.ndarray, done_ns: np.ndarray) -> FifoQueue:
    """Read ``scheduled_ns`` (intended send times) and ``done_ns`` (each request's
    answer; negative when none came) as one FIFO server, or say why not. Every request
    must have succeeded: the caller passes None for a run with failures."""
    order = np.argsort(np.asarray(scheduled_ns), kind="stable")
    a = np.asarray(scheduled_ns, dtype=np.float64)[order] / NS_PER_S
    d = np.asarray(done_ns, dtype=np.float64)[order] / NS_PER_S
    empty = np.zeros(0)
    n = len(a)
    if n < MIN_REQUESTS:
        return FifoQueue(empty, empty.astype(bool), empty, f"{n} requests (under {MIN_REQUESTS})")
    if bool(np.any(d < 0)) or not bool(np.all(np.isfinite(d))):
        return FifoQueue(empty, empty.astype(bool), empty, "requests without an answer")
    before = np.concatenate(([-math.inf], np.maximum.accumulate(d)[:-1]))
    overtakes = int(np.count_nonzero(d < before - OVERTAKE_S))
    if overtakes > MAX_OVERTAKES * n:
        why = f"{overtakes} answers overtook an earlier request: not one server in order"
        return FifoQueue(empty, empty.astype(bool), empty, why)
    start = np.maximum(a, before)
    service = np.maximum(d - start, 0.0)
    free = a >= before
    q = FifoQueue(service, free, np.diff(a))
    why = _why_not(q)
    return FifoQueue(service, free, q.gaps_s, why, None if why else decay_rate(q))


def _why_not(q: FifoQueue) -> str:
    queued, free = q.service_s[~q.free], q.service_s[q.free]
    if len(queued) < MIN_EACH or len(free) < MIN_EACH:
        return f"{len(queued)} queued and {len(free)} free requests (under {MIN_EACH} each)"
    # A heavy service first: its spread reads noisily too, and this is the reason.
    heaviness = min(
        tail.service_heaviness(q.service_s), tail.service_heaviness(q.service_s, tail.SERVICE_TOP)
    )
    if not heaviness < (HEAVY if len(q.service_s) >= SHORT else HEAVY_SHORT):
        return f"service times heavy-tailed ({heaviness:.2g})"
    spread = float(queued.std()) / float(free.std()) if free.std() > 0 else math.inf
    if queued.mean() < QUEUED_MEAN * free.mean() or not SPREAD[0] <= spread <= SPREAD[1]:
        return (
            f"queued requests served in {queued.mean() * 1e3:.3g} ms (spread "
            f"{queued.std() * 1e3:.2g} ms), those that found it free in "
            f"{free.mean() * 1e3:.3g} ms ({free.std() * 1e3:.2g} ms): more than one server"
        )
    r = _lag1(q.service_s)
    if r > MAX_LAG1:
        return f"service times drift together (lag-1 autocorrelation {r:.2f})"
    return ""


def _lag1(x: np.ndarray) -> float:
    dev = x - x.mean()
    denom = float(dev @ dev)
    return float(dev[:-1] @ dev[1:]) / denom if denom > 0 else 0.0


def _log_mgf(values: np.ndarray, theta: float) -> tuple[float, float]:
    """``log mean(exp(theta x))`` and the relative variance of that mean (delta method)."""
    e = np.exp(np.minimum(theta * values, EXP_CAP))
    m = float(e.mean())
    return math.log(m), float(e.var(ddof=1)) / (len(e) * m * m)


def _drift(q: FifoQueue, theta: float) -> float:
    """``log M_S(theta) + log M_A(-theta)`` at the point estimates: negative while the
    queue is stable at exponent ``theta`` (Kingman's condition)."""
    return _log_mgf(q.service_s, theta)[0] + _log_mgf(q.gaps_s, -theta)[0]


def decay_rate(q: FifoQueue) -> float | None:
    """The point estimate of Kingman's exponent ``theta*`` (the root of :func:`_drift`),
    None when the sample's queue is not stable (its mean service at or over its mean gap)."""
    if float(q.service_s.mean()) >= float(q.gaps_s.mean()):
        return None
    lo, hi = 0.0, 1.0 / float(q.service_s.mean())
    while _drift(q, hi) < 0.0:
        lo, hi = hi, 2.0 * hi
        if hi > 1e9:
            return None
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _drift(q, mid) < 0.0 else (lo, mid)
    return lo


def miss_bound(q: FifoQueue, threshold_s: float, z: float) -> float | None:
    """Upper bound on the share of latencies above ``threshold_s`` (see the module
    docstring): at each of :data:`SHARES` of the estimated exponent, Kingman's condition
    and the free requests' generating function each bounded at ``z`` normal deviations
    (the delta method); the least bound over the exponents certified. None where the run
    does not read as one FIFO server or no exponent is certified."""
    star = q.decay
    if q.why_not or star is None:
        return None
    free = q.service_s[q.free]
    best = math.inf
    for share in SHARES:
        theta = share * star
        log_s, var_s = _log_mgf(q.service_s, theta)
        log_a, var_a = _log_mgf(q.gaps_s, -theta)
        if log_s + log_a + z * math.sqrt(var_s + var_a) > 0.0:
            continue  # not shown stable at this exponent
        log_x, var_x = _log_mgf(free, theta)
        best = min(best, math.exp(log_x + z * math.sqrt(var_x) - theta * threshold_s))
    return min(best, 1.0) if math.isfinite(best) else None
