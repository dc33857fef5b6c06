"""Serving models against the seeds' published runs and known results: static batching
(seed 000), goodput collapse (seed 003), stragglers (seed 001), routing (the supermarket
model), fan-out (1 - q^n), hedging, bounded queues (Erlang B, M/M/1/K).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pytest

from tailwise.capacity import batch_throughput
from tailwise.distributions import parse_distribution
from tailwise.records import ERROR_KINDS, error_code
from tailwise.sim.fast import fcfs_one_server
from tailwise.sim.run import simulate
from tailwise.sim.scenario import parse_scenario
from tailwise.sim.system_spec import CANCELLED, DISCARDED, OK, REJECTED
from tests.sim import CI, WIDEN, assert_covers, check_summary, ci, run

MS = 1_000_000

# -- 3. seed 000: static batching, B = 16, c0 = 4 ms, c1 = 0.9 ms, Poisson 800/s --------

SEED_000 = {
    "name": "seed 000 static batching",
    "arrival": {"rate": "800/s", "duration": None, "requests": 200_000, "seed": 7},
    "batching": {"mode": "static", "size": 16, "base": "4ms", "per_item": "0.9ms"},
}


def test_seed_000_static_batching_reproduces_the_printed_run() -> None:
    """The seed prints p50/p95/p99 32.17/48.27/59.50 ms, mean 32.75 ms, 800.3 req/s,
    L = lam W 26.209 vs measured 26.207 (gap 7.5e-5). Tailwise's Poisson schedule with
    seed 7 draws the very same gaps, so the run is reproduced, not just approximated."""
    r = run(SEED_000)
    lat = r.summary["latency_ms"]
    # The seed interpolates percentiles (numpy's default), tailwise takes nearest rank:
    # neighbours in 200 000 sorted latencies differ by microseconds.
    assert lat["p50"] == pytest.approx(32.17, abs=0.006)
    assert lat["p95"] == pytest.approx(48.27, abs=0.006)
    assert lat["p99"] == pytest.approx(59.50, abs=0.006)
    assert lat["mean"] == pytest.approx(32.75, abs=0.006)
    little = r.summary["littles_law"]
    assert little["lambda_rps"] == pytest.approx(800.3, abs=0.06)
    assert little["lambda_w"] == pytest.approx(26.209, abs=0.001)
    assert little["l_measured"] == pytest.approx(26.207, abs=0.002)
    assert little["rel_gap"] < 1e-4
    # Stable: capacity B / (c0 + c1 B) = 869.6/s exceeds the 800/s offered.
    assert batch_throughput(16, 0.004, 0.0009) > 800


def test_static_batches_follow_the_seed_rule_request_by_request() -> None:
    """A batch starts when its 16th member has arrived and the server is free, and runs
    c0 + 16 c1: a Lindley recursion over batches. Every request's done instant matches."""
    sc = {**SEED_000, "arrival": {**SEED_000["arrival"], "requests": 16 * 2000}}
    rec = run(sc).records
    arrivals = rec.scheduled_ns
    last_in = arrivals[15::16]
    batch_done = fcfs_one_server(last_in, np.full(len(last_in), 4 * MS + 16 * 900_000))
    np.testing.assert_array_equal(rec.done_ns, np.repeat(batch_done, 16))


def test_a_static_batch_that_never_fills_is_cancelled_and_accounted() -> None:
    """20 requests, batches of 16: the last 4 wait forever; they are cancelled, not lost."""
    sc = {**SEED_000, "arrival": {**SEED_000["arrival"], "requests": 20}}
    s = simulate(parse_scenario(sc)).summary
    assert s["requests"]["ok"] == 16 and s["requests"]["cancelled"] == 4
    assert s["requests"]["errors"] == {"cancelled": 4} and s["requests"]["accounted"]


def test_dynamic_batch_waits_at_most_max_wait_when_alone() -> None:
    """One request every 100 ms never fills a batch of 16: each waits exactly max_wait and
    runs alone, so its latency is max_wait + c0 + c1, to the nanosecond."""
    sc = {
        "arrival": {"process": "constant", "rate": "10/s", "duration": "5s", "seed": 1},
        "batching": {"mode": "dynamic", "size": 16, "max_wait": "5ms", "base": "4ms",
                     "per_item": "0.9ms"},
    }  # fmt: skip
    rec = run(sc).records
    np.testing.assert_array_equal(rec.done_ns - rec.scheduled_ns, 5 * MS + 4 * MS + 900_000)


