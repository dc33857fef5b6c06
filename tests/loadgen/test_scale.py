"""Scale-out across local processes: one plan, many workers, one run directory.

The Ray path (same driver, actors instead of processes) is in test_scale_ray.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tailwise
from tailwise.arrivals import BLOCK, parse_schedule
from tailwise.errors import BadInput
from tailwise.loadgen.prepare.plan import parse_workers
from tailwise.loadgen.scale import merge
from tailwise.loadgen.scale.messages import Died, Failed, Snapshot, WorkerMessage
from tailwise.metrics.histogram import new_histogram, record_many
from tailwise.metrics.percentiles import nearest_rank
from tailwise.records import Records, read_jsonl
from tests.clirun import run_cli

Loopback = Callable[..., str]
CATEGORIES = ("scheduled", "sent", "ok", "failed", "timed_out", "cancelled", "not_sent")


def plan(seed: int, rate: str = "1000/s", duration_s: float = 2.0) -> np.ndarray:
    """The single-process plan of a run (what one process would have been asked to send)."""
    return parse_schedule(
        "poisson", rate, seed=seed, horizon_ns=int(duration_s * 1e9), max_count=None
    ).offsets_ns()


def records_in_plan_order(run_dir: Path) -> Records:
    """records.jsonl by plan sequence number (read_jsonl orders rows by worker, then seq)."""
    r = read_jsonl(run_dir / "records.jsonl")
    order = np.argsort(r.seq, kind="stable")
    for f in dataclasses.fields(Records):
        value = getattr(r, f.name)
        if isinstance(value, np.ndarray):
            setattr(r, f.name, value[order])
    r.chunk_times = [r.chunk_times[i] for i in order.tolist()]
    return r


def assert_totals_are_sums(summary: dict[str, object]) -> None:
    requests = summary["requests"]
    per_worker = summary["workers"]["per_worker"]  # type: ignore[index]
    for key in CATEGORIES:
        assert requests[key] == sum(w[key] for w in per_worker), key  # type: ignore[index]


# ---- the plan, sliced -------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    count=st.integers(1, 6),
    arrival=st.sampled_from(["poisson", "constant", "gamma:0.3", "stages:200/s@3s,900/s@4s"]),
)
def test_shares_partition_the_plan(seed: int, count: int, arrival: str) -> None:
    """Worker k's j-th offset is the plan's offset k + j*count; every block but the last is full."""
    rate = None if arrival.startswith("stages") else "3000/s"
    s = parse_schedule(arrival, rate, seed=seed, horizon_ns=7_000_000_000, max_count=None)
    whole = s.offsets_ns()
    rebuilt = np.full(len(whole), -1, dtype=np.int64)
    for k in range(count):
        blocks = list(s.share_blocks(k, count))
        assert all(len(b) == BLOCK for b in blocks[:-1])
        share = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
        rebuilt[k::count] = share
    assert np.array_equal(rebuilt, whole)


def test_parse_workers() -> None:
    assert parse_workers("3", ray=False) == 3
    assert parse_workers("auto", ray=False) == len(os.sched_getaffinity(0))
    assert parse_workers("auto", ray=True) is None  # the Ray cluster decides
    assert parse_workers(None, ray=True) is None
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(BadInput, match="--workers"):
            parse_workers(bad, ray=False)


def test_workers_refuse_closed_loop(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "http://127.0.0.1:9/", "--concurrency", "4", "--duration", "1s"]
    code, _, err = run_cli([*argv, "--workers", "2"], capsys)
    assert code == 2
    assert "--workers" in err and "closed loop" in err and len(err.strip().splitlines()) == 1


def test_an_unreachable_ray_cluster_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Refused at once (ray.init alone would retry for minutes), before anything is sent."""
    pytest.importorskip("ray")
    argv = ["run", "http://127.0.0.1:9/", "--rate", "10/s", "--ray", "127.0.0.1:1"]
    argv += ["--out", str(tmp_path), "--no-preflight"]  # (port 9: the preflight stops first)
    code, _, err = run_cli(argv, capsys)
    assert code == 2
    assert err.startswith("tailwise: error: --ray: got '127.0.0.1:1'") and "refused" in err


# ---- merging ----------------------------------------------------------------------------


def test_histogram_percentiles_bound_the_exact_ones() -> None:
    """Nearest rank on the merged histogram: never below the exact value, within one bucket."""
    rng = np.random.default_rng(5)
    values = (rng.lognormal(15, 1.2, 20_000)).astype(np.int64) + 1_000
    parts = np.array_split(values, 3)
    view = merge.LiveView(None)
    for part in parts:  # three workers' snapshots, in the same interval
        h = new_histogram()
        record_many(h, part)
        hists = [(True, 0, h.encode())]
        view.add(
            Snapshot(at_ns=0, sent=0, in_flight=0, completed=0, kinds={}, hists=hists, misses=None)
        )
    got = merge.hdr_summary_ms(view.window_histogram())
    exact = np.sort(values)
    assert got["count"] == len(values)
    for key, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9), ("max", 100)):
        truth_ms = nearest_rank(exact, q) / 1e6
        assert truth_ms <= got[key] <= truth_ms * (1 + 1 / 1024), key


