"""NTPOT, normalized time per output token (inference-perf): e2e latency over output tokens.

Added as one catalog entry plus its derivation (issue 41): these tests check the
values against a hand computation, the summary's distribution, and an SLO on it
judged by ``tailwise simulate`` as any other metric.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tailwise.metrics import derive
from tailwise.metrics.catalog import metric_bounds
from tailwise.metrics.client import ClientLag, LagSeries
from tailwise.metrics.slo import parse_slo
from tailwise.metrics.summary import RunInfo, summarize
from tests.clirun import run_cli
from tests.synthetic import make_records

MS = 1_000_000
S = 1_000_000_000


def _rows() -> tuple[np.ndarray, np.ndarray]:
    """Six requests scheduled 100 ms apart: (latency ns, output tokens)."""
    latency = np.array([120, 100, 90, 50, 80, 70], dtype=np.int64) * MS
    tokens = np.array([4, 3, 0, 10, -1, 5], dtype=np.int64)
    return latency, tokens


def test_ntpot_is_e2e_over_output_tokens_per_request() -> None:
    latency, tokens = _rows()
    sched = np.arange(6, dtype=np.int64) * 100 * MS
    errors = ["", "", "", "", "", "http_5xx"]
    r = make_records(sched, latency, errors, (0, S), lag=np.full(6, 2 * MS))
    r.output_tokens = tokens
    r.first_token_ns = sched + 10 * MS
    r.reasoning_tokens = np.array([-1, -1, -1, 6, -1, -1], dtype=np.int64)
    assert derive.ntpot_ns(r).tolist() == [
        30 * MS,  # 120 ms / 4 tokens
        33_333_333,  # 100 ms / 3 tokens, floored to the nanosecond
        -1,  # no output token: no value
        5 * MS,  # 50 ms / 10 tokens: the 6 reasoning tokens count (the e2e spans them)
        -1,  # output tokens unknown
        -1,  # failed
    ]
    # TPOT leaves the first token (and here the reasoning) out: a different number.
    assert derive.tpot_ns(r)[0] == (110 * MS) // 3


def test_ntpots_client_lag_bounds_are_latencys_over_the_tokens() -> None:
    latency, tokens = _rows()
    sched = np.arange(6, dtype=np.int64) * 100 * MS
    r = make_records(sched, latency, [""] * 6, (0, S), lag=np.full(6, 2 * MS))
    r.output_tokens = tokens
    lag = ClientLag([LagSeries(5 * MS, MS, np.zeros(200, dtype=np.int64))])  # 1 ms per read
    lo, hi = metric_bounds(r, "ntpot", lag)
    # Server's share at least latency - send lag (2 ms) - receive lag (1 ms), over the tokens.
    assert lo.tolist() == [117 * MS // 4, 97 * MS // 3, -1, 47 * MS // 10, -1, 67 * MS // 5]
    assert hi.tolist() == derive.ntpot_ns(r).tolist()


def test_the_summary_has_ntpots_distribution_and_judges_an_slo_on_it() -> None:
    latency, tokens = _rows()
    sched = np.arange(6, dtype=np.int64) * 100 * MS
    r = make_records(sched, latency, [""] * 6, (0, S))
    r.output_tokens, r.first_token_ns = tokens, sched + 10 * MS
    slos = [parse_slo("p50(ntpot)<=20ms"), parse_slo("ntpot<=20ms@50%")]
    info = RunInfo("loadgen", "http://x.invalid", "open", {}, (0, S), slos=slos, llm=True)
    s = summarize(r, info)
    # Values 30, 33.33, 5, 14 ms (rows without one are left out of the distribution)
    assert s["ntpot_ms"]["count"] == 4
    assert s["ntpot_ms"]["max"] == pytest.approx(33.333333)
    assert s["ntpot_ms"]["p50"] == pytest.approx(14.0)
    assert "ci" in s["ntpot_ms"]
    objective, deadline = s["slos"]
    # An objective counts a row without a value as infinitely slow, like any metric:
    # 5, 14, 30, 33.3, inf, inf -> the p50 (3rd of 6) is 30 ms.
    assert objective["value"] == pytest.approx(30.0) and objective["passed"] is False
    assert deadline["attainment"] == pytest.approx(2 / 6)
    assert objective["server_bound"]["lower"] <= objective["value"]


def _scenario(tmp_path: Path, slo: str) -> Path:
    path = tmp_path / "ntpot.yaml"
    path.write_text(
        "name: ntpot\n"
        "arrival: {process: poisson, rate: 10/s, duration: 200s, warmup: 2s, seed: 3}\n"
        "llm: {base: 4ms, prefill_per_token: 0.02ms, decode_per_seq: 0.3ms,\n"
        "      max_num_seqs: 32, prompt_tokens: 128, output_tokens: 16}\n"
        f'slo: ["{slo}"]\n'
    )
    return path


@pytest.mark.parametrize(("slo", "code", "decided"), [("20ms", 0, "pass"), ("2ms", 1, "fail")])
def test_simulate_decides_a_percentile_slo_on_ntpot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], slo: str, code: int, decided: str
) -> None:
    spec = f"p99(ntpot)<={slo}"
    out = tmp_path / "run"
    got, _, err = run_cli(
        ["simulate", str(_scenario(tmp_path, spec)), "-o", str(out), "-q"], capsys
    )
    assert got == code, err
    s = json.loads((out / "summary.json").read_text())
    (entry,) = s["slos"]
    assert entry["spec"] == spec and entry["decided"] == decided
    assert s["verdict"] == decided
    # About 2,000 requests at light load (a pass at p99 needs that many): a short TTFT and
    # 15 decode steps of about 5 ms, over 16 tokens.
    assert 2.0 < s["ntpot_ms"]["p99"] < 20.0 and s["ntpot_ms"]["count"] == s["requests"]["ok"]
