"""A loopback OpenAI-style streaming server with a known TTFT and ITL, that logs what it sent.

``POST /v1/embeddings`` answers with one JSON body after ``--ttft``.
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


def _event(obj: object) -> bytes:
    data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)  # one HTTP chunk per SSE event


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
        if url.endswith(b"/embeddings"):
            await self.embed(req)
            return
        chat = url.endswith(b"/chat/completions")
        n = int(req.get("max_tokens") or 32)
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        self.transport.write(head)
        if chat:
            self.transport.write(_event(_chunk(True, {"role": "assistant", "content": ""})))
        sent: list[int] = []
        loop = asyncio.get_running_loop()
        start = loop.time()
        lab_field = req.get("lab")
        steer: dict[str, Any] = lab_field if isinstance(lab_field, dict) else {}
        reasoning = steer.get("reasoning", 0) if isinstance(steer.get("reasoning"), int) else 0
        for i in range(n):
            due = start + self.lab.ttft_s + i * self.lab.itl_s
            await asyncio.sleep(max(due - loop.time(), 0))
            if self.transport.is_closing():
                return
            if i == steer.get("end_early"):  # a clean HTTP end, but no finish and no [DONE]
                self.transport.write(b"0\r\n\r\n")
                return
            if i == steer.get("error_after"):
                error = {"error": {"message": "lab: engine failed", "code": 500}}
                self.transport.write(_event(error) + b"0\r\n\r\n")
                return
            text = f" tok{i}"
            field = "reasoning_content" if chat and i < reasoning else "content"
            self.transport.write(_event(_chunk(chat, {field: text} if chat else text)))
            sent.append(time.monotonic_ns())
        self.transport.write(_event(_chunk(chat, {} if chat else "", finish="length")))
        opts = req.get("stream_options")
        if isinstance(opts, dict) and opts.get("include_usage"):
            usage: dict[str, Any] = {
                "prompt_tokens": 7,
                "completion_tokens": n,
                "total_tokens": n + 7,
            }
            if chat and reasoning:
                usage["completion_tokens_details"] = {"reasoning_tokens": min(reasoning, n)}
            self.transport.write(
                _event({"object": "chat.completion.chunk", "choices": [], "usage": usage})
            )
        self.transport.write(_event(b"[DONE]") + b"0\r\n\r\n")
        self.lab.served += 1
        if self.lab.truth is not None:
            self.lab.truth.write(json.dumps({"arrival_ns": arrival_ns, "chunks_ns": sent}) + "\n")
            self.lab.truth.flush()

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
