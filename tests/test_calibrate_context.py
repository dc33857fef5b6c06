"""``tailwise calibrate``'s context term: kv_per_token recovered from the streams.

The truths are simulated sweeps of an LLM step law with a known context cost
(the simulator's token instants are exact, so the decode steps rebuilt from
them carry the law itself) and one real sweep of the demo server, whose cost
is set on its command line; a law without the term must fit 0, and a sweep
whose contexts hardly vary must say the term is not identified.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailwise.calibrate import calibrate, write_model
from tailwise.calibrate.context import fit_context
from tailwise.calibrate.steps import load_steps
from tailwise.loadgen.runner import RunOptions
from tailwise.loadgen.sweep import Sweep
from tailwise.sim.scenario import load_scenario
from tests.test_calibrate import simulated_sweep

RATES = [2.0, 8.0, 16.0, 24.0, 40.0]
CALM_RATES = [2.0, 6.0, 10.0, 24.0, 40.0]  # capacity 16.25/s at 1 us: calm steps well below it


def law(kv: str, prompts: int | str = "uniform:32-512", outputs: int = 64) -> dict[str, Any]:
    return {
        "base": "4ms",
        "prefill_per_token": "0.02ms",
        "decode_per_seq": "0.3ms",
        "kv_per_token": kv,
        "max_num_seqs": 16,
        "prompt_tokens": prompts,
        "output_tokens": outputs,
    }


def fitted(tmp: Path, llm: dict[str, Any], rates: list[float] = RATES) -> tuple[float, list[str]]:
    sweep = simulated_sweep(tmp, {"llm": llm, "delay": "2ms"}, rates, 20)
    steps, _ = load_steps([sweep])
    return fit_context(steps)


@pytest.mark.parametrize("kv_ms", [0.0005, 0.001, 0.004])
def test_a_known_context_slope_is_recovered(kv_ms: float, tmp_path: Path) -> None:
    """Within 2%: the steps are rebuilt exactly, only the trimming can bias them."""
    k, notes = fitted(tmp_path, law(f"{kv_ms}ms"))
    assert k == pytest.approx(kv_ms, rel=0.02)
    assert notes == []


def test_one_prompt_length_still_shows_the_slope_through_long_outputs(tmp_path: Path) -> None:
    """Every prompt 128 tokens: the growth through 64 output tokens alone gives k."""
    k, notes = fitted(tmp_path, law("0.001ms", prompts=128, outputs=64))
    assert k == pytest.approx(0.001, rel=0.02) and notes == []


def test_no_context_cost_fits_zero(tmp_path: Path) -> None:
    k, notes = fitted(tmp_path, law("0ms"))
    assert k == 0.0
    assert len(notes) == 1 and "not above 0" in notes[0]


def test_one_prompt_length_and_short_outputs_is_not_identified(tmp_path: Path) -> None:
    """128-token prompts, 8-token outputs: every context is 128..135, k could be anything."""
    k, notes = fitted(tmp_path, law("0.001ms", prompts=128, outputs=8))
    assert k == 0.0
    assert len(notes) == 1 and "not identified" in notes[0] and "uniform:A-B" in notes[0]


def test_runs_without_token_times_say_so(tmp_path: Path) -> None:
    llm = {**law("0.001ms"), "token_times": False}
    k, notes = fitted(tmp_path, llm, rates=[2.0, 8.0])
    assert k == 0.0
    assert len(notes) == 1 and "no per-token times" in notes[0]


def test_calibrate_puts_the_context_term_in_the_model(tmp_path: Path) -> None:
    """The whole fit: kv_per_token in the model file, and the decode cost per sequence
    (fitted after the context's share of TPOT is taken off) still near its truth."""
    sweep = simulated_sweep(tmp_path, {"llm": law("0.001ms"), "delay": "2ms"}, CALM_RATES, 20)
    cal = calibrate([sweep])
    p = cal.fit.params
    assert p["kv_ms_per_token"] == pytest.approx(0.001, rel=0.02)
    assert cal.fit.model["llm"]["kv_per_token"] == f"{p['kv_ms_per_token']:.6g}ms"
    assert p["decode_ms_per_seq"] == pytest.approx(0.3, rel=0.35)
    assert p["base_ms"] == pytest.approx(4.0, rel=0.25)
    assert not cal.goodness.poor
    written = write_model(cal, tmp_path / "m.yaml")
    sc = load_scenario(written[0])
    assert sc.llm is not None and sc.llm.kv_per_token == f"{p['kv_ms_per_token']:.6g}ms"


def test_a_real_demo_server_sweep_recovers_its_context_cost(
    demo_target: Callable[..., str], tmp_path: Path
) -> None:
    """The demo server with 2 us per KV token, streamed: the steps rebuilt from what the
    client received (jitter, a busy machine) still give k within 30%. Beside four
    CPU-bound processes on 2 cores, 8 s steps gave k 1.59-2.01 us (sd 0.16) over six
    sweeps; 4 s steps 1.3-2.4 us, too few steps for the test to be decided."""
    base = demo_target("llm", "--per-kv-token", "2us", "--kv-allocation", "paged")
    opts = RunOptions(
        urls=[base + "/v1/completions"],
        duration="8s",
        warmup="0.5s",
        api="openai-completions",
        model="tailwise-demo",
        max_tokens="64",
        input_tokens="uniform:32-512",
        max_send_lag="1s",
    )
    sweep = Sweep(opts, tmp_path / "sweep")
    sweep.run_rates([4.0, 12.0])
    sweep.write()
    steps, _ = load_steps([tmp_path / "sweep"])
    k, notes = fit_context(steps)
    assert k == pytest.approx(0.002, rel=0.3), notes
