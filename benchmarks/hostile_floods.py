"""Hostile-server rows of floods and closing patterns (issue 40): run by hostile_servers.run_all.

Each row is a tailwise run of ``seconds`` while something hostile happens beside it:
300 connections pipelining 2,000 requests each and reading no answer, against the proxy
and against the demo server (then SIGTERM), or a target that resets every connection
after its third answer. The short versions are tests in tests/reliability/test_floods.py
and test_attack_holes.py.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tailwise
from tailwise.proxy import spawn_proxy
from tailwise.server import spawn_demo

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]
FLOOD, DEPTH = 300, 2000


@contextmanager
def flood(url: str, path: str) -> Iterator[None]:
    """:data:`FLOOD` connections, each pipelining :data:`DEPTH` GETs, never reading."""
    port = int(url.rsplit(":", 1)[1])
    blob = f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * DEPTH
    socks = []
    try:
        for _ in range(FLOOD):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(blob)
            socks.append(s)
        yield
    finally:
        for s in socks:
            s.close()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def sigterm(proc: subprocess.Popen[str]) -> tuple[int, float]:
    t = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    return rc, time.perf_counter() - t


def p99_ms(res: Any) -> str:
    p99 = res.summary["latency_ms"]["p99"]
    return "none" if p99 is None else f"{p99:.1f} ms"


async def _head(r: asyncio.StreamReader) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0]


def _flood_then_stop(
    proc: subprocess.Popen[str], url: str, flooded: str, path: str, out: Path, seconds: int
) -> tuple[Any, float, int, float, float]:
    """A 20/s run to ``url + path`` while ``url + flooded`` is flooded, then SIGTERM to
    ``proc``: ``(result, peak RSS MB, exit code, seconds to exit, wall s)``; ``proc``
    never outlives it."""
    try:
        t = time.perf_counter()
        with flood(url, flooded):
            res = tailwise.run(
                url + path, rate="20/s", duration=f"{seconds}s", out=str(out),
                server_metrics="off", progress=False,
            )  # fmt: skip
            rss = peak_rss_mb(proc.pid)
            rc, stop_s = sigterm(proc)
        return res, rss, rc, stop_s, time.perf_counter() - t
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def proxy_flood(
    start: Callable[[Answer], str], out: Path, seconds: int, row: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            if b"/hold" in await _head(r):
                while await r.read(65536):  # the flood is never answered; ends when it goes
                    pass
                return
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    out.mkdir(parents=True)
    proc, url = spawn_proxy(start(serve).removeprefix("http://"), "--log", str(out / "t.jsonl"))
    res, rss, rc, stop_s, wall = _flood_then_stop(proc, url, "/hold", "/x", out / "run", seconds)
    fact = (
        f"proxy peak {rss:.0f} MB (was 328), SIGTERM to exit {rc} in {stop_s:.1f} s (was 6.8), "
        f"latency p99 through it {p99_ms(res)} (was 3,959 ms)"
    )
    load = f"20/s open, {FLOOD} x {DEPTH:,} pipelined"
    return row("proxy: 300 connections pipeline, never read (D13)", load, res, fact, wall)


def demo_flood(out: Path, seconds: int, row: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    proc, url = spawn_demo("http", lifetime="600s")
    res, rss, rc, stop_s, wall = _flood_then_stop(proc, url, "/health", "/predict", out, seconds)
    fact = (
        f"SIGTERM to exit {rc} in {stop_s:.1f} s (was: killed by the signal, 143 in a shell, "
        f"after 2.5 s, up to 4.9 s at load 5); demo peak {rss:.0f} MB, latency p99 {p99_ms(res)}"
    )
    load = f"20/s open, {FLOOD} x {DEPTH:,} pipelined"
    return row("serve-demo: 300 connections pipeline, then SIGTERM (D13)", load, res, fact, wall)


def nth_answer_resets(
    start: Callable[[Answer], str], out: Path, seconds: int, row: Callable[..., dict[str, Any]]
) -> dict[str, Any]:
    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for _ in range(3):
            await _head(r)
            w.write(b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok")
            await w.drain()
        await asyncio.sleep(0.01)  # the next request has come: the close resets
        sock = w.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        w.transport.abort()

    url = start(serve) + "/x"
    t = time.perf_counter()
    res = tailwise.run(url, concurrency=8, duration=f"{seconds}s", out=str(out), progress=False)
    wall = time.perf_counter() - t
    errors = {**res.summary["requests"]["errors"], **res.summary["requests"]["warmup"]["errors"]}
    fact = (
        f"resets: {errors.get('reset', 0)} (was 2,325 of 9,320); "
        f"reconnects: {res.summary['reconnects']}"
    )
    return row("resets every connection after its third answer", "8 users closed", res, fact, wall)
