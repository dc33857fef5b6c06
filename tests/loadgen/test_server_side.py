"""What a server says of its own work, parsed from the shapes real servers send.

The chunks and answers below are llama.cpp's (b0, in the llama-cpp-python 0.3.36
sdist), trimmed to the fields that matter, and OpenAI's documented usage shape.
"""

from __future__ import annotations

import itertools
import json

import pytest

from tailwise.loadgen.llm.stream import MALFORMED, Timings, classify, classify_answer
from tailwise.loadgen.transport.http import NONCE_DIGITS, nonce_for

LLAMA_TIMINGS = {
    "cache_n": 35,
    "prompt_n": 1,
    "prompt_ms": 20.023,
    "prompt_per_token_ms": 20.023,
    "predicted_n": 4,
    "predicted_ms": 57.84,
    "predicted_per_token_ms": 19.28,
}


def test_llama_cpp_v1_last_chunk_carries_usage_cached_tokens_and_timings() -> None:
    chunk = {
        "choices": [],
        "object": "chat.completion.chunk",
        "usage": {
            "completion_tokens": 4,
            "prompt_tokens": 36,
            "prompt_tokens_details": {"cached_tokens": 35},
        },
        "timings": LLAMA_TIMINGS,
    }
    c = classify(json.dumps(chunk))
    assert (c.prompt_tokens, c.completion_tokens, c.cached_tokens) == (36, 4, 35)
    assert c.timings == Timings(1, 20.023, 4, 57.84, 19.28)


def test_llama_cpp_completion_route_counts_the_cached_prompt_too() -> None:
    # /completion: prompt_n leaves the cached tokens out; the prompt is both.
    event = {"content": "", "stop": True, "tokens_cached": 35, "timings": LLAMA_TIMINGS}
    c = classify(json.dumps(event))
    assert c.prompt_tokens == 36 and c.cached_tokens == 35 and c.completion_tokens == 4
    event["tokens_evaluated"] = 40  # when the server says the whole prompt, it wins
    assert classify(json.dumps(event)).prompt_tokens == 40


def test_whole_answers_chat_completions_and_embeddings() -> None:
    chat = {
        "choices": [{"finish_reason": "stop", "message": {"content": "Hello there!"}}],
        "usage": {"completion_tokens": 8, "prompt_tokens": 36, "total_tokens": 44},
        "timings": LLAMA_TIMINGS,
    }
    c = classify_answer(json.dumps(chat).encode())
    assert (c.prompt_tokens, c.completion_tokens, c.error) == (36, 8, None)
    assert c.timings is not None and c.timings.predicted_per_token_ms == 19.28
    emb = {"data": [{"embedding": [0.1, 0.2]}], "usage": {"prompt_tokens": 3, "total_tokens": 3}}
    c = classify_answer(json.dumps(emb).encode())
    assert (c.prompt_tokens, c.completion_tokens, c.cached_tokens) == (3, None, None)
    err = {"error": {"code": 400, "message": "Pooling type 'none' is not OAI compatible"}}
    assert (
        classify_answer(json.dumps(err).encode()).error
        == "Pooling type 'none' is not OAI compatible"
    )
    assert classify_answer(b"<html>").error == MALFORMED
    assert classify_answer(b"[1, 2]").error == MALFORMED


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": -1}},
        {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 10**30}},
    ],
)
def test_hostile_cached_counts_are_malformed_not_summed(usage: dict[str, object]) -> None:
    chunk = {"choices": [], "usage": usage}
    assert classify(json.dumps(chunk)).error == MALFORMED
    assert classify_answer(json.dumps(chunk).encode()).error == MALFORMED


@pytest.mark.parametrize("bad", [-1.0, 1e30, "NaN"])
def test_hostile_timings_are_malformed(bad: object) -> None:
    timings = dict(LLAMA_TIMINGS, prompt_ms=float(bad) if isinstance(bad, str) else bad)
    chunk = {"choices": [], "timings": timings}
    # json.dumps writes NaN, which Python's json reads back: it must not pass as a time
    assert classify(json.dumps(chunk)).error == MALFORMED


def test_timings_missing_a_field_are_ignored_not_guessed() -> None:
    partial = {k: v for k, v in LLAMA_TIMINGS.items() if k != "prompt_ms"}
    c = classify(json.dumps({"choices": [], "timings": partial}))
    assert c.error is None and c.timings is None and c.cached_tokens == 35


def test_nonces_are_fixed_width_and_unique_over_a_long_run() -> None:
    salt = 0x3A5F00C0DE
    seen = {nonce_for(seq, salt) for seq in range(200_000)}
    assert len(seen) == 200_000
    assert all(len(n) == NONCE_DIGITS for n in list(seen)[:1000])
    # consecutive requests differ in their first digit almost always: no shared head
    firsts = [nonce_for(seq, salt)[:1] for seq in range(1000)]
    assert sum(a != b for a, b in itertools.pairwise(firsts)) > 900
