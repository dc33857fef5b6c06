"""Closed forms for capacity: queueing (Erlang C) and the demo targets' cost models.

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
