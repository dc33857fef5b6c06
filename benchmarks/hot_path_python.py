"""The Python side of one request on the HTTP hot path, without any syscall.

A diagnostic, not run by ``make bench``: it drives the real pacer tick
(:class:`~tailwise.loadgen.engine.attack.OpenLoop`), the real pool dispatch and the
real response handling (:class:`~tailwise.loadgen.transport.http.Conn`: httptools
parse, completion, the engine's bookkeeping) against sockets that do nothing,
one request per tick as at ~65k req/s. What it prints is the share of a
request's cost that Python code can change; the rest (``send``, ``recv``,
``epoll``, waking the server) is the kernel's (see docs/benchmarks.md).

Usage: ``python benchmarks/hot_path_python.py [--requests N] [--repeat K]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import numpy as np

import tailwise.loadgen.engine.attack as attack
from tailwise.loadgen.transport.http import HttpTransport
from tailwise.loadgen.transport.http_conn import Conn
from tailwise.loadgen.transport.targets import parse_url

RESPONSE = (
    b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 21 Nov 2026 14:00:00 GMT\r\n"
    b"Content-Type: application/octet-stream\r\nContent-Length: 3\r\n"
    b"Connection: keep-alive\r\n\r\nok\n"
)
GAP_NS = 1_000  # schedule spacing: the fake clock moves one gap per request


class _NullSocket:
    """A connection's socket that accepts writes and does nothing."""

    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


class _NullWaker:
    def arm(self, at_ns: int, clock_ns: int) -> None:
        pass

    def close(self) -> None:
        pass


async def one_run(requests: int) -> float:
    """Microseconds of Python per request: tick + dispatch + response + completion."""
    transport = HttpTransport(
        [parse_url("http://127.0.0.1:9/")],
        [[b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"]],
        timeout_ns=10**10,
        connect_timeout_ns=10**9,
    )
    pool = transport._pools[0]
    for _ in range(8):
        conn = Conn(pool)
        conn.connection_made(_NullSocket())
        pool.idle.append(conn)
        pool.all.add(conn)
    engine = attack.OpenLoop(
        transport, iter([np.arange(requests, dtype=np.int64) * GAP_NS]), 10_000
    )
    pool.on_done = engine.on_done
    clock = [0]
    real_clock = attack.now_ns
    attack.now_ns = lambda: clock[0]  # the pacer's clock: exactly one request due per tick
    try:
        engine.prepare()
        engine.t0 = 0
        engine._waker = _NullWaker()
        started = time.perf_counter()
        for i in range(requests):
            clock[0] = i * GAP_NS
            conn = pool.idle[-1]  # the connection the tick is about to use
            engine._tick()
            conn.data_received(RESPONSE)
        elapsed = time.perf_counter() - started
    finally:
        attack.now_ns = real_clock
    assert len(engine.completed) == requests  # every request went through the whole path
    return elapsed / requests * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    runs: list[Any] = [asyncio.run(one_run(a.requests)) for _ in range(a.repeat)]
    print(
        f"Python per request: median {statistics.median(runs):.2f} us, "
        f"best {min(runs):.2f} us ({a.repeat} runs of {a.requests:,} requests)"
    )


if __name__ == "__main__":
    main()
