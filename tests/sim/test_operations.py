"""Pipelines, replica failures and autoscaling against results known in closed form.

* A tandem of M/M/1 stages is a Jackson network: each stage is an M/M/1 queue
  at the same rate, so the mean latency is the sum of 1 / (mu_i - lambda), and
  an overloaded stage caps throughput at its own mu.
* A replica that alternates exponential up and down times is up a share
  MTBF / (MTBF + MTTR) of the time; Poisson arrivals see time averages (PASTA),
  so that share of requests finds it down; M independent replicas are all down
  with probability (MTTR / (MTBF + MTTR))^M.
* Autoscaling on a deterministic load (constant arrivals, constant service,
  round robin) has an exact answer: N replicas each hold rho / N of a request
  in flight, so a target of t per replica settles at N = rho / t, a cold start
  later than the first tick that saw the step.
"""

from __future__ import annotations

from typing import Any

import pytest

from tailwise.sim.run import simulate
from tailwise.sim.scenario import parse_scenario
from tests.sim import assert_covers, run

# -- pipelines ---------------------------------------------------------------------------

TANDEM_MS = (4.0, 6.0, 8.0)


def _tandem(seed: int, rate: float = 100.0, duration: str = "120s") -> dict[str, Any]:
    return {
        "arrival": {"rate": f"{rate:g}/s", "duration": duration, "warmup": "10s", "seed": seed},
        "stages": [{"name": f"s{i}", "service": f"exp:{ms:g}ms"} for i, ms in enumerate(TANDEM_MS)],
    }


def test_tandem_latency_is_the_sum_of_the_stages_mm1_times() -> None:
    lam = 100.0
    truth_ms = sum(1e3 / (1e3 / ms - lam) for ms in TANDEM_MS)  # 6.67 + 15 + 40 ms
    summaries = [run(_tandem(seed)).summary for seed in range(6)]
    assert_covers([s["latency_ms"]["mean"] for s in summaries], truth_ms, "tandem mean")
    # Each stage on its own is M/M/1 at lambda: mean wait rho / (mu - lambda).
    for i, ms in enumerate(TANDEM_MS):
        mu = 1e3 / ms
        wq_ms = 1e3 * (lam / mu) / (mu - lam)
        waits = [s["sim"]["stages"][i]["mean_wait_ms"] for s in summaries]
        assert_covers(waits, wq_ms, f"stage {i} wait")


def test_the_slowest_stage_sets_the_throughput() -> None:
    """Offered 150/s into stages of capacity 250, 166.7 and 125/s: 125/s comes out."""
    result = simulate(parse_scenario(_tandem(1, rate=150.0, duration="60s")))
    s = result.summary
    assert s["requests"]["accounted"]  # Little's law needs a steady state; this has none
    stages = s["sim"]["stages"]
    assert s["rates"]["throughput_rps"] == pytest.approx(125.0, rel=0.03)
    # Utilization is busy time over the run, which lasts until the last stage drains.
    assert stages[2]["utilization"] == pytest.approx(1.0, abs=0.01)
    run_s = result.records.done_ns.max() / 1e9
    busy_s = stages[0]["legs_started"] * stages[0]["mean_service_ms"] / 1e3
    assert stages[0]["utilization"] == pytest.approx(busy_s / run_s, rel=0.01)
    assert busy_s / 70.0 == pytest.approx(150 / 250, rel=0.05)  # 10 s warm-up + 60 s
    assert stages[2]["mean_wait_ms"] > 100 * stages[0]["mean_wait_ms"]


