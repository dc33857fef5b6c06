"""Synthetic prompts of an exact token length with a tokenizer the test builds."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import tailwise
from tailwise.loadgen.llm import openai
from tailwise.loadgen.prepare.exact_prompts import exact_prompts, fit
from tailwise.loadgen.runner import RunOptions, prepare
from tests.wire import read_json_request

TEMPLATE_TOKENS = 7  # what the test server's "chat template" adds to every prompt


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """WordPiece over letters: a word is as many tokens as letters ("time" = t ##i ##m ##e),
    so a word count is far from a token count and a prompt must be cut inside words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["[UNK]", *letters, *("##" + c for c in letters)]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def test_every_prompt_has_the_asked_token_count(tokenizer: str) -> None:
    counter = openai.TokenCounter(tokenizer)
    opts = RunOptions(
        urls=["http://127.0.0.1:1/"],
        api="openai-completions",
        model="m",
        input_tokens="uniform:5-60",
        tokenizer=tokenizer,
        rate="1/s",
        seed=4,
    )
    p = prepare(opts)
    rng = random.Random(4)  # the draw prepare makes for --input-tokens
    asked = openai.sample_lengths("uniform:5-60", "--input-tokens", openai.N_PROMPTS, rng)
    prompts = [json.loads(b.split(b"\r\n\r\n", 1)[1])["prompt"] for b in p.payloads[0]]
    assert [counter.count(t) for t in prompts] == asked
    assert p.prompt_tokens == asked
    # by words, as without --tokenizer, the same lengths are several times too long here
    words = openai.synthetic_prompts(asked, 4)
    assert sum(counter.count(w) for w in words) > 3 * sum(asked)
    again = prepare(opts)
    assert p.nonce and again.nonce and again.nonce != p.nonce  # each run its own nonce

    def masked(q: object) -> list[bytes]:
        nonce = q.nonce
        return [b.replace(nonce, b"N" * len(nonce)) for b in q.payloads[0]]

    assert masked(again) == masked(p)  # otherwise deterministic for a seed


def test_a_shared_prefix_is_shared(tokenizer: str) -> None:
    counter = openai.TokenCounter(tokenizer)
    prompts = exact_prompts(counter, [80, 90, 100], seed=1, shared_prefix_words=5)
    prefix = openai.synthetic_prompts([5], 1)[0]
    assert all(t.startswith(prefix + " ") for t in prompts)
    assert [counter.count(t) for t in prompts] == [80, 90, 100]


def test_fit_cuts_inside_a_word_when_it_must(tokenizer: str) -> None:
    counter = openai.TokenCounter(tokenizer)
    assert fit(counter, "time year people", 6) == "time ye"  # 4 + 2 letters
    assert fit(counter, "time", 9) is None  # not enough text


# -- live: the server's usage against the local count --------------------------------


@pytest.fixture(scope="module")
def templated(tokenizer: str) -> Iterator[str]:
    """A chat server whose usage counts the message with the tokenizer, plus a template."""
    counter = openai.TokenCounter(tokenizer)
    loop = asyncio.new_event_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                body = await read_json_request(reader)
                text = body["messages"][0]["content"]
                usage = {
                    "prompt_tokens": counter.count(text) + TEMPLATE_TOKENS,
                    "completion_tokens": 2,
                }
                events = [
                    {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}]},
                    {"choices": [], "usage": usage},
                ]
                data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
                data += b"data: [DONE]\n\n"
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(data), data)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


def test_template_overhead_is_reported_apart(
    tokenizer: str, templated: str, tmp_path: Path
) -> None:
    res = tailwise.run(
        templated,
        api="openai-chat",
        model="m",
        input_tokens=32,
        max_tokens=2,
        tokenizer=tokenizer,
        rate="20/s",
        requests=8,
        out=str(tmp_path / "run"),
        server_metrics="off",
    )
    assert res.summary["requests"]["ok"] == 8
    assert res.records.input_tokens.tolist() == [32 + TEMPLATE_TOKENS] * 8  # the server's count
    tokens = res.summary["tokens"]
    assert tokens["template_overhead"]["p50"] == TEMPLATE_TOKENS
    assert tokens["template_overhead"]["prompt_tokens_mean"] == 32
    assert tokens["input_total"] == 8 * (32 + TEMPLATE_TOKENS)
    # throughput of both kinds over the same population (completed in the window)
    assert tokens["total_tps"] == pytest.approx(tokens["input_tps"] + tokens["output_tps"])
    # both chunks arrive in one read here: no decode pace to speak of, and none invented
    assert tokens["output_tps_per_user"] is None
