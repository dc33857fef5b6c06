"""Closed forms for capacity: queueing (Erlang C, M/M/1, M/G/1, M/G/c by Allen-Cunneen,
M/M/c/K exactly), the demo targets' cost
models, and the planning laws behind ``tailwise plan`` (Little, Amdahl, fan-out,
availability, cost per unit of work).

Depends on nothing but the standard library; it is the oracle the tests hold
measurements and the simulator against. Times are seconds, rates per second.

M/M/c (Poisson arrivals at ``lam``, ``c`` FCFS servers, exponential service
with mean ``service_s``, ``mu = 1/service_s``, ``a = lam/mu``, ``rho = a/c``):

* Erlang C, the chance a request waits: ``C = (a^c/c!)/(1-rho) / (sum_{k<c} a^k/k!
  + (a^c/c!)/(1-rho))``;
* a waiting request waits ``Exp(theta)`` with ``theta = c*mu - lam``, so the
  sojourn (wait + service) survives past ``t`` with probability
  ``(1-C) e^{-mu t} + C (theta e^{-mu t} - mu e^{-theta t}) / (theta - mu)``.
"""

from __future__ import annotations

import math


def erlang_c(c: int, offered_load: float) -> float:
    """Probability an arrival waits in M/M/c with offered load ``a = lam * service_s``."""
    if c < 1:
        raise ValueError("c must be >= 1")
    if offered_load >= c:
        return 1.0
    # Erlang B by its stable recurrence, then C from B.
    b = 1.0
    for k in range(1, c + 1):
        b = offered_load * b / (k + offered_load * b)
    rho = offered_load / c
    return b / (1.0 - rho * (1.0 - b))


def mmc_sojourn_survival(t_s: float, c: int, service_s: float, lam: float) -> float:
    """P(latency > t) in M/M/c, latency = queueing wait + service."""
    mu = 1.0 / service_s
    if lam >= c * mu:
        return 1.0
    wait_p = erlang_c(c, lam * service_s)
    theta = c * mu - lam
    service_tail = math.exp(-mu * t_s)
    if abs(theta - mu) < 1e-9 * mu:  # the limit theta -> mu: Erlang-2 tail
        waited_tail = (1.0 + mu * t_s) * service_tail
    else:
        waited_tail = (theta * service_tail - mu * math.exp(-theta * t_s)) / (theta - mu)
    return (1.0 - wait_p) * service_tail + wait_p * waited_tail


def mmc_sojourn_quantile(q: float, c: int, service_s: float, lam: float) -> float:
    """The q-quantile of M/M/c latency (seconds); inf at or past capacity."""
    if not 0.0 < q < 1.0:  # the doubling search below never ends for q >= 1
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if lam * service_s >= c:
        return math.inf
    lo, hi = 0.0, service_s
    while mmc_sojourn_survival(hi, c, service_s, lam) > 1.0 - q:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if mmc_sojourn_survival(mid, c, service_s, lam) > 1.0 - q:
            lo = mid
        else:
            hi = mid
    return hi


def mmc_max_rate(q: float, slo_s: float, c: int, service_s: float) -> float:
    """The highest Poisson rate at which M/M/c's q-quantile latency is <= ``slo_s``.

    This is the knee at a percentile SLO; 0 when even an idle server misses it.
    """
    if mmc_sojourn_quantile(q, c, service_s, 1e-12 / service_s) > slo_s:
        return 0.0
    lo, hi = 0.0, c / service_s
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if mmc_sojourn_quantile(q, c, service_s, mid) <= slo_s:
            lo = mid
        else:
            hi = mid
    return lo


def batch_throughput(batch: int, base_s: float, per_item_s: float) -> float:
    """Items per second when every batch has ``batch`` items: ``B / (c0 + c1 B)``."""
    return batch / (base_s + per_item_s * batch)


def llm_saturated_rps(
    base_s: float,
    prefill_s_per_token: float,
    decode_s_per_seq: float,
    max_num_seqs: int,
    prompt_tokens: int,
    output_tokens: int,
    prefill_steps_per_batch: int | None = None,
) -> float:
    """Requests/s of the demo LLM engine (no chunked prefill) with its batch always full.

    Each request rides ``L - 1`` decode steps of ``T_d = a + c N`` with ``N - 1``
    others, and needs ``b P`` of prefill; every prefill step also costs ``a``.
    With ``m`` prefill steps per ``N`` completions (``1 <= m <= N``), time balance
    gives ``X = N / ((L-1) T_d + m a + N b P)``. The default ``m = N`` (one
    prompt per prefill step, what Poisson arrivals onto a filling engine give)
    is a lower bound; a backlog admitted in bursts approaches ``m = 1``
    (:func:`llm_saturated_rps_upper`), 13% higher for the demo defaults.
    """
    n = max_num_seqs
    m = n if prefill_steps_per_batch is None else prefill_steps_per_batch
    decode_step_s = base_s + decode_s_per_seq * n
    return n / (
        (output_tokens - 1) * decode_step_s + m * base_s + n * prefill_s_per_token * prompt_tokens
    )


