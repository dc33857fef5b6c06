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
import itertools
import json
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

from tailwise.errors import BadInput
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
        "at",
        "chat",
        "i",
        "lab",
        "n",
        "reasoning",
        "req",
        "sent",
        "steer",
        "tokens",
        "transport",
    )

    def __init__(
        self, lab: Lab, transport: Any, req: dict[str, Any], chat: bool, arrival_ns: int
    ) -> None:
        self.lab, self.transport, self.req, self.chat = lab, transport, req, chat
        self.arrival_ns = arrival_ns
        try:
            n = int(req.get("max_tokens") or 32)
        except (TypeError, ValueError):
            n = 32
        self.n = max(0, min(n, MAX_TOKENS))
        self.i = 0
        self.sent: list[int] = []
        self.at = asyncio.get_running_loop().time() + lab.ttft_s  # when chunk i falls due
        lab_field = req.get("lab")
        self.steer: dict[str, Any] | None = lab_field if isinstance(lab_field, dict) else None
        r = self.steer.get("reasoning", 0) if self.steer else 0
        self.reasoning = r if isinstance(r, int) else 0
        self.tokens = _tokens(chat, self.n)

    def step(self) -> bool:
        """Write chunk ``i`` (or the end); True while more chunks follow."""
        transport = self.transport
        if transport.is_closing():
            return False
        i = self.i
        if i >= self.n:  # max_tokens < 0
            self.finish()
            return False
        if self.steer is not None:
            return self._steered_step(i)
        transport.write(self.tokens[i])
        self.sent.append(time.monotonic_ns())
        self.i = i = i + 1
        if i < self.n:
            self.at += self.lab.itl_s
            return True
        self.finish()
        return False

    def _steered_step(self, i: int) -> bool:
        """A chunk of a stream the request steers (``lab`` field): the slow, general path."""
        steer = self.steer or {}
        if i == steer.get("end_early"):  # a clean HTTP end, but no finish and no [DONE]
            self.transport.write(b"0\r\n\r\n")
            return False
        if i == steer.get("error_after"):
            error = {"error": {"message": "lab: engine failed", "code": 500}}
            self.transport.write(_event(error) + b"0\r\n\r\n")
            return False
        field = "reasoning_content" if self.chat and i < self.reasoning else "content"
        self.transport.write(_token_event(self.chat, field, i))
        self.sent.append(time.monotonic_ns())
        self.i = i + 1
        if self.i < self.n:
            self.at += self.lab.itl_s
            return True
        self.finish()
        return False

    def finish(self) -> None:
        chat, n, lab = self.chat, self.n, self.lab
        end = _FINISH[chat]
        opts = self.req.get("stream_options")
        if isinstance(opts, dict) and opts.get("include_usage"):
            usage: dict[str, Any] = {
                "prompt_tokens": 7,
                "completion_tokens": n,
                "total_tokens": n + 7,
            }
            if chat and self.reasoning:
                usage["completion_tokens_details"] = {"reasoning_tokens": min(self.reasoning, n)}
            end += _event({"object": "chat.completion.chunk", "choices": [], "usage": usage})
        if lab.truth is not None:  # before the end: a client that has it finds its row
            # By hand, not json.dumps: this runs once per stream on the lab's busy core.
            sent = ",".join(map(str, self.sent))
            lab.truth.write(f'{{"arrival_ns": {self.arrival_ns}, "chunks_ns": [{sent}]}}\n')
            lab.truth.flush()
        self.transport.write(end + _DONE)
        lab.served += 1