def test_a_stage_batches_on_its_own() -> None:
    """A batching stage behind a fixed 1 ms stage: requests leave the first stage 1 ms
    apart and the second serves them in static batches of 4 costing 2 + 0.5 x 4 = 4 ms."""
    sc = {
        "arrival": {"process": "constant", "rate": "250/s", "requests": 400, "duration": None},
        "stages": [
            {"name": "pre", "service": "1ms"},
            {"name": "model", "batching": {"mode": "static", "size": 4, "base": "2ms",
                                           "per_item": "0.5ms"}},
        ],
    }  # fmt: skip
    rec = run(sc).records
    lat = (rec.done_ns - rec.scheduled_ns) / 1e6
    # Batch members arrive 4 ms apart and wait for the 4th: 12, 8, 4, 0 ms, + 1 + 4 ms.
    assert lat[:4].tolist() == pytest.approx([17.0, 13.0, 9.0, 5.0])
    assert lat[4:8].tolist() == pytest.approx([17.0, 13.0, 9.0, 5.0])


def test_pipelines_refuse_fanout_and_top_level_stage_fields() -> None:
    from tailwise.errors import BadInput

    for extra, field in (
        ({"fanout": {"n": 2}}, "scenario.fanout"),
        ({"replicas": 2}, "scenario.replicas"),
    ):
        with pytest.raises(BadInput, match=f"^{field}"):
            simulate(parse_scenario({**_tandem(0), **extra}))


# -- failures -----------------------------------------------------------------------------


def _failing(seed: int, replicas: int, mtbf: str, mttr: str, **more: Any) -> dict[str, Any]:
    return {
        "arrival": {"rate": "50/s", "duration": "2000s", "seed": seed},
        "service": "exp:1ms",
        "replicas": replicas,
        "routing": "least_outstanding",
        "failures": {"mtbf": f"exp:{mtbf}", "mttr": f"exp:{mttr}", **more},
    }


def _share(s: dict[str, Any], kind: str) -> float:
    return float(s["requests"]["errors"].get(kind, 0) / s["requests"]["scheduled"])


def test_one_replica_is_down_mttr_over_mtbf_plus_mttr_of_the_time() -> None:
    summaries = [run(_failing(seed, 1, "10s", "1s")).summary for seed in range(5)]
    down = 1.0 / 11.0
    assert_covers([_share(s, "unavailable") for s in summaries], down, "requests refused")
    assert_covers([1 - s["sim"]["stages"][0]["availability"] for s in summaries], down, "time down")
    # A crash loses what is in flight: about rho = 5% of a request per crash.
    for s in summaries:
        st = s["sim"]["stages"][0]
        assert 0 < s["requests"]["errors"].get("reset", 0) <= st["crashes"]


def test_three_replicas_are_all_down_a_cubed_share_of_the_time() -> None:
    summaries = [run(_failing(seed, 3, "2s", "1s")).summary for seed in range(5)]
    assert_covers([_share(s, "unavailable") for s in summaries], (1 / 3) ** 3, "all down")


def test_retry_moves_in_flight_requests_to_a_live_replica() -> None:
    fail = run(_failing(3, 3, "2s", "1s")).summary
    retry = run(_failing(3, 3, "2s", "1s", in_flight="retry")).summary
    assert fail["requests"]["errors"]["reset"] > 20
    assert "reset" not in retry["requests"]["errors"]  # two retries always find one up
    stage = retry["sim"]["stages"][0]
    assert stage["retries"] > 20 and stage["crashes"] > 1000
    # Retried requests paid a second service; the refusals (all down) are unchanged.
    assert retry["latency_ms"]["mean"] > fail["latency_ms"]["mean"] * 0.99


# -- autoscaling ---------------------------------------------------------------------------


def _scaled(**auto: Any) -> dict[str, Any]:
    """Constant 100/s for 30 s, 200/s for 60 s, 100/s for 60 s; 10 ms each, round robin."""
    return {
        "arrival": {"process": "stages:100/s@30s,200/s@60s,100/s@60s", "seed": 0},
        "service": "10ms",
        "replicas": 2,
        "autoscale": {"metric": "concurrency", "target": 0.6, "min": 1, "max": 10,
                      "interval": "5s", "cold_start": "20s", "stabilization": "20s", **auto},
    }  # fmt: skip


