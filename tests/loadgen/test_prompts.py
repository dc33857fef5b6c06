"""Prompts and lengths for LLM runs: distributions, datasets, shared prefixes, determinism."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from tailwise.errors import BadInput
from tailwise.loadgen.llm import openai
from tailwise.loadgen.runner import RunOptions, prepare


def test_length_distributions_have_their_moments() -> None:
    rng = random.Random(1)
    assert openai.sample_lengths("128", "f", 5, rng) == [128] * 5
    u = np.array(openai.sample_lengths("uniform:64-256", "f", 20_000, rng))
    assert u.min() >= 64 and u.max() <= 256 and u.mean() == pytest.approx(160, rel=0.02)
    nrm = np.array(openai.sample_lengths("normal:128,16", "f", 20_000, rng))
    assert nrm.mean() == pytest.approx(128, rel=0.01) and nrm.std() == pytest.approx(16, rel=0.05)
    ln = np.array(openai.sample_lengths("lognormal:100,0.5", "f", 20_000, rng))
    assert np.median(ln) == pytest.approx(100, rel=0.03)
    assert (np.array(openai.sample_lengths("normal:2,50", "f", 1000, rng)) >= 1).all()


@pytest.mark.parametrize("bad", ["0", "-3", "1.5", "uniform:9-3", "normal:x,1", "zipf:1,2", ""])
def test_bad_lengths(bad: str) -> None:
    with pytest.raises(BadInput, match="--max-tokens"):
        openai.sample_lengths(bad, "--max-tokens", 3, random.Random(0))


def test_synthetic_prompts_are_seeded_and_share_a_prefix() -> None:
    a = openai.synthetic_prompts([20, 30], seed=3, shared_prefix=10)
    b = openai.synthetic_prompts([20, 30], seed=3, shared_prefix=10)
    assert a == b and [len(p.split()) for p in a] == [20, 30]
    assert a[0].split()[:10] == a[1].split()[:10]
    assert openai.synthetic_prompts([20], seed=4) != openai.synthetic_prompts([20], seed=3)


def test_dataset_shapes(tmp_path: Path) -> None:
    rows = [
        {"prompt": "Tell me a story.", "max_tokens": 50},
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ]
        },
        {
            "conversations": [
                {"from": "human", "value": "What is 2+2?"},
                {"from": "gpt", "value": "It is four, of course."},
            ]
        },
    ]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    got = openai.read_dataset(str(path))
    assert got[0] == ("Tell me a story.", 50)
    assert got[1] == (rows[1]["messages"], None)
    assert got[2] == ("What is 2+2?", 5)  # ShareGPT: the recorded answer's length, in words


def test_dataset_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{"text": "no prompt field"}\n')
    with pytest.raises(BadInput, match=r"bad\.jsonl:2"):
        openai.read_dataset(str(path))
    path.write_text('{"prompt": "x", "max_tokens": 0}\n')
    with pytest.raises(BadInput, match=r"bad\.jsonl:1"):
        openai.read_dataset(str(path))
    with pytest.raises(BadInput, match="--prompts"):
        openai.read_dataset(str(tmp_path / "missing.jsonl"))


def test_dataset_lengths_reach_the_request_bodies(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "a", "max_tokens": 7}\n{"prompt": "b"}\n')
    p = prepare(
        RunOptions(
            urls=["http://127.0.0.1:9"],
            rate="1/s",
            api="openai-completions",
            model="m",
            prompts=str(path),
            max_tokens="33",
        )
    )
    bodies = [json.loads(raw.split(b"\r\n\r\n", 1)[1]) for raw in p.payloads[0]]
    # Each prompt starts with the run's nonce placeholder (replaced per request on the wire).
    assert p.nonce is not None
    mark = p.nonce.decode()
    assert [(b["prompt"], b["max_tokens"]) for b in bodies] == [(f"{mark} a", 7), (f"{mark} b", 33)]
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True} for b in bodies)
