"""Fit quality gates the planner: no exit-0 answer from a POOR or out-of-range model.

The models are fitted to simulated sweeps of laws we chose, so what the runs
covered is known exactly: two FCFS servers with exponential 5 ms service
(400/s of capacity), swept below saturation (its highest throughput, about
150/s, is the measured range: the model fits, but past it knows nothing), or
past it; and a sweep mixing two servers (5 ms and 15 ms services), which no
one law fits: its fit must be POOR, and the planner must refuse it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tailwise.calibrate import calibrate, write_model
from tailwise.sim.scenario import load_scenario
from tailwise.sim.trust import UNTRUSTED_EXIT, of
from tests.clirun import run_cli
from tests.test_calibrate import simulated_sweep

FAST = {"servers": 2, "service": "exp:5ms"}  # capacity 400/s
SLOW = {"servers": 2, "service": "exp:15ms"}  # capacity 133/s


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("trust")
    out = {}
    runs = {
        "calm": [simulated_sweep(tmp / "calm", FAST, [40, 100, 150], 8)],
        "past": [simulated_sweep(tmp / "past", FAST, [60, 200, 300, 600], 8)],
        # two servers' steps: no one law fits both
        "mixed": [
            simulated_sweep(tmp / "m1", FAST, [40, 150], 8),
            simulated_sweep(tmp / "m2", SLOW, [100, 200], 8),
        ],
        # the same, short, few and below saturation: what would make it fit is plain
        "thin": [
            simulated_sweep(tmp / "t1", FAST, [30], 3),
            simulated_sweep(tmp / "t2", SLOW, [40], 3),
        ],
    }
    for name, sweeps in runs.items():
        cal = calibrate(sweeps)
        write_model(cal, tmp / f"{name}.yaml")
        out[name] = tmp / f"{name}.yaml"
    return out


def test_the_model_records_its_fit_range_and_advice(models: dict[str, Path]) -> None:
    calm = of(load_scenario(models["calm"]))
    past = of(load_scenario(models["past"]))
    mixed = of(load_scenario(models["mixed"]))
    assert calm is not None and past is not None and mixed is not None
    assert not calm.poor and not past.poor and mixed.poor
    assert calm.range is not None and not calm.range.saturated
    assert 130 < calm.range.throughput_rps < 160 <= calm.range.throughput_edge_rps + 10
    assert past.range is not None and past.range.saturated
    assert past.range.throughput_rps == pytest.approx(400, rel=0.06)
    assert calm.advice == () and mixed.advice  # advice only where the fit is poor


def test_a_poor_fit_says_what_would_make_it_good(models: dict[str, Path]) -> None:
    thin = of(load_scenario(models["thin"]))
    assert thin is not None and thin.poor
    text = " | ".join(thin.advice)
    assert "sweep further, past saturation" in text
    assert "more steps below saturation (2 now" in text
    assert "longer steps" in text


def test_plan_capacity_refuses_a_poor_fit(
    models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "capacity", "--model", str(models["thin"]), "--rate", "300/s"]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "--model" in err and "POOR" in err and "--accept-poor-fit" in err
    assert "sweep further, past saturation" in err and "longer steps" in err


def test_an_accepted_poor_fit_marks_every_answer(
    models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "capacity", "--model", str(models["mixed"]), "--rate", "300/s"]
    argv += ["--accept-poor-fit", "--replications", "2", "--json"]
    code, out, _ = run_cli(argv, capsys)
    assert code == UNTRUSTED_EXIT
    doc = json.loads(out)
    assert "fit" in doc["outputs"]["extrapolated"]
    assert all("fit" in row["extrapolated"] for row in doc["outputs"]["at target"])
    assert any("fit is POOR" in w for w in doc["warnings"])
    assert any(w.startswith("to fit well: ") for w in doc["warnings"])


def test_rates_beyond_the_measured_range_are_flagged_per_row(
    models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The calm sweep measured up to ~150/s: 300/s on one replica is beyond it (its row is
    flagged), 100/s on each of three is not (its row is clean), but either way the knee of
    one replica (~370/s for a 30 ms p99) is a rate no step reached: exit 8 both times."""
    base = ["plan", "capacity", "--model", str(models["calm"]), "--rate", "300/s"]
    base += ["--slo", "p99(latency)<=30ms", "--replications", "2", "--json"]
    code, out, _ = run_cli([*base, "--replicas", "1"], capsys)
    assert code == UNTRUSTED_EXIT
    doc = json.loads(out)
    assert doc["outputs"]["extrapolated"] == "rate"
    [row] = doc["outputs"]["at target"]
    assert row["extrapolated"] == "rate"
    assert any("300/s per replica is above the highest throughput" in w for w in doc["warnings"])
    code, out, _ = run_cli([*base, "--replicas", "3"], capsys)
    assert code == UNTRUSTED_EXIT
    doc = json.loads(out)
    [row] = doc["outputs"]["at target"]
    assert row["extrapolated"] is None
    assert any(w.startswith("extrapolated: knee per replica") for w in doc["warnings"])


