"""``--confidence``: how sure a verdict must be, validated before anything is sent, and
the level every interval and verdict of the run is then given at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailwise.loadgen.runner import RunOptions, execute, prepare
from tailwise.loadgen.transport import FakeTransport
from tailwise.metrics.slo import parse_slo
from tailwise.metrics.summary import RunInfo, summarize
from tests.clirun import run_cli

MS = 1_000_000


@pytest.mark.parametrize("bad", ["50%", "1.5", "100%", "abc", "0.5"])
def test_a_confidence_out_of_range_is_refused_in_one_line(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "http://127.0.0.1:9/x", "--rate", "10/s", "--duration", "1s"]
    code, out, err = run_cli([*argv, "--confidence", bad, "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--confidence" in err and "80%" in err and "Traceback" not in err
    assert not (tmp_path / "r" / "records.jsonl").exists()


def test_a_lower_confidence_is_the_runs_level_and_narrows_its_intervals(tmp_path: Path) -> None:
    """The same plan (a fake transport: 5 ms answers, one in 60 at 80 ms) at 95% and at
    80%: the level is the summary's (on disk too); and on the same records, the 80%
    intervals are no wider. Two runs' records differ by what the machine did meanwhile
    (beside four busy processes the 80% run's interval came out wider), so the widths
    are compared on one run's records summarized at both levels."""

    def law(seq: int) -> tuple[int, int, str]:
        return ((80 if seq % 60 == 0 else 5) * MS, 200, "")

    runs = {}
    for level in ("95%", 0.8):
        opts = RunOptions(
            urls=["http://127.0.0.1:9/x"], rate="400/s", duration="3s", warmup="0s",
            slo=["p98(latency)<=50ms"], confidence=level,
        )  # fmt: skip
        (tmp_path / str(level)).mkdir()
        runs[level] = execute(prepare(opts), tmp_path / str(level), transport=FakeTransport(law))
        s = runs[level].summary
        assert s["confidence"] == pytest.approx(0.95 if level == "95%" else 0.8)
        saved = json.loads((tmp_path / str(level) / "summary.json").read_text())
        assert saved["confidence"] == s["confidence"]
    s, records = runs["95%"].summary, runs["95%"].records
    w = s["window"]
    widths = {}
    for confidence in (0.95, 0.8):
        info = RunInfo(
            "loadgen", s["target"], "open", s["arrival"],
            (round(w["start_s"] * 1e9), round(w["end_s"] * 1e9)),
            slos=[parse_slo("p98(latency)<=50ms")], confidence=confidence,
        )  # fmt: skip
        lo, hi = summarize(records, info)["latency_ms"]["ci"]["p50"]
        widths[confidence] = hi - lo
    assert 0 < widths[0.8] <= widths[0.95]