# -- 4. seed 003: one replica, 500 req/s of exponential 2 ms work, SLO 200 ms -----------

# The seed's printed table: offered, throughput (its n / window), goodput, p50, p95, p99 (ms).
SEED_003_TABLE = [
    (100, 101, 101, 2, 8, 12),
    (200, 202, 202, 2, 10, 15),
    (300, 298, 298, 4, 15, 23),
    (400, 398, 398, 7, 31, 47),
    (450, 455, 455, 14, 63, 101),
    (480, 483, 448, 64, 212, 249),
    (500, 506, 72, 367, 630, 656),
    (520, 518, 123, 524, 925, 968),
    (560, 560, 82, 1287, 2379, 2499),
]


def test_seed_003_table_from_its_own_draws() -> None:
    """Fed the seed's own random draws (numpy seed 7, in its call order), the fast path's
    FCFS recursion prints the seed's table digit for digit."""
    rng = np.random.default_rng(7)
    window_s = 20.0
    for offered, thr, good, p50, p95, p99 in SEED_003_TABLE:
        n = rng.poisson(offered * window_s)
        arrivals_ms = np.sort(rng.uniform(0.0, window_s, n)) * 1000.0
        service_ms = rng.exponential(2.0, n)
        a_ns = np.rint(arrivals_ms * 1e6).astype(np.int64)
        done = fcfs_one_server(a_ns, np.rint(service_ms * 1e6).astype(np.int64))
        latency_ms = (done - a_ns) / 1e6
        got = [n / window_s, (latency_ms <= 200.0).sum() / window_s]
        got += list(np.percentile(latency_ms, [50, 95, 99]))
        assert [round(x) for x in got] == [thr, good, p50, p95, p99], offered


@functools.cache
def _seed_003(rate: int, seed: int, window: str = "20s") -> dict[str, Any]:
    """One of the seed's load-test windows (20 s, from an empty queue), simulated."""
    sc = {
        "name": f"seed 003 at {rate}/s",
        "arrival": {"rate": f"{rate}/s", "duration": window, "seed": seed},
        "service": "exp:2ms",
        "slo": ["latency<=200ms"],
    }
    return simulate(parse_scenario(sc)).summary


def _share(rate: int, seeds: range, window: str = "20s") -> CI:
    """Goodput as a share of throughput, over independent windows."""
    rows = [_seed_003(rate, seed, window)["rates"] for seed in seeds]
    return ci(r["goodput_rps"] / r["throughput_rps"] for r in rows)


def test_seed_003_goodput_equals_throughput_below_the_knee() -> None:
    """Up to 450/s (rho 0.9) every 20 s window has goodput == throughput: the M/M/1
    sojourn tail at 200 ms is e^{-(mu - lam) 0.2}, 4.5e-5 at 450/s (and misses come in
    clusters, so most windows have none). At 480/s (e^-4 = 1.8% in steady state; less
    in a window that starts empty) they part, on average."""
    for rate in (100, 200, 300, 400, 450):
        for seed in range(8):
            s = _seed_003(rate, seed)
            check_summary(s, littles_tol=0.02)  # 20 s windows, latencies up to ~0.2 s
            assert s["rates"]["goodput_rps"] == s["rates"]["throughput_rps"], (rate, seed)
            # Every SLO holds as measured; a 20 s window need not *show* a p99 at 0.9 load
            assert s["slos"][0]["passed"] and s["verdict"] in ("pass", "inconclusive")
            # below capacity, completions keep up with arrivals
            assert s["rates"]["throughput_rps"] == pytest.approx(
                s["rates"]["offered_rps"], rel=0.01
            )
    at_480 = _share(480, range(64))
    assert at_480.mean + at_480.half < 1.0, at_480
    assert at_480.covers(1 - math.exp(-20 * 0.2), widen=3.0)  # start-up keeps it above