def test_an_answer_inside_the_measured_range_exits_0(
    models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The sweep past saturation measured capacity (400/s); a 30 ms p99 holds to ~250/s
    (the 300/s step's p99 was 48 ms). The answer, 500/s on two or three replicas, is
    inside the range; a count tried on the way and refused may not be (500/s on one
    replica is past capacity), and only such a row is flagged."""
    argv = ["plan", "capacity", "--model", str(models["past"]), "--rate", "500/s"]
    argv += ["--slo", "p99(latency)<=30ms", "--replications", "2", "--json"]
    code, out, _ = run_cli(argv, capsys)
    doc = json.loads(out)
    assert code == 0, doc["warnings"]
    assert "extrapolated" not in doc["outputs"]
    n = doc["outputs"]["replicas"]
    assert n in (2, 3)
    for row in doc["outputs"]["at target"]:
        beyond = 500 / row["replicas"] > 400  # per replica, past the measured capacity
        assert row["extrapolated"] == ("rate" if beyond else None), row
        assert row["replicas"] != n or row["extrapolated"] is None


def test_simulate_refuses_a_poor_fit_and_flags_what_it_runs_beyond(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ["-q", "-o"]
    code, _, err = run_cli(["simulate", str(models["mixed"]), *out, str(tmp_path / "a")], capsys)
    assert code == 2 and err.count("\n") == 1 and "--accept-poor-fit" in err
    argv = ["simulate", str(models["mixed"]), "--accept-poor-fit", *out, str(tmp_path / "b")]
    code, _, err = run_cli(argv, capsys)
    assert code == UNTRUSTED_EXIT and "fit is POOR" in err
    # the model's own rate (the measured knee) is inside its range
    code, _, err = run_cli(["simulate", str(models["calm"]), *out, str(tmp_path / "c")], capsys)
    assert code == 0 and "extrapolated" not in err
    argv = ["simulate", str(models["calm"]), "--vary", "arrival.rate=100/s,300/s"]
    code, _, err = run_cli([*argv, *out, str(tmp_path / "d")], capsys)
    assert code == UNTRUSTED_EXIT and "300/s per replica is above the highest throughput" in err


LLM_LAW = {
    "base": "4ms",
    "prefill_per_token": "0.02ms",
    "decode_per_seq": "0.3ms",
    "max_num_seqs": 16,
    "prompt_tokens": "uniform:32-512",
    "output_tokens": 32,
}


def test_a_workload_outside_the_calibrated_lengths_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Prompts of 32-512 tokens and 32-token answers calibrated; 2048-token prompts or
    128-token answers are a question the runs never asked."""
    sweep = simulated_sweep(tmp_path, {"llm": LLM_LAW, "delay": "2ms"}, [2, 8, 16, 24, 40], 20)
    cal = calibrate([sweep])
    assert not cal.goodness.poor
    assert cal.range["prompt_tokens"] == [32, 512] and cal.range["output_tokens"] == [32, 32]
    write_model(cal, tmp_path / "llm.yaml")
    doc = yaml.safe_load((tmp_path / "llm.yaml").read_text())
    doc["arrival"]["duration"] = "10s"
    asked = [
        ("in", "prompt_tokens", "uniform:64-256"),
        ("long", "prompt_tokens", 2048),
        ("more", "output_tokens", 128),
    ]
    for name, field, value in asked:
        model = tmp_path / f"{name}.yaml"
        model.write_text(yaml.safe_dump({**doc, "llm": {**doc["llm"], field: value}}))
        argv = ["simulate", str(model), "-q", "-o", str(tmp_path / f"run-{name}")]
        code, _, err = run_cli(argv, capsys)
        if name == "in":
            assert code != UNTRUSTED_EXIT and "extrapolated" not in err, err
        else:
            assert code == UNTRUSTED_EXIT, err
            what = "prompt lengths 2048" if name == "long" else "answer lengths 128"
            assert f"{what} tokens are outside the calibrated" in err
