"""The proxy's parts: fault forms, reproducible draws, timed and bounded forwarding, HTTP."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tailwise
from tailwise.clock import now_ns
from tailwise.errors import BadInput
from tailwise.proxy import read_truth
from tailwise.proxy.faults import (
    PASS,
    Dice,
    Faults,
    parse_address,
    parse_bandwidth_bps,
    parse_faults,
    parse_schedule,
    parse_slow,
    parse_stall,
)
from tailwise.proxy.pipe import HIGH_WATER, Pipe
from tests.reliability.helpers import Proxies

pytestmark = pytest.mark.reliability
MS = 1_000_000


def test_fault_forms() -> None:
    assert parse_slow("1%x10") == (0.01, 10.0)
    assert parse_stall("1s/10s") == (10**9, 10 * 10**9)
    assert parse_bandwidth_bps("1MB/s") == 1e6
    assert parse_bandwidth_bps("10Mbit/s") == 1.25e6
    assert parse_bandwidth_bps("512 KiB/s") == 512 * 1024
    assert parse_schedule("5s-15s,30s-40s") == ((5 * 10**9, 15 * 10**9), (30 * 10**9, 40 * 10**9))
    assert parse_address("8001", "--listen") == ("127.0.0.1", 8001)
    assert parse_address("[::1]:80", "--to") == ("::1", 80)
    for call in (
        lambda: parse_slow("10x1%"),
        lambda: parse_stall("10s/1s"),
        lambda: parse_bandwidth_bps("fast"),
        lambda: parse_schedule("15s-5s"),
        lambda: parse_address("host:99999", "--to"),
        lambda: parse_faults(delay="exp:"),
    ):
        with pytest.raises(BadInput):
            call()


def test_stalls_hold_until_their_end_and_the_schedule_gates_them() -> None:
    f = Faults(stall_ns=200 * MS, period_ns=1000 * MS)
    assert f.stall_end(50 * MS) == 200 * MS
    assert f.stall_end(1199 * MS) == 1200 * MS
    assert f.stall_end(300 * MS) == 300 * MS
    gated = Faults(stall_ns=200 * MS, period_ns=1000 * MS, windows_ns=((2000 * MS, 3000 * MS),))
    assert gated.stall_end(1050 * MS) == 1050 * MS  # outside the window: no stall
    assert gated.stall_end(2050 * MS) == 2200 * MS


def test_draws_are_reproducible_shared_and_unmoved_by_the_schedule() -> None:
    f = parse_faults(reset="5%", drop="5%", truncate="5%", slow="10%x3", delay="exp:5ms", seed=7)
    a, b = Dice(f), Dice(f)
    first = [a.decide(0) for _ in range(20_000)]
    assert first == [b.decide(0) for _ in range(20_000)]
    n = len(first)
    for name, p in (("reset", 0.05), ("slow", 0.10)):
        hits = sum(name in d.names() for d in first)
        assert abs(hits - p * n) < 5 * math.sqrt(n * p * (1 - p)), name
    mean_ms = sum(d.delay_ns for d in first) / n / MS
    assert mean_ms == pytest.approx(5.0, rel=0.05)
    # A schedule switches faults off, but every request still takes its draw.
    windowed = Dice(Faults(**{**f.__dict__, "windows_ns": ((0, 1),)}))
    assert windowed.decide(0) == first[0] and windowed.decide(5) == PASS
    assert windowed.decide(0) == first[2]


class _Sink:
    """A destination transport that records when bytes were written."""

    def __init__(self, pipe: Callable[[], Pipe]) -> None:
        self.writes: list[tuple[int, int]] = []
        self.pipe = pipe

    def write(self, data: bytes) -> None:
        self.writes.append((self.pipe().now(), len(data)))


class _Source:
    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return False


def run_pipe(bandwidth_bps: float, sizes: list[int]) -> tuple[list[tuple[int, int]], list[bool]]:
    """Push pieces of ``sizes`` bytes at once; (write instants and sizes, paused states seen)."""

    async def scenario() -> tuple[list[tuple[int, int]], list[bool]]:
        source = _Source()
        pipe = Pipe(Faults(bandwidth_bps=bandwidth_bps), origin_ns=now_ns(), source=source)
        sink = _Sink(lambda: pipe)
        pipe.attach(sink)
        paused = []
        for n in sizes:
            pipe.push(b"x" * n, pipe.now())
            paused.append(source.paused)
        while pipe.queue:
            await asyncio.sleep(0.005)
        paused.append(source.paused)
        return sink.writes, paused

    return asyncio.run(scenario())


def test_bandwidth_paces_each_slice_in_order() -> None:
    writes, _ = run_pipe(1e6, [50_000])  # 50 ms of link at 1 MB/s, in 16 KiB slices
    assert sum(n for _, n in writes) == 50_000 and len(writes) == 4
    times = [t for t, _ in writes]
    assert times == sorted(times)
    assert times[-1] >= 50 * MS  # released no sooner than the link carried it


def test_a_full_pipe_stops_its_source_until_it_drains() -> None:
    _, paused = run_pipe(50e6, [HIGH_WATER // 2, HIGH_WATER])
    assert paused == [False, True, False]


@pytest.fixture
def echo() -> Iterator[str]:
    """A line echo server that is not HTTP (the proxy must become a plain tunnel)."""

    class Echo(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                self.wfile.write(line)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_bytes_that_are_not_http_pass_through_a_tunnel(echo: str, proxied: Proxies) -> None:
    url, truth = proxied(echo, "--stall", "100ms/1s")
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"hello, not http\n")
        got = s.makefile("rb").readline()
    assert got == b"hello, not http\n"
    proxied.stop()
    rows = [json.loads(line) for line in truth.read_text().splitlines()]
    conns = [r for r in rows if r["kind"] == "connection"]
    assert conns and conns[0]["tunnel"] == "not HTTP/1.1"
    assert rows[-1]["kind"] == "end"


def test_interim_answers_and_keep_alive(
    loopback: Callable[..., str], proxied: Proxies, tmp_path: Path
) -> None:
    """A 103 before the answer is one request, not two; requests share connections."""
    url, truth_path = proxied(loopback("--service", "1ms"))
    bodies = tmp_path / "b.jsonl"
    bodies.write_text(json.dumps({"action": "early_hints", "delay_ms": 5}) + "\n")
    res = tailwise.run(url + "/x", rate="50/s", requests=20, bodies=str(bodies), out=str(tmp_path))
    assert res.summary["requests"]["ok"] == 20
    proxied.stop()
    start, rows = read_truth(truth_path)
    assert start["to"].startswith("127.0.0.1:")
    assert [r["status"] for r in rows] == [200] * 20
    assert len({r["conn"] for r in rows}) < 20  # keep-alive: fewer connections than requests
    assert all(r["path"] == "/x" and r["method"] == "POST" for r in rows)


def wait_for_lines(path: Path, kind: str, n: int, limit_s: float = 20.0) -> None:
    """Poll the proxy's log (flushed every 0.2 s) until it holds ``n`` lines of ``kind``."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count(f'"kind":"{kind}"') >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never held {n} {kind} lines")


def test_swallowed_requests_are_logged_without_headers_or_query(
    loopback: Callable[..., str], proxied: Proxies
) -> None:
    url, truth_path = proxied(loopback("--service", "1ms"), "--drop", "100%")
    host, port = url.removeprefix("http://").split(":")
    request = b"GET /x?token=hidden HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer hidden\r\n\r\n"
    for _ in range(3):
        with socket.create_connection((host, int(port))) as s:
            s.sendall(request)
            s.shutdown(socket.SHUT_WR)  # then close: the client gave up
            assert s.recv(1) == b""  # no answer: the connection ends once we have given up
    wait_for_lines(truth_path, "connection", 3)
    proxied.stop()
    text = truth_path.read_text()
    rows: list[dict[str, Any]] = [json.loads(line) for line in text.splitlines()]
    requests = [r for r in rows if r["kind"] == "request"]
    assert [(r["outcome"], r["path"], r["faults"]) for r in requests] == [
        ("dropped", "/x", ["drop"])
    ] * 3
    assert rows[-1]["kind"] == "end" and rows[-1]["requests"] == 3
    assert "hidden" not in text