def test_seed_003_goodput_collapses_from_capacity() -> None:
    """From 500/s the replica completes ~500/s (throughput counts completions in the
    window; the seed's "throughput" column prints n / window, the offered rate) while
    goodput collapses: under half of throughput on average at 520/s, under a tenth at
    560/s. At exactly
    capacity the queue is a driftless random walk: a 20 s window keeps ~78% on average
    but varies widely (the seed's 72 of 506/s is one plausible draw), and a longer
    window loses more, as the walk spreads like sqrt(t)."""
    seeds = range(64)
    share = {rate: _share(rate, seeds) for rate in (500, 520, 560)}
    for rate in (520, 560):
        rows = [_seed_003(rate, seed) for seed in seeds]
        # Every run misses as measured; most are *shown* to fail (a queue still filling);
        # a few 20 s windows of a drifting walk stay too correlated to show it.
        assert all(not s["slos"][0]["passed"] and s["verdict"] != "pass" for s in rows)
        assert sum(s["verdict"] == "fail" for s in rows) >= 0.9 * len(rows)
        assert_covers([s["rates"]["throughput_rps"] for s in rows], 500.0, f"throughput {rate}")
    assert share[520].mean + share[520].half < 0.5, share[520]
    # The self-check notices that an overloaded run is not in steady state.
    assert all(_seed_003(560, seed)["littles_law"]["rel_gap"] > 0.05 for seed in seeds)
    # Mean goodput share with its interval: below 1 at capacity, falling with load.
    assert share[500].mean + WIDEN * share[500].half < 0.95, share[500]
    # The seed's windows (goodput / throughput 72/506, 123/518, 82/560) are plausible draws.
    assert share[500].predicts(72 / 506) and share[520].predicts(123 / 518)
    assert share[560].predicts(82 / 560)
    assert share[520].mean + share[520].half < share[500].mean - share[500].half
    assert share[560].mean + share[560].half < min(0.1, share[520].mean - share[520].half)
    longer = _share(500, range(16), "80s")
    assert longer.mean + longer.half < share[500].mean - share[500].half, longer


# -- 5. seed 001: 2% of requests 6x slower inflate p99 ~2.6x ----------------------------


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _straggler_quantile(q: float, median_ms: float, sigma: float, p: float, k: float) -> float:
    """Quantile of the mixture (1-p) LN(median, sigma) + p k LN(median, sigma), by bisection."""
    lo, hi = 1e-6, 1e6
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        cdf = (1 - p) * _phi(math.log(mid / median_ms) / sigma)
        cdf += p * _phi(math.log(mid / (k * median_ms)) / sigma)
        lo, hi = (mid, hi) if cdf < q else (lo, mid)
    return mid


SEED_001 = {
    "name": "seed 001 stragglers",
    # One request every 10 s on one server: nobody queues, latency = service time.
    "arrival": {"process": "constant", "rate": "0.1/s", "duration": None, "requests": 200_000},
    "service": "lognormal:40ms,0.35",
    "stragglers": {"fraction": "2%", "factor": 6},
}


def test_seed_001_printed_run_from_its_own_draws() -> None:
    """The service string's median form draws what the seed drew: lognormal median 40 ms,
    sigma 0.35, then 2% of requests 6x: p50/p95/p99 40.4/77.0/237.8 ms, 2.63x p99."""
    rng = np.random.default_rng(7)
    base = parse_distribution("lognormal:40ms,0.35").sample(rng, 200_000) / 1e6
    slow = rng.random(200_000) < 0.02
    lat = np.where(slow, base * 6.0, base)
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    assert [round(p50, 1), round(p95, 1), round(p99, 1)] == [40.4, 77.0, 237.8]
    assert round(p99 / np.percentile(base, 99), 2) == 2.63


