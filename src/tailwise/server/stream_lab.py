"""A loopback OpenAI-style streaming server with a known TTFT and ITL, that logs what it sent.

``POST /v1/embeddings`` answers with one JSON body after ``--ttft``; ``GET /health``
answers 200 and ``GET /v1/models`` lists the one model, ``lab``, as vLLM does (other
tools check both before a run); any other path is a 404.
``POST /v1/chat/completions`` and ``/v1/completions`` stream ``max_tokens``
content chunks (default 32) as Server-Sent Events over chunked transfer
encoding, the way vLLM does: a role chunk at once, the first content chunk
``--ttft`` after the request arrived, then one every ``--itl``, a finish chunk,
a usage chunk (when ``stream_options.include_usage``) and ``[DONE]``.

A body field ``"lab": {"end_early": k}`` ends the stream cleanly after k chunks
but with no finish reason or ``[DONE]`` (a truncated stream); ``{"error_after": k}``
sends an error event after k chunks instead; ``{"reasoning": k}`` makes the first
k chunks of a chat stream ``reasoning_content`` (a reasoning model thinking before
it answers; usage then reports them as ``completion_tokens_details.reasoning_tokens``).

The truth is what the server *actually* did, not what it was asked to do:
with ``--truth FILE`` it appends one JSON line per request with the monotonic
instants (``time.monotonic_ns``, the same clock the load generator uses on
this machine) of the request's arrival and of every content chunk's write.

Run: ``python -m tailwise.server.stream_lab --port 0`` prints ``listening on URL``.
It binds 127.0.0.1 and exits after ``--lifetime``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from tailwise.server import RequestProtocol
from tailwise.units import parse_duration_ns


class Lab:
    def __init__(self, ttft_s: float, itl_s: float, truth: TextIO | None) -> None:
        self.ttft_s, self.itl_s, self.truth = ttft_s, itl_s, truth
        self.served = 0
        self.pacer = _Pacer()


class _Stream:
    """One answer's chunks, written by the pacer when each falls due (no task per stream)."""

    __slots__ = (
        "arrival_ns",
        "chat",
        "i",
        "lab",
        "n",
        "reasoning",
        "req",
        "sent",
        "start",
        "steer",
        "transport",
    )

    def __init__(
        self, lab: Lab, transport: Any, req: dict[str, Any], chat: bool, arrival_ns: int
    ) -> None:
        self.lab, self.transport, self.req, self.chat = lab, transport, req, chat
        self.arrival_ns = arrival_ns
        self.n = int(req.get("max_tokens") or 32)
        self.i = 0
        self.sent: list[int] = []
        self.start = asyncio.get_running_loop().time()
        lab_field = req.get("lab")
        self.steer: dict[str, Any] = lab_field if isinstance(lab_field, dict) else {}
        r = self.steer.get("reasoning", 0)
        self.reasoning = r if isinstance(r, int) else 0

    def due(self) -> float:
        return self.start + self.lab.ttft_s + self.i * self.lab.itl_s

    def step(self) -> bool:
        """Write chunk ``i`` (or the end); True while more chunks follow."""
        if self.transport.is_closing():
            return False
        i, chat = self.i, self.chat
        if self.n <= i:
            self.finish()
            return False
        if i == self.steer.get("end_early"):  # a clean HTTP end, but no finish and no [DONE]
            self.transport.write(b"0\r\n\r\n")
            return False
        if i == self.steer.get("error_after"):
            error = {"error": {"message": "lab: engine failed", "code": 500}}
            self.transport.write(_event(error) + b"0\r\n\r\n")
            return False
        field = "reasoning_content" if chat and i < self.reasoning else "content"
        self.transport.write(_token_event(chat, field, i))
        self.sent.append(time.monotonic_ns())
        self.i = i + 1
        if self.i < self.n:
            return True
        self.finish()
        return False

    def finish(self) -> None:
        chat, n, lab = self.chat, self.n, self.lab
        self.transport.write(_event(_chunk(chat, {} if chat else "", finish="length")))
        opts = self.req.get("stream_options")
        if isinstance(opts, dict) and opts.get("include_usage"):
            usage: dict[str, Any] = {
                "prompt_tokens": 7,
                "completion_tokens": n,
                "total_tokens": n + 7,
            }
            if chat and self.reasoning:
                usage["completion_tokens_details"] = {"reasoning_tokens": min(self.reasoning, n)}
            self.transport.write(
                _event({"object": "chat.completion.chunk", "choices": [], "usage": usage})
            )
        self.transport.write(_event(b"[DONE]") + b"0\r\n\r\n")
        lab.served += 1
        if lab.truth is not None:
            row = {"arrival_ns": self.arrival_ns, "chunks_ns": self.sent}
            lab.truth.write(json.dumps(row) + "\n")
            lab.truth.flush()


