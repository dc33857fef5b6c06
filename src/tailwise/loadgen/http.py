"""HTTP/1.1 transport: ``asyncio.Protocol`` + httptools, keep-alive pools, no per-request tasks.

Why not aiohttp or httpx: a request here costs one ``transport.write`` of
pre-rendered bytes and a few callbacks; there is no coroutine, future or timer
per request. Total timeouts use a deque of deadlines swept every few
milliseconds (requests are sent in time order and share one timeout, so the
deque is sorted and each entry is looked at once).

Failure mapping (see :mod:`tailwise.errors`): a connection that cannot be
opened -> ``connect`` (or ``tls``); closed or reset before the response ends
-> ``reset``; unparsable response -> ``protocol``; no complete response within
the total timeout -> ``timeout``; 4xx/5xx statuses -> ``http_4xx``/``http_5xx``.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from typing import Any

import httptools

from tailwise.clock import now_ns
from tailwise.errors import error_kind
from tailwise.loadgen.targets import Target
from tailwise.loadgen.transport import OnDone
from tailwise.records import RecordBlock, error_code

_OK, _4XX, _5XX = error_code(""), error_code("http_4xx"), error_code("http_5xx")
_RESET, _PROTOCOL, _TIMEOUT = error_code("reset"), error_code("protocol"), error_code("timeout")
SWEEP_S = 0.005


def _status_code(status: int) -> int:
    if status >= 500:
        return _5XX
    if status >= 400:
        return _4XX
    return _OK


class _Conn(asyncio.Protocol):
    """One keep-alive connection; carries at most one request at a time (no pipelining)."""

    __slots__ = ("block", "first", "j", "nbytes", "parser", "pool", "transport")

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.block: RecordBlock | None = None
        self.j = 0
        self.first = True
        self.nbytes = 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def start(self, block: RecordBlock, j: int, payload: bytes, deadline_ns: int) -> None:
        self.block, self.j, self.first, self.nbytes = block, j, True, 0
        block.bytes_out[j] = len(payload)
        self.pool.deadlines.append((deadline_ns, self, block, j))
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        block = self.block
        if block is None:  # bytes nobody asked for: the connection can't be trusted
            self.transport.abort()
            return
        if self.first:
            self.first = False
            block.first_byte_ns[self.j] = now_ns() - self.pool.t0
        self.nbytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.fail(_PROTOCOL)
            self.transport.abort()

    def on_message_complete(self) -> None:
        block = self.block
        if block is None:
            return
        j = self.j
        status = self.parser.get_status_code()
        block.done_ns[j] = now_ns() - self.pool.t0
        block.status[j] = status
        block.error[j] = _status_code(status)
        block.bytes_in[j] = self.nbytes
        self.block = None
        keep = self.parser.should_keep_alive()
        self.pool.on_done(block, j)
        if keep:
            self.pool.release(self)
        else:
            self.transport.close()

    def fail(self, code: int) -> None:
        block = self.block
        if block is None:
            return
        self.block = None
        block.done_ns[self.j] = now_ns() - self.pool.t0
        block.error[self.j] = code
        block.bytes_in[self.j] = self.nbytes
        self.pool.on_done(block, self.j)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(_RESET)
        self.pool.discard(self)


class _Pool:
    """Connections to one target: idle stack, requests waiting for a new connection."""

    def __init__(self, owner: HttpTransport, target: Target, payloads: list[bytes]) -> None:
        self.owner = owner
        self.target = target
        self.address = target.host  # replaced by a resolved IP literal in resolve()
        self.payloads = payloads
        self.idle: list[_Conn] = []
        self.all: set[_Conn] = set()
        self.waiting: deque[tuple[RecordBlock, int]] = deque()
        self.connecting = 0
        self.deadlines = owner.deadlines
        self.t0 = 0
        self.on_done: OnDone = owner.on_done_cb

    def dispatch(self, block: RecordBlock, j: int) -> None:
        if self.idle:
            self._start(self.idle.pop(), block, j)
            return
        self.waiting.append((block, j))
        if self.connecting < len(self.waiting):
            self.connecting += 1
            asyncio.get_running_loop().create_task(self._connect())

    def _start(self, conn: _Conn, block: RecordBlock, j: int) -> None:
        payload = self.payloads[(block.base + j) % len(self.payloads)]
        conn.start(block, j, payload, now_ns() + self.owner.timeout_ns)

    async def resolve(self) -> None:
        """Resolve the host once, before the clock starts.

        asyncio resolves names in a thread pool; a thread contending for the GIL
        during the run delays the pacer by up to the 5 ms switch interval. An IP
        literal takes asyncio's resolver-free path. If resolution fails, the name
        is kept and each connection attempt fails as a ``connect`` error.
        """
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(
                self.target.host, self.target.port, type=socket.SOCK_STREAM
            )
        except OSError:
            return
        if infos:
            self.address = str(infos[0][4][0])

    def _open(self) -> Any:
        t = self.target
        ctx = self.owner.ssl_context(t)
        return asyncio.wait_for(
            asyncio.get_running_loop().create_connection(
                lambda: _Conn(self),
                self.address,
                t.port,
                ssl=ctx,
                server_hostname=t.host if ctx is not None else None,
            ),
            self.owner.connect_timeout_ns / 1e9,
        )

    async def _connect(self) -> None:
        try:
            _, conn = await self._open()
        except (OSError, TimeoutError, ssl.SSLError, ValueError) as exc:
            self.connecting -= 1
            if self.waiting:
                block, j = self.waiting.popleft()
                block.done_ns[j] = now_ns() - self.t0
                block.error[j] = error_code(error_kind(exc))
                self.on_done(block, j)
            return
        self.connecting -= 1
        self.all.add(conn)
        self.release(conn)

    def release(self, conn: _Conn) -> None:
        if self.waiting:
            block, j = self.waiting.popleft()
            self._start(conn, block, j)
        else:
            self.idle.append(conn)

    def discard(self, conn: _Conn) -> None:
        self.all.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)

    async def preconnect(self, n: int) -> None:
        """Open up to ``n`` idle connections before the clock starts (failures are ignored)."""

        async def one() -> None:
            try:
                _, conn = await self._open()
            except (OSError, TimeoutError, ssl.SSLError, ValueError):
                return
            self.all.add(conn)
            self.idle.append(conn)

        await asyncio.gather(*(one() for _ in range(n)))


class HttpTransport:
    """Round-robin over targets, one keep-alive pool each."""

    def __init__(
        self,
        targets: list[Target],
        payloads: list[list[bytes]],
        *,
        timeout_ns: int,
        connect_timeout_ns: int,
        insecure: bool = False,
        preconnect: int = 4,
    ) -> None:
        self.timeout_ns = timeout_ns
        self.connect_timeout_ns = connect_timeout_ns
        self.deadlines: deque[tuple[int, _Conn, RecordBlock, int]] = deque()
        self._insecure = insecure
        self._ssl: ssl.SSLContext | None = None
        self._on_done: OnDone | None = None
        self._in_flight = 0
        self._preconnect = preconnect
        self._pools = [_Pool(self, t, p) for t, p in zip(targets, payloads, strict=True)]
        self._rr = 0
        self._sweeper: asyncio.TimerHandle | None = None
        self._t0 = 0

    def ssl_context(self, target: Target) -> ssl.SSLContext | None:
        if not target.tls:
            return None
        if self._ssl is None:
            ctx = ssl.create_default_context()
            if self._insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx
        return self._ssl

    def on_done_cb(self, block: RecordBlock, j: int) -> None:
        self._in_flight -= 1
        assert self._on_done is not None
        self._on_done(block, j)

    async def start(self, on_done: OnDone) -> None:
        self._on_done = on_done
        await asyncio.gather(*(p.resolve() for p in self._pools))
        await asyncio.gather(*(p.preconnect(self._preconnect) for p in self._pools))
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def set_origin(self, t0_ns: int) -> None:
        self._t0 = t0_ns
        for p in self._pools:
            p.t0 = t0_ns

    def send(self, block: RecordBlock, j: int) -> None:
        self._in_flight += 1
        pools = self._pools
        if len(pools) == 1:
            pools[0].dispatch(block, j)
        else:
            self._rr += 1
            pools[self._rr % len(pools)].dispatch(block, j)

    def _sweep(self) -> None:
        now = now_ns()
        dq = self.deadlines
        while dq and dq[0][0] <= now:
            _, conn, block, j = dq.popleft()
            if conn.block is block and conn.j == j:
                conn.fail(_TIMEOUT)
                conn.transport.abort()
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def in_flight(self) -> int:
        return self._in_flight

    def abort_all(self, kind: str) -> int:
        code = error_code(kind)
        n = 0
        for pool in self._pools:
            while pool.waiting:
                block, j = pool.waiting.popleft()
                block.done_ns[j] = now_ns() - self._t0
                block.error[j] = code
                pool.on_done(block, j)
                n += 1
            for conn in list(pool.all):
                if conn.block is not None:
                    conn.fail(code)
                    n += 1
                conn.transport.abort()
        return n

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.abort_all("cancelled")
        await asyncio.sleep(0)
