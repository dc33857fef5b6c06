"""A --duration auto run stopped by a look reports that look's decisions
(tailwise.metrics.intervals.honour_looks): the summary never says "inconclusive" for a
run that stopped because it was decided, and never flips a look's decision."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailwise.metrics.intervals import honour_looks
from tailwise.metrics.slo import parse_slo
from tailwise.metrics.summary import RunInfo, summarize
from tailwise.records import Records
from tests.synthetic import make_records

SPEC = "p99(latency)<=300ms"
SETTLED = f"decided after 8192 requests (look 7): {SPEC} pass"


def _records(latency_ms: np.ndarray) -> Records:
    sched = np.arange(len(latency_ms), dtype=np.int64) * 10_000_000  # 100/s
    lat = (latency_ms * 1e6).astype(np.int64)
    return make_records(sched, lat, [""] * len(sched), (0, int(sched[-1]) + 1))


def _summary(latency_ms: np.ndarray, sequential: dict[str, Any] | None) -> dict[str, Any]:
    records = _records(latency_ms)
    info = RunInfo(
        source="run",
        target="test",
        mode="open",
        arrival={"process": "constant"},
        window_ns=(0, int(records.scheduled_ns[-1]) + 1),
        slos=[parse_slo(SPEC)],
        max_send_lag_ns=2**62,
        sequential=sequential,
    )
    return summarize(records, info)


def test_a_run_stopped_as_decided_reports_the_looks_decision() -> None:
    """200 fast requests cannot show a p99 alone (fewer than 10 expected beyond it):
    the summary by itself is inconclusive, with the look's record it passes and says
    which look decided and what the whole sample alone said."""
    fast = np.full(200, 5.0)
    alone = _summary(fast, None)
    assert alone["slos"][0]["decided"] == "inconclusive"
    assert alone["verdict"] == "inconclusive"
    seq = {"settled": SETTLED, "decided": {SPEC: "pass"}, "reached_cap": False}
    s = _summary(fast, seq)
    entry = s["slos"][0]
    assert entry["decided"] == "pass" and s["verdict"] == "pass"
    assert entry["ci_note"].startswith("pass: the run's deciding look (decided after 8192")
    assert "the whole sample alone: n too small" in entry["ci_note"]


def test_a_look_never_overrules_a_contrary_sample() -> None:
    """Every request at 400 ms fails the SLO outright; a look record saying pass (never
    produced by the engine, but a file can say anything) leaves it inconclusive, not a
    pass."""
    s = _summary(np.full(2000, 400.0), {"settled": SETTLED, "decided": {SPEC: "pass"}})
    entry = s["slos"][0]
    assert entry["decided"] == "inconclusive"
    assert "said pass, the whole sample fail" in entry["ci_note"]
    assert s["verdict"] != "pass"


def test_entries_the_look_did_not_decide_are_left_alone() -> None:
    entries: list[dict[str, Any]] = [{"spec": "p90(latency)<=1s", "decided": "inconclusive"}]
    honour_looks(entries, {"settled": SETTLED, "decided": {SPEC: "pass"}})
    assert entries == [{"spec": "p90(latency)<=1s", "decided": "inconclusive"}]
    honour_looks(entries, None)
    assert entries[0]["decided"] == "inconclusive"
