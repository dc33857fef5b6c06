"""The proxy process: accept, connect each client to the target, inject, log, stop by itself.

It binds 127.0.0.1 unless told otherwise, prints ``listening on URL`` once it
accepts connections, and stops after ``lifetime`` or on SIGINT/SIGTERM; either
way every request still open is logged (``unfinished``, or ``dropped`` for a
swallowed one) and the ground-truth file ends with an ``end`` line. It serves at
most ``max_connections`` clients at once (:class:`Acceptor`); the others wait in
the listen backlog, so memory is bounded whatever the flood.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailwise.clock import now_ns
from tailwise.errors import BadInput
from tailwise.proxy.faults import Dice, Faults
from tailwise.proxy.link import Link
from tailwise.proxy.truth import FLUSH_S, Exchange, TruthLog

CONNECT_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 4096  # client connections served at once, unless the file limit allows fewer
ACCEPT_BURST = 64  # connections accepted per wake-up of the listening socket
RETRY_ACCEPT_S = 0.1  # after the system ran out of descriptors or buffers


def default_max_connections() -> int:
    """:data:`MAX_CONNECTIONS`, or fewer when the open-file limit would run out first.

    Each client connection takes two descriptors (it and its connection to the target).
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, (soft - 64) // 2))


@dataclass(frozen=True)
class ProxyConfig:
    listen: tuple[str, int]
    upstream: tuple[str, int]
    faults: Faults
    log_path: Path | None = None
    max_connections: int = 0  # 0: default_max_connections()


class Proxy:
    """Shared state of every link: the faults, the dice, the clock origin, the log."""

    def __init__(self, cfg: ProxyConfig) -> None:
        self.cfg = cfg
        self.faults = cfg.faults
        self.dice = Dice(cfg.faults)
        self.truth = TruthLog(cfg.log_path)
        self.origin_ns = now_ns()
        self.links: set[Link] = set()
        self.upstream_address = cfg.upstream
        self._n_requests = 0
        self._n_links = 0
        self.acceptor: Acceptor | None = None

    def now(self) -> int:
        """Proxy time: ns since the proxy started."""
        return now_ns() - self.origin_ns

    def new_exchange(self, conn: int, t_ns: int) -> Exchange:
        ex = Exchange(self._n_requests, conn, t_ns, self.dice.decide(t_ns))
        self._n_requests += 1
        return ex

    def finish(self, ex: Exchange, t_ns: int) -> None:
        """Log a request once: when its response left, or it failed, or the proxy stops."""
        if ex.out_done_ns is None:
            ex.out_done_ns = t_ns
        self.truth.write(ex.row())

    def open_link(self, client: Any) -> Link:
        link = Link(self, self._n_links, client)
        self._n_links += 1
        self.links.add(link)
        asyncio.get_running_loop().create_task(
            connect_upstream(link, self.upstream_address, CONNECT_TIMEOUT_S)
        )
        return link

    def link_closed(self, link: Link, t_ns: int) -> None:
        self.links.discard(link)
        if self.acceptor is not None:
            self.acceptor.closed_one()
        self.truth.write(
            {
                "kind": "connection",
                "conn": link.id,
                "opened_ns": link.opened_ns,
                "closed_ns": t_ns,
                "requests": link.requests,
                "closed_by": link.closed_by,
                "tunnel": link.tunnel or None,
            }
        )

    async def resolve(self) -> None:
        """The target's address, once: name lookups must not stall the loop later."""
        host, port = self.cfg.upstream
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            raise BadInput("--to", f"{host}:{port}", f"a host that resolves ({exc})") from None
        self.upstream_address = (str(infos[0][4][0]), port)

    def start_line(self, bound: tuple[str, int]) -> dict[str, Any]:
        return {
            "kind": "start",
            "listen": f"{bound[0]}:{bound[1]}",
            "to": f"{self.cfg.upstream[0]}:{self.cfg.upstream[1]}",
            "faults": self.faults.describe(),
            "started_unix_s": time.time(),
            "origin_monotonic_ns": self.origin_ns,
            "clock": "ns since start, CLOCK_MONOTONIC",
        }

    async def stop(self) -> None:
        """Log what is still open, let the closed connections report, end the log."""
        if self.acceptor is not None:
            self.acceptor.close()
        for link in list(self.links):
            link.shut()
        for _ in range(3):  # aborted transports report their loss on the next iterations
            await asyncio.sleep(0)
        self.truth.close(self.now(), self._n_links)


class ClientSide(asyncio.Protocol):
    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.link: Link | None = None

    def connection_made(self, transport: Any) -> None:
        _nodelay(transport)
        self.link = self.proxy.open_link(transport)

    def data_received(self, data: bytes) -> None:
        assert self.link is not None
        self.link.from_client(data)

    def eof_received(self) -> bool:
        """An HTTP client that closes has given up (nginx's 499): what it waited for ends here.

        A tunnel passes the half-close on and keeps the reply direction open.
        """
        assert self.link is not None
        if not self.link.tunnel:
            return False  # the transport closes; connection_lost logs what was pending
        self.link.client_eof()
        return True

    def pause_writing(self) -> None:
        if self.link is not None:
            self.link.down.set_blocked(True)

    def resume_writing(self) -> None:
        if self.link is not None:
            self.link.down.set_blocked(False)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.link is not None:
            self.link.client_lost()


