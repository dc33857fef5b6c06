"""The stream lab, the truth every LLM accuracy claim is checked against.

Its pacer is tested in-process with stand-in streams (order, never early, never
starving reads); the wire and the truth log against a real lab process on loopback.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailwise.server.stream_lab import _Pacer, read_truth


class Stand:
    """A stream whose chunks take ``cost_s`` of CPU each, with a given first due instant
    (stands in for :class:`tailwise.server.stream_lab._Stream` in the pacer's tests)."""

    def __init__(self, name: str, at: float, n: int, itl_s: float, cost_s: float, log: list[Any]):
        self.name, self.at, self.n, self.itl_s, self.cost_s, self.log = (
            name,
            at,
            n,
            itl_s,
            cost_s,
            log,
        )
        self.i = 0
        self.transport = None

    def step(self) -> bool:
        now = asyncio.get_running_loop().time()
        self.log.append(("chunk", self.name, self.i, self.at, now))
        end = time.perf_counter() + self.cost_s
        while time.perf_counter() < end:  # the write's cost, on the lab's core
            pass
        self.i += 1
        self.at += self.itl_s
        return self.i < self.n


def pace(streams: list[tuple[str, float, int]], itl_s: float, cost_s: float) -> list[Any]:
    """Run the pacer over stand-ins ``(name, first due offset s, chunks)``; the event log,
    with a marker each time the loop got round to other callbacks (a read's turn)."""
    log: list[Any] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pacer = _Pacer()
        t0 = loop.time()
        stands = [Stand(n, t0 + off, k, itl_s, cost_s, log) for n, off, k in streams]
        for s in stands:
            pacer.add(s)  # type: ignore[arg-type]

        def turn() -> None:
            log.append(("turn",))
            if any(s.i < s.n for s in stands):
                loop.call_soon(turn)

        loop.call_soon(turn)
        while any(s.i < s.n for s in stands):
            await asyncio.sleep(0.001)

    asyncio.run(main())
    return log


def test_pacer_writes_in_due_order_and_never_early() -> None:
    # Staggered first chunks interleave with later chunks of earlier streams.
    log = pace([("a", 0.0, 6), ("b", 0.0025, 6), ("c", 0.004, 6), ("d", 0.0041, 2)], 0.003, 0)
    chunks = [e for e in log if e[0] == "chunk"]
    assert len(chunks) == 20
    dues = [e[3] for e in chunks]
    assert dues == sorted(dues)
    assert all(now >= due - 1e-6 for _, _, _, due, now in chunks)  # asyncio's clock resolution
    for name in "abcd":
        assert [e[2] for e in chunks if e[1] == name] == list(range(6 if name != "d" else 2))


def test_pacer_gives_reads_a_turn_when_writing_falls_behind() -> None:
    # Each write costs 2 ms but chunks fall due every 1 ms: the pacer is behind for the
    # whole run. A tick may write only what was due when it began (3 streams), then the
    # loop must get round to its other callbacks (the sockets' reads) before the next.
    log = pace([("a", 0.0, 5), ("b", 0.0, 5), ("c", 0.0, 5)], 0.001, 0.002)
    run = 0
    longest = 0
    for e in log:
        run = run + 1 if e[0] == "chunk" else 0
        longest = max(longest, run)
    assert sum(e[0] == "chunk" for e in log) == 15
    assert longest <= 3


@pytest.fixture
def lab(tmp_path: Path, stream_lab: Callable[..., str]) -> tuple[str, Path]:
    truth = tmp_path / "truth.jsonl"
    return stream_lab("5ms", "2ms", truth), truth


def post(url: str, path: str, body: dict[str, Any]) -> bytes:
    """One request over a raw socket; the whole chunked answer, as sent."""
    host, port = url.removeprefix("http://").split(":")
    raw = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST %s HTTP/1.1\r\nHost: lab\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(raw), raw)
        )
        got = b""
        while not got.endswith(b"0\r\n\r\n"):
            part = sock.recv(65536)
            assert part, got
            got += part
    return got


def events(answer: bytes) -> list[Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Transfer-Encoding: chunked" in head
    out: list[Any] = []
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        chunk, body = rest[:size], rest[size + 2 :]
        assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")  # one event a chunk
        data = chunk[6:-2]
        out.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return out


def test_chat_stream_and_its_truth(lab: tuple[str, Path]) -> None:
    url, truth = lab
    ev = events(
        post(
            url,
            "/v1/chat/completions",
            {"model": "lab", "max_tokens": 3, "stream_options": {"include_usage": True}},
        )
    )
    assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [e["choices"][0]["delta"]["content"] for e in ev[1:4]] == [" tok0", " tok1", " tok2"]
    assert ev[4]["choices"][0]["finish_reason"] == "length"
    assert ev[5]["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert ev[6] == "[DONE]" and len(ev) == 7
    (row,) = [json.loads(line) for line in truth.read_text().splitlines()]
    sent = row["chunks_ns"]
    assert len(sent) == 3 and sent == sorted(sent)
    # Chunk i is due TTFT + i x ITL after arrival, on the loop's millisecond clock (its
    # reading and its timers each round to the millisecond: up to 2 ms early in all).
    assert all(t - row["arrival_ns"] >= (5 + 2 * i - 2.5) * 1e6 for i, t in enumerate(sent))
    ttft, gaps = read_truth(truth)
    assert ttft == [sent[0] - row["arrival_ns"]] and len(gaps) == 2


@pytest.mark.parametrize(
    ("max_tokens", "content"), [(0, 32), (-4, 0), ("two", 32), (None, 32), (2.0, 2)]
)
def test_odd_max_tokens(lab: tuple[str, Path], max_tokens: Any, content: int) -> None:
    url, truth = lab
    ev = events(post(url, "/v1/completions", {"model": "lab", "max_tokens": max_tokens}))
    texts = [e["choices"][0]["text"] for e in ev if e != "[DONE]" and e["choices"][0]["text"]]
    assert len(texts) == content
    assert ev[-2]["choices"][0]["finish_reason"] == "length" and ev[-1] == "[DONE]"
    (row,) = [json.loads(line) for line in truth.read_text().splitlines()]
    assert len(row["chunks_ns"]) == content