def test_seed_001_stragglers_inflate_p99_within_sampling_error() -> None:
    """Ten simulated replications of the seed's 200 000 requests: the p99 ratio with and
    without stragglers has the mixture's closed form (2.66x) in its interval, and the
    seed's single run (2.63x, p99 237.8 ms) is a plausible further replication."""
    p50s, p95s, p99s, ratios = [], [], [], []
    for seed in range(10):
        arrival = {**SEED_001["arrival"], "seed": seed}
        with_s = run({**SEED_001, "arrival": arrival}).summary["latency_ms"]
        without = run({**SEED_001, "arrival": arrival, "stragglers": None}).summary["latency_ms"]
        p50s.append(with_s["p50"])
        p95s.append(with_s["p95"])
        p99s.append(with_s["p99"])
        ratios.append(with_s["p99"] / without["p99"])
    exact = {q: _straggler_quantile(q, 40.0, 0.35, 0.02, 6.0) for q in (0.5, 0.95, 0.99)}
    assert_covers(p50s, exact[0.5], "p50 with stragglers (ms)")
    assert_covers(p95s, exact[0.95], "p95 with stragglers (ms)")
    assert_covers(p99s, exact[0.99], "p99 with stragglers (ms)")
    truth_ratio = exact[0.99] / (40.0 * math.exp(0.35 * 2.3263478740408408))
    interval = assert_covers(ratios, truth_ratio, "p99 inflation")
    assert 2.5 < interval.mean < 2.8
    assert ci(p99s).predicts(237.8) and interval.predicts(2.63)


# -- 6. routing: power of two choices, the supermarket model --------------------------


def supermarket_mean(lam: float, d: int, terms: int = 60) -> float:
    """Mean time in system, in service times, of the supermarket model as n -> infinity:
    sum_{i>=1} lam^{(d^i - d)/(d - 1)} (Mitzenmacher, "The power of two choices in
    randomized load balancing", IEEE TPDS 12(10), 2001; Vvedenskaya, Dobrushin and
    Karpelevich, Problems Inform. Transmission 32, 1996). d = 1 gives M/M/1's 1/(1-lam)."""
    if d == 1:
        return 1.0 / (1.0 - lam)
    return sum(lam ** ((d**i - d) / (d - 1)) for i in range(1, terms) if d**i < 10**6)


def _routed(routing: str, replicas: int, lam: float, seed: int, requests: int) -> float:
    """Mean latency in service times (exponential 10 ms) at per-replica load ``lam``."""
    sc = {
        "arrival": {"rate": f"{lam * 100 * replicas:g}/s", "requests": requests,
                    "duration": None, "warmup": "2s", "seed": seed},
        "service": "exp:10ms",
        "replicas": replicas,
        "routing": routing,
    }  # fmt: skip
    return float(run(sc).summary["latency_ms"]["mean"]) / 10.0


def test_power_of_two_choices_beats_random_routing() -> None:
    """20 replicas at 80% load. Random routing splits a Poisson stream into independent
    M/M/1 queues (mean 1/(1 - 0.8) = 5 service times); two choices lands near the
    supermarket limit 1.95, with the small finite-n excess; full-information policies do
    better still: jsq beats power_of_d, and without batching least_outstanding picks
    exactly as jsq does (a replica with a queue has every server busy)."""
    seeds, n = range(4), 12_000
    means = {
        policy: ci(_routed(policy, 20, 0.8, seed, n) for seed in seeds)
        for policy in ("random", "power_of_d", "jsq", "least_outstanding")
    }
    assert means["random"].covers(supermarket_mean(0.8, 1)), means["random"]
    p2c = means["power_of_d"]
    # Two choices more than halve random routing's closed-form mean (5 -> 1.95 + excess).
    assert p2c.mean + p2c.half < 0.5 * supermarket_mean(0.8, 1), p2c
    limit = supermarket_mean(0.8, 2)
    # n = 20 sits a little above the n -> infinity limit (measured ~3%; the excess shrinks
    # like 1/n, and the long test below extrapolates it away): allow it up to 10%.
    assert limit - WIDEN * p2c.half <= p2c.mean <= 1.1 * limit, (limit, p2c)
    jsq, lo = means["jsq"], means["least_outstanding"]
    assert jsq.mean + jsq.half < p2c.mean - p2c.half, (jsq, p2c)
    assert lo.mean == jsq.mean, (lo, jsq)