class UpstreamSide(asyncio.Protocol):
    def __init__(self, link: Link) -> None:
        self.link = link

    def connection_made(self, transport: Any) -> None:
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        self.link.from_upstream(data)

    def pause_writing(self) -> None:
        self.link.up.set_blocked(True)

    def resume_writing(self) -> None:
        self.link.up.set_blocked(False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.upstream_lost()


def _nodelay(transport: Any) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Acceptor:
    """Accepts client connections while fewer than ``limit`` are open.

    At the limit it stops accepting: further connections wait in the listen backlog
    (their connect takes longer, which the client measures) and are accepted as open
    ones close. When the system runs out of descriptors or buffers it waits
    :data:`RETRY_ACCEPT_S` and tries again: a flood slows the proxy, never stops it.
    """

    def __init__(self, sock: socket.socket, proxy: Proxy, limit: int) -> None:
        self.sock = sock
        self.proxy = proxy
        self.limit = limit
        self.open = 0  # accepted and not yet closed
        self.reading = False
        self.closed = False
        self.loop = asyncio.get_running_loop()
        self.full_said = False

    def start(self) -> None:
        if not self.reading and not self.closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)
            self.reading = True

    def _pause(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.sock.fileno())
            self.reading = False

    def _accept(self) -> None:
        for _ in range(ACCEPT_BURST):
            if self.open >= self.limit:
                self._pause()
                self._say_full()
                return
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause()
                    self.loop.call_later(RETRY_ACCEPT_S, self.start)
                    return
                continue  # ECONNABORTED and the like: that client is gone
            conn.setblocking(False)
            self.open += 1
            self.loop.create_task(self._serve(conn))

    async def _serve(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(lambda: ClientSide(self.proxy), conn)
        except OSError:
            conn.close()
            self.closed_one()

    def closed_one(self) -> None:
        self.open -= 1
        if not self.reading and self.open < self.limit:
            self.start()

    def _say_full(self) -> None:
        if not self.full_said:
            self.full_said = True
            print(
                f"proxy: {self.limit} connections open; further ones wait to be accepted",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        self._pause()
        self.closed = True
        self.sock.close()


def listen_socket(host: str, port: int) -> socket.socket:
    """A non-blocking listening socket on ``host:port`` (BadInput if it cannot be had)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        infos.sort(key=lambda info: info[0] != socket.AF_INET)  # IPv4 first: "localhost"
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise BadInput("--listen", f"{host}:{port}", f"a free address ({exc})") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(4096)
    except OSError as exc:
        sock.close()
        raise BadInput("--listen", f"{host}:{port}", f"a free address ({exc.strerror})") from None
    sock.setblocking(False)
    return sock


async def connect_upstream(link: Link, address: tuple[str, int], timeout_s: float) -> None:
    """Open the target's side for ``link``; a failure closes the client's side."""
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await asyncio.wait_for(
            loop.create_connection(lambda: UpstreamSide(link), *address), timeout_s
        )
    except (OSError, TimeoutError):
        link.upstream_failed()
        return
    link.upstream_connected(transport)


async def _flush_loop(truth: TruthLog) -> None:
    while True:
        await asyncio.sleep(FLUSH_S)
        truth.flush()


async def run_proxy(
    cfg: ProxyConfig, lifetime_s: float | None, on_listening: Callable[[str], None]
) -> Proxy:
    """Serve until ``lifetime_s`` passes or SIGINT/SIGTERM; returns the proxy (its counts)."""
    loop = asyncio.get_running_loop()
    proxy = Proxy(cfg)
    await proxy.resolve()
    sock = listen_socket(*cfg.listen)
    bound = sock.getsockname()[:2]
    proxy.acceptor = Acceptor(sock, proxy, cfg.max_connections or default_max_connections())
    proxy.acceptor.start()
    proxy.truth.write(proxy.start_line(bound))
    proxy.truth.flush()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    flusher = loop.create_task(_flush_loop(proxy.truth))
    on_listening(f"http://{bound[0]}:{bound[1]}")
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), lifetime_s)
    flusher.cancel()
    await proxy.stop()
    return proxy


def serve(cfg: ProxyConfig, lifetime_s: float | None) -> None:
    """The ``tailwise proxy`` command: print ``listening on URL``, serve, stop by itself.

    What it injects is described on stderr once it listens (a mistake found while
    starting, such as an unwritable log, is then the only line).
    """

    def listening(url: str) -> None:
        print(f"listening on {url}", flush=True)
        print(describe(cfg), file=sys.stderr, flush=True)

    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        proxy = runner.run(run_proxy(cfg, lifetime_s, listening))
    counts = ", ".join(f"{k} {v}" for k, v in sorted(proxy.truth.outcomes.items())) or "none"
    print(f"proxy: {proxy.truth.requests} requests ({counts})", file=sys.stderr, flush=True)


def describe(cfg: ProxyConfig) -> str:
    """One line on what the proxy will do, for stderr at start-up."""
    f = cfg.faults
    parts = []
    if f.delay is not None:
        parts.append(f"delay {f.delay.kind} mean {f.delay.mean_ns / 1e6:g} ms")
    if f.stall_ns:
        parts.append(f"stall {f.stall_ns / 1e9:g}s every {f.period_ns / 1e9:g}s")
    if f.slow_p:
        parts.append(f"slow {f.slow_p:.2%} x{f.slow_factor:g}")
    for name, p in (("reset", f.reset_p), ("drop", f.drop_p), ("truncate", f.truncate_p)):
        if p:
            parts.append(f"{name} {p:.2%}")
    if f.bandwidth_bps:
        parts.append(f"bandwidth {f.bandwidth_bps / 1e6:g} MB/s per connection and direction")
    if f.windows_ns:
        spans = ",".join(f"{a / 1e9:g}s-{b / 1e9:g}s" for a, b in f.windows_ns)
        parts.append(f"only during {spans}")
    to = f"{cfg.upstream[0]}:{cfg.upstream[1]}"
    return f"proxy to {to}: " + ("; ".join(parts) if parts else "no faults (pass-through)")
