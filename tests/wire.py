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