@pytest.mark.long
def test_power_of_two_choices_extrapolates_to_the_supermarket_limit() -> None:
    """At 90% load the n -> infinity mean is 2.61 service times (random: 10). The finite-n
    excess shrinks like 1/n, so 2 T(40) - T(20) (Richardson) estimates the limit; its
    replication interval (paired seeds) covers Mitzenmacher's closed form."""
    estimates = [
        2 * _routed("power_of_d", 40, 0.9, seed, 60_000)
        - _routed("power_of_d", 20, 0.9, seed, 60_000)
        for seed in range(8)
    ]
    assert_covers(estimates, supermarket_mean(0.9, 2), "supermarket limit, d = 2, lam = 0.9")


# -- 7. fan-out: P(slow) = 1 - q^n ----------------------------------------------------


@pytest.mark.parametrize(("n", "k"), [(5, None), (5, 3), (10, None)])
def test_fanout_slow_probability_is_one_minus_q_to_the_n(n: int, k: int | None) -> None:
    """Legs on an unloaded fleet (64 servers per replica, nobody waits) are independent
    exponential draws. Threshold t at the legs' q = 0.9 quantile: all n must be fast, so
    a request is slow with probability 1 - q^n; with k of n, when fewer than k are fast."""
    mean_s, q = 0.010, 0.9
    t_ns = round(-mean_s * math.log(1 - q) * 1e9)
    q = 1 - math.exp(-t_ns / 1e9 / mean_s)  # exactly the quantile of the rounded threshold
    need = k or n
    p_fast = sum(math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(need, n + 1))
    slow = []
    for seed in range(6):
        sc = {
            "arrival": {"rate": "100/s", "duration": "20s", "seed": seed},
            "service": "exp:10ms",
            "replicas": n,
            "servers": 64,
            "fanout": {"n": n, "k": k},
        }
        r = run(sc)
        res = r.result
        assert (res.leg_start_ns == res.leg_sent_ns).all()  # unloaded: no leg ever waited
        rec = r.records
        latency = (rec.done_ns - rec.scheduled_ns)[rec.in_window]
        slow.append(float((latency > t_ns).mean()))
        # The request ends with its k-th fastest leg (its slowest when k = n); the legs
        # still running then were cancelled at that instant.
        assert (res.leg_parent == np.repeat(np.arange(len(rec)), n)).all()
        legs = np.sort((res.leg_done_ns - res.leg_sent_ns).reshape(-1, n), axis=1)
        np.testing.assert_array_equal(rec.done_ns - rec.scheduled_ns, legs[:, need - 1])
        assert r.summary["sim"]["legs"]["cancelled"] == int((res.leg_status == CANCELLED).sum())
    assert_covers(slow, 1 - p_fast, f"P(request slow), n = {n}, k = {k}")


# -- 8. hedging ----------------------------------------------------------------------

HEDGE_BASE = {
    "arrival": {"rate": "300/s", "duration": "20s", "warmup": "2s"},
    "service": "lognormal:5ms,1.2",  # SCV e^1.44 - 1 = 3.2: a heavy tail
    "replicas": 8,
    "routing": "least_outstanding",
}


@pytest.mark.parametrize("cancel", ["instant", "queued_only"])
def test_hedging_cuts_p99_and_reports_its_extra_load(cancel: str) -> None:
    """A second leg to another replica after 20 ms (about the unhedged p88): p99 falls in
    every replication; the price is visible (extra legs served, losers let go). With
    free cancellation a loser cut short may even save server time (a straggler is cut);
    when work in service cannot be aborted, the losers' server time is extra load."""
    ratio, extra = [], []
    for seed in range(5):
        arrival = {**HEDGE_BASE["arrival"], "seed": seed}
        plain = run({**HEDGE_BASE, "arrival": arrival}).summary
        hedge = {"after": "20ms", "cancel": cancel}
        hedged_run = run({**HEDGE_BASE, "arrival": arrival, "hedge": hedge})
        hedged = hedged_run.summary
        legs = hedged["sim"]["legs"]
        n = hedged["sim"]["requests"]
        assert hedged["latency_ms"]["p99"] < plain["latency_ms"]["p99"]
        # Exact bookkeeping: a hedge is sent iff the request was not done 20 ms in; each
        # hedged request then ends with one winner and one loser, cancelled (dropped from
        # its queue, or cut in service when cancellation is instant) or discarded (served
        # to its end for nobody).
        rec = hedged_run.records
        late = int(((rec.done_ns - rec.scheduled_ns) > 20 * MS).sum())
        assert legs["sent"] - n == late == legs["cancelled"] + legs["discarded"]
        assert legs["cancel"] == cancel and legs["cancelled"] > 0
        assert (legs["discarded"] == 0) == (cancel == "instant")
        assert n <= legs["served"] <= legs["sent"]
        assert legs["legs_per_request"] == pytest.approx(legs["served"] / n, abs=1e-4)
        if cancel == "queued_only":
            assert legs["extra_load"] > 0
        ratio.append(hedged["latency_ms"]["p99"] / plain["latency_ms"]["p99"])
        extra.append(legs["legs_per_request"] - 1)
    improvement, cost = ci(ratio), ci(extra)
    assert improvement.mean + improvement.half < 0.8, improvement
    assert cost.mean - cost.half > 0 and cost.mean + cost.half < 0.2, cost