def test_snapshots_of_failures_only_count_kinds_and_no_latency() -> None:
    """A slice with no successful answer adds counts but no histogram (and does not fail)."""
    from tailwise.loadgen.scale.worker import Snapshots
    from tailwise.records import RecordBlock, error_code

    block = RecordBlock(0, 100)
    np.frombuffer(block.scheduled_ns, np.int64)[:] = np.arange(100) * 1_000_000
    np.frombuffer(block.done_ns, np.int64)[:] = np.arange(100) * 1_000_000 + 500
    np.frombuffer(block.error, np.int16)[:] = error_code("http_4xx")

    engine = SimpleNamespace(blocks=[block], completed=list(range(100)), sent=100, in_flight=0)
    snaps = Snapshots(engine, 0, (0, 10**12), None)  # type: ignore[arg-type]
    snaps.catch_up_now()
    taken = snaps.take()
    assert taken.kinds == {"http_4xx": 100} and taken.hists == []


def test_owed_rows_fill_only_what_a_worker_never_reported() -> None:
    offsets = np.arange(0, 10_000_000, 1_000_000, dtype=np.int64)  # ten offsets of worker 1 of 3
    have = merge.empty(3)
    have.seq = np.array([1, 4, 13], dtype=np.int64)  # plan seqs = local 0, 1, 4
    lost = merge.owed_rows(have, offsets, 6, (1, 3), merge.WORKER_LOST, 4_500_000)
    assert lost.seq.tolist() == [7, 10, 16]  # local 2, 3, 5
    assert lost.scheduled_ns.tolist() == [2_000_000, 3_000_000, 5_000_000]
    assert lost.done_ns.tolist() == [4_500_000, 4_500_000, 5_000_000]
    assert lost.error_kinds == [merge.WORKER_LOST] * 3
    assert (lost.sent_ns == -1).all()


# ---- real runs against a loopback server --------------------------------------------------


def test_two_processes_run_one_plan(loopback: Loopback, tmp_path: Path) -> None:
    url = loopback("--service", "2ms") + "/x"
    res = tailwise.run(
        url, rate="1000/s", duration="2s", seed=7, workers=2, warmup="0s", out=str(tmp_path)
    )
    s, r = res.summary, records_in_plan_order(tmp_path)
    # One plan: the union of the workers' intended instants is the single-process plan.
    assert np.array_equal(r.seq, np.arange(len(r)))
    assert np.array_equal(r.scheduled_ns, plan(7))
    assert set(r.worker.tolist()) == {0, 1}
    assert np.array_equal(r.worker, r.seq % 2)  # round-robin shares
    # One run directory, the single-process files and schema, plus the workers section.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "client.json",
        "latency.hlog",
        "records.jsonl",
        "run.json",
        "summary.json",
    ]
    assert s["schema"] == "tailwise.summary/1" and s["verdict"] == "pass"
    assert s["requests"]["accounted"] and s["requests"]["ok"] == len(r)
    assert_totals_are_sums(s)
    w = s["workers"]
    assert (w["mode"], w["count"], w["lost"]) == ("processes", 2, 0)
    assert [x["state"] for x in w["per_worker"]] == ["done", "done"]
    assert len({x["pid"] for x in w["per_worker"]}) == 2
    run_json = json.loads((tmp_path / "run.json").read_text())
    assert run_json["workers"]["per_worker"] == w["per_worker"]
    # The streamed histograms, merged, agree with the records (lossless merge).
    lat = np.sort((r.done_ns - r.scheduled_ns)[r.error == 0])
    for key, q in (("p50", 50), ("p99", 99), ("max", 100)):
        truth_ms = nearest_rank(lat, q) / 1e6
        assert truth_ms <= w["hdr_latency_ms"][key] <= truth_ms * (1 + 1 / 1024)
    assert w["hdr_latency_ms"]["count"] == s["latency_ms"]["count"]


