"""Small pieces the tests' own asyncio HTTP servers share."""

from __future__ import annotations

import asyncio
import json
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
    from tailwise.loadgen.http import HttpTransport
    from tailwise.loadgen.targets import parse_url

    transport = HttpTransport(
        [parse_url("http://127.0.0.1:9/")],
        [[b"GET / HTTP/1.1\r\n\r\n"]],
        timeout_ns=timeout_ns,
        connect_timeout_ns=10**9,
        streaming=streaming,
    )
    pool = transport._pools[0]
    settled: list[int] = []
    pool.on_done = lambda block, j: settled.append(block.base + j)
    pool.start_waiting = lambda conn: None
    return pool, settled
