"""LLM streams over worker processes (--workers): one plan, merged records, same truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tailwise
from tailwise.records import read_jsonl
from tailwise.server.stream_lab import read_truth


def test_open_loop_streams_over_two_workers_match_the_servers_log(
    lab: tuple[str, Path], tmp_path: Path
) -> None:
    url, truth = lab
    res = tailwise.run(
        url,
        api="openai-chat",
        model="lab",
        max_tokens=12,
        rate="60/s",
        duration="2s",
        warmup="0s",
        seed=3,
        workers=2,
        out=str(tmp_path / "r"),
    )
    s = res.summary
    w = s["workers"]
    assert (w["mode"], w["count"], w["lost"]) == ("processes", 2, 0)
    assert s["requests"]["ok"] == s["requests"]["scheduled"] > 60
    rec = read_jsonl(tmp_path / "r" / "records.jsonl")
    assert sorted(set(rec.worker.tolist())) == [0, 1]  # both workers streamed
    assert all(t is not None and len(t) == 12 for t in rec.chunk_times)
    assert (rec.output_tokens == 12).all() and s["tokens_counted_by"] == "server usage"
    ttft_ns, gaps_ns = read_truth(truth)
    # Every stream the server served is one record (and one probe before the run, as
    # in a single process).
    assert len(ttft_ns) in (len(rec), len(rec) + 1)
    # The same accuracy as one process: TTFT from the send and ITL within 2 ms of the truth.
    assert s["service_ttft_ms"]["p50"] == pytest.approx(np.median(ttft_ns) / 1e6, abs=2.0)
    assert s["itl_ms"]["p50"] == pytest.approx(np.median(gaps_ns) / 1e6, abs=2.0)
    rows = [
        json.loads(line) for line in (tmp_path / "r" / "records.jsonl").read_text().splitlines()
    ]
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)
