"""The tail model's early pass (tailwise.metrics.tail): where its gates let it decide, it
is right as often as it claims; where they do not, it never decides. Truths are closed
forms (the M/M/1 sojourn is exponential with rate mu - lambda) and recursions written
for the test; the full validation is ``benchmarks/quick_decisions.py`` and the grid."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tailwise.metrics.slo import parse_slo
from tailwise.metrics.summary import RunInfo, summarize
from tailwise.metrics.tail import (
    BLOCKS,
    IDLE_GATE,
    MIN_CYCLES,
    SHORT_CYCLES,
    Regeneration,
    gates,
    idle_on_arrival,
    miss_bound,
    regeneration,
    regeneration_blocks,
    service_heaviness,
)
from tailwise.metrics.uncertainty import decide_within, t_quantile, tail_heaviness
from tailwise.records import Records

MU = 50.0  # 20 ms mean service


def mm1_path(lam: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrival and departure instants (s) of an M/M/1 queue from empty (Lindley)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1 / MU, n)
    done = np.empty(n)
    free = 0.0
    for i in range(n):  # n is small here: the loop is clearer than a scan
        free = max(free, arrivals[i]) + service[i]
        done[i] = free
    return arrivals, done


def p99_mm1(lam: float) -> float:
    return math.log(100.0) / (MU - lam)


def test_idle_on_arrival_counts_what_was_in_flight_at_each_start() -> None:
    start = np.array([0, 10, 20, 50, 60, -1])
    end = np.array([15, 30, 25, 55, -1, -1])  # the 5th never answered; the 6th never sent
    # 0: first; 10: #0 in flight; 20: #0 done at 15, #1 in flight; 50: all done;
    # 60: #3 done at 55; the unsent one is never idle.
    assert idle_on_arrival(start, end).tolist() == [True, False, False, True, True, False]
    regen = regeneration(idle_on_arrival(start, end), np.arange(6.0))
    assert regen.idle_share == pytest.approx(3 / 6)
    assert regen.service.tolist() == [0.0, 3.0, 4.0]


def test_the_bound_holds_the_true_share_beyond_the_threshold() -> None:
    """Independent exponential values at the true p99 (share beyond it exactly 1%): the
    one-sided 97.5% bound lies below the truth in at most 2.5% of samples; allowing
    three standard errors over 200 samples, at most 7."""
    rng = np.random.default_rng(44)
    t = t_quantile(0.975, 19)
    below = 0
    for _ in range(200):
        x = rng.exponential(0.02, 3000)
        bound = miss_bound(x, 0.02 * math.log(100), 0.99, t)
        assert bound is not None
        below += bound < 0.01
    assert below <= 7


def test_the_model_applies_only_to_far_thresholds_and_tail_levels() -> None:
    x = np.random.default_rng(1).exponential(0.02, 2000)
    t = t_quantile(0.975, 19)
    assert miss_bound(x, 0.5, 0.95, t) is None  # a p95 has plenty of its own misses
    assert miss_bound(x, float(np.quantile(x, 0.85)), 0.99, t) is None  # inside the top k
    assert miss_bound(x[:400], 0.5, 0.99, t) is None  # 100 excesses would be a quarter
    bound = miss_bound(x, 0.2, 0.99, t)  # 2.2x the true p99: 0.005% beyond it
    assert bound is not None and math.exp(-0.2 / 0.02) < bound < 0.01


def test_infinite_values_count_as_certain_misses() -> None:
    x = np.random.default_rng(2).exponential(0.02, 4000)
    t = t_quantile(0.975, 19)
    clean = miss_bound(x, 0.2, 0.99, t)
    x[::100] = math.inf  # 1% failed: the share beyond any threshold is at least 1%
    lost = miss_bound(x, 0.2, 0.99, t)
    assert clean is not None and lost is not None
    assert lost >= 0.01 > clean


def test_the_gates_refuse_a_busy_system_and_a_heavy_service() -> None:
    light = Regeneration(0.5, np.ones(10))
    assert gates(light, 0.8) == ""
    assert "found the system empty" in gates(Regeneration(IDLE_GATE - 0.01, np.ones(10)), 0.8)
    assert "heavy" in gates(light, 1.5)
    assert gates(None, 0.8)
    # Under SHORT_CYCLES of the requests finding it empty, MIN_CYCLES of them are needed.
    busy = SHORT_CYCLES - 0.01
    assert "needed" in gates(Regeneration(busy, np.ones(MIN_CYCLES - 1)), 0.8)
    assert gates(Regeneration(busy, np.ones(MIN_CYCLES)), 0.8) == ""


def test_the_jackknife_blocks_start_where_the_system_was_empty() -> None:
    """Each cut falls on a request that found nothing in flight, the one nearest the
    equal split; too few such requests give no blocks (and no bound)."""
    rng = np.random.default_rng(3)
    idle = rng.random(5000) < 0.05
    ranges = regeneration_blocks(5000, idle)
    assert len(ranges) == BLOCKS
    assert ranges[0][0] == 0 and ranges[-1][1] == 5000
    assert all(a == b for (_, a), (b, _) in itertools.pairwise(ranges))
    assert all(idle[a] for a, _ in ranges[1:])
    starts = np.flatnonzero(idle)
    for j, (a, _) in enumerate(ranges[1:], start=1):
        assert abs(a - j * 5000 / BLOCKS) == np.abs(starts - j * 5000 / BLOCKS).min()
    assert regeneration_blocks(5000, np.zeros(5000, dtype=bool)) == []
    assert [b - a for a, b in regeneration_blocks(5003, None)] == [5003 // BLOCKS] * BLOCKS


def _decide(lam: float, n: int, seed: int, factor: float, with_regen: bool) -> str:
    arrivals, done = mm1_path(lam, n, seed)
    x = done - arrivals
    regen = regeneration(idle_on_arrival(arrivals, done), x) if with_regen else None
    return decide_within(x, factor * p99_mm1(lam), 0.99, 0.95, regen)[2]


def test_a_light_load_m_m_1_passes_twice_its_p99_within_1500_requests() -> None:
    """Issue 39's bar: M/M/1 at 42% load, p99 <= 2x the truth. Counting misses alone
    decides few runs at 1,500 requests (a miss comes with about five more); with the tail
    model most do. And at 0.9x the truth (a false SLO) neither passes."""
    lam = 0.42 * MU
    seeds = range(60)
    with_tail = sum(_decide(lam, 1500, s, 2.0, True) == "pass" for s in seeds)
    counting = sum(_decide(lam, 1500, s, 2.0, False) == "pass" for s in seeds)
    assert with_tail >= 30 > counting + 15
    assert sum(_decide(lam, 1500, s, 0.9, True) == "pass" for s in seeds) <= 3


def test_a_short_busy_run_never_reaches_the_tail_model() -> None:
    """M/M/1 at 80% load, 3,000 requests: about 600 requests find the system empty, too
    few regeneration cycles for blocks that stand for independent stretches (the
    model's equal blocks passed 8.5% of false SLOs there). The gate refuses every run,
    so it decides exactly as counting does."""
    lam = 0.8 * MU
    for seed in range(10):
        arrivals, done = mm1_path(lam, 3000, seed)
        x = done - arrivals
        regen = regeneration(idle_on_arrival(arrivals, done), x)
        assert regen.idle_share < SHORT_CYCLES and len(regen.service) < MIN_CYCLES
        for factor in (0.95, 2.0):
            t = factor * p99_mm1(lam)
            assert decide_within(x, t, 0.99, 0.95, regen) == decide_within(x, t, 0.99, 0.95)


def mmc_path(lam: float, servers: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrivals and departures (s) of an M/M/c FCFS queue from empty (each request to
    the server that frees first)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1 / MU, n)
    free = np.zeros(servers)
    done = np.empty(n)
    for i in range(n):
        j = int(np.argmin(free))
        free[j] = max(free[j], arrivals[i]) + service[i]
        done[i] = free[j]
    return arrivals, done


def test_a_long_run_of_two_busy_servers_passes_by_the_tail_model_and_only_truly() -> None:
    """M/M/2 at 64% load per server, 5,000 requests (about 1,100 find it empty): with
    blocks cut at those instants the model passes a p99 SLO at 1.5x its true value
    (142.3 ms, from a 10^7-customer recursion) in runs that counting leaves undecided
    (9 of 16 against 5), and passes none at 0.9x."""
    lam, true_p99 = 0.64 * 2 * MU, 0.1423
    passed = passed_counting = false = 0
    for seed in range(16):
        arrivals, done = mmc_path(lam, 2, 5000, seed)
        x = done - arrivals
        regen = regeneration(idle_on_arrival(arrivals, done), x)
        assert IDLE_GATE < regen.idle_share < SHORT_CYCLES
        passed += decide_within(x, 1.5 * true_p99, 0.99, 0.95, regen)[2] == "pass"
        passed_counting += decide_within(x, 1.5 * true_p99, 0.99, 0.95)[2] == "pass"
        false += decide_within(x, 0.9 * true_p99, 0.99, 0.95, regen)[2] == "pass"
    assert passed >= passed_counting + 3
    assert false == 0


def test_a_summary_says_when_the_tail_model_decided() -> None:
    """The first seeded run that counting leaves undecided and the tail model passes
    (p99 <= 2x the truth at 42% load, 1,500 requests): its summary passes the SLO and
    says why."""
    lam = 0.42 * MU
    seed = next(
        s
        for s in range(40)
        if _decide(lam, 1500, s, 2.0, False) == "inconclusive"
        and _decide(lam, 1500, s, 2.0, True) == "pass"
    )
    arrivals, done = mm1_path(lam, 1500, seed)
    n = len(arrivals)
    sched = np.rint(arrivals * 1e9).astype(np.int64)
    end = np.rint(done * 1e9).astype(np.int64)
    absent = np.full(n, -1, np.int64)
    records = Records(
        seq=np.arange(n, dtype=np.int64),
        parent=absent.copy(),
        worker=np.zeros(n, np.int64),
        scheduled_ns=sched,
        sent_ns=sched.copy(),
        first_byte_ns=end.copy(),
        first_token_ns=absent.copy(),
        done_ns=end,
        status=np.full(n, 200, np.int64),
        error=np.zeros(n, np.int16),
        bytes_out=np.zeros(n, np.int64),
        bytes_in=np.zeros(n, np.int64),
        input_tokens=absent.copy(),
        output_tokens=absent.copy(),
        replica=np.zeros(n, np.int64),
        in_window=np.ones(n, dtype=bool),
        chunk_times=[None] * n,
        capped=np.zeros(n, np.int8),
    )
    spec = f"p99(latency)<={round(2.0 * p99_mm1(lam) * 1e9)}ns"
    info = RunInfo(
        source="sim",
        target="test",
        mode="open",
        arrival={"process": "poisson"},
        window_ns=(0, int(sched[-1]) + 1),
        slos=[parse_slo(spec)],
        max_send_lag_ns=2**62,
    )
    entry = summarize(records, info)["slos"][0]
    assert entry["decided"] == "pass"
    assert "tail model" in entry["ci_note"]


def mg1_lognormal(lam: float, sigma: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrivals and departures (s) of a single FCFS server with lognormal service of
    mean 20 ms and log-sd ``sigma``, from empty."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.lognormal(math.log(1 / MU) - sigma * sigma / 2, sigma, n)
    done = np.empty(n)
    free = 0.0
    for i in range(n):
        free = max(free, arrivals[i]) + service[i]
        done[i] = free
    return arrivals, done


def test_the_empty_system_requests_show_a_service_tail_the_queue_hides() -> None:
    """One server at 70% load with lognormal service (sigma 2): the queue's backlog makes
    the whole sample's top look lighter than exponential (the latency guard's Hill ratio
    under 2), while the requests that found the system empty show the service bare, and
    the tail model's gate refuses every run. An M/M/1's empty-system requests look
    exponential: the gate lets most runs through."""
    heavy_service = 0
    for seed in range(12):
        arrivals, done = mg1_lognormal(0.7 * MU, 2.0, 20_000, seed)
        x = done - arrivals
        regen = regeneration(idle_on_arrival(arrivals, done), x)
        assert tail_heaviness(x) < 2.0
        heavy_service += gates(regen, service_heaviness(regen.service)) != ""
    assert heavy_service == 12
    light = 0
    for seed in range(20):
        arrivals, done = mm1_path(0.42 * MU, 3000, seed)
        regen = regeneration(idle_on_arrival(arrivals, done), done - arrivals)
        light += gates(regen, service_heaviness(regen.service)) == ""
    assert light >= 17


def test_the_service_reading_tells_an_exponential_from_heavier_services() -> None:
    """service_heaviness over 2,000 independent service times: an exponential reads under
    the gate in every sample; lognormal sigma 1.5 over it in every one; too few values
    read as infinitely heavy (the model must not decide on them)."""
    rng = np.random.default_rng(8)
    assert all(service_heaviness(rng.exponential(1.0, 2000)) < 1.0 for _ in range(50))
    assert all(service_heaviness(rng.lognormal(0.0, 1.5, 2000)) >= 1.0 for _ in range(50))
    assert service_heaviness(rng.exponential(1.0, 50)) == math.inf
