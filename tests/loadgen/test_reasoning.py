"""Reasoning streams: the first reasoning token and the first answer token are apart."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import tailwise
from tailwise.loadgen.llm.stream import classify
from tailwise.loadgen.transport.sse import SSEParser
from tailwise.records import read_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sse"
MS = 1_000_000
THINK_FIRST_MS = 30  # the server waits this long before its first reasoning chunk
THINK_SPAN_MS = 60  # and this long between its last reasoning chunk and the answer


def events(name: str) -> list[tuple[str, str]]:
    return list(SSEParser().feed((FIXTURES / name).read_bytes()))


def test_reasoning_fixture_reasons_before_it_answers() -> None:
    chunks = [classify(data, etype) for etype, data in events("reasoning_tools.sse")]
    first_reasoning = next(i for i, c in enumerate(chunks) if c.reasoning)
    first_answer = next(i for i, c in enumerate(chunks) if c.text)
    assert first_reasoning < first_answer
    assert sum(1 for c in chunks if c.reasoning) == 8


@pytest.mark.parametrize(
    "delta",
    [
        {"reasoning_content": "hm"},  # vLLM --reasoning-parser, SGLang, llama.cpp
        {"reasoning": "hm"},  # vLLM's newer field (gpt-oss)
        {"reasoning_content": "hm", "content": None},  # SGLang sends nulls beside it
    ],
)
def test_reasoning_fields_of_each_server(delta: dict[str, object]) -> None:
    c = classify(json.dumps({"choices": [{"index": 0, "delta": delta}]}))
    assert c.reasoning == "hm" and c.text == ""


def test_reasoning_usage_details() -> None:
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": 30,
        "completion_tokens_details": {"reasoning_tokens": 22},
    }
    c = classify(json.dumps({"choices": [], "usage": usage}))
    assert (c.completion_tokens, c.reasoning_tokens) == (30, 22)
    bad = {**usage, "completion_tokens_details": {"reasoning_tokens": -1}}
    assert classify(json.dumps({"choices": [], "usage": bad})).error == "malformed chunk"


# -- live: a loopback server that thinks, then answers -----------------------------


def _event(delta: dict[str, object], finish: str | None = None) -> bytes:
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    body["choices"][0]["finish_reason"] = finish  # type: ignore[index]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def _answer(writer: asyncio.StreamWriter, usage: bool) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )

    def send(data: bytes) -> None:
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))

    send(_event({"role": "assistant", "content": ""}))
    await asyncio.sleep(THINK_FIRST_MS / 1e3)
    for word in ("Let", " me", " think", "."):
        send(_event({"reasoning_content": word}))
        await writer.drain()
    await asyncio.sleep(THINK_SPAN_MS / 1e3)
    for word in ("Forty", "-two", "."):
        send(_event({"content": word}))
        await writer.drain()
    send(_event({}, "stop"))
    if usage:
        u = {
            "prompt_tokens": 5,
            "completion_tokens": 17,
            "completion_tokens_details": {"reasoning_tokens": 14},
        }
        send(b"data: " + json.dumps({"choices": [], "usage": u}).encode() + b"\n\n")
    send(b"data: [DONE]\n\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


@pytest.fixture(scope="module")
def thinker() -> Iterator[tuple[str, str]]:
    """(URL with usage, URL without): a server that reasons 4 chunks, then answers 3."""
    loop = asyncio.new_event_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                await _answer(writer, usage=b"/usage/" in head.split(b"\r\n")[0])
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/usage/chat", f"http://127.0.0.1:{port}/plain/chat"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


def run(url: str, out: Path) -> tailwise.loadgen.runner.RunResult:
    return tailwise.run(
        url,
        api="openai-chat",
        model="m",
        rate="20/s",
        requests=6,
        max_tokens=8,
        out=str(out),
        server_metrics="off",
    )


def test_reasoning_ttft_and_counts_with_usage(thinker: tuple[str, str], tmp_path: Path) -> None:
    res = run(thinker[0], tmp_path / "u")
    r = res.records
    assert (r.error == 0).all() and len(r) == 6
    # The server's own waits bound the gaps from below, whatever the machine's speed.
    assert (r.first_reasoning_ns - r.sent_ns >= THINK_FIRST_MS * MS).all()
    assert (r.first_token_ns - r.sent_ns >= (THINK_FIRST_MS + THINK_SPAN_MS) * MS).all()
    assert (r.first_token_ns > r.first_reasoning_ns).all()
    assert r.reasoning_tokens.tolist() == [14] * 6 and r.output_tokens.tolist() == [17] * 6
    sec = res.summary["reasoning"]
    assert sec["requests"] == sec["answered"] == 6
    assert sec["reasoning_tokens_total"] == 6 * 14 and sec["answer_tokens_total"] == 6 * 3
    ttft = (r.first_token_ns - r.scheduled_ns) / 1e6
    assert sec["ttft_answer_ms"]["max"] == pytest.approx(float(ttft.max()), abs=1e-3)
    assert res.summary["ttft_ms"]["max"] == sec["ttft_answer_ms"]["max"]  # TTFT: the answer
    assert sec["ttft_reasoning_ms"]["p50"] < sec["ttft_answer_ms"]["p50"]
    gap = (r.first_token_ns - r.first_reasoning_ns) / 1e6
    assert sec["reasoning_ms"]["max"] == pytest.approx(float(gap.max()), abs=1e-3)
    on_disk = read_jsonl(res.directory / "records.jsonl")
    assert np.array_equal(np.sort(on_disk.first_reasoning_ns), np.sort(r.first_reasoning_ns))


def test_reasoning_counted_by_chunks_without_usage(
    thinker: tuple[str, str], tmp_path: Path
) -> None:
    res = run(thinker[1], tmp_path / "p")
    r = res.records
    assert r.reasoning_tokens.tolist() == [4] * 6  # one per reasoning chunk
    assert r.output_tokens.tolist() == [7] * 6  # every chunk: reasoning and answer
    sec = res.summary["reasoning"]
    assert (sec["reasoning_tokens_total"], sec["answer_tokens_total"]) == (24, 18)


def test_no_reasoning_section_without_reasoning(tmp_path: Path) -> None:
    from tailwise.records import Records

    r = Records(
        **{
            c: np.zeros(2, np.int64)
            for c in (
                "seq parent worker scheduled_ns sent_ns first_byte_ns first_token_ns done_ns "
                "status bytes_out bytes_in input_tokens output_tokens replica"
            ).split()
        },
        error=np.zeros(2, np.int16),
        in_window=np.ones(2, bool),
    )
    assert r.first_reasoning_ns.tolist() == [-1, -1]  # producers without reasoning: absent
    from tailwise.metrics.reasoning import reasoning_section

    assert reasoning_section(r, np.ones(2, bool)) is None


def test_the_stream_labs_reasoning_steer(tmp_path: Path) -> None:
    from tailwise.metrics.reasoning import text_lines
    from tailwise.server import spawn

    proc, url = spawn("tailwise.server.stream_lab", "--ttft", "20ms", "--itl", "5ms")
    try:
        res = tailwise.run(
            url,
            api="openai-chat",
            model="lab",
            rate="20/s",
            requests=5,
            max_tokens=8,
            extra_body=json.dumps({"lab": {"reasoning": 5}}),
            out=str(tmp_path / "lab"),
            server_metrics="off",
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    r = res.records
    assert r.reasoning_tokens.tolist() == [5] * 5 and r.output_tokens.tolist() == [8] * 5
    # the answer's first chunk is written after the reasoning (on the lab's own timeline,
    # 5 ITLs later; its timer jitter makes that no lower bound on what arrives)
    assert (r.first_token_ns > r.first_reasoning_ns).all()
    assert [len(c or []) for c in r.chunk_times] == [3] * 5  # ITL over answer chunks only
    sec = res.summary["reasoning"]
    assert (sec["reasoning_tokens_total"], sec["answer_tokens_total"]) == (25, 15)
    lines = text_lines(res.summary.tokens, res.summary.reasoning)
    assert lines[-2].startswith("reasoning 5 requests: first reasoning token")
    # TPOT is the answer's pace: its span over its 3 tokens, not over all 8
    tpot_ms = (r.done_ns - r.first_token_ns) / (8 - 5 - 1) / 1e6
    assert res.summary["tpot_ms"]["max"] == pytest.approx(float(tpot_ms.max()), abs=1e-3)