def _worker_pids(run_dir: Path, timeout_s: float = 30.0) -> list[int]:
    """The worker pids the driver writes into run.json once every worker is ready."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            rows = json.loads((run_dir / "run.json").read_text())["workers"]["per_worker"]
            if all(row["pid"] for row in rows):
                return [int(row["pid"]) for row in rows]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError("workers never became ready")


def _cli(url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tailwise", "run", url, "--rate", "1000/s", "--seed", "3"]
    argv += ["--workers", "2", "--out", str(out), "--no-progress", *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(
    ("sig", "said"), [(signal.SIGKILL, "killed by SIGKILL"), (signal.SIGTERM, "stopped by SIGTERM")]
)
def test_a_killed_worker_is_reported_lost(
    loopback: Loopback, tmp_path: Path, sig: signal.Signals, said: str
) -> None:
    """SIGKILL, or a SIGTERM sent to one worker alone (it stops as an interrupted run would):
    either way the worker is lost, the others go on, its share is owed, not dropped."""
    url = loopback("--service", "2ms") + "/x"
    out = tmp_path / "run"
    cli = _cli(url, out, "--duration", "3s")
    victim = _worker_pids(out)[1]
    # Mid-run by what the worker did, not by a fixed sleep (a loaded machine may take
    # seconds to start): once its first rows are on disk, and a little later.
    rows = out / "workers" / "w1" / "records.jsonl"
    deadline = time.monotonic() + 30
    while not (rows.is_file() and rows.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    os.kill(victim, sig)
    stdout, _ = cli.communicate(timeout=60)
    assert cli.returncode == 3  # invalid
    assert f"LOST worker 1 ({said}" in stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["verdict"] == "invalid"
    assert s["verdict_reason"].startswith("interrupted: worker 1 of 2 lost after")
    w0, w1 = s["workers"]["per_worker"]
    assert (w0["state"], w1["state"], s["workers"]["lost"]) == ("done", "lost", 1)
    # The survivor's share is complete; the dead worker's missing share is counted, not dropped.
    assert w0["ok"] == w0["scheduled"] > 0 and w0["worker_lost"] == 0
    assert 0 < w1["worker_lost"] < w1["scheduled"]
    assert w1["ok"] + w1["worker_lost"] + w1["failed"] + w1["cancelled"] == w1["scheduled"]
    assert s["requests"]["errors"]["not_sent:worker_lost"] == w1["worker_lost"]
    assert s["requests"]["accounted"]
    assert_totals_are_sums(s)
    r = records_in_plan_order(out)
    assert np.array_equal(r.scheduled_ns, plan(3, duration_s=3.0))  # every planned request
    kinds = np.array(r.error_kinds)
    assert set(kinds[r.worker == 0]) == {""}
    lost_rows = kinds == "not_sent:worker_lost"
    assert (r.worker[lost_rows] == 1).all() and (r.sent_ns[lost_rows] == -1).all()
    # The dead worker's rows before its death reached the run, sent and answered.
    first_lost = r.scheduled_ns[lost_rows].min()
    assert (kinds[(r.worker == 1) & (r.scheduled_ns < first_lost)] == "").all()


def test_ctrl_c_at_the_driver_stops_every_worker(loopback: Loopback, tmp_path: Path) -> None:
    url = loopback("--service", "2ms") + "/x"
    out = tmp_path / "run"
    cli = _cli(url, out, "--duration", "20s", "--json")
    _worker_pids(out)
    time.sleep(1.0)
    cli.send_signal(signal.SIGINT)
    stdout, _ = cli.communicate(timeout=60)
    assert cli.returncode == 3
    s = json.loads(stdout)
    assert s["interrupted"] and s["verdict_reason"].startswith("interrupted: SIGINT after")
    assert s["window"]["end_s"] < 5  # cut where sending stopped, far before 20 s
    assert [w["state"] for w in s["workers"]["per_worker"]] == ["interrupted", "interrupted"]
    assert s["requests"]["accounted"] and s["requests"]["ok"] > 0
    assert_totals_are_sums(s)


def test_a_lost_slo_stops_every_worker(loopback: Loopback, tmp_path: Path) -> None:
    """Certain misses add up across workers; the driver stops them all once the SLO is lost
    (a fixed warm-up: with ``--warmup auto`` several processes have no watch, see
    tests/loadgen/test_loss_watch.py)."""
    url = loopback("--service", "30ms") + "/x"
    res = tailwise.run(
        url,
        rate="400/s",
        duration="10s",
        warmup="1s",
        workers=2,
        slo=["p99(latency)<=10ms"],
        stop_on_slo_loss=True,
        out=str(tmp_path),
    )
    s = res.summary
    assert s["verdict"] == "fail"
    assert s["stopped_early"].startswith("p99(latency)<=10ms")
    assert s["window"]["end_s"] < 5
    assert not math.isnan(s["latency_ms"]["p99"]) and s["latency_ms"]["p99"] > 10
    assert_totals_are_sums(s)


# ---- a worker that does not start: this machine failed, not the input (exit 9) ---------


@pytest.mark.parametrize(
    ("message", "why"),
    [(Died("exit code -9"), "exit code -9"), (Failed("OSError: boom"), "OSError: boom")],
)
def test_a_worker_that_fails_to_start_exits_9_not_bad_input(
    message: WorkerMessage,
    why: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tailwise.loadgen.scale import pool as scale_pool

    monkeypatch.setattr(scale_pool.LocalPool, "launch", lambda self, specs: None)
    monkeypatch.setattr(scale_pool.LocalPool, "poll", lambda self, timeout_s: [(0, message)])
    argv = ["run", "http://127.0.0.1:9/", "--rate", "10/s", "--requests", "10"]
    argv += ["--workers", "2", "--no-preflight", "--out", str(tmp_path / "run"), "-q"]
    code, _, err = run_cli(argv, capsys)
    assert code == 9 and err.count("\n") == 1, err
    assert f"tailwise: error: --workers: got 'worker 0: {why}'" in err
    assert "expected workers that start" in err
