"""Small pieces the tests' own asyncio HTTP servers share."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any


async def read_json_request(reader: asyncio.StreamReader) -> Any:
    """One request's JSON body (the head read up to its blank line, the body by its
    Content-Length); raises IncompleteReadError when the client closes."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return json.loads(await reader.readexactly(length))


class FakeWire:
    """A connection's transport for driving a protocol by hand: it notes an abort or close."""

    def __init__(self) -> None:
        self.aborted = self.closed = False

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def write(self, data: bytes) -> None:
        pass


def hand_pool(*, streaming: bool = False, timeout_ns: int = 10**10) -> tuple[Any, list[int]]:
    """A transport's one pool (a loopback URL never dialled) for connections driven by hand,
    and the list of sequence numbers it settles, in order."""
    from tailwise.loadgen.llm.answers import AnswerBook
    from tailwise.loadgen.transport.http import HttpTransport
    from tailwise.loadgen.transport.targets import parse_url

    transport = HttpTransport(
        [parse_url("http://127.0.0.1:9/")],
        [[b"GET / HTTP/1.1\r\n\r\n"]],
        timeout_ns=timeout_ns,
        connect_timeout_ns=10**9,
        answers=AnswerBook(streams=True) if streaming else None,
    )
    pool = transport._pools[0]
    settled: list[int] = []
    pool.on_done = lambda block, j: settled.append(block.base + j)
    pool.start_waiting = lambda conn: None
    return pool, settled


class ThreadedServer:
    """An asyncio HTTP/1.1 server on 127.0.0.1 in a daemon thread, for a test's own wire:
    a subclass writes :meth:`serve` (one connection; a closed peer ends it quietly).
    ``with server as url:`` starts it and stops its loop at the end."""

    read_limit = 1 << 16  # asyncio's stream buffer (its default); a subclass may raise it

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.port = 0

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._conn, "127.0.0.1", 0, limit=self.read_limit)
        )
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        server.close()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self.serve(reader, writer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    def __enter__(self) -> str:
        self.thread.start()
        self.ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
