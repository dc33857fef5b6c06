"""HTTP/1.1 transport: ``asyncio.Protocol`` + httptools, keep-alive pools, no per-request tasks.

Why not aiohttp or httpx: a request here costs one ``transport.write`` of
pre-rendered bytes and a few callbacks; there is no coroutine, future, timer
or allocation per request. Measured on loopback, the kernel's share of a
request (send, receive, waking the server) is already larger than Python's,
so the Python path is kept flat: the engine calls the pool directly, and one
clock read per received chunk serves both first-byte and completion times.

Total timeouts: a request's deadline is its send time plus the timeout; a sweep
every :data:`SWEEP_S` fails overdue requests (so a timeout fires within 10 ms of
its deadline), looking at the connections only when the earliest deadline it
knows of has come: no per-request timer, and nearly no per-sweep cost.

Failure mapping (see :mod:`tailwise.errors`): a connection that cannot be
opened or is closed before use, including a connect timeout -> ``connect`` (or
``tls``); closed or reset before the response ends -> ``reset``; unparsable
response -> ``protocol``; no complete response within the total timeout, while
on the wire or still waiting for a connection -> ``timeout``; 4xx/5xx statuses
-> ``http_4xx``/``http_5xx``. Interim 1xx responses (100 Continue, 103 Early
Hints) are skipped; a body delimited by the connection closing (no length, not
chunked) completes at the close.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

import httptools

from tailwise.clock import now_ns
from tailwise.errors import error_kind
from tailwise.loadgen.llm_stream import MALFORMED, classify
from tailwise.loadgen.openai import TokenCounter
from tailwise.loadgen.sse import SSEParser
from tailwise.loadgen.targets import Target
from tailwise.loadgen.transport import OnDone
from tailwise.records import RecordBlock, error_code

_OK, _4XX, _5XX = error_code(""), error_code("http_4xx"), error_code("http_5xx")
_RESET, _PROTOCOL, _TIMEOUT = error_code("reset"), error_code("protocol"), error_code("timeout")
_CONNECT = error_code("connect")
SWEEP_S = 0.01
MAX_CONNECTING = 32  # connection attempts in progress per target; more only feeds a storm


def _ends_at_close(head: bytes | None) -> bool:
    """Whether a response whose first chunk is ``head`` has a body delimited by the close.

    Looked at only when a connection closes mid-response (rare), so the common path
    pays nothing for it: no header callbacks. A response with a Content-Length or a
    chunked encoding that ends early is truncated, not complete.
    """
    if head is None:
        return False
    end = head.find(b"\r\n\r\n")
    if end < 0:
        return False  # headers never completed: truncated
    headers = head[:end].lower()
    return b"\ncontent-length:" not in headers and b"\ntransfer-encoding:" not in headers


def _noop_done(block: RecordBlock, j: int) -> None:
    raise RuntimeError("transport used before start()")


class _Conn(asyncio.Protocol):
    """One keep-alive connection; carries at most one request at a time (no pipelining)."""

    __slots__ = (
        "block",
        "closed",
        "first",
        "head",
        "j",
        "nbytes",
        "parser",
        "pool",
        "t_last",
        "transport",
    )

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.block: RecordBlock | None = None
        self.j = 0
        self.first = True
        self.nbytes = 0
        self.closed = False
        self.t_last = 0  # run-relative ns of the latest chunk
        self.head: bytes | None = None  # first chunk of the current response (see connection_lost)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        block = self.block
        if block is None:  # bytes nobody asked for: the connection can't be trusted
            self.transport.abort()
            return
        t = now_ns() - self.pool.t0
        self.t_last = t
        if self.first:
            self.first = False
            block.first_byte_ns[self.j] = t
        if self.head is None:
            self.head = data
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
        parser = self.parser
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.head = None  # an interim response; the final one follows on this connection
            return
        block.done_ns[j] = self.t_last
        block.status[j] = status
        if status >= 400:
            block.error[j] = _5XX if status >= 500 else _4XX
        block.bytes_in[j] = self.nbytes
        self.block = None
        keep = parser.should_keep_alive()
        pool = self.pool
        pool.on_done(block, j)
        if keep and not self.closed:
            if pool.waiting:
                pool.start_waiting(self)
            else:
                pool.idle.append(self)
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

    def reset_stream(self) -> None:
        """Only stream connections keep per-response stream state."""

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        block = self.block
        if block is not None and exc is None and _ends_at_close(self.head):
            # HTTP/1.1 allows a body that ends when the server closes: complete it.
            status = self.parser.get_status_code()
            self.block = None
            block.done_ns[self.j] = now_ns() - self.pool.t0
            block.status[self.j] = status
            if status >= 400:
                block.error[self.j] = _5XX if status >= 500 else _4XX
            block.bytes_in[self.j] = self.nbytes
            self.pool.on_done(block, self.j)
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
        self.t0 = 0
        self.timeout_ns = owner.timeout_ns
        self.next_scan_ns = 0  # run-relative: when sweep() next looks at every connection
        self.on_done: OnDone = _noop_done
        self.streaming = owner.streaming
        self.conn_class: type[_Conn] = _StreamConn if owner.streaming else _Conn

    def dispatch(self, block: RecordBlock, j: int) -> None:
        """Send request ``(block, j)``: on an idle connection now, else when one opens."""
        idle = self.idle
        if idle:
            conn = idle.pop()
            payloads = self.payloads
            payload = (
                payloads[0] if len(payloads) == 1 else payloads[(block.base + j) % len(payloads)]
            )
            conn.block = block
            conn.j = j
            conn.first = True
            conn.head = None
            conn.nbytes = 0
            if self.streaming:
                conn.reset_stream()
            block.bytes_out[j] = len(payload)
            conn.transport.write(payload)
            return
        self.waiting.append((block, j))
        self._grow()

    def start_waiting(self, conn: _Conn) -> None:
        self.idle.append(conn)
        block, j = self.waiting.popleft()
        self.dispatch(block, j)

    def _grow(self) -> None:
        """Open connections for waiting requests, a bounded number at a time."""
        while self.connecting < min(len(self.waiting), MAX_CONNECTING):
            self.connecting += 1
            asyncio.get_running_loop().create_task(self._connect())

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
                lambda: self.conn_class(self),
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
            # A connect timeout is a connect failure, not a request timeout.
            self._fail_one_waiting(
                _CONNECT if isinstance(exc, TimeoutError) else error_code(error_kind(exc))
            )
            return
        self.connecting -= 1
        if self.owner.closing:
            conn.transport.abort()
            return
        if conn.closed:  # accepted, then closed before any request: unusable
            self._fail_one_waiting(_CONNECT)
            return
        self.all.add(conn)
        if self.waiting:
            self.start_waiting(conn)
        else:
            self.idle.append(conn)
        self._grow()

    def _fail_one_waiting(self, code: int) -> None:
        """One connection attempt failed: the oldest waiting request fails with ``code``."""
        if self.waiting:
            block, j = self.waiting.popleft()
            block.done_ns[j] = now_ns() - self.t0
            block.error[j] = code
            self.on_done(block, j)
            self._grow()

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
            if not conn.closed:
                self.all.add(conn)
                self.idle.append(conn)

        await asyncio.gather(*(one() for _ in range(n)))

    def sweep(self, now_rel_ns: int) -> None:
        """Fail overdue requests: waiting for a connection (in send order) or on the wire.

        The pass over connections (hundreds after a burst) runs only once the earliest
        deadline the previous pass saw has come. A request put on the wire since then
        was sent after that pass, or waited behind the queue's head it looked at, so
        its deadline is no earlier: a timeout still fires within :data:`SWEEP_S`.
        """
        waiting, timeout = self.waiting, self.timeout_ns
        while waiting and waiting[0][0].sent_ns[waiting[0][1]] + timeout <= now_rel_ns:
            block, j = waiting.popleft()
            block.done_ns[j] = now_rel_ns
            block.error[j] = _TIMEOUT
            self.on_done(block, j)
        if now_rel_ns < self.next_scan_ns:
            return
        earliest = now_rel_ns + timeout
        if waiting:
            earliest = min(earliest, waiting[0][0].sent_ns[waiting[0][1]] + timeout)
        for conn in list(self.all):
            busy = conn.block
            if busy is None:
                continue
            deadline = busy.sent_ns[conn.j] + timeout
            if deadline <= now_rel_ns:
                conn.fail(_TIMEOUT)
                conn.transport.abort()
            elif deadline < earliest:
                earliest = deadline
        self.next_scan_ns = earliest


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
        streaming: bool = False,
        counter: TokenCounter | None = None,
        prompt_tokens: list[int] | None = None,
    ) -> None:
        self.streaming = streaming
        self.counter = counter  # counts tokens locally when the server reports no usage
        self.prompt_tokens = prompt_tokens  # per request body, when counted locally
        self.usage_rows = 0  # stream rows whose token counts came from the server's usage
        self.tokenizer_rows = 0
        self.timeout_ns = timeout_ns
        self.connect_timeout_ns = connect_timeout_ns
        self._insecure = insecure
        self._ssl: ssl.SSLContext | None = None
        self._preconnect = preconnect
        self._pools = [_Pool(self, t, p) for t, p in zip(targets, payloads, strict=True)]
        self._rr = 0
        self._sweeper: asyncio.TimerHandle | None = None
        self._t0 = 0
        self.closing = False
        # The engine calls ``send`` once per request: with one target it is the pool's own
        # dispatch, with no round-robin hop in between.
        self.send: Callable[[RecordBlock, int], None] = (
            self._pools[0].dispatch if len(self._pools) == 1 else self._send_round_robin
        )

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

    async def start(self, on_done: OnDone) -> None:
        for p in self._pools:
            p.on_done = on_done
        await asyncio.gather(*(p.resolve() for p in self._pools))
        await asyncio.gather(*(p.preconnect(self._preconnect) for p in self._pools))
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def set_origin(self, t0_ns: int) -> None:
        self._t0 = t0_ns
        for p in self._pools:
            p.t0 = t0_ns
            p.next_scan_ns = 0  # a new time base: what sweeps before it saw means nothing

    def _send_round_robin(self, block: RecordBlock, j: int) -> None:
        self._rr += 1
        self._pools[self._rr % len(self._pools)].dispatch(block, j)

    def _sweep(self) -> None:
        now_rel = now_ns() - self._t0
        for pool in self._pools:
            pool.sweep(now_rel)
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

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
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.abort_all("cancelled")
        await asyncio.sleep(0)


_TRUNCATED, _STREAM_ERROR, _MALFORMED, _TOO_LARGE = (
    error_code("truncated"),
    error_code("stream_error"),
    error_code("malformed_chunk"),
    error_code("too_large"),
)
# Bounds on what one stream may hold in memory. A plain response is never buffered
# (only its length is counted), but a stream keeps its unfinished event and one
# arrival time per content chunk. An event over 4 MiB, or over 2^18 content chunks
# (far above any max_tokens served today), fails the request as ``too_large``
# instead of growing without bound until the timeout.
MAX_EVENT_BYTES = 4 << 20
MAX_STREAM_CHUNKS = 1 << 18


class _StreamConn(_Conn):
    """A connection whose responses are LLM token streams (Server-Sent Events).

    Every content chunk's arrival time is the arrival of the read that carried
    it (``t_last``): chunks that arrive together share a time, as they did on
    the wire. A stream that ends without ``[DONE]`` or a finish reason is
    ``truncated``; an error event is ``stream_error``; unparsable data is
    ``malformed_chunk``; a stream over the memory bounds above is ``too_large``
    (the connection is dropped). Partial data (first token, chunk times) is kept.
    """

    __slots__ = (
        "chunks",
        "finished",
        "prompt_tokens",
        "sse",
        "stream_err",
        "text",
        "usage_tokens",
    )

    def __init__(self, pool: _Pool) -> None:
        super().__init__(pool)
        self.reset_stream()

    def reset_stream(self) -> None:
        self.sse = SSEParser()
        self.chunks: list[int] = []
        self.finished = False
        self.stream_err = 0
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.text: list[str] = []  # kept only when tokens are counted locally

    def on_body(self, body: bytes) -> None:
        block = self.block
        if block is None or self.parser.get_status_code() >= 300:
            return
        for etype, data in self.sse.feed(body):
            c = classify(data, etype)
            if c.text:
                if not self.chunks:
                    block.first_token_ns[self.j] = self.t_last
                self.chunks.append(self.t_last)
                if self.pool.owner.counter is not None:
                    self.text.append(c.text)
            if c.done or c.finish_reason:
                self.finished = True
            if c.completion_tokens is not None:
                self.usage_tokens = c.completion_tokens
            if c.prompt_tokens is not None:
                self.prompt_tokens = c.prompt_tokens
            if c.error is not None and not self.stream_err:
                self.stream_err = _MALFORMED if c.error == MALFORMED else _STREAM_ERROR
        # Checked once per read, not per event: the bounds only need to hold roughly.
        if self.sse.pending_bytes > MAX_EVENT_BYTES or len(self.chunks) > MAX_STREAM_CHUNKS:
            self.fail(_TOO_LARGE)
            self.transport.abort()

    def _keep(self, block: RecordBlock, j: int) -> None:
        owner = self.pool.owner
        if self.chunks:
            block.chunk_times[j] = self.chunks
        if self.usage_tokens is not None:
            block.output_tokens[j] = self.usage_tokens
            owner.usage_rows += 1
        elif owner.counter is not None:  # once per request, not per token
            block.output_tokens[j] = owner.counter.count("".join(self.text))
            owner.tokenizer_rows += 1
        elif self.chunks:
            block.output_tokens[j] = len(self.chunks)  # no usage: one token per chunk
        if self.prompt_tokens is not None:
            block.input_tokens[j] = self.prompt_tokens
        elif owner.prompt_tokens:
            block.input_tokens[j] = owner.prompt_tokens[(block.base + j) % len(owner.prompt_tokens)]

    def on_message_complete(self) -> None:
        block = self.block
        if block is None:
            return
        status = self.parser.get_status_code()
        if 200 <= status < 300:
            self._keep(block, self.j)
            if self.stream_err:
                block.error[self.j] = self.stream_err
            elif not self.finished or self.sse.close():
                block.error[self.j] = _TRUNCATED
        super().on_message_complete()

    def fail(self, code: int) -> None:
        if self.block is not None:
            self._keep(self.block, self.j)
        super().fail(code)
