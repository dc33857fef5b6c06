"""``tailwise calibrate``: fitted models recover a known truth.

The truths are models whose numbers we chose: simulated sweeps of an M/G/c
queue with a delay, a dynamic batcher and an LLM step law (the fit must find
the numbers back), and one real sweep of the demo http target, whose law
(c FCFS workers, exponential service) is set on its command line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailwise.calibrate import calibrate, write_model
from tailwise.calibrate.llm import theil_sen
from tailwise.calibrate.steps import load_steps
from tailwise.errors import BadInput
from tailwise.loadgen.runner import RunOptions
from tailwise.loadgen.sweep import Sweep
from tailwise.sim.run import simulate, write_run
from tailwise.sim.scenario import load_scenario, parse_scenario
from tests.clirun import run_cli


def simulated_sweep(tmp: Path, model: dict[str, Any], rates: list[float], window_s: float) -> Path:
    """Simulated runs of ``model`` at each rate, as a measured sweep's step directories."""
    out = tmp / "sweep"
    for i, rate in enumerate(rates):
        arrival = {
            "process": "poisson",
            "rate": f"{rate:g}/s",
            "duration": f"{window_s:g}s",
            "warmup": "1s",
            "seed": 100 + i,
        }
        sc = parse_scenario({**model, "arrival": arrival, "slo": ["p99(latency)<=1s"]})
        write_run(out / f"step-{i:02d}-{rate:g}rps", simulate(sc), sc)
    return out


def test_http_fit_recovers_servers_service_and_delay(tmp_path: Path) -> None:
    truth = {"servers": 3, "service": "exp:4ms", "delay": "1ms"}  # capacity 750/s
    sweep = simulated_sweep(tmp_path, truth, [50, 250, 450, 600, 1000], 10)
    cal = calibrate([sweep])
    p = cal.fit.params
    assert cal.fit.kind == "http"
    assert p["servers"] == 3
    assert p["service_mean_ms"] == pytest.approx(4.0, rel=0.06)
    assert p["delay_ms"] == pytest.approx(1.0, abs=0.3)
    assert p["capacity_rps"] == pytest.approx(750, rel=0.05)
    assert not cal.goodness.poor
    saturated = [r.rate_rps for r in cal.goodness.rows if r.saturated]
    assert saturated == [1000]


def test_http_fit_without_saturation_says_so(tmp_path: Path) -> None:
    sweep = simulated_sweep(tmp_path, {"servers": 2, "service": "exp:5ms"}, [40, 150, 250], 10)
    cal = calibrate([sweep])
    assert any("no step reached saturation" in n for n in cal.fit.notes)
    assert cal.fit.params["servers"] >= 1


def test_batching_fit_recovers_c0_and_c1(tmp_path: Path) -> None:
    batching = {"mode": "dynamic", "size": 16, "max_wait": "5ms", "base": "4ms", "per_item": "1ms"}
    # capacity 16 / 20 ms = 800/s
    sweep = simulated_sweep(tmp_path, {"batching": batching}, [50, 200, 400, 600, 1200], 10)
    cal = calibrate([sweep], max_batch=16, max_wait_ms=5.0)
    p = cal.fit.params
    assert cal.fit.kind == "batching"
    assert p["c0_ms"] == pytest.approx(4.0, abs=1.0)
    assert p["c1_ms"] == pytest.approx(1.0, abs=0.1)
    assert not cal.goodness.poor


def test_llm_fit_recovers_the_step_law(tmp_path: Path) -> None:
    llm = {
        "base": "4ms",
        "prefill_per_token": "0.02ms",
        "decode_per_seq": "0.3ms",
        "max_num_seqs": 16,
        "prompt_tokens": "uniform:32-512",
        "output_tokens": 32,
    }
    sweep = simulated_sweep(tmp_path, {"llm": llm, "delay": "2ms"}, [2, 8, 16, 24, 40], 20)
    cal = calibrate([sweep])
    p = cal.fit.params
    assert cal.fit.kind == "llm"
    assert p["prefill_ms_per_token"] == pytest.approx(0.02, rel=0.25)
    assert p["decode_ms_per_seq"] == pytest.approx(0.3, rel=0.25)
    assert p["base_ms"] == pytest.approx(4.0, rel=0.25)
    assert abs(p["max_num_seqs"] - 16) <= 2
    assert not cal.goodness.poor


