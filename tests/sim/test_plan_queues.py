"""``tailwise plan queue``'s M/G/c and M/M/c/K against the simulator.

M/G/c is the Allen-Cunneen approximation: the plan says so, and the test
holds it to 10% of the simulated mean wait, with runs long enough that the
simulator's own interval is far tighter than that. M/M/c/K is exact: its
blocking probability and mean latency must lie in the replication interval.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tailwise import plan
from tailwise.distributions import parse_distribution
from tests.sim import assert_covers, ci, run


@pytest.mark.parametrize(
    ("service", "rho"),
    [("5ms", 0.85), ("lognormal:4ms,0.8", 0.8), ("exp:5ms", 0.8)],
)
def test_mgc_allen_cunneen_within_10_percent_of_the_simulator(service: str, rho: float) -> None:
    """c = 4 with deterministic (cv 0), lognormal (cv 0.95) and exponential (cv 1) service.

    The plan's mean wait Wq is within 10% of the simulated one; the simulated interval is
    under 4% of its mean (so 10% is a claim about the formula, not about noise); for
    exponential service (exact there: M/M/4) the interval covers the plan.
    """
    law = parse_distribution(service, "service")
    service_s, cv = law.mean_ns / 1e9, math.sqrt(law.scv)
    rate = rho * 4 / service_s
    (row,) = plan.queue(servers=4, service_s=service_s, rates_rps=[rate], cv=cv).outputs["levels"]
    waits = []
    for seed in range(6):
        arrival = {"rate": f"{rate:.9g}/s", "duration": "600s", "warmup": "5s", "seed": seed}
        s = run({"arrival": arrival, "service": service, "servers": 4}).summary
        waits.append(s["latency_ms"]["mean"] - service_s * 1e3)  # FCFS: W = Wq + S
    sim = ci(waits)
    assert sim.half < 0.04 * sim.mean, sim
    assert abs(row["wq_ms"] - sim.mean) <= 0.10 * sim.mean, (row["wq_ms"], sim)
    if cv == 1.0:
        assert sim.covers(row["wq_ms"]), (row["wq_ms"], sim)


@pytest.mark.parametrize(("servers", "k", "rho"), [(2, 5, 0.9), (1, 3, 1.3), (3, 3, 0.8)])
def test_mmck_blocking_and_mean_latency_match_the_simulator(
    servers: int, k: int, rho: float
) -> None:
    """Servers c with room for K in the system: the simulator's bounded queue (``queue_limit``
    K - c). The share of arrivals turned away and the mean latency of those admitted lie in
    the replication intervals around the exact M/M/c/K values."""
    service_s = 0.005
    rate = rho * servers / service_s
    (row,) = plan.queue(
        servers=servers, service_s=service_s, rates_rps=[rate], max_in_system=k
    ).outputs["levels"]
    blocked, latency_ms = [], []
    for seed in range(8):
        arrival = {"rate": f"{rate:g}/s", "duration": "30s", "warmup": "1s", "seed": seed}
        sc = {
            "arrival": arrival,
            "service": "exp:5ms",
            "servers": servers,
            "queue_limit": k - servers,
        }
        r = run(sc)
        rec = r.records
        inside = rec.in_window
        ok = inside & (rec.status == 200)
        blocked.append(1 - ok.sum() / inside.sum())
        latency_ms.append(float(np.mean(rec.done_ns[ok] - rec.scheduled_ns[ok])) / 1e6)
    assert_covers(blocked, row["p_block"], f"M/M/{servers}/{k} blocking")
    assert_covers(latency_ms, row["w_ms"], f"M/M/{servers}/{k} mean latency")
