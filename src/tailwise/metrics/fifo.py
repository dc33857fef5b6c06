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
server that slows for a while queues more than independent draws say).

**Failures, and the knee, by Pollaczek-Khinchine.** Fed by a Poisson schedule (the
default of ``tailwise run`` and of every knee trial), one FIFO server's steady state is
a function of its service law alone: the waiting time is a geometric number of
residual service times. Computed on a lattice for the service times read, it gives a
**floor** on the share of latencies beyond a threshold (:func:`miss_floor`, the delta
method's lower bound: a failure shown from ~2,000 requests where the clustered misses
need 4,000-8,000), the **level** at a share (:func:`model_level`: the steady state's
p99, where a run's own rests on a few excursions) and the **rate** at which that level
reaches a threshold (:func:`model_rate`: the knee, read from one run at any load, as
the service law does not change with the rate). Its **ceiling** (:func:`miss_ceiling`)
passes where Kingman's bound, loose by about a factor of the load, would need twice the
requests.

**Several servers.** Answers that overtake are replayed as 2 to :data:`MAX_SERVERS`
servers taking requests first come, first served (:func:`_servers`; processor sharing
is told apart by :func:`_crowding`). Their service times are read back the same way, and a
pass comes from Wolff's cyclic bound (:func:`_cyclic_beyond`); no failure is shown and
no level or knee is read (:func:`_model_service` says why).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from tailwise.metrics import tail

NS_PER_S = 1e9
MIN_REQUESTS = 500  # fewer answers: no service law to read
MIN_EACH = 100  # requests that queued, and that found the server free, at least
OVERTAKE_S = 0.001  # an answer this much before an earlier request's: not one FIFO server
MAX_OVERTAKES = 0.005  # ... tolerated share (answers close in time, reordered on the way)
MAX_SERVERS = 8  # first come first served servers tried where one does not explain the answers
CROWDED = 1.15  # free requests sent beside others against those sent alone: service ratio within
CROWDED_MAX = 1.4  # ... however few were sent alone
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
    # How long before the previous answer each request was sent (0 when it found the
    # server free): the floor (:func:`miss_floor`) reads only requests queued by more
    # than the network's offset, whose service is the gap between two answers.
    backlog_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    structure: str = ""  # why not one FIFO server, a heavy service aside ("" when it is)
    heaviness: float = math.inf  # tail.service_heaviness of the service times (both depths)
    servers: int = 1  # first come first served servers that explain the answers


def fifo_queue(scheduled_ns: np.ndarray, done_ns: np.ndarray) -> FifoQueue:
    """Read ``scheduled_ns`` (intended send times) and ``done_ns`` (each request's
    answer; negative when none came) as one FIFO server, or say why not. Every request
    must have succeeded: the caller passes None for a run with failures."""
    order = np.argsort(np.asarray(scheduled_ns), kind="stable")
    a = np.asarray(scheduled_ns, dtype=np.float64)[order] / NS_PER_S
    d = np.asarray(done_ns, dtype=np.float64)[order] / NS_PER_S
    n = len(a)
    if n < MIN_REQUESTS:
        return _refused(f"{n} requests (under {MIN_REQUESTS})")
    if bool(np.any(d < 0)) or not bool(np.all(np.isfinite(d))):
        return _refused("requests without an answer")
    before = np.concatenate(([-math.inf], np.maximum.accumulate(d)[:-1]))
    overtakes = int(np.count_nonzero(d < before - OVERTAKE_S))
    servers = 1
    if overtakes > MAX_OVERTAKES * n:
        servers, before = _servers(a, d)
        if servers == 0:
            why = (
                f"{overtakes} answers overtook an earlier request: not one server in "
                f"order, nor up to {MAX_SERVERS} serving first come, first served"
            )
            return _refused(why)
    start = np.maximum(a, before)
    service = np.maximum(d - start, 0.0)
    free = a >= before
    heaviness = min(
        tail.service_heaviness(service), tail.service_heaviness(service, tail.SERVICE_TOP)
    )
    q = FifoQueue(
        service,
        free,
        np.diff(a),
        backlog_s=np.maximum(before - a, 0.0),
        heaviness=heaviness,
        servers=servers,
    )
    if servers > 1:  # Kingman's bound and the point estimates are one server's
        crowd = _crowding(a, d, free)
        why, structure = crowd or _why_not(q), crowd or _why_not(q, light=False)
        return replace(q, why_not=why, structure=structure)
    why = _why_not(q)
    structure = _why_not(q, light=False) if why else ""
    return replace(q, why_not=why, decay=None if why else decay_rate(q), structure=structure)


def _servers(a: np.ndarray, d: np.ndarray) -> tuple[int, np.ndarray]:
    """The fewest servers, 2 to :data:`MAX_SERVERS`, that serve first come first served
    and explain these answers (no more than :data:`MAX_OVERTAKES` of them before a server
    was free), and per request when that server freed; ``(0, ...)`` when none do.

    With ``c`` servers taking requests in order, each request starts when it was sent or
    when the earliest of the servers' last answers came, whichever is later: a heap of
    ``c`` times replays it. Too few servers put answers before their start; too many
    read the queued requests' service long (the spread test of :func:`_why_not`)."""
    n = len(a)
    allowed = MAX_OVERTAKES * n
    for servers in range(2, MAX_SERVERS + 1):
        free_at = [-math.inf] * servers
        before = np.empty(n)
        early = 0
        for i in range(n):
            t = heapq.heappop(free_at)
            before[i] = t
            done = d[i]
            if done < t - OVERTAKE_S:
                early += 1
                if early > allowed:
                    break
            heapq.heappush(free_at, done if done > t else t)
        else:
            return servers, before
    return 0, np.zeros(0)


def _crowding(a: np.ndarray, d: np.ndarray, free: np.ndarray) -> str:
    """Why requests that found a server free do not read as served alone ("" when
    they do): under first come first served their service does not depend on how many
    others were in flight, under processor sharing (or a batch that slows as it grows)
    it does. Those sent beside others must take as long as those sent into an empty
    system, within :data:`CROWDED` or three standard errors, never past
    :data:`CROWDED_MAX`. An M/M/1-PS server at 30-75% load, whose answers the replay
    can explain with 4-8 servers, reads 1.65-2.3x; M/M/4 at 80% load, 1.0 +- 0.1 (few
    requests find it empty)."""
    in_flight = np.arange(len(a)) - np.searchsorted(np.sort(d), a, side="right")
    service = d - a
    alone, beside = service[free & (in_flight == 0)], service[free & (in_flight > 0)]
    if len(alone) < MIN_EACH or len(beside) < MIN_EACH:
        return (
            f"{len(alone)} requests sent into an empty system and {len(beside)} beside "
            f"others, with a server free (under {MIN_EACH} each)"
        )
    ratio = float(beside.mean()) / float(alone.mean()) if alone.mean() > 0 else math.inf
    noise = math.hypot(_relative_se(alone), _relative_se(beside))
    allowed = min(CROWDED_MAX, max(CROWDED, 1.0 + 3.0 * noise))
    if not 1.0 / allowed <= ratio <= allowed:
        return (
            f"requests sent beside others took {ratio:.2f}x as long as those sent into an "
            "empty system: not first come, first served"
        )
    return ""


def _relative_se(x: np.ndarray) -> float:
    mean = float(x.mean())
    return float(x.std()) / (mean * math.sqrt(len(x))) if mean > 0 else math.inf


def _refused(why: str) -> FifoQueue:
    empty = np.zeros(0)
    return FifoQueue(empty, empty.astype(bool), empty, why, structure=why)


def _why_not(q: FifoQueue, light: bool = True) -> str:
    """Why ``q`` does not read as one FIFO server ("" when it does); with ``light``, as
    Kingman's bound needs, a heavy-tailed service is a reason too (the floor does without:
    a sample short of the rare long jobs only lowers it)."""
    queued, free = q.service_s[~q.free], q.service_s[q.free]
    if len(queued) < MIN_EACH or len(free) < MIN_EACH:
        return f"{len(queued)} queued and {len(free)} free requests (under {MIN_EACH} each)"
    # A heavy service first: its spread reads noisily too, and this is the reason.
    heaviness = q.heaviness
    if light and not heaviness < (HEAVY if len(q.service_s) >= SHORT else HEAVY_SHORT):
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


# -- the floor: a failure shown by the queue's law ----------------------------------------

# Steps from 0 to the threshold: each service time rounded to T / 1024 (the floor down,
# the ceiling up: at a threshold of 100 mean services, rounding up adds 5% to the load,
# and near saturation the ceiling then reads the queue as overloaded; Kingman's bound,
# tight there, decides beside it).
LATTICE = 1024
MAX_LOAD = (
    0.97  # a sample's load from which the floor is not computed (the rising queue's rule decides)
)
POISSON_CV = (0.9, 1.1)  # the sends' gaps read exponential: coefficient of variation within
POISSON_KS = 1.63  # ... and Kolmogorov's distance to the fitted exponential under this / sqrt(n)


def poisson_sends(gaps_s: np.ndarray) -> str:
    """Why the gaps between intended sends do not read as a Poisson schedule ("" when
    they do): coefficient of variation within :data:`POISSON_CV` and Kolmogorov's
    distance to the exponential of their mean under ``POISSON_KS / sqrt(n)`` (the 1%
    critical value of a fully specified law; with the mean fitted, a Poisson schedule
    is refused less often still). A constant rate reads 0.63 from it, gamma gaps of CV
    2 fail the first test."""
    n = len(gaps_s)
    mean = float(gaps_s.mean()) if n else 0.0
    if n < MIN_REQUESTS or mean <= 0.0:
        return f"{n} gaps between sends (under {MIN_REQUESTS})"
    cv = float(gaps_s.std()) / mean
    fitted = 1.0 - np.exp(-np.sort(gaps_s) / mean)
    steps = np.arange(n + 1) / n
    distance = max(float(np.max(steps[1:] - fitted)), float(np.max(fitted - steps[:-1])))
    if not POISSON_CV[0] <= cv <= POISSON_CV[1] or distance > POISSON_KS / math.sqrt(n):
        return (
            f"sends not a Poisson schedule (gaps' coefficient of variation {cv:.2f}, "
            f"distance to an exponential {distance:.3f})"
        )
    return ""


def _offset(q: FifoQueue) -> float:
    """The network's offset (seconds): how much longer the requests that found a server
    free read than those that queued (whose time is the gap between two answers)."""
    return max(0.0, float(q.service_s[q.free].mean()) - float(q.service_s[~q.free].mean()))


def floor_service(q: FifoQueue, narrow: bool = True) -> np.ndarray:
    """The service times the floor reads: those of requests sent more than the network's
    offset before the previous answer (the offset: how much longer the free requests'
    read, whose time holds the network's part; a request sent inside it may have found
    the server already free, and would read its service plus part of that). Whether a
    request queued depends on the requests before it, not on its own service, so these
    are a fair sample of the service law.

    Each is the gap between two answers, so a client that notes answers late by a
    varying ``e_n`` reads ``s_n + e_n - e_{n-1}``: a spread too wide by ``2 var(e)``,
    which is what a queue's tail grows with, and a lag-1 covariance of ``-var(e)``.
    Where that covariance is negative the spread is narrowed by it around the mean
    (never widened: a floor may only err low); not with ``narrow`` False (a ceiling
    may only err high)."""
    service, free = q.service_s, q.free
    if len(q.backlog_s) != len(service) or bool(np.all(free)) or not bool(np.any(free)):
        return np.zeros(0)
    clear = np.flatnonzero(~free & (q.backlog_s > _offset(q)))
    clear = clear[clear > 0]
    s = service[clear]
    if len(s) < MIN_EACH:
        return np.zeros(0)
    dev = s - s.mean()
    prev = service[clear - 1] - service[clear - 1].mean()
    var, cov1 = float(dev @ dev) / len(s), float(dev @ prev) / len(s)
    if narrow and cov1 < 0.0 and var > 0.0:
        s = s.mean() + dev * math.sqrt(max(0.0, 1.0 + 2.0 * cov1 / var))
    return s


@dataclass(frozen=True)
class _Service:
    """Service times on a lattice of ``step`` seconds from 0 to ``(points - 1) step``,
    each rounded to the nearest step (``index``, capped at ``points``; ``value``): off by
    a fraction of a step each, far under their sampling error. ``cdf``: their law."""

    step: float
    points: int
    index: np.ndarray
    value: np.ndarray
    mean: float
    cdf: np.ndarray


def _service(service_s: np.ndarray, top_s: float, steps: int, up: bool = False) -> _Service:
    """The lattice of ``steps`` from 0 to ``top_s``; with ``up`` each service time is
    rounded up to its step (a ceiling may only err high)."""
    step = top_s / steps
    points = steps + 1
    lattice = np.ceil(service_s / step) if up else np.floor(service_s / step + 0.5)
    index = np.minimum(lattice, points).astype(np.int64)
    cdf = np.cumsum(np.bincount(index, minlength=points + 1)[:points]) / len(service_s)
    value = lattice * step
    return _Service(step, points, index, value, float(value.mean()), cdf)


@dataclass(frozen=True)
class _Lattice:
    """Pollaczek-Khinchine's M/G/1 for the service law ``svc`` at ``rate``: the load,
    and the series ``u`` with P(wait = k steps) = ``(1 - load) u_k`` (a geometric
    number of residual service times, whose law is ``step * (1 - cdf_k) / mean``)."""

    svc: _Service
    rate: float
    load: float
    u: np.ndarray

    def latency_cdf(self) -> np.ndarray:
        """P(wait + service <= k steps) for every lattice point."""
        return (1.0 - self.load) * np.convolve(self.u, self.svc.cdf)[: self.svc.points]


Rounding = Literal["down", "centred", "up"]


def _lattice(svc: _Service, rate: float, rounding: Rounding = "down") -> _Lattice | None:
    """The queue at ``rate`` (None at a load of 1 or more). The residual service times
    are rounded ``down`` to the lattice (by half a step on average; the floor's lattice
    is fine, a thousandth of the threshold, and a floor may err low), ``up`` (the
    ceiling's, which may only err high), or ``centred`` to the nearest step (the point
    estimates: a latency in the tail sums many residuals, and rounding each down read
    an M/M/1's p99 4% low on 512 steps)."""
    load = rate * svc.mean
    if not 0.0 < load < 1.0:
        return None
    beyond = 1.0 - svc.cdf  # the residual's mass in [k, k + 1) steps, put at k
    shifted = np.concatenate(([0.0], beyond[:-1]))  # ... put at k + 1
    if rounding == "up":
        beyond = shifted
    elif rounding == "centred":
        beyond = 0.5 * (beyond + shifted)
    series = -rate * svc.step * beyond
    series[0] += 1.0
    return _Lattice(svc, rate, load, _series_inverse(series))


def miss_floor(q: FifoQueue, threshold_s: float, z: float) -> float | None:
    """Lower bound on the steady state's share of latencies above ``threshold_s``: a
    failure shown by the queue's law where counting would need the clustered misses of
    thousands of requests (M/M/1 at 80% load, 5% beyond the threshold of a p99).

    For a FIFO server fed by a Poisson schedule (:func:`poisson_sends`, at the rate of
    the gaps' mean) the waiting time is Pollaczek-Khinchine's: a geometric number of
    residual service times. It is computed exactly on a lattice of :data:`LATTICE`
    steps up to the threshold (:class:`_Lattice`) for the service law of
    :func:`floor_service`; a request's latency is its wait plus its service, the
    network's part left out (it only adds). The share's standard error is the delta
    method's: each service time's influence on it (in closed form from the lattice's
    series, one pass) and the rate's. The bound is the share times ``exp(-z se /
    share)``: on the log scale, as the share falls off exponentially in the load and
    its estimate's law is skewed right. None where the run does not read as one FIFO
    server fed by Poisson sends (a heavy service is allowed: a sample short of the
    rare long jobs only lowers the floor), or its load is :data:`MAX_LOAD` or over.

    Over 100 M/M/1 runs at 80% load the floor sat above the true share in 1-3% (one
    side of a 95% interval allows 2.5%), and showed ``p99 <= 300 ms`` failing (4.8%
    beyond) in 65% of runs of 1,000 requests, 91% of 2,000, 98% of 3,000."""
    if q.structure or q.servers != 1 or poisson_sends(q.gaps_s):
        return None
    s = floor_service(q)
    if len(s) < MIN_EACH or threshold_s <= 0.0:
        return None
    read = _beyond(s, q.gaps_s, threshold_s, up=False)
    if read is None:
        return None
    share, se = read
    return share * math.exp(-z * se / share) if share > 0.0 else 0.0


def miss_ceiling(
    q: FifoQueue, threshold_s: float, z: float, under: float | None = None
) -> float | None:
    """Upper bound on the steady state's share of latencies above ``threshold_s``: a
    pass shown by the queue's law (:func:`miss_floor`'s, the other side) where counting
    waits for the clustered misses to average out (M/M/1 at 0.8x its knee: 4,000-8,000
    requests) and Kingman's bound, loose by about a factor of the load, needs
    2,000-4,000.

    Everything errs high: the service times are the queued requests' own gaps between
    answers, not narrowed by a client's noise (:func:`floor_service` with its spread as
    read), each rounded up to the lattice, and so is each residual; the threshold is
    lowered by the network's offset (the free requests' mean over the queued ones',
    which every latency carries). The bound is the share times ``exp(z se / share)``,
    the delta method on the log scale. None unless the run reads as one FIFO server
    with a light service (``why_not`` empty: a sample short of a heavy service's rare
    long jobs would read the share low) fed by Poisson sends, at a load under
    :data:`MAX_LOAD`.

    Several first come first served servers (``q.servers``) are bounded by Wolff's
    cyclic system (:func:`_cyclic_beyond`), whose share is computed, not its error,
    when it is over ``under`` already (the caller's allowed share: no pass either way)."""
    if q.why_not or poisson_sends(q.gaps_s):
        return None
    s = floor_service(q, narrow=False)
    if len(s) < MIN_EACH:
        return None
    offset = _offset(q)
    if threshold_s - offset <= 0.0:
        return None
    if q.servers > 1:
        read = _cyclic_beyond(s, q.gaps_s, q.servers, threshold_s - offset, under)
    else:
        read = _beyond(s, q.gaps_s, threshold_s - offset, up=True)
    if read is None:
        return None
    share, se = read
    if share <= 0.0:
        return None  # nothing on the lattice beyond: no error to scale
    return min(1.0, share * math.exp(z * se / share))


def _beyond(
    s: np.ndarray, gaps_s: np.ndarray, threshold_s: float, up: bool
) -> tuple[float, float] | None:
    """Pollaczek-Khinchine's share of latencies (wait plus service) beyond
    ``threshold_s`` for service times ``s`` at the rate of the gaps ``gaps_s``, and its
    standard error by the delta method (the service times' influence and the rate's);
    rounded ``up`` or down on the lattice. None at a load of :data:`MAX_LOAD` or more."""
    rate = 1.0 / float(gaps_s.mean())
    svc = _service(s, threshold_s, LATTICE, up=up)
    m = _lattice(svc, rate, "up" if up else "down")
    if m is None or m.load >= MAX_LOAD:
        return None
    beyond = 1.0 - svc.cdf  # P(service > k steps)
    within_t = float(m.u @ svc.cdf[::-1])  # (u * cdf) at T: P(latency <= T) / (1 - load)
    share = 1.0 - (1.0 - m.load) * within_t
    # Influence of one service time s (lattice index j) on P(latency <= T):
    # sum_{k<j} c_k - sum_k beyond_k c_k - rate (s - mean) within_t, where the residual's
    # term reads v one step later when the residuals are rounded up.
    v = np.convolve(np.convolve(m.u, m.u)[: svc.points], svc.cdf)[: svc.points]
    lag = 1 if up else 0
    v_back = np.concatenate((v[::-1][lag:], np.zeros(lag)))
    c = (1.0 - m.load) * (rate * svc.step * v_back - m.u[::-1])
    cum = np.concatenate(([0.0], np.cumsum(c)))
    influence = cum[svc.index] - float(beyond @ c) - rate * (svc.value - svc.mean) * within_t
    var_service = float(np.mean(influence**2)) / len(s)
    by_rate = -svc.mean * within_t + (1.0 - m.load) * svc.step * float(beyond @ v_back)
    cv2 = float(gaps_s.var()) / float(gaps_s.mean()) ** 2
    var_rate = (by_rate * rate) ** 2 * cv2 / len(gaps_s)
    return share, math.sqrt(var_service + var_rate)


# -- several servers: Wolff's cyclic bound -----------------------------------------------

CYCLIC_STEPS = 512  # lattice steps from 0 to the threshold (each Lindley step rounds up by one)
CYCLIC_TOP = 8  # the wait's lattice ends at this many thresholds; mass past it stays there
CYCLIC_ITERATIONS = 4000  # Lindley steps before a queue that has not settled is given up
CYCLIC_SETTLED = 1e-4  # ... settled: the share's move still to come under this (relative)
CYCLIC_GROUPS = 20  # jackknife groups of the service times (and of the gaps)
ERLANG_TAIL = 1e-12  # the gap's lattice ends where its law has this much left beyond


def _cyclic_beyond(
    s: np.ndarray, gaps_s: np.ndarray, servers: int, threshold_s: float, under: float | None
) -> tuple[float, float] | None:
    """Upper share of latencies beyond ``threshold_s`` for ``servers`` first come first
    served servers fed by a Poisson schedule, with its jackknife standard error.

    Wolff (1977): every request's wait under first come first served is at most what
    it would be if the requests were dealt to the servers in turn (request ``n`` to
    server ``n mod c``), a sample-path fact for any arrivals and service times. Each
    server then is a queue of its own, fed every ``c``-th send: gaps of Erlang's law
    (``c`` exponential gaps) and the same service law. Its steady wait is computed on a
    lattice by Lindley's recursion ``W' = max(0, W + S - A)`` from empty to its fixed
    point (services rounded up, gaps down, wait past the lattice's end kept there for
    good: a ceiling errs high). Loose by the pooling it gives up (M/M/2: the bound
    reaches 1% beyond a 300 ms threshold at 0.9x the true knee), but at 0.78x the knee
    it reads 0.13% where the truth is 0.01%: a low end shown in a few thousand requests
    where counting needs 8,000-16,000."""
    rate = 1.0 / float(gaps_s.mean())
    full = _cyclic_point(s, rate, servers, threshold_s, under=under)
    if full is None:
        return None
    share, w = full
    if under is not None and share > under:
        return share, 0.0  # over already: no error to compute
    # Jackknife over groups of service times, each left out in turn, the rate too (the
    # gaps' groups): the share is a smooth function of both.
    order = np.arange(len(s)) % CYCLIC_GROUPS
    gap_group = np.arange(len(gaps_s)) % CYCLIC_GROUPS
    reads = []
    for g in range(CYCLIC_GROUPS):
        rate_g = 1.0 / float(gaps_s[gap_group != g].mean())
        read = _cyclic_point(s[order != g], rate_g, servers, threshold_s, w)
        if read is None:
            return None
        reads.append(read[0])
    x = np.asarray(reads)
    se = math.sqrt((CYCLIC_GROUPS - 1) / CYCLIC_GROUPS * float(np.sum((x - x.mean()) ** 2)))
    return share, se


def _erlang_pmf(servers: int, rate: float, step: float) -> np.ndarray:
    """P(gap in [k, k + 1) steps) for the gap of Erlang's law (``servers`` exponential
    gaps at ``rate``), each rounded down to its step (a ceiling's gaps err short)."""
    top = (servers + 10.0 * math.sqrt(servers) + 30.0) / rate  # past 1e-12 for c <= 8
    k = np.arange(math.ceil(top / step) + 2)
    x = rate * k * step
    term = np.ones_like(x)
    beyond = np.ones_like(x)  # sum_{j < c} x^j / j!
    for j in range(1, servers):
        term = term * x / j
        beyond = beyond + term
    survival = np.exp(-x) * beyond  # P(gap > k steps)
    pmf = survival[:-1] - survival[1:]
    last = min(int(np.searchsorted(-survival[1:], -ERLANG_TAIL)) + 1, len(pmf))
    out: np.ndarray = pmf[:last].copy()
    out[-1] += float(survival[last])  # the tail past the lattice, at its last step
    return out


def _cyclic_point(
    s: np.ndarray,
    rate: float,
    servers: int,
    threshold_s: float,
    start: np.ndarray | None = None,
    under: float | None = None,
) -> tuple[float, np.ndarray] | None:
    """The cyclic system's share beyond ``threshold_s`` and its wait's law (lattice of
    ``threshold_s / CYCLIC_STEPS`` steps, the last entry the mass held past its end); from
    ``start`` (a wait's law) rather than empty when given. From empty, the share only
    grows step by step: with ``under``, the first share over it is returned. None at a
    per-server load of :data:`MAX_LOAD` or more, or where the recursion does not
    settle."""
    step = threshold_s / CYCLIC_STEPS
    si = np.ceil(s / step).astype(np.int64)
    if float(si.mean()) * step * rate / servers >= MAX_LOAD:
        return None
    service = np.bincount(si) / len(si)
    gap = _erlang_pmf(servers, rate, step)
    # S - A on the lattice: index i stands for (i - len(gap) + 1) steps
    jump = np.convolve(service, gap[::-1])
    low = len(gap) - 1
    top = CYCLIC_TOP * CYCLIC_STEPS
    size = top + 1 + len(jump)
    nfft = 1 << (size - 1).bit_length()
    jump_f = np.fft.rfft(jump, nfft)
    service_cdf = np.cumsum(service)
    within = np.zeros(top + 1)  # P(S <= (CYCLIC_STEPS - k) steps) for a wait of k steps
    idx = CYCLIC_STEPS - np.arange(CYCLIC_STEPS + 1)  # the cdf ends at 1: clip the index
    within[: CYCLIC_STEPS + 1] = service_cdf[np.minimum(idx, len(service_cdf) - 1)]
    if start is None:
        w = np.zeros(top + 2)
        w[0] = 1.0
    else:
        w = start.copy()
    share, delta = 1.0 - float(w[: top + 1] @ within), 0.0
    for _ in range(CYCLIC_ITERATIONS):
        y = np.fft.irfft(np.fft.rfft(w[: top + 1], nfft) * jump_f, nfft)[:size]
        y = np.maximum(y, 0.0)  # the transforms' rounding
        nxt = np.empty(top + 2)
        nxt[0] = float(y[: low + 1].sum())
        nxt[1 : top + 1] = y[low + 1 : low + 1 + top]
        nxt[top + 1] = w[top + 1] + float(y[low + 1 + top :].sum())
        w = nxt / nxt.sum()
        new = 1.0 - float(w[: top + 1] @ within)
        delta, last = new - share, delta
        share = new
        # The recursion nears its fixed point geometrically: what is left is about
        # delta r / (1 - r), r the ratio of successive moves; stop once that is small.
        if share > 0.0 and last != 0.0 and 0.0 < delta / last < 1.0:
            r = delta / last
            left = delta * r / (1.0 - r)
            if abs(left) <= CYCLIC_SETTLED * share:
                return share + left, w
        if share > 0.0 and delta == 0.0 and last == 0.0:
            return share, w
        if under is not None and share > under and delta >= 0.0 and start is None:
            return share, w  # from empty the share only grows: already over
    return None


# -- the model's point estimates: a level at this rate, the rate at a threshold --------------

MODEL_STEPS = 512  # lattice steps of the point estimates (a level to 0.2% of its range)
# Service heaviness from which the point estimates are not given: a heavy service's sample
# lacks its rare long jobs, and the model would read its level low. Looser than the pass's
# (HEAVY_SHORT refuses 31% of exponential services at 1,024 requests: a knee search's
# steering trials would lose their reading); an exponential service reads under 1.0 in
# about 97% of such runs, a lognormal of sigma 1 about 1.8.
MODEL_HEAVY = 1.0
MODEL_TRIES = 8  # doublings of the lattice's range before a level is given up
RATE_BISECTIONS = 14  # the rate at a threshold to 2^-14 (0.006%) of the service's capacity


def _model_service(q: FifoQueue) -> tuple[np.ndarray, float] | None:
    """``(service_s, offset_s)`` the point estimates read: :func:`floor_service` and the
    network's offset (the free requests' mean over the queued ones', which every latency
    carries). None where the model does not apply: not one FIFO server, a service
    heavier than :data:`MODEL_HEAVY`, or sends that are not a Poisson schedule.

    Not for several servers: there each queued request's service is read from the
    earliest of the servers' last answers, the least of several times a client notes
    late by varying amounts, so it reads long where the servers are rarely all busy
    (4 demo workers of 5 ms at a quarter of their capacity: 6.2 ms) and the knee low.
    A ceiling only errs high from it; a point estimate would not."""
    if q.structure or q.servers != 1 or not q.heaviness < MODEL_HEAVY:
        return None
    if poisson_sends(q.gaps_s):
        return None
    s = floor_service(q)
    if len(s) < MIN_EACH:
        return None
    offset = _offset(q)
    return s, offset


def model_level(q: FifoQueue, share: float, rate: float | None = None) -> float | None:
    """The steady state's latency at ``share`` (its p99 at 0.99), in seconds, at
    ``rate`` (the sends' own rate by default): Pollaczek-Khinchine's law for the run's
    service times, plus the network's offset. A run's own p99 at 80% load rests on a
    few clustered excursions (the M/M/1 knee's high trial read 938 ms where the steady
    state's is 523 ms); this rests on every service time. None where the model does not
    apply (:func:`_model_service`) or the load is 1 or more."""
    read = _model_service(q)
    if read is None or not 0.0 < share < 1.0:
        return None
    s, offset = read
    rate = 1.0 / float(q.gaps_s.mean()) if rate is None else rate
    load = rate * float(s.mean())
    if not 0.0 < load < 1.0:
        return None
    top = 2.0 * float(s.mean()) * math.log(1.0 / (1.0 - share)) / (1.0 - load) + float(s.max())
    for _ in range(MODEL_TRIES):
        svc = _service(s, top, MODEL_STEPS)
        cdf = _latency_cdf(svc, rate)
        if cdf is None:
            return None
        k = int(np.searchsorted(cdf, share))
        if 0 < k < svc.points:  # between two lattice points, on the line joining them
            part = (share - cdf[k - 1]) / (cdf[k] - cdf[k - 1]) if cdf[k] > cdf[k - 1] else 1.0
            return (k - 1 + part) * svc.step + offset
        if k == 0:
            return offset
        top *= 2.0
    return None


def _latency_cdf(svc: _Service, rate: float) -> np.ndarray | None:
    """P(latency <= k steps) at every lattice point of ``svc`` at ``rate`` (None at a
    load of 1 or more): Pollaczek-Khinchine's law."""
    m = _lattice(svc, rate, rounding="centred")
    return None if m is None else m.latency_cdf()


def model_rate(q: FifoQueue, share: float, threshold_s: float) -> float | None:
    """The rate at which the model's latency at ``share`` reaches ``threshold_s``
    (requests/s): Pollaczek-Khinchine's law for the run's service times at each rate
    tried, by bisection. For one FIFO server the service law does not change with the
    rate, so one run at any load reads the knee. None where the model does not apply,
    or even a rate near zero leaves the threshold under the service itself."""
    read = _model_service(q)
    if read is None or not 0.0 < share < 1.0:
        return None
    s, offset = read
    t = threshold_s - offset
    if t <= 0.0:
        return None

    svc = _service(s, t, MODEL_STEPS)  # the lattice ends at the threshold, whatever the rate

    def holds(rate: float) -> bool:
        cdf = _latency_cdf(svc, rate)
        return cdf is not None and float(cdf[-1]) >= share

    lo, hi = 0.0, 1.0 / svc.mean if svc.mean > 0 else 0.0
    if not holds(hi * 2.0**-RATE_BISECTIONS):
        return None
    for _ in range(RATE_BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def _series_inverse(a: np.ndarray) -> np.ndarray:
    """The power series ``1 / a(z)`` to as many terms as ``a`` has (``a[0] > 0``)."""
    u = np.zeros(len(a))
    u[0] = 1.0 / a[0]
    for k in range(1, len(a)):
        u[k] = -float(a[1 : k + 1] @ u[k - 1 :: -1]) / a[0]
    return u
