"""Fixtures of the reliability suite: a fault-injecting proxy in front of a loopback target.

Every module here sets ``pytestmark = pytest.mark.reliability``; full lengths
are marked ``long`` as well (deselected by default, ``pytest -m long`` runs them).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.reliability.helpers import Proxies

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[Proxies]:
    """Proxies started by the test, all stopped after it (see :class:`Proxies`)."""
    proxies = Proxies(tmp_path)
    try:
        yield proxies
    finally:
        proxies.stop()


@pytest.fixture
def raw_server() -> Iterator[Callable[[Answer], str]]:
    """``raw_server(answer)`` -> base URL; ``answer(reader, writer)`` runs per connection."""
    with raw_servers() as start:
        yield start


@contextlib.contextmanager
def raw_servers() -> Iterator[Callable[[Answer], str]]:
    """:func:`raw_server` for any scope: servers on one loop in a thread, closed at the end."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[asyncio.Server] = []

    def start(answer: Answer) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await answer(reader, writer)  # type: ignore[misc]
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        async def serve() -> asyncio.Server:
            return await asyncio.start_server(handle, "127.0.0.1", 0)

        server = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    try:
        yield start
    finally:
        asyncio.run_coroutine_threadsafe(_shut(servers), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _shut(servers: list[asyncio.Server]) -> None:
    for s in servers:
        s.close()
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
