"""An SLO on NTPOT (normalized time per output token) judged on a real loopback run.

The demo LLM server (``tailwise serve-demo --kind llm``) takes at least its base
step time (4 ms) per decoded token, so NTPOT, e2e latency over output tokens,
cannot be under 1 ms: ``p99(ntpot)<=1ms`` is certainly lost, and the run says so
(exit 1) with the value the records give.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tailwise.metrics import derive
from tailwise.metrics.percentiles import nearest_rank
from tailwise.records import read_jsonl
from tests.clirun import run_cli


def test_a_p99_ntpot_slo_is_decided_on_the_demo_llm_server(
    llm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r"
    argv = [
        "run", llm, "--api", "openai-chat", "--model", "tailwise-demo",
        "--max-tokens", "8", "--input-tokens", "8",
        "--rate", "10/s", "--duration", "3s", "--warmup", "0.5s",
        "--slo", "p99(ntpot)<=1ms", "--out", str(out),
    ]  # fmt: skip
    code, _, err = run_cli(argv, capsys)
    assert code == 1, err
    s = json.loads((out / "summary.json").read_text())
    (entry,) = s["slos"]
    assert entry["spec"] == "p99(ntpot)<=1ms" and entry["kind"] == "objective"
    assert entry["passed"] is False and entry["decided"] == "fail" and s["verdict"] == "fail"
    # The value is the p99 over the window's requests of latency / output tokens.
    r = read_jsonl(out / "records.jsonl")
    v = derive.ntpot_ns(r)[r.in_window].astype(np.float64)
    v[v < 0] = math.inf
    assert entry["value"] == pytest.approx(nearest_rank(np.sort(v), 99.0) / 1e6)
    assert entry["value"] >= 4.0  # the demo's base step, at least, per token
    assert s["ntpot_ms"]["count"] == s["requests"]["ok"] > 10
    assert s["ntpot_ms"]["p50"] <= s["latency_ms"]["p50"] / 8 * 1.01  # 8 tokens each
    assert entry["server_bound"]["lower"] <= entry["value"]
