"""Floods, huge bodies and SIGTERM against the two servers tailwise ships (issue 40, D13).

`tailwise proxy` and `tailwise serve-demo` face hundreds of connections that pipeline
thousands of requests and never read an answer, bodies of hundreds of MiB, and a
SIGTERM in the middle of it all. Each test asserts what the docs promise: memory held
to a stated bound, a fresh connection still served, an exit 0 within 4 s of SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tailwise.proxy import spawn_proxy
from tailwise.server import spawn_demo
from tests.reliability.conftest import raw_servers

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc"),
]

FLOOD = 300  # connections
DEPTH = 2000  # requests pipelined on each
STOP_S = 4.0  # SIGTERM to exit, as docs/proxy.md and docs/demo-server.md state


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head (and its Content-Length body, drained); returns the request line."""
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            left = int(line.split(b":")[1])
            while left:
                left -= len(await reader.read(min(left, 1 << 20)))
    return head.split(b"\r\n", 1)[0]


@contextmanager
def flood(port: int, path: str, n: int = FLOOD, depth: int = DEPTH) -> Iterator[None]:
    """``n`` connections, each pipelining ``depth`` GETs of ``path``, never reading an answer."""
    blob = f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * depth
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(blob)  # the kernel's buffers take it, whether the server reads or not
            socks.append(s)
        yield
    finally:
        for s in socks:
            s.close()


def get(port: int, path: str, timeout_s: float) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        got = b""
        while part := s.recv(65536):
            got += part
        return got


