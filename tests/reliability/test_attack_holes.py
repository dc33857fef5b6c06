"""Holes that attack testing found (issue 40), each reproduced against a hostile loopback server.

Every test asserts the facts the hole broke: no row credited with an answer that was not
its own, no token lost, every scheduled request accounted for, the status a server sent
kept beside the error it caused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tailwise
from tailwise.records import Records, read_jsonl
from tests.reliability.conftest import Answer

pytestmark = pytest.mark.reliability
Serve = Callable[[Answer], str]


async def read_head(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))


def own_answers(r: Records) -> None:
    """Every answered row's times are its own: a first byte, no answer before its send."""
    answered = r.status > 0
    assert answered.any()
    assert (r.first_byte_ns[answered] >= r.sent_ns[answered]).all()
    assert (r.done_ns[answered] >= r.first_byte_ns[answered]).all()
    assert (r.sent_ns[answered] >= 0).all()


def sse_answer(*texts: str, done: bool = True) -> bytes:
    events = [json.dumps({"choices": [{"delta": {"content": t}}]}) for t in texts]
    if done:
        events.append("[DONE]")
    return "".join(f"data: {e}\n\n" for e in events).encode()


# D2: a server that answers each request twice. The stale second answer was parsed in the
# same read after the first one's callback had sent the next request on the connection,
# and was credited to it: no first byte, a negative service time.
TWICE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"


async def answer_twice(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    while True:
        await read_head(r)
        await asyncio.sleep(0.005)
        w.write(TWICE + TWICE)  # one write: the two answers arrive in one read


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_an_answer_given_twice_is_never_credited_to_the_next_request(
    raw_server: Serve, tmp_path: Path, mode: str
) -> None:
    url = raw_server(answer_twice) + "/x"
    load = {"concurrency": 2, "duration": "1s"} if mode == "closed" else {"rate": "300/s"}
    res = tailwise.run(url, **load, requests=200, out=str(tmp_path / mode), progress=False)
    s = res.summary
    assert s["requests"]["accounted"]
    back = read_jsonl(tmp_path / mode / "records.jsonl")
    own_answers(back)
    # Each stray answer closed its connection: the next request went on a fresh one.
    assert s["stray_answers"] > 0
    assert s["requests"]["ok"] + s["requests"]["warmup"]["ok"] == len(back)


def test_a_stream_answered_twice_is_never_credited_to_the_next_request(
    raw_server: Serve, tmp_path: Path
) -> None:
    body = sse_answer("a", "b")
    one = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + (
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            await read_head(r)
            await asyncio.sleep(0.005)
            w.write(one + one)

    res = tailwise.run(
        raw_server(serve) + "/v1",
        api="openai-chat",
        model="m",
        rate="300/s",
        requests=200,
        out=str(tmp_path / "sse"),
        progress=False,
    )
    assert res.summary["requests"]["accounted"] and res.summary["stray_answers"] > 0
    back = read_jsonl(tmp_path / "sse" / "records.jsonl")
    own_answers(back)
    ok = back.error == 0
    assert ok.any() and (back.output_tokens[ok] == 2).all()
    assert (back.first_token_ns[ok] >= back.sent_ns[ok]).all()
    assert np.all(back.status[ok] == 200)