class _Pacer:
    """Writes every stream's chunks on time from one timer: thousands of streams, one task.

    Every stream has the same TTFT and ITL, so due instants come in order from two
    FIFO queues, no heap: first chunks (arrival + TTFT, in arrival order) and later
    chunks (the previous one's due + ITL, in the order they were written). One
    ``call_at`` for the earliest head. Each chunk's write instant is logged as it
    happens, so a late pacer shows in the truth.
    """

    def __init__(self) -> None:
        self.first: deque[_Stream] = deque()
        self.later: deque[_Stream] = deque()
        self.timer: asyncio.TimerHandle | None = None
        self.armed_at = 0.0

    def add(self, s: _Stream) -> None:
        self.first.append(s)
        if self.timer is None or s.at < self.armed_at:
            self.arm()

    def _head(self) -> deque[_Stream] | None:
        first, later = self.first, self.later
        if first and (not later or first[0].at <= later[0].at):
            return first
        return later or None

    def arm(self) -> None:
        queue = self._head()
        if queue is None:
            return
        at = queue[0].at
        if self.timer is not None:
            if self.armed_at <= at:
                return
            self.timer.cancel()
        self.armed_at = at
        self.timer = asyncio.get_running_loop().call_at(at, self.tick)

    def tick(self) -> None:
        self.timer = None
        first, later = self.first, self.later
        # At most one chunk per stream a tick, and only chunks due when it began: then
        # the loop reads its sockets before the next tick. Chasing the clock here starved
        # reads whenever the lab fell behind (measured at 1,000 streams: requests read up
        # to 50 ms after they arrived, which the truth log then booked as the client's
        # TTFT error). Streams written in this tick go to the back of ``later``, past
        # the ``owed`` entries that were there when it began.
        owed = len(later)
        now = asyncio.get_running_loop().time()
        while True:
            if first and first[0].at <= now and not (owed and later[0].at < first[0].at):
                s = first.popleft()
            elif owed and later[0].at <= now:
                s = later.popleft()
                owed -= 1
            else:
                break
            try:
                more = s.step()
            except Exception:  # one broken stream must not stop the others' clock
                s.transport.abort()
                more = False
            if more:
                later.append(s)
        self.arm()


MAX_TOKENS = 100_000
_TOKEN_LISTS: dict[bool, list[bytes]] = {True: [], False: []}


def _tokens(chat: bool, n: int) -> list[bytes]:
    """The content events of tokens 0..n-1 (encoded once, shared by every stream)."""
    out = _TOKEN_LISTS[chat]
    while len(out) < n:
        out.append(_token_event(chat, "content", len(out)))
    return out


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
        arrival_ns = time.monotonic_ns()
        try:
            req = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            req = {}
        if not isinstance(req, dict):
            req = {}
        path = url.split(b"?", 1)[0]
        if path.endswith(b"/embeddings"):
            asyncio.get_running_loop().create_task(self.embed(req))
        elif path.endswith(b"/completions"):
            self.stream(url.endswith(b"/chat/completions"), req, arrival_ns)
        else:  # /metrics, /props, ...: not a model route
            self.transport.write({b"/health": HEALTHY, b"/v1/models": MODELS}.get(path, NOT_FOUND))

    def stream(self, chat: bool, req: dict[str, Any], arrival_ns: int) -> None:
        self.transport.write(_HEAD[chat])
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


# Encoded once: the lab must stay cheaper than any client it measures.
_HEAD = {
    chat: b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
    + (_event(_chunk(True, {"role": "assistant", "content": ""})) if chat else b"")
    for chat in (True, False)
}
_FINISH = {
    chat: _event(_chunk(chat, {} if chat else "", finish="length")) for chat in (True, False)
}
_DONE = _event(b"[DONE]") + b"0\r\n\r\n"


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
    try:  # a mistake in an option is one line and exit 2, as in the CLI
        ttft_s = parse_duration_ns(a.ttft, "--ttft") / 1e9
        itl_s = parse_duration_ns(a.itl, "--itl") / 1e9
        lifetime_s = parse_duration_ns(a.lifetime, "--lifetime") / 1e9
        truth = open(a.truth, "a", encoding="utf-8") if a.truth else None  # noqa: SIM115
    except BadInput as exc:
        ap.exit(2, f"{ap.prog}: error: {exc}\n")
    except OSError as exc:
        ap.exit(2, f"{ap.prog}: error: --truth: {a.truth}: {exc.strerror}\n")
    lab = Lab(ttft_s, itl_s, truth)
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner, contextlib.suppress(KeyboardInterrupt):
        runner.run(serve(lab, a.port, lifetime_s))
    sys.exit(0)


if __name__ == "__main__":
    main()
