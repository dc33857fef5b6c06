"""LLM streaming endpoints, against a loopback server that logs what it actually sent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tailwise
from tailwise.errors import BadInput
from tailwise.loadgen.runner import RunOptions, prepare
from tailwise.server.stream_lab import read_truth


def truth_ms(path: Path) -> tuple[np.ndarray, np.ndarray]:
    ttft_ns, gaps_ns = read_truth(path)
    return np.array(ttft_ns) / 1e6, np.array(gaps_ns) / 1e6


@pytest.mark.parametrize("streams", [1, 50])
def test_ttft_and_itl_match_the_servers_truth(
    lab: tuple[str, Path], tmp_path: Path, streams: int
) -> None:
    url, truth = lab
    res = tailwise.run(
        url,
        api="openai-chat",
        model="lab",
        max_tokens=16,
        concurrency=streams,
        duration="3s",
        out=str(tmp_path / "r"),
    )
    s = res.summary
    assert s["requests"]["ok"] == s["requests"]["scheduled"] > streams
    ttft, itl = truth_ms(truth)
    # TTFT from the actual send vs. the server's own first-chunk write after arrival: never
    # earlier, and later by at most what the client says it read late (its receive lag:
    # beside four CPU-bound processes, 50 streams were read 3.4 ms late at the median)
    late_ms = 2.0 + float(s["generator"]["recv_lag_p99_ms"])
    assert -2.0 <= s["service_ttft_ms"]["p50"] - float(np.median(ttft)) <= late_ms
    assert s["itl_ms"]["p50"] == pytest.approx(float(np.median(itl)), abs=2.0)
    assert s["tokens_counted_by"] == "server usage"
    assert (
        s["tokens"]["output_total"] == 16 * s["requests"]["ok"] + 16 * s["requests"]["warmup"]["ok"]
    )
    # TPOT = (e2e - TTFT) / (tokens - 1): 15 gaps of ~10 ms
    assert s["tpot_ms"]["p50"] == pytest.approx(10.0, abs=1.5)


def test_open_loop_llm_run_with_slos(lab: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = lab
    res = tailwise.run(
        url + "/v1/completions",
        api="openai-completions",
        model="lab",
        max_tokens=8,
        rate="40/s",
        duration="2s",
        slo=["ttft<=100ms", "tpot<=20ms", "p99(ttft)<=200ms"],
        out=str(tmp_path / "r"),
    )
    s = res.summary
    # Every SLO holds as measured, but 80 requests cannot show a 99% attainment (a pass
    # needs several hundred): the verdict says so instead of passing.
    assert [e["passed"] for e in s["slos"]] == [True, True, True]
    assert s["verdict"] == "inconclusive" and s["verdict_cause"] == "undecided"
    assert "ttft<=100ms undecided" in s["verdict_reason"]
    assert s["ttft_ms"]["p50"] >= 50.0  # from the intended send: never less than the server's
    row = json.loads((tmp_path / "r" / "records.jsonl").read_text().splitlines()[0])
    assert len(row["chunk_times"]) == 8 and row["output_tokens"] == 8


@pytest.mark.parametrize(
    ("steer", "kind"), [({"end_early": 3}, "truncated"), ({"error_after": 3}, "stream_error")]
)
def test_broken_streams_are_misses_with_partial_data(
    lab: tuple[str, Path], tmp_path: Path, steer: dict[str, int], kind: str
) -> None:
    url, _ = lab
    res = tailwise.run(
        url,
        api="openai-chat",
        model="lab",
        max_tokens=8,
        rate="20/s",
        requests=10,
        extra_body=json.dumps({"lab": steer}),
        slo=["ttft<=1s"],
        out=str(tmp_path / "r"),
    )
    s = res.summary
    assert s["requests"]["errors"] == {kind: 10}
    assert s["rates"]["goodput_rps"] == 0.0 and s["verdict"] == "fail"
    r = res.records
    assert all(len(c or []) == 3 for c in r.chunk_times)  # the 3 chunks that did arrive
    assert (r.first_token_ns > 0).all()


def test_llm_input_errors() -> None:
    base = {"urls": ["http://127.0.0.1:9"], "rate": "1/s"}
    with pytest.raises(BadInput, match="--model"):
        prepare(RunOptions(**base, api="openai-chat"))
    with pytest.raises(BadInput, match="--extra-body"):
        prepare(RunOptions(**base, api="openai-chat", model="m", extra_body="[1]"))
    with pytest.raises(BadInput, match="--slo"):  # TTFT needs a streaming LLM run
        prepare(RunOptions(**base, slo=["ttft<=1s"]))
    p = prepare(RunOptions(**base, api="openai-chat", model="m"))
    assert p.targets[0].path == "/v1/chat/completions" and p.streaming


def test_api_key_never_reaches_disk_or_output(lab: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = lab
    key = "sk-tailwise-test-5f1d2c"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tailwise",
            "run",
            url,
            "--api",
            "openai-chat",
            "--model",
            "lab",
            "--max-tokens",
            "4",
            "--rate",
            "10/s",
            "--requests",
            "5",
            "--api-key",
            key,
            "--json",
            "--out",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert key not in p.stdout + p.stderr
    for f in (tmp_path / "r").iterdir():
        assert key not in f.read_text(), f.name


def test_dataset_output_lengths_are_what_the_server_streams(
    lab: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = lab
    data = tmp_path / "data.jsonl"
    data.write_text(
        "\n".join(json.dumps({"prompt": f"p{i}", "max_tokens": 2 + i}) for i in range(4)) + "\n"
    )
    res = tailwise.run(
        url,
        api="openai-chat",
        model="lab",
        prompts=str(data),
        rate="20/s",
        requests=8,
        out=str(tmp_path / "r"),
    )
    r = res.records
    assert r.output_tokens.tolist() == [2 + (i % 4) for i in range(8)]  # body i % 4, in turn
    assert [len(c or []) for c in r.chunk_times] == r.output_tokens.tolist()


def test_decode_pace_and_tokens_per_chunk(lab: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = lab
    res = tailwise.run(
        url,
        api="openai-chat",
        model="lab",
        max_tokens=12,
        rate="20/s",
        requests=10,
        out=str(tmp_path / "r"),
    )
    tok = res.summary["tokens"]
    assert tok["tokens_per_chunk"] == pytest.approx(1.0)  # the lab sends one token per event
    assert tok["per_request_decode_tps"]["p50"] == pytest.approx(100.0, rel=0.1)  # ITL 10 ms


def test_embeddings_requests(lab: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = lab
    res = tailwise.run(
        url,
        api="openai-embeddings",
        model="lab",
        input_tokens=16,
        rate="20/s",
        requests=10,
        slo=["p99(latency)<=1s"],  # 50 ms answers; a busy machine has added 150 ms to one
        out=str(tmp_path / "r"),
    )
    s = res.summary
    assert s["requests"]["ok"] == 10 and s["slos"][0]["passed"]
    assert s["verdict"] == "inconclusive"  # a p99 from 10 requests is "n too small"
    assert s["ttft_ms"] is None  # not a stream: no token metrics
    assert s["service_ms"]["p50"] == pytest.approx(50.0, abs=5.0)  # the lab's 50 ms
    assert json.loads((tmp_path / "r" / "run.json").read_text())["requests"]["urls"] == [
        url + "/v1/embeddings"
    ]


def test_token_counts_without_server_usage(lab: tuple[str, Path], tmp_path: Path) -> None:
    """No usage from the server: a local tokenizer counts, else chunks, and the summary says so."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{f"tok{i}": i + 1 for i in range(64)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    url, _ = lab
    no_usage = json.dumps({"stream_options": {"include_usage": False}})
    common = {
        "api": "openai-chat",
        "model": "lab",
        "max_tokens": 6,
        "input_tokens": 20,
        "rate": "20/s",
        "requests": 5,
        "extra_body": no_usage,
    }
    counted = tailwise.run(url, tokenizer=str(path), out=str(tmp_path / "a"), **common)
    assert counted.summary["tokens_counted_by"] == "tokenizer tokenizer.json"
    assert counted.records.output_tokens.tolist() == [6] * 5  # " tok0" ... " tok5"
    # With --tokenizer the prompt is built to exactly 20 tokens, the per-request nonce
    # that starts it (one unknown token to this vocabulary) included
    assert counted.records.input_tokens.tolist() == [20] * 5
    guessed = tailwise.run(url, out=str(tmp_path / "b"), **common)
    assert guessed.summary["tokens_counted_by"] == "content chunks (approximation)"
    assert guessed.records.output_tokens.tolist() == [6] * 5


def test_a_bad_tokenizer_file_is_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(BadInput, match="--tokenizer"):
        prepare(
            RunOptions(
                urls=["http://127.0.0.1:9"],
                rate="1/s",
                api="openai-chat",
                model="m",
                tokenizer=str(bad),
            )
        )


def test_the_lab_answers_health_and_models_as_a_server_does(lab: tuple[str, Path]) -> None:
    import urllib.error
    import urllib.request

    llm = lab[0]
    with urllib.request.urlopen(llm + "/health", timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(llm + "/v1/models", timeout=5) as r:
        assert [m["id"] for m in json.loads(r.read())["data"]] == ["lab"]
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(llm + "/metrics", timeout=5)
    assert err.value.code == 404