def llm_saturated_rps_upper(
    base_s: float,
    prefill_s_per_token: float,
    decode_s_per_seq: float,
    max_num_seqs: int,
    prompt_tokens: int,
    output_tokens: int,
) -> float:
    """The ``m = 1`` end of :func:`llm_saturated_rps`: all N prompts share one prefill step."""
    return llm_saturated_rps(
        base_s, prefill_s_per_token, decode_s_per_seq, max_num_seqs, prompt_tokens, output_tokens, 1
    )


def llm_idle_ttft_s(base_s: float, prefill_s_per_token: float, prompt_tokens: int) -> float:
    """TTFT of a lone request on an idle engine: one prefill step."""
    return base_s + prefill_s_per_token * prompt_tokens


# --- Planning closed forms (``tailwise plan``): M/M/1, M/G/1, means of M/M/c, and the
# laws of fleet sizing. Each states its assumptions; docs/plan.md derives them.


def _ceil(x: float) -> int:
    """``ceil`` that ignores float noise: 15.000000000000002 replicas is 15, not 16."""
    return math.ceil(x - 1e-9 * max(1.0, abs(x)))


def replicas_needed(rate: float, latency_s: float, per_replica: float, utilization: float) -> int:
    """Replicas to carry ``rate`` by Little's law: ``ceil(rate * W / (u * N))``.

    ``per_replica`` (N) is the number of requests one replica holds in flight
    before its latency degrades; ``utilization`` (u) the share of it planned on.
    """
    # At least one: a rate far below one replica's capacity still needs a replica to serve it.
    return max(1, _ceil(rate * latency_s / (per_replica * utilization)))


def mm1_sojourn_quantile(q: float, service_s: float, lam: float) -> float:
    """The q-quantile of M/M/1 latency: it is ``Exp(mu - lam)``, so ``-ln(1-q)/(mu-lam)``."""
    mu = 1.0 / service_s
    if lam >= mu:
        return math.inf
    return -math.log1p(-q) / (mu - lam)


def mm1_max_rate(q: float, slo_s: float, service_s: float) -> float:
    """The highest rate at which M/M/1's q-quantile latency is <= ``slo_s`` (0 if none)."""
    return max(0.0, 1.0 / service_s + math.log1p(-q) / slo_s)


def mmc_queue_length(c: int, offered_load: float) -> float:
    """Mean number waiting (Lq) in M/M/c: ``C(c, a) rho / (1 - rho)``; M/M/1 ``rho^2/(1-rho)``."""
    rho = offered_load / c
    if rho >= 1.0:
        return math.inf
    return erlang_c(c, offered_load) * rho / (1.0 - rho)


def mmc_mean_wait_s(c: int, service_s: float, lam: float) -> float:
    """Mean queueing wait (Wq) in M/M/c: ``C / (c mu - lam)``, by Little's law on Lq."""
    mu = 1.0 / service_s
    if lam >= c * mu:
        return math.inf
    return erlang_c(c, lam * service_s) / (c * mu - lam)


def mmc_max_rate_mean(slo_s: float, c: int, service_s: float) -> float:
    """The highest rate at which M/M/c's MEAN latency ``S + Wq`` is <= ``slo_s`` (0 if none).

    M/M/1 has it in closed form, ``mu - 1/slo``; for c > 1 the mean grows
    monotonically with the rate, so it is found by bisection.
    """
    if slo_s <= service_s:
        return 0.0
    if c == 1:
        return 1.0 / service_s - 1.0 / slo_s
    lo, hi = 0.0, c / service_s
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if service_s + mmc_mean_wait_s(c, service_s, mid) <= slo_s:
            lo = mid
        else:
            hi = mid
    return lo


def mg1_queue_length(rho: float, cv: float) -> float:
    """Pollaczek-Khinchine mean number waiting in M/G/1: ``rho^2 (1 + cv^2) / (2 (1 - rho))``.

    ``cv`` is the service time's coefficient of variation (sd / mean): 1 gives
    M/M/1, 0 deterministic service (M/D/1, half the queue of M/M/1).
    """
    if rho >= 1.0:
        return math.inf
    return rho * rho * (1.0 + cv * cv) / (2.0 * (1.0 - rho))


def mg1_max_utilization_mean(slo_s: float, service_s: float, cv: float) -> float:
    """The highest M/G/1 utilization whose mean latency ``S (1 + rho k / (1 - rho))`` is <= slo.

    With ``k = (1 + cv^2) / 2`` and ``x = slo/S - 1``, that is ``rho <= x / (k + x)``.
    """
    if slo_s <= service_s:
        return 0.0
    x = slo_s / service_s - 1.0
    k = (1.0 + cv * cv) / 2.0
    return x / (k + x)


def amdahl_speedup(shares: list[float], speedups: list[float]) -> float:
    """End-to-end speedup when stage i (a share of the time) runs ``speedups[i]`` times faster.

    Amdahl's law, one term per stage: ``1 / sum(share_i / s_i)``; shares sum to 1.
    An infinite speedup removes the stage; removing every stage is an unbounded speedup.
    """
    left = math.fsum(p / s for p, s in zip(shares, speedups, strict=True))
    return 1.0 / left if left > 0 else math.inf


