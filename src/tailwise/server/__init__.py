"""Built-in targets that run on loopback, with latency laws known in closed form.

Shared here: :class:`RequestProtocol`, the request-reading half every built-in
server needs, and :func:`spawn`, which starts one in its own process (so it
gets its own core) and returns its URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from typing import Any

import httptools


class RequestProtocol(asyncio.Protocol):
    """Reads HTTP/1.1 requests; a subclass answers in :meth:`handle`."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.url = b""
        self.body = bytearray()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        url, body = self.url, bytes(self.body)
        self.url, self.body = b"", bytearray()
        self.handle(url, body)

    def handle(self, url: bytes, body: bytes) -> None:
        raise NotImplementedError


class Background:
    """A coroutine that runs for the server's lifetime (an engine or batcher loop)."""

    _task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def spawn(module: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """Run ``python -m module args... --port 0``; returns the process and its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args, "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"{module} did not start: {line!r}")
    return proc, line.removeprefix("listening on ")


def spawn_demo(kind: str, *args: str, lifetime: str = "600s") -> tuple[subprocess.Popen[str], str]:
    """Start ``tailwise serve-demo --kind kind args...`` on a free port (needs ``[server]``)."""
    return spawn("tailwise", "serve-demo", "--kind", kind, "--lifetime", lifetime, *args)
