"""Targets that misbehave on purpose, each in its own process (``python -m``).

``python -m tests.reliability.badservers KIND [--bytes N] [--every DURATION]``
prints ``listening on URL`` and serves on 127.0.0.1 until ``--lifetime`` ends:

* ``silent`` - accepts and reads, never answers;
* ``endless-sse`` - answers 200 with an OpenAI chat stream that never ends, one
  content chunk every ``--every`` (0: as fast as the socket takes them);
* ``huge`` - answers 200 with a body of ``--bytes`` bytes (Content-Length), sent
  as fast as the client reads;
* ``huge-event`` - answers 200 with an event stream whose first event is one
  ``data:`` line of ``--bytes`` bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from typing import Any

_CHUNK = (
    "data: "
    + json.dumps({"object": "chat.completion.chunk", "choices": [{"delta": {"content": "tok"}}]})
    + "\n\n"
).encode()
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
_MIB = 1 << 20


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _read_request(reader: asyncio.StreamReader) -> bool:
    """Read one request's head and body; False at end of stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return True


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, a: Any) -> None:
    while await reader.read(65536):
        pass


async def _endless_sse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, a: Any) -> None:
    await _read_request(reader)
    writer.write(_SSE_HEAD)
    batch = _chunked(_CHUNK * (1 if a.every > 0 else 64))
    while True:
        writer.write(batch)
        await writer.drain()
        if a.every > 0:
            await asyncio.sleep(a.every)


async def _huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, a: Any) -> None:
    while await _read_request(reader):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % a.bytes)
        block, left = b"x" * _MIB, a.bytes
        while left > 0:
            writer.write(block[: min(left, _MIB)])
            left -= _MIB
            await writer.drain()


async def _huge_event(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, a: Any) -> None:
    await _read_request(reader)
    writer.write(_SSE_HEAD + _chunked(b"data: "))
    left = a.bytes
    while left > 0:
        writer.write(_chunked(b"x" * min(left, _MIB)))
        left -= _MIB
        await writer.drain()
    writer.write(_chunked(b"\n\n") + b"0\r\n\r\n")
    await writer.drain()


HANDLERS = {
    "silent": _silent,
    "endless-sse": _endless_sse,
    "huge": _huge,
    "huge-event": _huge_event,
}


async def _serve(a: Any) -> None:
    handler = HANDLERS[a.kind]

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await handler(reader, writer, a)
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.serve_forever(), a.lifetime)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.reliability.badservers")
    ap.add_argument("kind", choices=sorted(HANDLERS))
    ap.add_argument("--bytes", type=int, default=256 * _MIB)
    ap.add_argument("--every", type=float, default=0.001, help="seconds between stream chunks")
    ap.add_argument("--lifetime", type=float, default=120.0)
    ap.add_argument("--port", type=int, default=0)  # tailwise.server.spawn passes --port 0
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(ap.parse_args()))


if __name__ == "__main__":
    main()