def test_autoscaler_settles_at_load_over_target_a_cold_start_after_the_step() -> None:
    s = run(_scaled()).summary
    stage = s["sim"]["stages"][0]
    tl = [(e["t_s"], e["ready"], e["billed"]) for e in stage["timeline"]]
    # 100/s x 10 ms = 1 in flight; 2 replicas at 0.6 each: ceil(2 x 1 / 1.2) = 2, no change.
    assert tl[0] == (0.0, 2, 2)
    # The step to 200/s (2 in flight) at 30 s is seen at the 35 s tick: ceil(2 x 2 / 1.2)
    # = 4 are ordered; the new two are ready a 20 s cold start later; ceil(4 x 2 / 2.4) = 4.
    assert tl[1] == (35.0, 2, 4)
    assert tl[2] == (55.0, 4, 4)
    # Back to 100/s at 90 s: from the 95 s tick the advice is 2, but the 20 s window keeps
    # the last advice of 4 (at 90 s) until 115 s; then two replicas drain and stop.
    assert tl[3][:2] == (115.0, 2)
    assert tl[-1][1:] == (2, 2) and tl[-1][0] - 115.0 < 0.011
    # Billed replica-seconds: 2 x 35 + 4 x 80 + 2 x 35 (to the last answer at 150 s).
    assert stage["replica_seconds"] == pytest.approx(460.0, abs=0.1)
    assert s["latency_ms"]["max"] == pytest.approx(10.0)  # rho <= 1 everywhere: no queue


def test_cold_start_shows_in_the_tail_and_scale_from_zero_waits_for_it() -> None:
    # Poisson 400/s at 10 ms is rho 4: two replicas fall behind until the new ones are
    # ready 20 s later, and requests queued on the old two wait out that backlog.
    sc = _scaled(target=0.8) | {"arrival": {"process": "stages:100/s@30s,400/s@60s+poisson"}}
    s = simulate(parse_scenario(sc)).summary
    assert s["requests"]["accounted"] and s["latency_ms"]["p99"] > 1000
    assert max(e["ready"] for e in s["sim"]["stages"][0]["timeline"]) >= 5
    zero = {
        "arrival": {"process": "constant", "rate": "1/s", "requests": 3, "duration": None},
        "service": "10ms",
        "replicas": 0,
        "autoscale": {"min": 0, "max": 1, "target": 1, "interval": "1h", "cold_start": "2s"},
    }
    zero_run = simulate(parse_scenario(zero))
    rec = zero_run.records
    lat_ms = ((rec.done_ns - rec.scheduled_ns) / 1e6).tolist()
    # Time parked for the cold start is waiting: (2000 + 1010 + 20) / 3 ms.
    assert zero_run.summary["sim"]["stages"][0]["mean_wait_ms"] == pytest.approx(1010.0)
    # The first request (t = 0) wakes a replica that is ready at 2 s; the second (1 s)
    # is parked behind it; the third arrives as it becomes ready and queues behind both.
    assert lat_ms == pytest.approx([2010.0, 1020.0, 30.0])


def test_p99_autoscaling_adds_replicas_when_the_tail_is_over_target() -> None:
    sc = {
        "arrival": {"rate": "300/s", "duration": "120s", "seed": 4},
        "service": "exp:10ms",
        "replicas": 4,
        "routing": "least_outstanding",
        "autoscale": {"metric": "p99", "target": "50ms", "min": 1, "max": 12,
                      "interval": "10s", "cold_start": "5s"},
    }  # fmt: skip
    stage = run(sc).summary["sim"]["stages"][0]
    # At 4 replicas (rho 0.75) the p99 is well over 50 ms, so replicas are added.
    assert max(e["ready"] for e in stage["timeline"]) > 4
    assert stage["mean_ready_replicas"] > 4.5