# -- 9. bounded queues: rejections are data, and blocking follows Erlang B / M/M/1/K ---


def _erlang_b(c: int, a: float) -> float:
    b = 1.0
    for j in range(1, c + 1):
        b = a * b / (j + a * b)
    return b


@pytest.mark.parametrize(("servers", "queue_limit"), [(1, 0), (1, 4), (3, 0), (2, 3)])
def test_bounded_queue_rejects_at_the_blocking_probability(servers: int, queue_limit: int) -> None:
    """M/M/c/(c+K) at offered load 0.9 c: a request finding c busy and K waiting is
    rejected at once (PASTA: with the stationary probability of a full system)."""
    a = 0.9 * servers
    cap = servers + queue_limit
    weights = [a**j / math.factorial(min(j, servers)) / servers ** max(0, j - servers)
               for j in range(cap + 1)]  # fmt: skip
    blocking = weights[-1] / sum(weights)
    if queue_limit == 0:
        assert blocking == pytest.approx(_erlang_b(servers, a))
    rejected = []
    for seed in range(8):
        sc = {
            "arrival": {"rate": f"{a * 200:g}/s", "duration": "30s", "warmup": "1s",
                        "seed": seed},
            "service": "exp:5ms",
            "servers": servers,
            "queue_limit": queue_limit,
        }  # fmt: skip
        r = run(sc)
        s, rec = r.summary, r.records
        req = s["requests"]
        assert req["accounted"] and req["failed"] == req["errors"]["rejected"] > 0
        assert set(req["errors"]) == {"rejected"}
        bad = rec.error == error_code("rejected")
        assert ERROR_KINDS[error_code("rejected")] == "rejected"
        assert (rec.status[bad] == 503).all() and (rec.status[~bad] == 200).all()
        assert (rec.done_ns[bad] == rec.scheduled_ns[bad]).all()  # turned away at once
        assert s["rates"]["error_rate"] == pytest.approx(req["failed"] / req["scheduled"])
        assert s["verdict"] == "fail"  # the implicit SLO: error_rate <= 1%
        rejected.append(req["failed"] / req["scheduled"])
    assert_covers(rejected, blocking, f"blocking, c = {servers}, K = {queue_limit}")