def test_model_file_round_trip_with_samples_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = simulated_sweep(tmp_path, {"servers": 2, "service": "exp:4ms"}, [50, 300, 800], 8)
    cal = calibrate([sweep], service="empirical")
    written = write_model(cal, tmp_path / "models" / "m.yaml")
    assert [p.name for p in written] == ["m.yaml", "m.service.txt"]
    monkeypatch.chdir(tmp_path)  # the sample file is found beside the model, not in the cwd
    sc = load_scenario(tmp_path / "models" / "m.yaml")
    assert sc.service.startswith("empirical:") and sc.calibration is not None
    assert sc.calibration["params"]["servers"] == cal.fit.params["servers"]
    assert simulate(sc).summary["requests"]["ok"] > 0


def test_real_demo_target_sweep(demo_target: Callable[..., str], tmp_path: Path) -> None:
    """Two FCFS workers, exp 20 ms: 100/s of capacity; the fit finds 2 servers. The
    service is long against the millisecond a busy 2-core machine adds to each request
    (with 5 ms, four CPU-bound processes beside the suite made the fit find 4)."""
    base = demo_target("http", "--workers", "2", "--service", "exp:20ms")
    opts = RunOptions(urls=[base + "/predict"], duration="4s", warmup="0.5s")
    sweep = Sweep(opts, tmp_path / "sweep")
    sweep.run_rates([15.0, 50.0, 150.0])
    sweep.write()
    cal = calibrate([tmp_path / "sweep"])
    assert cal.fit.params["servers"] == 2
    assert cal.fit.params["capacity_rps"] == pytest.approx(100, rel=0.1)


