"""Scale-out on a real (local) Ray: two actors against a loopback server.

One Ray session for the whole module (starting Ray costs seconds): two CPUs,
no dashboard, shut down at the end.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tailwise
from tailwise.loadgen.scale.merge import hdr_summary_ms
from tailwise.metrics.histogram import new_histogram, record_many
from tailwise.metrics.percentiles import nearest_rank
from tests.loadgen.test_scale import assert_totals_are_sums, plan, records_in_plan_order

ray = pytest.importorskip("ray")

Loopback = Callable[..., str]


@pytest.fixture(scope="module")
def ray_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # The actors' scratch folders go under pytest's tmp: a killed actor cannot clean up.
    scratch = str(tmp_path_factory.mktemp("ray-scratch"))
    env = {"env_vars": {"TMPDIR": scratch}}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=env)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_two_actors_run_one_plan_and_merge_losslessly(
    ray_session: Any, loopback: Loopback, tmp_path: Path
) -> None:
    url = loopback("--service", "2ms") + "/x"
    res = tailwise.run(
        url, rate="1000/s", duration="2s", seed=11, ray="auto", warmup="0s", out=str(tmp_path)
    )
    s, r = res.summary, records_in_plan_order(tmp_path)
    w = s["workers"]
    assert (w["mode"], w["count"], w["lost"]) == ("ray", 2, 0)  # one actor per CPU
    assert all(row["actor"].startswith("tailwise-") for row in w["per_worker"])
    assert s["verdict"] == "pass" and s["requests"]["accounted"]
    # The union of the actors' intended send times is the single-process plan.
    assert np.array_equal(r.scheduled_ns, plan(11))
    assert np.array_equal(r.worker, r.seq % 2)
    # Totals are the sums of the workers'.
    assert_totals_are_sums(s)
    assert s["requests"]["ok"] == len(r) == sum(row["ok"] for row in w["per_worker"])
    # Merged streamed histograms = a histogram of the concatenated records, bucket for
    # bucket; and within HdrHistogram precision of their exact percentiles.
    lat = (r.done_ns - r.scheduled_ns)[(r.error == 0) & r.in_window]
    whole = new_histogram()
    record_many(whole, lat)
    assert w["hdr_latency_ms"] == hdr_summary_ms(whole)
    exact = np.sort(lat)
    for key, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9), ("max", 100)):
        truth_ms = nearest_rank(exact, q) / 1e6
        assert truth_ms <= w["hdr_latency_ms"][key] <= truth_ms * (1 + 1 / 1024), key
        if key in s["latency_ms"]:
            assert s["latency_ms"][key] == pytest.approx(truth_ms)


def _kill_actor_when_running(run_dir: Path, index: int, after_s: float) -> threading.Thread:
    """Kill worker ``index``'s Ray actor ``after_s`` into the run (the node-lost path)."""

    def kill() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                rows = json.loads((run_dir / "run.json").read_text())["workers"]["per_worker"]
                if all(row["pid"] for row in rows):
                    time.sleep(after_s)
                    ray.kill(ray.get_actor(rows[index]["actor"]))
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_a_lost_actor_is_reported_with_counts(
    ray_session: Any, loopback: Loopback, tmp_path: Path
) -> None:
    url = loopback("--service", "2ms") + "/x"
    killer = _kill_actor_when_running(tmp_path, 0, after_s=3.0)
    res = tailwise.run(url, rate="1000/s", duration="5s", seed=5, ray="auto", out=str(tmp_path))
    killer.join(timeout=5)
    s, r = res.summary, records_in_plan_order(tmp_path)
    w0, w1 = s["workers"]["per_worker"]
    assert (w0["state"], w1["state"]) == ("lost", "done")
    assert "Ray actor lost" in w0["note"]
    assert s["verdict"] == "invalid" and "worker 0 of 2 lost" in s["verdict_reason"]
    assert w1["ok"] == w1["scheduled"] > 0  # the survivor's data is all there
    # What the lost actor shipped before it died is kept; the rest of its share is counted.
    assert w0["ok"] > 0 and w0["worker_lost"] > 0
    assert s["requests"]["errors"]["not_sent:worker_lost"] == w0["worker_lost"]
    assert s["requests"]["accounted"]
    assert_totals_are_sums(s)
    assert np.array_equal(r.scheduled_ns, plan(5, duration_s=5.0))