@pytest.mark.parametrize("cancel", ["instant", "queued_only"])
@pytest.mark.parametrize(("n", "k"), [(3, 1), (3, 2), (3, 3)])
def test_fanout_with_rejections_decides_each_request_once(n: int, k: int, cancel: str) -> None:
    """k of n legs on bounded replicas: a request fails only when k successes became
    impossible, succeeds with exactly k ok legs, and sends no leg after it was decided.
    (Regression: a first leg rejected used to fail a k < n request before its other
    legs were even sent, which then ran anyway.)"""
    sc = {
        "arrival": {"rate": "300/s", "duration": "10s", "seed": 1},
        "service": "exp:5ms",
        "replicas": n,
        "queue_limit": 0,
        "routing": "random",
        "fanout": {"n": n, "k": k, "cancel": cancel},
    }
    r = run(sc)
    res = r.result
    ok_legs = np.bincount(res.leg_parent[res.leg_status == OK], minlength=len(res.status))
    rejected_legs = np.bincount(
        res.leg_parent[res.leg_status == REJECTED], minlength=len(res.status)
    )
    assert (res.status >= 0).all()
    assert (ok_legs[res.status == OK] == k).all()
    assert (ok_legs[res.status == REJECTED] < k).all()
    assert (rejected_legs[res.status == REJECTED] > n - k).all()
    # With free cancellation nothing of a request outlives its decision: every leg ended
    # (served, rejected or cancelled) by the instant its request was decided. Without a
    # queue (limit 0) every leg let go is in service: queued_only lets it run to its end,
    # after the decision, and cancels none.
    discarded = res.leg_status == DISCARDED
    decided = res.done_ns[res.leg_parent]
    assert (res.leg_done_ns[~discarded] <= decided[~discarded]).all()
    assert (res.leg_done_ns[discarded] > decided[discarded]).all()
    assert (res.status == REJECTED).any() and (res.status == OK).any()
    cancelled = res.leg_status == CANCELLED
    assert (res.leg_done_ns[cancelled] == res.done_ns[res.leg_parent[cancelled]]).all()
    if cancel == "instant":
        assert not discarded.any()
    elif k < n:
        assert discarded.any() and not cancelled.any()


def test_slow_replica_slows_exactly_its_share() -> None:
    """Round robin over 4 replicas, replica 0 six times slower, no queueing: a quarter of
    the requests take 6 x 5 ms, the rest 5 ms."""
    sc = {
        "arrival": {"process": "constant", "rate": "20/s", "duration": "10s", "seed": 1},
        "service": "5ms",
        "replicas": 4,
        "stragglers": {"slow_replicas": [0], "slow_factor": 6},
    }
    rec = run(sc).records
    latency = rec.done_ns - rec.scheduled_ns
    np.testing.assert_array_equal(latency, np.where(rec.replica == 0, 30 * MS, 5 * MS))
    assert (rec.replica == 0).mean() == pytest.approx(0.25)


def test_ci_helper_rejects_a_wrong_closed_form() -> None:
    """The tolerance is earned: a 5% error in the M/M/1 mean is far outside the interval."""
    means = []
    for seed in range(10):
        arrival = {"rate": "160/s", "duration": "300s", "warmup": "5s", "seed": seed}
        means.append(run({"arrival": arrival, "service": "exp:5ms"}).summary["latency_ms"]["mean"])
    interval: CI = ci(means)
    assert interval.covers(25.0)
    assert not interval.covers(25.0 * 1.05) and not interval.covers(25.0 * 0.95)


def test_hedging_after_the_p95_costs_about_five_percent_extra_load() -> None:
    """The Tail at Scale's rule: hedge only once a request is slower than the 95th
    percentile of recent answers. About 5% of requests get a second leg (a little
    less: some finish before their hedge is served), and the p99 still falls by far:
    below 0.3 of the unhedged p99 with free cancellation; when losers in service cannot
    be aborted (queued_only) they hold servers, so it falls less, but still below half."""
    base = {
        "arrival": {"rate": "300/s", "duration": "40s", "warmup": "2s", "seed": 3},
        "service": "lognormal:5ms,1.0",
        "replicas": 4,
        "routing": "random",
        "stragglers": {"fraction": "2%", "factor": 10},
    }
    plain = run(base).summary
    hedged = run({**base, "hedge": {"after": "p95"}}).summary
    free = run({**base, "hedge": {"after": "p95", "cancel": "instant"}}).summary
    sim = hedged["sim"]
    assert 0.02 <= sim["legs"]["legs_per_request"] - 1 <= 0.08
    # The hedges that started run to their end (cancel: queued_only): extra server time.
    assert sim["legs"]["server_time_x"] > 1
    assert free["latency_ms"]["p99"] < 0.3 * plain["latency_ms"]["p99"]
    p99 = hedged["latency_ms"]["p99"]
    assert free["latency_ms"]["p99"] < p99 < 0.5 * plain["latency_ms"]["p99"]
    # The delay in force is the p95 of the last answers, near the requests' own p95.
    assert sim["hedge_delay_ms"] == pytest.approx(hedged["latency_ms"]["p95"], rel=0.5)