def fanout_slow_probability(q: float, n: int) -> float:
    """P(a request that waits for all of n independent calls is slow): ``1 - q^n``.

    ``q`` is the chance one call is fast (under the latency bound).
    """
    if q <= 0.0:
        return 1.0
    return -math.expm1(n * math.log(q))


def fanout_backend_needed(target: float, n: int) -> float:
    """The per-call chance of being fast that makes ``q^n = target``: ``target^(1/n)``."""
    return float(target ** (1.0 / n))


def k_of_m_unavailability(r: float, m: int, k: int) -> float:
    """P(fewer than k of m independent machines are up), each up with probability r.

    The lower tail of Binomial(m, r), summed in log space so that tiny
    unavailabilities (many nines) keep their digits. ``k = m``: ``1 - r^m``.
    """
    if k <= 0:
        return 0.0
    if k > m:
        return 1.0
    if r >= 1.0:
        return 0.0
    if r <= 0.0:
        return 1.0
    if k == m:
        return -math.expm1(m * math.log(r))
    log_r, log_f, log_m = math.log(r), math.log1p(-r), math.lgamma(m + 1)

    def pmf(i: int) -> float:
        return math.exp(
            log_m - math.lgamma(i + 1) - math.lgamma(m - i + 1) + i * log_r + (m - i) * log_f
        )

    # Sum outward from k, where the terms shrink, and stop once they no longer count:
    # a few hundred terms even for millions of machines.
    below_mode = k - 1 < math.floor((m + 1) * r)
    total = 0.0
    for i in range(k - 1, -1, -1) if below_mode else range(k, m + 1):
        term = pmf(i)
        total += term
        if term == 0.0 or term < total * 1e-17:
            break
    return min(1.0, total) if below_mode else max(0.0, 1.0 - total)


def cost_per_unit(dollars_per_hour: float, utilization: float, peak_per_s: float) -> float:
    """Dollars per unit of work: ``D / (3600 u X_max)``.

    A machine billed ``D`` $/h that could complete ``X_max`` units/s when fully
    busy, but is busy only a share ``u`` of the time, pays for its idle time too.
    """
    return dollars_per_hour / (3600.0 * utilization * peak_per_s)


def mgc_mean_wait_s(c: int, service_s: float, lam: float, cv: float) -> float:
    """Mean queueing wait (Wq) in M/G/c by the Allen-Cunneen approximation:
    ``Wq(M/M/c) x (1 + cv^2) / 2``, the M/M/c wait scaled by the service's variability.

    Exact at c = 1 (it is Pollaczek-Khinchine there) and for exponential service
    (cv = 1); an approximation otherwise, good to a few percent at moderate to high
    load and worst for nearly deterministic service at light load. inf at capacity.
    """
    return mmc_mean_wait_s(c, service_s, lam) * allen_cunneen_factor(cv)


def allen_cunneen_factor(cv: float) -> float:
    """``(1 + cv^2) / 2``: how much an M/G/c queue exceeds M/M/c's (Allen-Cunneen)."""
    if cv < 0:
        raise ValueError("cv must be >= 0")
    return (1.0 + cv * cv) / 2.0


def mmck_probabilities(c: int, k: int, offered_load: float) -> list[float]:
    """Stationary P(n in system), n = 0..k, of M/M/c/K (c servers, room for K in all).

    ``p_n`` is proportional to ``a^n / n!`` for ``n <= c`` and to ``a^c/c! rho^(n-c)``
    beyond; computed by ratios, so large K or a stay finite. Any load is stable.
    """
    if c < 1 or k < c:
        raise ValueError("need c >= 1 and K >= c")
    if offered_load < 0:
        raise ValueError("offered load must be >= 0")
    weights = [1.0]
    for n in range(1, k + 1):
        weights.append(weights[-1] * offered_load / min(n, c))
    total = sum(weights)
    return [w / total for w in weights]


def mmck_metrics(c: int, k: int, service_s: float, lam: float) -> dict[str, float]:
    """M/M/c/K exactly: blocking (an arrival finding K in the system is turned away, by
    PASTA with probability ``p_K``), throughput ``lam (1 - p_K)``, L, Lq, and the mean
    latency W and wait Wq of the requests admitted (Little's law on the throughput)."""
    p = mmck_probabilities(c, k, lam * service_s)
    blocking = p[-1]
    throughput = lam * (1.0 - blocking)
    length = sum(n * pn for n, pn in enumerate(p))
    queue_length = sum((n - c) * pn for n, pn in enumerate(p) if n > c)
    w = length / throughput if throughput > 0 else service_s
    wq = queue_length / throughput if throughput > 0 else 0.0
    return {
        "blocking": blocking,
        "throughput_rps": throughput,
        "l": length,
        "lq": queue_length,
        "w_s": w,
        "wq_s": wq,
        "busy_servers": throughput * service_s,
    }
