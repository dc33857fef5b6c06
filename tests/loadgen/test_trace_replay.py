"""Replaying LLM traces with their lengths against the demo LLM server (loopback)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tailwise
from tailwise.errors import BadInput
from tailwise.loadgen.runner import RunOptions, prepare
from tailwise.traces import read_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"


@pytest.mark.parametrize("sample", ["mooncake_sample.jsonl", "azure_llm_sample.csv"])
def test_a_trace_replays_its_instants_and_lengths(llm: str, tmp_path: Path, sample: str) -> None:
    path = EXAMPLES / sample
    trace = read_trace(str(path))
    assert trace.input_lengths is not None and trace.output_lengths is not None
    res = tailwise.run(
        llm,
        api="openai-completions",
        model="tailwise-demo",
        arrival=f"trace:{path}",
        trace_speed="10x",
        out=str(tmp_path / "run"),
        server_metrics_interval="100ms",
    )
    n = len(trace.offsets_ns)
    assert res.summary["requests"]["ok"] == n
    scheduled = np.sort(res.records.scheduled_ns)
    assert scheduled.tolist() == [round(t / 10) for t in trace.offsets_ns]
    # The server counts what it received and generated (one token per word in the demo)
    tokens = res.summary["tokens"]
    assert tokens["input_total"] == sum(trace.input_lengths)
    assert tokens["output_total"] == sum(trace.output_lengths)
    order = np.argsort(res.records.scheduled_ns, kind="stable")
    assert res.records.output_tokens[order].tolist() == list(trace.output_lengths)
    assert res.summary["server_metrics"]["prompt_tokens"] == sum(trace.input_lengths)


def test_trace_options_are_checked_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="--trace-speed"):
        prepare(RunOptions(urls=["http://127.0.0.1:1/"], rate="1/s", trace_speed="2x"))
    with pytest.raises(BadInput, match="--prompts"):
        prepare(
            RunOptions(
                urls=["http://127.0.0.1:1/"],
                api="openai-chat",
                model="m",
                arrival=f"trace:{EXAMPLES / 'azure_llm_sample.csv'}",
                prompts=str(tmp_path / "p.jsonl"),
            )
        )
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12,x\n")
    with pytest.raises(BadInput, match=r"bad\.csv:2 generatedtokens"):
        prepare(RunOptions(urls=["http://127.0.0.1:1/"], arrival=f"trace:{bad}"))
