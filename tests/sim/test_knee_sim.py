"""`tailwise knee --sim`: the same search on a simulated M/M/4 finds the Erlang C knee."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailwise.capacity import mmc_max_rate
from tailwise.cli import main

SCENARIO = """\
name: M/M/4
arrival: {process: poisson, rate: 100/s, duration: 30s, warmup: 2s, seed: 1}
service: exp:5ms
servers: 4
"""


def test_knee_on_a_scenario_matches_erlang_c(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "mm4.yaml"
    scenario.write_text(SCENARIO)
    argv = ["knee", "--sim", str(scenario), "--slo", "p99(latency)<=50ms", "--start", "200/s"]
    argv += ["--min-requests", "50000", "--repeats", "2", "--out", str(tmp_path / "k"), "--json"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "-q"])
    assert exited.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    truth = mmc_max_rate(0.99, 0.050, 4, 0.005)  # 700.2/s
    lo, hi = doc["band_rps"]
    assert lo <= truth * 1.02 and hi >= truth * 0.98  # the band holds the truth
    assert doc["knee_rps"] == pytest.approx(truth, rel=0.05)
    repeats = [t for t in doc["trials"] if t["phase"] == "repeat"]
    assert len(repeats) == 4 and all(Path(t["directory"]).is_dir() for t in doc["trials"])


def test_knee_needs_a_url_or_a_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["knee", "--slo", "latency<=1s"])
    assert exited.value.code == 2
    assert "--sim" in capsys.readouterr().err
