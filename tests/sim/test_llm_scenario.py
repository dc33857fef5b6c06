"""``llm:`` scenarios end to end: the engine model's answers become streaming records,
hence TTFT / TPOT / ITL, SLO verdicts, Little's law and the knee search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailwise.capacity import llm_saturated_rps, llm_saturated_rps_upper
from tailwise.errors import BadInput
from tailwise.laws.llm import EngineConfig
from tailwise.metrics.derive import tpot_ns, ttft_ns
from tailwise.sim.llm import LlmSpec, simulate_llm
from tailwise.sim.run import SERVICE_SEED_OFFSET, simulate
from tailwise.sim.scenario import parse_scenario
from tests.clirun import run_cli
from tests.sim import check_summary

DEMO: dict[str, Any] = {
    "name": "demo llm",
    "arrival": {"rate": "20/s", "duration": "30s", "warmup": "5s", "seed": 2},
    "llm": {},
    "slo": ["ttft<=300ms", "tpot<=25ms"],
}


def test_records_are_the_models_answers_and_the_summary_has_token_metrics() -> None:
    run = simulate(parse_scenario(DEMO))
    s, r = run.summary, run.records
    check_summary(s, littles_tol=0.02)
    assert all(e["passed"] for e in s["slos"]) and s["sim"]["engine"] == "llm steps"
    assert s["verdict"] in ("pass", "inconclusive")  # 600 requests: 99% need not be shown
    # The same arrivals through simulate_llm directly give the same instants.
    res = simulate_llm(
        LlmSpec(EngineConfig()),
        r.scheduled_ns,
        np.full(len(r), 128),
        np.full(len(r), 64),
        np.random.default_rng([2, SERVICE_SEED_OFFSET]),
    )
    np.testing.assert_array_equal(r.first_token_ns, res.first_token_ns)
    np.testing.assert_array_equal(r.done_ns, res.done_ns)
    assert (r.output_tokens == 64).all() and (r.input_tokens == 128).all()
    assert all(len(t) == 64 for t in r.chunk_times if t is not None)
    # An idle engine's TTFT is one prefill step: a + b P = 4 + 0.02 x 128 = 6.56 ms.
    assert ttft_ns(r).min() == 6_560_000
    # TPOT is at least one decode step with one sequence, a + c = 4.3 ms.
    assert tpot_ns(r).min() >= 4_300_000
    assert s["itl_ms"]["count"] == 63 * s["ttft_ms"]["count"]


def test_overload_answers_429_and_counts_them_as_errors() -> None:
    sc = {**DEMO, "arrival": {**DEMO["arrival"], "rate": "60/s"}, "llm": {"max_waiting": 8}}
    s = simulate(parse_scenario(sc)).summary
    assert s["requests"]["errors"].get("http_4xx", 0) > 100
    assert s["requests"]["accounted"] and s["verdict"] == "fail"
    # Throughput saturates between the closed-form bounds (demo defaults, 128/64 tokens).
    args = (0.004, 0.00002, 0.0003, 32, 128, 64)
    assert llm_saturated_rps(*args) * 0.97 <= s["rates"]["throughput_rps"]
    assert s["rates"]["throughput_rps"] <= llm_saturated_rps_upper(*args) * 1.03


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"batching": {"mode": "static", "size": 4}}, "scenario.batching"),
        ({"service": "exp:5ms"}, "scenario.service"),
        ({"routing": "power_of_d"}, "scenario.routing"),
        ({"llm": {"base": "soon"}}, "scenario.llm.base"),
        ({"llm": {"prompt_tokens": "many"}}, "scenario.llm.prompt_tokens"),
        ({"llm": {"gpu": "h100"}}, "scenario.llm.gpu"),
    ],
)
def test_bad_llm_scenarios_name_the_field(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(BadInput) as raised:
        simulate(parse_scenario({**DEMO, **extra}))
    assert str(raised.value).startswith(field), str(raised.value)


def test_knee_on_an_llm_scenario_lies_below_the_saturated_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "llm.json"
    scenario.write_text(json.dumps(DEMO))
    # No --slo: the scenario's own slo: list (ttft<=300ms, tpot<=25ms) is the objective.
    code, _, _ = run_cli(
        ["knee", "--sim", str(scenario), "--out", str(tmp_path / "knee"), "-q"], capsys
    )
    assert code == 0
    assert json.loads((tmp_path / "knee" / "knee.json").read_text())["slos"] == DEMO["slo"]
    knee = json.loads((tmp_path / "knee" / "knee.json").read_text())["knee_rps"]
    lower = llm_saturated_rps(0.004, 0.00002, 0.0003, 32, 128, 64)
    # TTFT's p99 blows up as the engine nears saturation (~30/s), so the SLO knee lies
    # below it; with 30 s trials it lands around 0.75-0.9 of it (seed to seed).
    assert 0.6 * lower <= knee < lower


@pytest.mark.parametrize("llm", [True, False])
def test_point_estimates_are_the_same_without_intervals(llm: bool) -> None:
    """``simulate(..., intervals=False)`` (the calibration's objective) leaves out the
    intervals and so the verdict, and changes no percentile, rate or count."""
    sc = DEMO if llm else {"servers": 2, "service": "exp:5ms", "arrival": DEMO["arrival"]}
    full = simulate(parse_scenario(sc)).summary.to_json()
    bare = simulate(parse_scenario(sc), intervals=False).summary.to_json()

    def points(obj: Any) -> Any:  # the summary without its intervals and verdict
        if isinstance(obj, dict):
            return {
                k: points(v)
                for k, v in obj.items()
                if not k.startswith(("verdict", "ci", "decided", "within"))
                and k not in ("confidence", "steady_state", "sim")
            }
        return [points(v) for v in obj] if isinstance(obj, list) else obj

    assert "ci" in json.dumps(full) and bare["verdict"] == "inconclusive"
    assert points(bare) == points(full)
    assert bare["latency_ms"]["p99"] == full["latency_ms"]["p99"] > 0
    if llm:
        assert bare["ttft_ms"]["p50"] == full["ttft_ms"]["p50"] > 0
