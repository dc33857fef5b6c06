"""A queueing law computed in virtual time: c FCFS workers, stalls and stragglers.

For a request arriving at server time ``a`` (seconds since the server started):

* if ``a`` falls in a stall window ``[k*P, k*P + S)`` (stall ``S/P``), work
  starts at the end of that window, else at ``a``;
* its work is a service time drawn from ``constant`` or ``exp`` with the given
  mean, times ``k`` for a straggler (probability ``p``, straggler ``p%xk``);
* with ``workers`` c > 0 it queues FCFS for c servers, computed from a heap of
  worker free instants, so the queue is exact whatever the event loop does;
  with 0, every request is served in parallel;
* the response is due when its work finishes.

With exponential service and no stalls or stragglers this is exactly M/M/c
under Poisson arrivals, so Erlang C gives its latency distribution.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from dataclasses import dataclass

from tailwise.errors import BadInput
from tailwise.units import parse_duration_ns, parse_slow_share, parse_stall_ns

SERVICE_FORM = "<duration> or exp:<duration> (e.g. 5ms, exp:5ms)"


@dataclass(frozen=True)
class Law:
    service_s: float = 0.005
    distribution: str = "constant"  # constant | exp
    workers: int = 0
    stall_s: float = 0.0
    period_s: float = 0.0
    seed: int = 0
    straggler_p: float = 0.0
    straggler_factor: float = 1.0


def parse_law(
    service: str, workers: int, stall: str | None, seed: int, straggler: str | None = None
) -> Law:
    dist, _, value = service.rpartition(":")
    if (dist or "constant") not in ("constant", "exp"):
        raise BadInput("--service", service, SERVICE_FORM)
    if workers < 0:
        raise BadInput("--workers", workers, "a count >= 0 (0: unlimited)")
    stall_s = period_s = 0.0
    if stall:  # the period defaults to 10 s; a zero stall is no stall
        stall_ns, period_ns = parse_stall_ns(
            stall, "--stall", default_period="10s", allow_zero=True
        )
        stall_s, period_s = stall_ns / 1e9, period_ns / 1e9
    p_slow, factor = 0.0, 1.0
    if straggler:
        p_slow, factor = parse_slow_share(straggler, "--straggler")
    return Law(
        parse_duration_ns(value, "--service") / 1e9,
        dist or "constant",
        workers,
        stall_s,
        period_s,
        seed,
        p_slow,
        factor,
    )


class QueueLab:
    def __init__(self, law: Law) -> None:
        self.law = law
        self.rng = random.Random(law.seed)
        self.epoch = time.monotonic()
        self.free_at: list[float] = [0.0] * law.workers  # heap of worker free instants
        self.served = 0
        self.busy_s = 0.0  # total work handed to workers (server-side truth for /metrics)

    def now_s(self) -> float:
        return time.monotonic() - self.epoch

    def service_s(self) -> float:
        law = self.law
        work = law.service_s
        if law.distribution == "exp" and law.service_s > 0:  # exp:0 is no work, not 1/0
            work = self.rng.expovariate(1.0 / law.service_s)
        if law.straggler_p > 0 and self.rng.random() < law.straggler_p:
            work *= law.straggler_factor
        return work

    def finish_at(self, arrival: float, extra_s: float = 0.0) -> float:
        """Server-clock instant the response is due (see the module's law)."""
        start = arrival
        law = self.law
        if law.stall_s > 0 and law.period_s > 0:
            k = math.floor(arrival / law.period_s)
            if arrival < k * law.period_s + law.stall_s:
                start = k * law.period_s + law.stall_s
        work = self.service_s() + extra_s
        self.busy_s += work
        if law.workers > 0:
            start = max(start, self.free_at[0])
            heapq.heapreplace(self.free_at, start + work)
        return start + work

    def busy_workers(self, now_s: float) -> int:
        """Workers whose current work runs past ``now_s``."""
        return sum(1 for t in self.free_at if t > now_s)
