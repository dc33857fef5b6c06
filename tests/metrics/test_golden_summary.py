"""summary.json is a contract: the same run gives the same bytes.

The golden files in ``tests/fixtures/golden/`` were written before the metric
catalog (issue 41) by the code of the time; the summaries of today must match
them byte for byte, keys in the same order, values the same. Three runs cover
the summary path: a seeded HTTP simulation, a seeded LLM simulation, and the
LLM simulation's records summarized again as a measured run with a receive-lag
series (every SLO judged on the client-lag bounds too).

Only what differs between two runs of the same seed is masked: ``tool_version``
and the simulator's own speed (``sim.wall_s``, ``sim.requests_per_s``). Keys that
a later change adds on purpose are listed in :data:`ADDED_KEYS` (and in
docs/metrics.md) and taken out before the comparison; the test also checks
that they are there.

``TAILWISE_WRITE_GOLDEN=1`` rewrites the files (only for a deliberate change of
the contract, listed in the docs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailwise.metrics.client import ClientLag, LagSeries
from tailwise.metrics.schema import Summary
from tailwise.metrics.summary import RunInfo, summarize
from tailwise.sim.run import SimRun, simulate
from tailwise.sim.scenario import load_scenario

GOLDEN = Path(__file__).parent.parent / "fixtures" / "golden"
# Top-level keys added since the golden files were written, per case (docs/metrics.md):
# ntpot_ms, the distribution of NTPOT (issue 41), in LLM summaries only.
ADDED_KEYS: dict[str, tuple[str, ...]] = {
    "http": (),
    "llm": ("ntpot_ms",),
    "llm_lag": ("ntpot_ms",),
}


def _run(name: str) -> SimRun:
    return simulate(load_scenario(GOLDEN / f"{name}.yaml"))


def _with_client_lag(run: SimRun) -> Summary:
    """The LLM run's records summarized as a measured run whose client read late: a
    seeded receive-lag series of up to 3 ms per 5 ms slice."""
    r = run.records
    end_ns = int(r.done_ns.max())
    bucket_ns = 5_000_000
    lag_ns = np.random.default_rng(7).integers(0, 3_000_000, end_ns // bucket_ns + 1)
    info = RunInfo(
        source="loadgen",
        target="http://golden.invalid/v1/chat/completions",
        mode="open",
        arrival=dict(run.summary.arrival),
        window_ns=(
            int((run.summary.window.start_s or 0) * 1e9),
            int((run.summary.window.end_s or 0) * 1e9),
        ),
        slos=_slos("llm"),
        llm=True,
        client_lag=ClientLag([LagSeries(bucket_ns, 1_000_000, lag_ns, samples=len(lag_ns))]),
    )
    return summarize(r, info)


def _slos(name: str) -> list[Any]:
    from tailwise.metrics.slo import parse_slo

    return [parse_slo(s) for s in load_scenario(GOLDEN / f"{name}.yaml").slo]


def _summary(case: str) -> dict[str, Any]:
    """The case's summary in its JSON form (what summary.json holds)."""
    if case == "llm_lag":
        return _with_client_lag(_run("llm")).to_json()
    return _run(case).summary.to_json()


def _as_written(summary: dict[str, Any]) -> str:
    """The file's text as the CLI writes it, with run-to-run noise masked."""
    doc = dict(summary)
    doc["tool_version"] = "golden"
    if isinstance(doc.get("sim"), dict):
        doc["sim"] = {**doc["sim"], "wall_s": 0.0, "requests_per_s": 0}
    return json.dumps(doc, indent=2) + "\n"


@pytest.mark.parametrize("case", ["http", "llm", "llm_lag"])
def test_summary_matches_the_golden_file_byte_for_byte(case: str) -> None:
    summary = _summary(case)
    path = GOLDEN / f"{case}.summary.json"
    if os.environ.get("TAILWISE_WRITE_GOLDEN") == "1":
        path.write_text(_as_written(summary), encoding="utf-8")
    added = ADDED_KEYS[case]
    assert [k for k in added if k not in summary] == []
    kept = {k: v for k, v in summary.items() if k not in added}
    assert _as_written(kept) == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", ["http", "llm", "llm_lag"])
def test_a_golden_file_read_back_writes_the_same_bytes(case: str) -> None:
    """``Summary.from_json`` then ``to_json``: every key kept, in its order, every value
    of the same JSON type (an int stays an int), also when read strictly."""
    text = (GOLDEN / f"{case}.summary.json").read_text(encoding="utf-8")
    for strict in (False, True):
        again = Summary.from_json(json.loads(text), strict=strict).to_json()
        assert json.dumps(again, indent=2) + "\n" == text


def test_the_golden_runs_exercise_the_metrics() -> None:
    """The files are worth comparing: requests in the window, every SLO judged, and the
    lag case has SLOs whose bounds differ from the measured values."""
    http, llm = (json.loads((GOLDEN / f"{c}.summary.json").read_text()) for c in ("http", "llm"))
    assert http["requests"]["scheduled"] > 1000 and http["ttft_ms"] is None
    assert llm["ttft_ms"]["count"] > 100 and llm["tpot_ms"]["count"] > 100
    lag = json.loads((GOLDEN / "llm_lag.summary.json").read_text())
    bounds = [e["server_bound"] for e in lag["slos"]]
    assert any(b["lower"] != b["upper"] for b in bounds)
