"""Failed answers are diagnosable: status per request, counts per (kind, status), sample bodies.

The target is an asyncio server written here, in a thread, whose answers the test
chooses per request path: a 404 with a JSON error body (the wrong-model answer of an
OpenAI-style server, echoing a key), a 429, a 200, and a plain JSON answer where a
token stream was asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import tailwise
from tailwise.metrics.error_samples import (
    SAMPLE_BYTES,
    ErrorSamples,
    body_of,
    clean_sample,
    redact,
)
from tailwise.records import read_jsonl

NOT_FOUND = {
    "error": {
        "message": "The model `gpt-5-mini` does not exist.",
        "type": "NotFoundError",
        "echo": "Authorization: Bearer sk-live-abcdef123456",
    }
}


def _answer(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    reason = {200: "OK", 404: "Not Found", 429: "Too Many Requests"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length)
            if b'"n": 0' in body or b'"n":0' in body:
                answer = _answer(404, json.dumps(NOT_FOUND).encode())
            elif b'"n": 1' in body or b'"n":1' in body:
                answer = _answer(429, b'{"error": "slow down"}')
            else:
                answer = _answer(200, b'{"choices": [{"message": {"content": "hi"}}]}')
            # Headers and body in two writes: the body may arrive in a later read.
            cut = answer.index(b"\r\n\r\n") + 4
            writer.write(answer[:cut])
            await writer.drain()
            writer.write(answer[cut:])
            await writer.drain()


@pytest.fixture
def target() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, int] = {}
    stop = asyncio.Event()

    async def main() -> None:
        server = await asyncio.start_server(_serve, "127.0.0.1", 0)
        box["port"] = server.sockets[0].getsockname()[1]
        started.set()
        async with server:
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10)
    yield f"http://127.0.0.1:{box['port']}"
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


def test_404_with_a_json_body_is_broken_down_by_status_with_a_sample(
    target: str, tmp_path: Path
) -> None:
    bodies = tmp_path / "bodies.jsonl"
    bodies.write_text("\n".join(json.dumps({"n": i % 3}) for i in range(3)) + "\n")
    res = tailwise.run(
        target + "/v1/x",
        rate="50/s",
        arrival="constant",
        requests=30,
        bodies=str(bodies),
        out=str(tmp_path / "run"),
    )
    s = res.summary
    assert s["requests"]["errors"] == {"http_4xx": 20}
    by_status = {e["status"]: e for e in s["errors"]}
    assert set(by_status) == {404, 429}
    assert by_status[404]["count"] + by_status[404]["warmup"] == 10
    assert by_status[404]["kind"] == "http_4xx"
    samples = by_status[404]["samples"]
    assert 1 <= len(samples) <= 3
    assert "does not exist" in samples[0]
    assert "sk-live" not in samples[0] and "abcdef123456" not in samples[0]
    assert "Authorization: ***" in samples[0]
    assert by_status[429]["samples"][0] == '{"error": "slow down"}'
    on_disk = read_jsonl(tmp_path / "run" / "records.jsonl")
    assert sorted(set(on_disk.status.tolist())) == [200, 404, 429]
    # The words reach disk with the run, secrets stripped there too.
    client = (tmp_path / "run" / "client.json").read_text()
    assert "does not exist" in client and "abcdef123456" not in client


def test_a_plain_json_answer_to_a_stream_request_is_not_a_stream(
    target: str, tmp_path: Path
) -> None:
    res = tailwise.run(
        target,
        api="openai-chat",
        model="m",
        max_tokens=4,
        rate="20/s",
        requests=6,
        out=str(tmp_path / "r"),
    )
    s = res.summary
    assert s["requests"]["errors"] == {"not_a_stream": 6}
    (entry,) = s["errors"]
    assert (entry["kind"], entry["status"]) == ("not_a_stream", 200)
    assert '"choices"' in entry["samples"][0]


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        ('{"api_key": "abc123secret"}', "abc123secret"),
        ("Authorization: Bearer eyJhbGciOi.JIUzI1", "eyJhbGciOi"),
        ("authorization=Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("key sk-proj-AbCdEf0123456789 is invalid", "AbCdEf0123456789"),
        ("token hf_abcdefghijklmnop", "abcdefghijklmnop"),
        ('"password":"hunter22"', "hunter22"),
    ],
)
def test_secrets_are_stripped(text: str, leak: str) -> None:
    out = redact(text)
    assert leak not in out and "***" in out


def test_samples_are_bounded_and_chunked_bodies_are_read() -> None:
    assert len(clean_sample(b"x" * 10_000)) == SAMPLE_BYTES + len(" ...")
    head = b"HTTP/1.1 500 E\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked = head + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    assert body_of(chunked) == b"hello world"
    assert body_of(b"HTTP/1.1 500 E\r\nContent-Length: 2\r\n") == b""  # headers unfinished
    s = ErrorSamples()
    for i in range(10):
        s.add("http_5xx", 500, b"%d" % i)
    assert s.bodies[("http_5xx", 500)] == ["0", "1", "2"]
    for status in range(1000):
        s.add("http_4xx", status, b"")
    assert len(s.bodies) == 64
    s2 = ErrorSamples()
    s2.merge([{"kind": 1}, "junk", {"kind": "k", "status": 1, "samples": ["a", 2]}])
    assert s2.bodies == {("k", 1): ["a"]}