def stop_bound_s() -> float:
    """:data:`STOP_S`, stretched by how oversubscribed the machine is (1-minute load
    average over cores, when above 1): beside four CPU-bound processes on 2 cores the
    demo server took 4.6 s to exit, its shutdown's work unchanged, its share of a core
    about a third. On a machine with a core to spare the bound is the documented 4 s."""
    return STOP_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def stop(proc: subprocess.Popen[str]) -> tuple[int, float]:
    """SIGTERM; (exit code, seconds to exit)."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rc, time.monotonic() - t0


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def truth_rows(path: Path, kind: str) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


# D13, the proxy: 5,000 connections pipelining 2,000 requests each held 1.4 GB in the proxy
# (every request in a read was parsed and kept, owed an answer) and SIGTERM then took as long
# as logging a million unfinished requests (24 s for 500 connections). The proxy now parses a
# connection no further than 32 requests ahead of their answers and does not read it meanwhile.
def test_the_proxy_reads_a_deep_pipeline_no_further_than_32_requests_ahead(
    tmp_path: Path,
) -> None:
    async def target(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            if b"/health" not in await read_request(r):
                while await r.read(65536):  # the flood is never answered: its requests pile up
                    pass
                return
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            return

    truth = tmp_path / "truth.jsonl"
    with raw_servers() as serve:
        to = serve(target).removeprefix("http://")
        proc, url = spawn_proxy(to, "--log", str(truth), lifetime="120s")
        try:
            with flood(port_of(url), "/hold"):
                time.sleep(1.0)
                t0 = time.monotonic()
                assert get(port_of(url), "/health", timeout_s=10).startswith(b"HTTP/1.1 200")
                health_s = time.monotonic() - t0
                rss_mb = peak_rss_mb(proc.pid)
                rc, stop_s = stop(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert rc == 0 and stop_s < stop_bound_s(), (rc, stop_s, os.getloadavg())
    held = Counter(r["conn"] for r in truth_rows(truth, "request") if r["outcome"] == "unfinished")
    assert len(held) == FLOOD and max(held.values()) == 32, held.most_common(3)
    # 600,000 requests were sent; 9,600 were read. Before: 1,000,000 parsed for 500 connections,
    # 505 MB, /health answered after 14 s.
    assert rss_mb < 150, rss_mb
    assert health_s < 3.0, health_s


# Bodies stream through the proxy, each way, with at most 1 MiB waiting in each direction of a
# connection (docs/proxy.md): a 256 MiB upload and a 256 MiB answer, the target's reads slowed
# by a stall so that bytes wait in the proxy.
def test_the_proxy_streams_a_huge_body_each_way_without_holding_it(tmp_path: Path) -> None:
    size = 256 << 20

    async def target(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        assert (await read_request(r)).startswith(b"POST")
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        piece = b"y" * (1 << 20)
        for _ in range(size >> 20):
            w.write(piece)
            await w.drain()

    with raw_servers() as serve:
        to = serve(target).removeprefix("http://")
        proc, url = spawn_proxy(to, "--stall", "100ms/500ms", "--log", str(tmp_path / "t.jsonl"))
        try:
            with socket.create_connection(("127.0.0.1", port_of(url)), timeout=60) as s:
                s.sendall(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
                piece = b"x" * (1 << 20)
                for _ in range(size >> 20):
                    s.sendall(piece)
                assert s.recv(100).endswith(b"ok")
                s.sendall(b"GET /down HTTP/1.1\r\nHost: x\r\n\r\n")
                got = 0
                while got < size:
                    part = s.recv(1 << 20)
                    assert part
                    got += len(part)
            rss_mb = peak_rss_mb(proc.pid)
            rc, _ = stop(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert rc == 0
    assert rss_mb < 100, rss_mb  # about 45 MB: the body never sits whole in the proxy


# A flood of connections beyond the proxy's cap: it serves --max-connections at once, leaves the
# rest in the listen backlog and accepts them as others close. Every client is answered.
def test_the_proxy_serves_a_flood_beyond_its_connection_cap(tmp_path: Path) -> None:
    cap, clients = 20, 300

    async def target(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        await asyncio.sleep(0.02)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await w.drain()

    async def client(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        got = await reader.read()
        writer.close()
        return got

    async def all_clients(port: int) -> list[bytes]:
        return await asyncio.wait_for(
            asyncio.gather(*(client(port) for _ in range(clients))), timeout=60
        )

    truth = tmp_path / "truth.jsonl"
    with raw_servers() as serve:
        to = serve(target).removeprefix("http://")
        cmd = [sys.executable, "-m", "tailwise", "proxy", "--listen", "127.0.0.1:0", "--to", to]
        cmd += ["--max-connections", str(cap), "--log", str(truth), "--lifetime", "120s"]
        with (tmp_path / "err.txt").open("w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            assert proc.stdout is not None
            port = port_of(proc.stdout.readline().strip())
            answers = asyncio.run(all_clients(port))
            rc, _ = stop(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert rc == 0
    assert all(a.startswith(b"HTTP/1.1 200") and a.endswith(b"ok") for a in answers)
    assert f"{cap} connections open; further ones wait" in (tmp_path / "err.txt").read_text()
    events = []
    for c in truth_rows(truth, "connection"):
        events += [(c["opened_ns"], 1), (c["closed_ns"], -1)]
    open_now = most = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        open_now += step
        most = max(most, open_now)
    assert len(events) == 2 * clients and most <= cap, most


# D13, the demo's SIGTERM: it did not stop in 4 s under a flood, and once it did it died of the
# signal uvicorn raised again (exit 143). Now: 2 s for answers in flight, then cut, exit 0.
def test_serve_demo_stops_on_sigterm_under_a_flood() -> None:
    proc, url = spawn_demo("http", lifetime="120s")
    try:
        with flood(port_of(url), "/health"):
            time.sleep(1.0)
            rc, stop_s = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0 and stop_s < stop_bound_s(), (rc, stop_s, os.getloadavg())


# Out of descriptors: with a 200-file limit the proxy caps itself at (200 - 64) / 2 = 68
# connections (each takes two), so 300 clients neither crash it nor fail at the target for
# want of a descriptor: 68 are served, the rest wait to be accepted, and once the flood is
# gone a new client is served.
def test_the_proxy_caps_its_connections_by_the_file_limit(tmp_path: Path) -> None:
    import resource

    async def target(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            await read_request(r)
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))

    get_x = b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n"
    with raw_servers() as serve:
        to = serve(target).removeprefix("http://")
        cmd = [sys.executable, "-m", "tailwise", "proxy", "--listen", "127.0.0.1:0", "--to", to]
        cmd += ["--log", str(tmp_path / "t.jsonl"), "--lifetime", "60s"]
        with (tmp_path / "err.txt").open("w") as err:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, text=True, preexec_fn=few_files
            )
        try:
            assert proc.stdout is not None
            port = port_of(proc.stdout.readline().strip())
            socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(300)]
            for s in socks:
                s.sendall(get_x)
            answered = 0
            for s in socks[:68]:
                answered += s.recv(100).startswith(b"HTTP/1.1 200")
            for s in socks:
                s.close()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(get_x)
                after = s.recv(100)
            rc, _ = stop(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert answered == 68 and after.startswith(b"HTTP/1.1 200") and rc == 0
    assert "68 connections open; further ones wait" in (tmp_path / "err.txt").read_text()
    closed = Counter(r["outcome"] for r in truth_rows(tmp_path / "t.jsonl", "request"))
    assert "upstream_closed" not in closed, closed  # no connection to the target failed
