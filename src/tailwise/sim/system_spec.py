"""What the event-driven serving model is given and what it gives back.

A :class:`SystemSpec` is one stage of replicas (its own fields) or a pipeline
of :class:`StageSpec` (``stages``), plus fan-out or hedging; each stage may
batch (:class:`Batching`), fail (:class:`Failures`) and scale
(:class:`Autoscale`). :class:`tailwise.sim.system.System` runs it and returns
a :class:`SimResult`, with the outcome codes below; :func:`legs_summary` is its
legs section in ``summary.json`` (what redundancy cost). Times are integer
nanoseconds (``_ns``); the service law is a :class:`Distribution` of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailwise.distributions import Distribution

# Leg and request outcomes. DISCARDED (legs only): served to the end after its request
# was decided (a hedge's loser that could not be aborted); its answer is thrown away.
OK, REJECTED, CANCELLED, FAILED, UNAVAILABLE, DISCARDED = 0, 1, 2, 3, 4, 5
# What happens to a request's other legs once it is decided (fan-out, hedging):
# instant: removed from the queue and cut short in service, for free;
# queued_only: removed from the queue; a leg in service runs to its end;
# none: every leg runs to its end, queued or not.
CANCEL_MODES = ("instant", "queued_only", "none")


@dataclass(frozen=True)
class Batching:
    mode: str  # "static" | "dynamic"
    size: int
    max_wait_ns: int = 0
    base_ns: int = 0
    per_item_ns: int = 0


@dataclass(frozen=True)
class Failures:
    mtbf: Distribution  # time a replica stays up
    mttr: Distribution  # time it stays down
    retry: bool = False  # re-send the legs it held (else they fail)
    max_retries: int = 2


@dataclass(frozen=True)
class Autoscale:
    metric: str  # "concurrency" (legs per replica) | "queue" (waiting per replica) | "p99"
    target: float  # legs per replica, or ns for p99
    min_replicas: int
    max_replicas: int
    interval_ns: int
    cold_start_ns: int
    tolerance: float = 0.1
    stabilization_ns: int = 0  # scale down to the highest recommendation in this window


@dataclass(frozen=True)
class StageSpec:
    service: Distribution
    name: str = "server"
    replicas: int = 1
    servers: int = 1
    queue_limit: int | None = None  # legs waiting per replica; beyond: rejected
    routing: str = "round_robin"
    power_d: int = 2
    batching: Batching | None = None
    slow_replicas: tuple[int, ...] = ()
    slow_factor: float = 1.0
    straggler_p: float = 0.0
    straggler_factor: float = 1.0
    failures: Failures | None = None
    autoscale: Autoscale | None = None


@dataclass(frozen=True)
class SystemSpec:
    """One stage (the fields below) or a pipeline (``stages``), plus fan-out or hedging."""

    service: Distribution
    replicas: int = 1
    servers: int = 1
    queue_limit: int | None = None
    routing: str = "round_robin"
    power_d: int = 2
    batching: Batching | None = None
    slow_replicas: tuple[int, ...] = ()
    slow_factor: float = 1.0
    straggler_p: float = 0.0
    straggler_factor: float = 1.0
    fanout: int = 1
    fanout_k: int | None = None  # None: wait for all n
    hedge_after_ns: int | None = None
    # Hedge after this quantile of recent answers (The Tail at Scale's "p95"); the
    # delay starts at hedge_after_ns and follows the last answers from then on.
    hedge_quantile: float | None = None
    cancel: str = "instant"  # one of CANCEL_MODES
    failures: Failures | None = None
    autoscale: Autoscale | None = None
    stages: tuple[StageSpec, ...] = ()

    def tiers(self) -> tuple[StageSpec, ...]:
        if self.stages:
            return self.stages
        return (
            StageSpec(
                self.service,
                "server",
                self.replicas,
                self.servers,
                self.queue_limit,
                self.routing,
                self.power_d,
                self.batching,
                self.slow_replicas,
                self.slow_factor,
                self.straggler_p,
                self.straggler_factor,
                self.failures,
                self.autoscale,
            ),
        )


@dataclass
class SimResult:
    """Per request (client view) and per leg (server view); times in ns, -1 absent."""

    done_ns: np.ndarray
    status: np.ndarray  # OK, REJECTED, FAILED or UNAVAILABLE
    replica: np.ndarray
    leg_parent: np.ndarray
    leg_sent_ns: np.ndarray
    leg_start_ns: np.ndarray
    leg_done_ns: np.ndarray
    leg_status: np.ndarray  # OK, REJECTED, CANCELLED, FAILED, UNAVAILABLE or DISCARDED
    leg_replica: np.ndarray
    events: int
    stages: list[dict[str, Any]] = field(default_factory=list)
    hedge_delay_ns: int | None = None  # the hedge delay in force at the end
    busy_ns: int = 0  # server time used by all legs (all stages; a batch counts once)
    # The full service time of the legs each request needed (its first k of a k-of-n
    # fan-out, its first leg when hedged), wherever they were routed: the work the
    # request would have cost without redundancy.
    needed_work_ns: int = 0


def legs_summary(result: SimResult, n: int, spec: SystemSpec) -> dict[str, Any]:
    """What the redundancy cost, in legs and in server time.

    ``legs_per_request``: legs whose service started, per request.
    ``server_time_x``: server time all legs used over the full work of the legs each
    request needed (1 leg hedged, k of a k-of-n fan-out, n of a wait-for-all one): 1.0
    is no waste; None where batching shares server time between legs or the legs
    cross stages. ``extra_load``: ``server_time_x - 1``, the extra share of server time.
    """
    started = result.leg_start_ns >= 0
    ratio = None
    if spec.batching is None and not spec.stages and result.needed_work_ns > 0:
        ratio = round(result.busy_ns / result.needed_work_ns, 4)
    return {
        "cancel": spec.cancel,
        "sent": len(result.leg_parent),
        "served": int(started.sum()),
        "cancelled": int((result.leg_status == CANCELLED).sum()),
        "discarded": int((result.leg_status == DISCARDED).sum()),
        "legs_per_request": round(int(started.sum()) / n, 4) if n else 0.0,
        "needed_per_request": spec.fanout_k or spec.fanout,
        "server_time_x": ratio,
        "extra_load": None if ratio is None else round(ratio - 1, 4),
    }
