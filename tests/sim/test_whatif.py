"""``tailwise plan capacity``: replicas and knees against M/M/1 closed forms.

With random routing each of N replicas is an M/M/1 queue at rate/N, so the
knee of one replica under a p99 latency SLO is ``mm1_max_rate`` and the
replica count follows from it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailwise.capacity import mm1_max_rate
from tailwise.errors import BadInput
from tailwise.sim.scenario import parse_scenario
from tailwise.sim.whatif import WhatIf, apply, capacity
from tests.clirun import run_cli

MODEL = {
    "name": "M/M/1 replicas",
    "arrival": {"process": "poisson", "rate": "40/s", "duration": "30s", "seed": 3},
    "service": "exp:10ms",
    "routing": "random",
    "slo": ["p99(latency)<=100ms"],
}


def test_replicas_and_knee_follow_the_mm1_closed_form() -> None:
    plan = capacity(parse_scenario(MODEL), 120.0, WhatIf(), reps=4)
    out = plan.outputs
    truth = mm1_max_rate(0.99, 0.100, 0.010)  # 53.9/s
    assert out["knee_per_replica_rps"] == pytest.approx(truth, rel=0.1)
    # 3 replicas: 40/s each, p99 77 ms; 2 replicas: 60/s each, p99 115 ms > 100 ms
    assert out["replicas"] == 3 and out["holds_slo"] is True
    rows = {r["replicas"]: r for r in out["at target"]}
    assert rows[2]["passed"] == "0/4" and rows[3]["passed"] == "4/4"
    assert out["fleet_knee_rps"] == pytest.approx(3 * truth, rel=0.12)


def test_fixed_replicas_what_if_reports_a_miss() -> None:
    plan = capacity(parse_scenario(MODEL), 120.0, WhatIf(replicas=2), reps=3)
    assert plan.outputs["replicas"] == 2 and plan.outputs["holds_slo"] is False


def test_what_if_edits_apply_and_name_their_flag() -> None:
    sc = apply(parse_scenario(MODEL), WhatIf(router="jsq", hedge="p95", sets=("servers=2",)))
    assert sc.routing == "jsq" and sc.servers == 2
    assert sc.hedge is not None and sc.hedge.after == "p95"
    with pytest.raises(BadInput) as bad:
        apply(parse_scenario(MODEL), WhatIf(sets=("serverz=2",)))
    assert bad.value.field == "--set"
    with pytest.raises(BadInput) as bad:
        apply(parse_scenario(MODEL), WhatIf(batch_size=8))  # the model has no batching
    assert bad.value.field == "--batch-size"


def _model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.json.yaml"
    path.write_text(json.dumps(MODEL))  # JSON is YAML
    return path


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "capacity", "--model", str(_model_file(tmp_path)), "--rate", "120/s"]
    code, out, _ = run_cli([*argv, "--replications", "3", "--replicas", "3", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["model"] == "capacity" and doc["outputs"]["replicas"] == 3


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--rate", "fast"], "--rate"),
        (["--rate", "10/s", "--replications", "1"], "--replications"),
        (["--rate", "10/s", "--replicas", "0"], "--replicas"),
        (["--rate", "10/s", "--slo", "p99<=soon"], "slo"),
        (["--rate", "10/s", "--set", "nonsense"], "--set"),
    ],
)
def test_cli_bad_input(
    extra: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "capacity", "--model", str(_model_file(tmp_path)), *extra]
    code, _, err = run_cli(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1 and field in err


def test_cli_missing_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "capacity", "--model", str(tmp_path / "none.yaml"), "--rate", "10/s"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "SCENARIO" in err


@pytest.mark.parametrize(("rate_rps", "seed"), [(120.0, 3), (100.0, 5), (160.0, 8)])
def test_fleet_knee_is_never_above_n_times_one_replicas(rate_rps: float, seed: int) -> None:
    """Random routing cannot beat independent replicas (each is an M/M/1 at rate / n), so
    the fleet's knee, from the same search and pass rule, is at most n x one replica's,
    up to the search's resolution: n x the lowest rate one replica was seen to fail at.
    (It once was 5x one replica's at 2 replicas: trials of 13 requests against 70.)
    And simulating the fleet at its reported knee passes."""
    from tailwise.sim.run import sim_trial
    from tailwise.sim.whatif import KNEE_REQUESTS, at

    model = {**MODEL, "arrival": {**MODEL["arrival"], "seed": seed}}
    sc = parse_scenario(model)
    plan = capacity(sc, rate_rps, WhatIf(), reps=3)
    out = plan.outputs
    n = out["replicas"]
    lo, hi = out["knee_per_replica_band_rps"]  # shown to hold, shown to fail
    knee = out["knee_per_replica_rps"]
    assert lo is not None and lo <= knee and (hi is None or knee < hi)
    lowest_fail = min(
        float(r) for r in (hi, *[knee * 1.06]) if r is not None
    )  # the search's resolution above the knee, or the band's end
    assert out["fleet_knee_rps"] <= n * max(lowest_fail, hi or 0.0)
    assert out["fleet_knee_per_replica_rps"] == pytest.approx(out["fleet_knee_rps"] / n)
    # Where the fleet's own search went higher, the plan says so.
    assert all("random routing cannot beat" in w for w in plan.warnings)
    # The fleet's knee is where its miss share crosses the SLO's (a fit over its trials):
    # 10% below it the fleet passes as measured.
    trial = sim_trial(at(sc, replicas=n), requests=KNEE_REQUESTS)
    assert trial(0.9 * out["fleet_knee_rps"]).passed


@pytest.mark.parametrize("rate_rps", [120.0, 170.0])
def test_plan_capacity_p99_interval_holds_the_steady_state_closed_form(rate_rps: float) -> None:
    """Each replica count tried near the knee (random routing: M/M/1 at rate / n): the
    replications' 95% interval for the p99 holds ln(100) / (mu - rate / n), the
    steady-state truth. Runs start empty; --warmup auto (arrival.warmup: auto) cuts the
    transient MSER-5 confirms, where a replication of the empty start would read low."""
    import math

    plan = capacity(parse_scenario(MODEL), rate_rps, WhatIf(), reps=10)
    rows = plan.outputs["at target"]
    assert len(rows) >= 2  # the count chosen and the one below it, which misses
    for row in rows:
        lam = rate_rps / row["replicas"]
        truth_ms = 1000 * math.log(100) / (100 - lam)
        mean, half = (float(x) for x in row["latency p99"].split(" ± "))
        assert abs(mean - truth_ms) <= half, (row, truth_ms)


def test_plan_capacity_logs_its_phases_into_a_pipe(tmp_path: Path) -> None:
    """stderr not a terminal: one line per phase (a terminal gets a status line instead)."""
    import subprocess
    import sys

    argv = ["plan", "capacity", "--model", str(_model_file(tmp_path)), "--rate", "120/s"]
    p = subprocess.run(
        [sys.executable, "-m", "tailwise", *argv, "--replications", "3"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert lines[0].startswith("tailwise plan capacity: searching the knee of one replica (")
    assert any(
        ln.startswith("tailwise plan capacity: searching the knee of one replica") for ln in lines
    )
    assert any(
        "tailwise plan capacity: simulating 3 replicas, 3 replications" in ln for ln in lines
    )


def test_a_floor_above_the_slo_is_named_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Service alone (200 ms mean) misses a 100 ms p99 at any rate: no fleet can help, and
    the error says so after one knee search, not after trying ever more replicas."""
    path = tmp_path / "slow.yaml"
    path.write_text(json.dumps({**MODEL, "service": "exp:200ms"}))
    argv = ["plan", "capacity", "--model", str(path), "--rate", "2000/s"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "--slo" in err and "no number of replicas can" in err, err