class _Pacer:
    """Writes every stream's chunks on time from one timer: thousands of streams, one task.

    A heap of (due, order, stream); one ``call_at`` for the earliest due instant. Each
    chunk's write instant is logged as it happens, so a late pacer shows in the truth.
    """

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, _Stream]] = []
        self.order = 0
        self.timer: asyncio.TimerHandle | None = None
        self.armed_at = 0.0

    def add(self, s: _Stream) -> None:
        self.order += 1
        heapq.heappush(self.heap, (s.due(), self.order, s))
        self.arm()

    def arm(self) -> None:
        if not self.heap:
            return
        at = self.heap[0][0]
        if self.timer is not None:
            if self.armed_at <= at:
                return
            self.timer.cancel()
        self.armed_at = at
        self.timer = asyncio.get_running_loop().call_at(at, self.tick)

    def tick(self) -> None:
        self.timer = None
        loop_time = asyncio.get_running_loop().time
        heap = self.heap
        now = loop_time()
        while heap and heap[0][0] <= now:
            _, order, s = heapq.heappop(heap)
            try:
                more = s.step()
            except Exception:  # one broken stream must not stop the others' clock
                s.transport.abort()
                more = False
            if more:
                heapq.heappush(heap, (s.due(), order, s))
            now = loop_time()
        self.arm()


_TOKEN_EVENTS: dict[tuple[bool, str, int], bytes] = {}


def _token_event(chat: bool, field: str, i: int) -> bytes:
    """The event of token ``i`` (encoded once: the lab must stay cheaper than any client)."""
    key = (chat, field, i)
    out = _TOKEN_EVENTS.get(key)
    if out is None:
        text = f" tok{i}"
        out = _event(_chunk(chat, {field: text} if chat else text))
        if len(_TOKEN_EVENTS) < 100_000:
            _TOKEN_EVENTS[key] = out
    return out


def _event(obj: object) -> bytes:
    data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)  # one HTTP chunk per SSE event


NOT_FOUND = (
    b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)
# What vLLM answers too: peers (GuideLLM) check /health and ask /v1/models before a run.
HEALTHY = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
_MODELS = b'{"object":"list","data":[{"id":"lab","object":"model","owned_by":"tailwise"}]}'
MODELS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(_MODELS),
    _MODELS,
)


class _Http(RequestProtocol):
    def __init__(self, lab: Lab) -> None:
        super().__init__()
        self.lab = lab

    def handle(self, url: bytes, body: bytes) -> None:
        arrival = time.monotonic_ns()
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            req = {}
        if not isinstance(req, dict):
            req = {}
        asyncio.get_running_loop().create_task(self.stream(url, req, arrival))

    async def stream(self, url: bytes, req: dict[str, Any], arrival_ns: int) -> None:
        path = url.split(b"?", 1)[0]
        if path.endswith(b"/embeddings"):
            await self.embed(req)
            return
        if not path.endswith(b"/completions"):  # /metrics, /props, ...: not a model route
            answer = {b"/health": HEALTHY, b"/v1/models": MODELS}.get(path, NOT_FOUND)
            self.transport.write(answer)
            return
        chat = url.endswith(b"/chat/completions")
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        self.transport.write(head)
        if chat:
            self.transport.write(_event(_chunk(True, {"role": "assistant", "content": ""})))
        self.lab.pacer.add(_Stream(self.lab, self.transport, req, chat, arrival_ns))

    async def embed(self, req: dict[str, Any]) -> None:
        """``/v1/embeddings``: one JSON answer after ``--ttft`` (no stream)."""
        await asyncio.sleep(self.lab.ttft_s)
        text = str(req.get("input", ""))
        body = json.dumps(
            {
                "object": "list",
                "model": "lab",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.0] * 8}],
                "usage": {"prompt_tokens": len(text.split()), "total_tokens": len(text.split())},
            }
        ).encode()
        if not self.transport.is_closing():
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            )
            self.transport.write(head % len(body) + body)
            self.lab.served += 1


def read_truth(path: str | Path) -> tuple[list[int], list[int]]:
    """The truth log as ``(ttft_ns per stream, every inter-chunk gap in ns)``.

    TTFT here is the server's own: first content chunk written minus request arrival.
    """
    ttft: list[int] = []
    gaps: list[int] = []
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        sent = row["chunks_ns"]
        if sent:
            ttft.append(sent[0] - row["arrival_ns"])
            gaps.extend(b - a for a, b in itertools.pairwise(sent))
    return ttft, gaps


def _chunk(chat: bool, part: object, finish: str | None = None) -> dict[str, Any]:
    if chat:
        choice = {"index": 0, "delta": part, "finish_reason": finish}
        return {"object": "chat.completion.chunk", "model": "lab", "choices": [choice]}
    return {
        "object": "text_completion",
        "model": "lab",
        "choices": [{"index": 0, "text": part, "finish_reason": finish}],
    }


async def serve(lab: Lab, port: int, lifetime_s: float) -> None:
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: _Http(lab), "127.0.0.1", port, backlog=4096)
    host, bound = srv.sockets[0].getsockname()[:2]
    print(f"listening on http://{host}:{bound}", flush=True)
    try:
        await asyncio.sleep(lifetime_s)
    finally:
        srv.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tailwise.server.stream_lab")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft", default="50ms")
    ap.add_argument("--itl", default="10ms")
    ap.add_argument("--truth", default=None, help="append what was sent, one JSON line a request")
    ap.add_argument("--lifetime", default="600s")
    a = ap.parse_args(argv)
    truth = open(a.truth, "a", encoding="utf-8") if a.truth else None  # noqa: SIM115
    lab = Lab(
        parse_duration_ns(a.ttft, "--ttft") / 1e9, parse_duration_ns(a.itl, "--itl") / 1e9, truth
    )
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner, contextlib.suppress(KeyboardInterrupt):
        runner.run(serve(lab, a.port, parse_duration_ns(a.lifetime, "--lifetime") / 1e9))
    sys.exit(0)


if __name__ == "__main__":
    main()