def test_cli_writes_the_model_and_prints_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = simulated_sweep(tmp_path, {"servers": 2, "service": "exp:4ms"}, [50, 300, 800], 8)
    out = tmp_path / "m.yaml"
    code, stdout, _ = run_cli(["calibrate", str(sweep), "-o", str(out), "--json"], capsys)
    assert code == 0
    doc = json.loads(stdout)
    assert doc["kind"] == "http" and doc["params"]["servers"] == 2
    assert load_scenario(out).servers == 2
    code, stdout, _ = run_cli(["calibrate", str(sweep), "-o", str(out)], capsys)
    assert code == 0 and "fit rms error" in stdout and "latency p99 err" in stdout


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["calibrate", "/nonexistent/dir"], "RUN_OR_SWEEP_DIR"),
        (["calibrate", "SWEEP", "--kind", "batching"], "--max-batch"),
        (["calibrate", "SWEEP", "--max-wait", "soon"], "--max-wait"),
    ],
)
def test_cli_bad_input(
    argv: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = simulated_sweep(tmp_path, {"servers": 1, "service": "exp:4ms"}, [50, 400], 4)
    argv = [str(sweep) if a == "SWEEP" else a for a in argv]
    code, _, err = run_cli([*argv, "-o", str(tmp_path / "m.yaml")], capsys)
    assert code == 2
    assert err.count("\n") == 1 and field in err


def _told_by_llama_cpp(sweep: Path, slots: int) -> None:
    """Mark each step as llama-server marks a real run: its /props slot count."""
    for summary in sweep.glob("*/summary.json"):
        doc = json.loads(summary.read_text())
        doc["server_info"] = {"engine": "llama.cpp", "slots": slots}
        summary.write_text(json.dumps(doc))


LLAMA_CPP_LAW = {
    # llama.cpp's shape: every slot's next token and the new prompts in one batch
    # (n_batch 2048), so a prompt stalls the decodes of its step; 8 slots (-np 8).
    "base": "3ms",
    "prefill_per_token": "0.4ms",
    "decode_per_seq": "2ms",
    "max_num_seqs": 8,
    "prefill_chunk_tokens": 2048,
    "prompt_tokens": "uniform:16-64",
    "output_tokens": 32,
}


def test_llm_fit_of_a_llama_cpp_server_takes_its_slots_and_schedule(tmp_path: Path) -> None:
    """Capacity is about 8 / (32 x 19 ms) = 11/s; the fit must not guess the slots.

    And it fits: judged against fresh draws of the arrivals, this truth's own TTFT
    p99 missed one 60 s run of it by up to 35% (slot queueing in bursts), and the fit
    was POOR (0.22); each step's own arrivals replayed, it scores 0.07."""
    truth = {"llm": LLAMA_CPP_LAW, "delay": "1ms"}
    sweep = simulated_sweep(tmp_path, truth, [2, 4, 6, 8, 20], 60)
    _told_by_llama_cpp(sweep, 8)
    cal = calibrate([sweep])
    p = cal.fit.params
    assert p["max_num_seqs"] == 8 and "max_num_seqs" not in p["closed_form_start"]
    assert p["prefill_chunk_tokens"] == 2048
    assert cal.fit.model["llm"]["prefill_chunk_tokens"] == 2048
    assert any("the server's own slot count (llama.cpp /props)" in n for n in cal.fit.notes)
    assert p["prefill_ms_per_token"] == pytest.approx(0.4, rel=0.25)
    assert p["decode_ms_per_seq"] == pytest.approx(2.0, rel=0.25)
    assert not cal.goodness.poor and cal.goodness.rms_log_error < 0.1
    low, saturated = cal.goodness.rows[0], cal.goodness.rows[-1]
    assert saturated.saturated and abs(saturated.error("throughput") or 1) <= 0.10
    assert abs(low.error("TPOT p50") or 1) <= 0.20


def test_llm_slots_and_chunk_as_given_override_the_server(tmp_path: Path) -> None:
    sweep = simulated_sweep(tmp_path, {"llm": LLAMA_CPP_LAW}, [2, 8], 10)
    _told_by_llama_cpp(sweep, 8)
    cal = calibrate([sweep], slots=6, prefill_chunk=0)
    assert cal.fit.params["max_num_seqs"] == 6
    assert "prefill_chunk_tokens" not in cal.fit.model["llm"]
    assert any("max_num_seqs 6: as given (--slots)" in n for n in cal.fit.notes)


def test_llm_steps_from_different_slot_counts_are_refused(tmp_path: Path) -> None:
    a = simulated_sweep(tmp_path / "a", {"llm": LLAMA_CPP_LAW}, [2], 5)
    b = simulated_sweep(tmp_path / "b", {"llm": LLAMA_CPP_LAW}, [4], 5)
    _told_by_llama_cpp(a, 8)
    _told_by_llama_cpp(b, 2)
    with pytest.raises(BadInput) as info:
        calibrate([a, b])
    assert info.value.field == "RUN_OR_SWEEP_DIR" and "slots 2, 8" in str(info.value)


def test_prompt_tokens_leave_out_what_the_server_cache_held(tmp_path: Path) -> None:
    """server.jsonl from a hostile or broken writer: bad rows are skipped, not trusted."""
    sweep = simulated_sweep(tmp_path, {"llm": {**LLAMA_CPP_LAW, "prompt_tokens": 40}}, [2], 10)
    run = next(sweep.iterdir())
    step = load_steps([run])[0][0]
    seqs = step.records.seq[step.ok()].tolist()
    rows = [json.dumps({"seq": seqs[0], "cached_tokens": 24})]
    rows += ["not json", "[1, 2]", json.dumps({"seq": "x", "cached_tokens": 5})]
    rows += [json.dumps({"seq": seqs[1], "cached_tokens": True})]  # a bool is not a count
    rows += [json.dumps({"seq": seqs[2], "cached_tokens": -7})]  # nor a negative one
    (run / "server.jsonl").write_text("\n".join(rows) + "\n")
    step = load_steps([run])[0][0]
    tokens = step.prompt_tokens()
    assert tokens[0] == 16 and (tokens[1:] == 40).all()


@pytest.mark.parametrize(("flag", "value"), [("--slots", "0"), ("--prefill-chunk", "-1")])
def test_cli_refuses_bad_slots_and_chunk(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = simulated_sweep(tmp_path, {"llm": LLAMA_CPP_LAW}, [2], 5)
    code, _, err = run_cli(["calibrate", str(sweep), flag, value], capsys)
    assert code == 2 and flag in err and len(err.strip().splitlines()) == 1


def test_the_prefill_line_is_not_tilted_by_one_cold_request() -> None:
    """One request that met a cold server flattens a least-squares line to a slope of 0;
    the median line keeps the true 0.02 ms per token."""
    rng = np.random.default_rng(3)
    prompt = rng.integers(32, 512, size=40).astype(np.float64)
    ttft = 6.0 + 0.02 * prompt + rng.normal(0, 0.3, size=40)
    ttft[np.argmin(prompt)] = 64.0  # the cold one, at the shortest prompt
    assert np.polyfit(prompt, ttft, 1)[0] < 0.012
    slope, intercept = theil_sen(prompt, ttft)
    assert slope == pytest.approx(0.02, rel=0.1) and intercept == pytest.approx(6.0, abs=0.5)
