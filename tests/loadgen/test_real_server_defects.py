"""Two defects found against llama.cpp's llama-server, reproduced on loopback servers we control.

1. A server that closes the connection after each response although it promised
   ``Connection: keep-alive``: a request written on the dying connection must be
   sent again on a fresh one (a reconnect), not booked as a ``reset``.
2. A server with a prefix cache that reports cached prompt tokens: prompts must be
   unique per request unless reuse is asked for, cached tokens are summarised, and
   a high hit rate nobody asked for is flagged.

The servers run an asyncio loop in a thread of the test process and keep a log of
what they received, so every assertion is checked against what really happened.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tailwise
from tailwise.loadgen.observe.server_view import server_lines
from tests.wire import ThreadedServer

KEEP_ALIVE = b"Connection: keep-alive\r\nKeep-Alive: timeout=5, max=100\r\n"
NONCE = re.compile(r"^[0-9a-f]{10}$")


@dataclass
class Log:
    """What a test server saw: request bodies in arrival order, connections accepted."""

    bodies: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    prompts_seen: list[list[str]] = field(default_factory=list)
    prompt_ms: list[float] = field(default_factory=list)  # the prompt time each answer reported


Handler = Callable[[dict[str, Any], Log], tuple[bytes, bool]]


class ThreadServer(ThreadedServer):
    """An asyncio HTTP/1.1 server on 127.0.0.1 in its own thread.

    ``mode`` says how a connection ends after its first answer:
    ``keep``: a proper keep-alive server; ``close_on_next``: the next request on the
    connection is met with a close (the race with a server's close, made certain);
    ``close_now``: closes right after each answer though it said keep-alive;
    ``partial_on_next``: the next request gets a status line, then the close;
    ``reset_on_next``: the next request gets a TCP reset (a crashed peer).
    """

    read_limit = 1 << 20

    def __init__(self, handler: Handler, mode: str = "keep") -> None:
        super().__init__()
        self.handler, self.mode, self.log = handler, mode, Log()

    async def _read(self, reader: asyncio.StreamReader) -> dict[str, Any] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        length = re.search(rb"(?i)content-length:\s*(\d+)", head)
        body = await reader.readexactly(int(length.group(1))) if length else b""
        return json.loads(body) if body else {}

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.log.connections += 1
        answered = 0
        try:
            while (req := await self._read(reader)) is not None:
                if answered and self.mode == "close_on_next":
                    break
                if answered and self.mode == "partial_on_next":
                    writer.write(b"HTTP/1.1 200 OK\r\n")
                    await writer.drain()
                    break
                if answered and self.mode == "reset_on_next":
                    # SO_LINGER 0: close() sends RST, as a crashed peer's kernel does
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                self.log.bodies.append(req)
                answer, stream = self.handler(req, self.log)
                if self.mode == "close_now":
                    # The answer, then at once the FIN, as llama-server's leave: the
                    # client's next request can still race the close.
                    writer.write(answer)
                    if writer.transport.get_write_buffer_size():
                        await writer.drain()  # (a small answer leaves in the write call)
                    writer.get_extra_info("socket").shutdown(socket.SHUT_WR)
                    break
                await self._write(writer, answer, stream)
                answered += 1
        finally:
            writer.close()

    async def _write(self, writer: asyncio.StreamWriter, answer: bytes, stream: bool) -> None:
        """A stream goes out as the LLM law says: prompt time, then one event per decode step."""
        if not stream:
            writer.write(answer)
            await writer.drain()
            return
        head, _, events = answer.partition(b"\r\n\r\n")
        await asyncio.sleep(self.log.prompt_ms[-1] / 1e3)
        writer.write(head + b"\r\n\r\n")
        for event in events.split(b"\n\n")[:-1]:
            writer.write(event + b"\n\n")
            await writer.drain()
            await asyncio.sleep(DECODE_MS / 1e3)


def plain(req: dict[str, Any], log: Log) -> tuple[bytes, bool]:
    body = b'{"ok":true}'
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + KEEP_ALIVE
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body, False


@pytest.mark.parametrize("mode", ["close_on_next", "close_now"])
def test_a_server_closing_after_each_response_costs_no_error(mode: str, tmp_path: Path) -> None:
    server = ThreadServer(plain, mode)
    with server as url:
        res = tailwise.run(
            url + "/x",
            concurrency=4,
            requests=60,
            body="{}",
            timeout="5s",
            out=str(tmp_path / "r"),
        )
    s = res.summary
    assert s["requests"]["errors"] == {}
    assert s["requests"]["ok"] == s["requests"]["scheduled"] == 60
    # Every request the server answered is one the client counted ok: none twice.
    assert len(server.log.bodies) == 60
    if mode == "close_on_next":
        # Every connection answers once: after the 4 preconnected ones, each request but
        # the first on a reused connection met the close and was sent again.
        assert s["reconnects"] > 0
        summary_on_disk = json.loads((tmp_path / "r" / "summary.json").read_text())
        assert summary_on_disk["reconnects"] == s["reconnects"]
        assert any(line.startswith("reconnect ") for line in server_lines(s))


def test_a_reconnect_is_counted_once_and_timed_from_the_intended_instant(tmp_path: Path) -> None:
    with ThreadServer(plain, "close_on_next") as url:
        res = tailwise.run(url + "/x", rate="50/s", requests=20, body="{}", out=str(tmp_path / "r"))
    r, s = res.records, res.summary
    assert s["requests"]["ok"] == 20 and s["requests"]["errors"] == {}
    assert s["reconnects"] > 0
    # The latency still starts at the intended instant and covers both attempts.
    assert ((r.done_ns - r.scheduled_ns) >= (r.done_ns - r.sent_ns)).all()
    assert (r.sent_ns >= r.scheduled_ns).all()


def test_a_response_byte_means_no_second_send(tmp_path: Path) -> None:
    with ThreadServer(plain, "partial_on_next") as url:
        res = tailwise.run(
            url + "/x", concurrency=1, requests=3, body="{}", out=str(tmp_path / "r")
        )
    s = res.summary
    # The first request is answered; the second got a status line and the close: a reset,
    # not resent (the server may have acted on it). The third goes on a fresh connection.
    assert s["requests"]["errors"] == {"reset": 1}
    assert s["reconnects"] == 0


def test_a_reset_is_a_failure_not_a_reconnect(tmp_path: Path) -> None:
    """An RST under an unanswered request may be a crash mid-request: never sent again."""
    server = ThreadServer(plain, "reset_on_next")
    with server as url:
        res = tailwise.run(
            url + "/x", concurrency=1, requests=3, body="{}", out=str(tmp_path / "r")
        )
    s = res.summary
    assert s["requests"]["errors"] == {"reset": 1}
    assert s["reconnects"] == 0
    assert len(server.log.bodies) == 2  # the reset request was not sent a second time


# --- a prefix-caching LLM server -------------------------------------------------------


def _prompt_words(req: dict[str, Any]) -> list[str]:
    if "messages" in req:
        text = " ".join(str(m.get("content", "")) for m in req["messages"])
    else:
        text = str(req.get("prompt", req.get("input", "")))
    return text.split()


def _cached_prefix(words: list[str], seen: list[list[str]]) -> int:
    """Longest common prefix (in words) with any prompt this server processed before."""
    best = 0
    for old in seen:
        n = 0
        for a, b in zip(old, words, strict=False):
            if a != b:
                break
            n += 1
        best = max(best, n)
    return best


PROMPT_MS_PER_TOKEN = 0.5
DECODE_MS = 2.0


def llm(req: dict[str, Any], log: Log) -> tuple[bytes, bool]:
    """A word-per-token LLM with a prefix cache, reporting usage, cached tokens and timings."""
    words = _prompt_words(req)
    cached = _cached_prefix(words, log.prompts_seen)
    log.prompts_seen.append(words)
    n_in, n_out = len(words), int(req.get("max_tokens", 4))
    usage = {
        "prompt_tokens": n_in,
        "completion_tokens": n_out,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    timings = {
        "cache_n": cached,
        "prompt_n": n_in - cached,
        "prompt_ms": PROMPT_MS_PER_TOKEN * (n_in - cached),
        "predicted_n": n_out,
        "predicted_ms": DECODE_MS * n_out,
        "predicted_per_token_ms": DECODE_MS,
    }
    log.prompt_ms.append(timings["prompt_ms"])
    if "input" in req:  # embeddings
        data = {"data": [{"embedding": [0.0, 1.0]}], "usage": {"prompt_tokens": n_in}}
        return _json(data), False
    if not req.get("stream"):
        data = {
            "choices": [{"message": {"content": "w " * n_out}, "finish_reason": "length"}],
            "usage": usage,
            "timings": timings,
        }
        return _json(data), False
    events = [{"choices": [{"delta": {"content": "w "}, "finish_reason": None}]}] * n_out
    events.append({"choices": [{"delta": {}, "finish_reason": "length"}], "timings": timings})
    events.append({"choices": [], "usage": usage})
    sse = b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in events) + b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + KEEP_ALIVE
    return head + b"Content-Length: %d\r\n\r\n" % len(sse) + sse, True


def _json(data: dict[str, Any]) -> bytes:
    body = json.dumps(data).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + KEEP_ALIVE
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


@pytest.fixture
def llm_server() -> Iterator[tuple[str, ThreadServer]]:
    srv = ThreadServer(llm, "keep")
    with srv as url:
        yield url, srv


def chat(url: str, out: Path, **kw: Any) -> tailwise.loadgen.runner.RunResult:
    args: dict[str, Any] = dict(
        api="openai-chat", model="m", rate="100/s", requests=30, max_tokens=4, input_tokens=32,
        server_metrics="off",  # the log must hold the run's requests only, not /metrics probes
    )  # fmt: skip
    args.update(kw)
    return tailwise.run(url, out=str(out), **args)


def test_prompts_are_unique_per_request_and_across_runs(
    llm_server: tuple[str, ThreadServer], tmp_path: Path
) -> None:
    url, srv = llm_server
    first = chat(url, tmp_path / "a").summary
    second = chat(url, tmp_path / "b").summary  # the same seed, the same server, its cache warm
    firsts = [_prompt_words(b)[0] for b in srv.log.bodies]
    assert len(firsts) == 60 and all(NONCE.match(w) for w in firsts)
    assert len(set(firsts)) == 60  # no two requests, in one run or two, begin alike
    for s in (first, second):
        cache = s["prompt_cache"]
        assert cache["requests_reporting"] == s["requests"]["ok"] == 30
        assert cache["cached_tokens"] == 0 and cache["hit_rate"] == 0.0
        assert cache["warning"] is None and not cache["reuse_asked"]


def test_reused_prompts_are_flagged_and_cached_tokens_summed(
    llm_server: tuple[str, ThreadServer], tmp_path: Path
) -> None:
    url, srv = llm_server
    chat(url, tmp_path / "a", unique_prompts=False)
    s = chat(url, tmp_path / "b", unique_prompts=False).summary  # every prompt seen before
    cache = s["prompt_cache"]
    second_run = srv.log.bodies[30:]
    prompt_tokens = sum(len(_prompt_words(b)) for b in second_run)
    assert cache["prompt_tokens"] == prompt_tokens == s["tokens"]["input_total"]
    assert cache["cached_tokens"] == prompt_tokens  # the server's word-level cache: all of it
    assert cache["hit_rate"] == 1.0 and not cache["reuse_asked"]
    assert cache["warning"] and "100% of prompt tokens" in cache["warning"]
    assert any(line.startswith("WARNING") for line in server_lines(s))
    rows = [json.loads(x) for x in (tmp_path / "b" / "server.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and sum(r["cached_tokens"] for r in rows) == prompt_tokens


def test_a_shared_prefix_is_asked_for_reuse_and_the_nonce_follows_it(
    llm_server: tuple[str, ThreadServer], tmp_path: Path
) -> None:
    url, srv = llm_server
    s = chat(url, tmp_path / "a", shared_prefix=8).summary
    words = [_prompt_words(b) for b in srv.log.bodies]
    assert len({tuple(w[:8]) for w in words}) == 1  # the prefix asked for is shared
    assert len({w[8] for w in words}) == 30 and all(NONCE.match(w[8]) for w in words)
    cache = s["prompt_cache"]
    assert cache["reuse_asked"] and cache["warning"] is None
    assert cache["cached_tokens"] == 8 * 29  # every request after the first hit 8 words


def test_server_timings_are_kept_beside_the_clients_numbers(
    llm_server: tuple[str, ThreadServer], tmp_path: Path
) -> None:
    url, _ = llm_server
    s = chat(url, tmp_path / "a", ignore_eos=True).summary
    t = s["server_timings"]
    assert t["requests"] == 30
    assert t["decode_per_token_ms"]["p50"] == DECODE_MS
    assert t["tokens_predicted"] == 4 * 30
    assert t["ttft_gap_ms"] is not None and t["tpot_gap_ms"] is not None
    assert any(line.startswith("server ") for line in server_lines(s))


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
def test_whole_answers_count_tokens_from_usage(
    llm_server: tuple[str, ThreadServer], tmp_path: Path, api: str
) -> None:
    url, srv = llm_server
    s = chat(url, tmp_path / "a", api=api, stream=False, max_tokens=7, ignore_eos=True).summary
    assert s["requests"]["ok"] == 30
    assert all(b["ignore_eos"] is True and b["stream"] is False for b in srv.log.bodies)
    sent_words = sum(len(_prompt_words(b)) for b in srv.log.bodies)
    assert s["tokens"]["output_total"] == 7 * 30
    assert s["tokens"]["input_total"] == sent_words
    assert s["server_timings"]["tokens_predicted"] == 7 * 30


def test_embeddings_count_prompt_tokens_and_carry_no_nonce(
    llm_server: tuple[str, ThreadServer], tmp_path: Path
) -> None:
    url, srv = llm_server
    s = chat(url, tmp_path / "a", api="openai-embeddings", ignore_eos=True).summary
    assert s["requests"]["ok"] == 30
    sent_words = sum(len(_prompt_words(b)) for b in srv.log.bodies)
    assert sent_words == 32 * 30  # no nonce: an embedding has no prefix cache to defeat
    assert s["tokens"]["input_total"] == sent_words
    assert "ignore_eos" not in srv.log.bodies[0]


def test_prompts_stay_unique_across_worker_processes(
    llm_server: tuple[str, ThreadServer], tmp_path: Path
) -> None:
    url, srv = llm_server
    s = chat(url, tmp_path / "a", workers=2, requests=40).summary
    assert s["requests"]["ok"] == 40
    firsts = [_prompt_words(b)[0] for b in srv.log.bodies]
    assert len(firsts) == 40 and len(set(firsts)) == 40
    assert all(NONCE.match(w) for w in firsts)
