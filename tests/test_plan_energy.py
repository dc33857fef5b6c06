"""plan cost with measured joules: kWh and electricity per million tokens or requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import run_cli


def test_joules_per_token_from_a_number_or_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    gpu = {"per_output_token_j": {"value": 1.8}, "per_request_j": None}
    (run / "summary.json").write_text(json.dumps({"gpu": gpu}))
    for given in ("1.8", str(run)):
        code, out, err = run_cli(
            [
                *("plan", "cost", "--dollars-per-hour", "3", "--peak-tokens", "1000"),
                *("--joules-per-token", given, "--dollars-per-kwh", "0.2", "--json"),
            ],
            capsys,
        )
        assert code == 0, err
        doc = json.loads(out)["outputs"]
        # 1.8 J x 1e6 tokens = 1.8e6 J = 0.5 kWh; at $0.2 a kWh, $0.10
        assert doc["kwh_per_million_tokens"] == pytest.approx(0.5)
        assert doc["energy_cost_per_million_tokens_usd"] == pytest.approx(0.1)
        assert doc["cost_per_million_tokens_usd"] == pytest.approx(3 / 3.6)


def test_a_run_without_gpu_energy_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"gpu": {}}))
    args = ["plan", "cost", "--dollars-per-hour", "3", "--joules-per-request", str(tmp_path)]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "--joules-per-request" in err and "gpu.per_request_j" in err
