"""What a decided request does with its other legs: ``cancel: instant | queued_only | none``.

Three stories: a hand-computed pair of hedged requests (every instant and every
nanosecond of server time by hand); hedging that cannot abort work in service
against an independent SimPy model written here (different code, different
random streams: the two agree within their replication intervals); and
``instant`` reproducing, bit for bit, what the simulator gave before the modes
existed (free cancellation was then the only behaviour).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest
import simpy

from tailwise.distributions import parse_distribution
from tailwise.errors import BadInput
from tailwise.sim.scenario import parse_scenario, system_spec
from tailwise.sim.system import System
from tailwise.sim.system_spec import CANCELLED, DISCARDED, OK, SystemSpec
from tests.sim import ci, run

MS = 1_000_000


# -- a hand-computed case ------------------------------------------------------------


@pytest.mark.parametrize(
    ("cancel", "busy_ms", "cancelled", "discarded"),
    [("instant", 21, 2, 0), ("queued_only", 30, 1, 1), ("none", 40, 0, 2)],
)
def test_two_hedged_requests_by_hand(
    cancel: str, busy_ms: int, cancelled: int, discarded: int
) -> None:
    """Two replicas, round robin, service 10 ms, hedge after 4 ms; requests at 0 and 1 ms.

    r0 -> replica 1 (0-10). r1 -> replica 0 (1-11). r0's hedge (4 ms) avoids replica 1:
    queued on replica 0. r1's hedge (5 ms) avoids 0: queued on replica 1. At 10 r0 is
    done on replica 1, which then starts r1's hedge (10-20); r0's hedge is still queued.
    At 11 r1 is done on replica 0. Then:
    instant: r0's queued hedge dropped at 10, r1's hedge cut at 11: 10 + 10 + 1 = 21 ms;
    queued_only: the queued one dropped, r1's hedge runs to 20: 30 ms, one discarded;
    none: both run to their end, r0's hedge on replica 0 from 11 to 21: 40 ms.
    Both requests take 10 ms in every mode; the needed work is 2 x 10 ms.
    """
    spec = SystemSpec(
        service=parse_distribution("10ms", "service"),
        replicas=2,
        hedge_after_ns=4 * MS,
        cancel=cancel,
    )
    res = System(spec, np.random.default_rng(0)).run(np.array([0, 1 * MS], np.int64))
    assert res.done_ns.tolist() == [10 * MS, 11 * MS]
    assert res.status.tolist() == [OK, OK]
    assert res.busy_ns == busy_ms * MS and res.needed_work_ns == 20 * MS
    assert int((res.leg_status == CANCELLED).sum()) == cancelled
    assert int((res.leg_status == DISCARDED).sum()) == discarded
    hedges = {int(p): (int(s), int(d)) for p, s, d in zip(
        res.leg_parent[2:], res.leg_status[2:], res.leg_done_ns[2:], strict=True)}  # fmt: skip
    expected = {
        "instant": {0: (CANCELLED, 10 * MS), 1: (CANCELLED, 11 * MS)},
        "queued_only": {0: (CANCELLED, 10 * MS), 1: (DISCARDED, 20 * MS)},
        "none": {0: (DISCARDED, 21 * MS), 1: (DISCARDED, 20 * MS)},
    }[cancel]
    assert hedges == expected


def test_the_summary_reports_legs_and_server_time() -> None:
    """The summary's legs section is the result's, with the mode; a bad mode names the field."""
    sc: dict[str, Any] = {
        "arrival": {"rate": "200/s", "duration": "5s", "seed": 2},
        "service": "exp:5ms",
        "replicas": 3,
        "routing": "random",
        "hedge": {"after": "6ms", "cancel": "none"},
    }
    r = run(sc)
    legs, res = r.summary["sim"]["legs"], r.result
    n = len(res.status)
    assert legs["cancel"] == "none" and legs["cancelled"] == 0
    assert legs["discarded"] == legs["sent"] - n  # every hedge runs, and every loser too
    assert legs["server_time_x"] == pytest.approx(res.busy_ns / res.needed_work_ns, abs=1e-4)
    assert legs["extra_load"] == pytest.approx(legs["server_time_x"] - 1, abs=1e-4)
    sections = {"hedge": {"after": "6ms", "cancel": "later"}, "fanout": {"n": 2, "cancel": "x"}}
    for where, section in sections.items():
        bad = {**sc, "hedge": None, where: section}
        with pytest.raises(BadInput) as err:
            system_spec(parse_scenario(bad))
        assert err.value.field == f"scenario.{where}.cancel"


# -- against an independent model ----------------------------------------------------

HEDGED = {
    "arrival": {"rate": "300/s", "duration": "30s", "warmup": "2s"},
    "service": "lognormal:5ms,1.0",
    "replicas": 4,
    "routing": "random",
    "stragglers": {"fraction": "2%", "factor": 10},
}
HEDGE_AFTER_S = 0.015


def simpy_hedging(seed: int, cancel: str, rate_rps: float) -> dict[str, float]:
    """The hedging scenario in SimPy: 4 FCFS replicas (one server each), Poisson arrivals
    for 32 s,
    random routing, lognormal(median 5 ms, sigma 1) service with 2% of legs 10x slower,
    a hedge after 15 ms to a random other replica. A request is done when its first leg
    is; a leg still queued then leaves its queue (both modes here); in ``queued_only``
    a leg in service runs on, in ``none`` a queued leg stays and runs too. Returns mean
    and p99 latency (ms) of requests arriving after 2 s, and server utilization."""
    rng = np.random.default_rng([seed, 99])
    env = simpy.Environment()
    reps = [simpy.Resource(env, capacity=1) for _ in range(4)]
    busy = [0.0]
    latencies: list[tuple[float, float]] = []

    def work_s() -> float:
        w = float(rng.lognormal(np.log(0.005), 1.0))
        return w * 10 if rng.random() < 0.02 else w

    def leg(rep: int, done: simpy.Event, t0: float) -> Any:
        with reps[rep].request() as req:
            got = yield req | done
            if req not in got:  # decided while queued
                if cancel == "queued_only":
                    return
                yield req
            w = work_s()
            yield env.timeout(w)
            busy[0] += w
            if not done.triggered:
                done.succeed()
                latencies.append((t0, env.now - t0))

    def request(t0: float) -> Any:
        done = env.event()
        first = int(rng.integers(4))
        env.process(leg(first, done, t0))
        yield env.timeout(HEDGE_AFTER_S) | done
        if not done.triggered:
            other = [j for j in range(4) if j != first][int(rng.integers(3))]
            env.process(leg(other, done, t0))

    def source() -> Any:
        t = 0.0
        while True:
            t += float(rng.exponential(1 / rate_rps))
            if t >= 32.0:
                return
            yield env.timeout(t - env.now)
            env.process(request(t))

    env.process(source())
    env.run()
    lat = np.array([x for t, x in latencies if t >= 2.0]) * 1e3
    return {
        "mean_ms": float(lat.mean()),
        "p99_ms": float(np.quantile(lat, 0.99)),
        "utilization": busy[0] / (4 * env.now),
    }


def _agree(ours: list[float], theirs: list[float], what: str) -> None:
    """Two independent replication means agree: their gap is within the combined
    95% half-widths (widened by 1.5, as the simulator's other oracle tests are)."""
    a, b = ci(ours), ci(theirs)
    assert abs(a.mean - b.mean) <= 1.5 * float(np.hypot(a.half, b.half)), f"{what}: {a} vs {b}"


@pytest.mark.parametrize(("cancel", "rate_rps"), [("queued_only", 300), ("none", 150)])
def test_hedging_that_cannot_abort_matches_an_independent_simpy_model(
    cancel: str, rate_rps: int
) -> None:
    """Mean latency, p99 and utilization over 6 replications each agree with SimPy's;
    and the utilization is far above free cancellation's (which cuts stragglers).
    (``none`` at 300/s, even 220/s, is unstable: every hedge runs, a slower answer
    sends more hedges, and the queues grow for good; 150/s keeps it stable.)"""
    ours: dict[str, list[float]] = {"mean_ms": [], "p99_ms": [], "utilization": []}
    theirs: dict[str, list[float]] = {k: [] for k in ours}
    free_util = []
    for seed in range(6):
        arrival = {**HEDGED["arrival"], "seed": seed, "rate": f"{rate_rps}/s"}
        hedge = {"after": "15ms", "cancel": cancel}
        s = run({**HEDGED, "arrival": arrival, "hedge": hedge}).summary
        ours["mean_ms"].append(s["latency_ms"]["mean"])
        ours["p99_ms"].append(s["latency_ms"]["p99"])
        ours["utilization"].append(s["sim"]["stages"][0]["utilization"])
        for k, v in simpy_hedging(seed, cancel, rate_rps).items():
            theirs[k].append(v)
        free = {**hedge, "cancel": "instant"}
        free_s = run({**HEDGED, "arrival": arrival, "hedge": free}).summary
        free_util.append(free_s["sim"]["stages"][0]["utilization"])
    for k in ours:
        _agree(ours[k], theirs[k], f"{k}, cancel {cancel}")
    assert ci(free_util).mean + 0.1 < ci(ours["utilization"]).mean


# -- instant: free cancellation, as before -------------------------------------------

# Digests of (request done, leg done, leg status, leg start) taken with the simulator
# just before cancel modes existed (free cancellation the only behaviour), on the
# scenarios below; instant must reproduce them bit for bit.
BEFORE_MODES = {
    "hedging": "73047b2480e13f0d",
    "fanout": "c07c5b68192f0b8a",
    "k_of_n": "9235bb4ebcd02c40",
}


def _digest(res: Any) -> str:
    h = hashlib.sha256()
    for a in (res.done_ns, res.leg_done_ns, res.leg_status, res.leg_start_ns):
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(BEFORE_MODES))
def test_instant_reproduces_free_cancellation_exactly(name: str) -> None:
    import yaml

    from tests.sim.test_study import EXAMPLES

    example = "hedging" if name == "hedging" else "fanout"
    sc = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
    sc["arrival"]["duration"] = "10s"
    if name == "hedging":
        sc["hedge"]["cancel"] = "instant"
    elif name == "fanout":
        sc["fanout"]["cancel"] = "instant"
    else:
        sc.update(fanout={"n": 20, "k": 18, "cancel": "instant"}, servers=1)
        sc["arrival"]["rate"] = "120/s"
    assert _digest(run(sc).result) == BEFORE_MODES[name]
