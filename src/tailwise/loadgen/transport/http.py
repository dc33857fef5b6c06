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
chunked) completes at the close. A reused connection closed before any response
byte sends its request once more on a fresh connection, counted in ``reconnects``
(see :mod:`~tailwise.loadgen.transport.http_conn` for when that is safe).

LLM answers: the transport only moves bytes. Given an
:class:`~tailwise.loadgen.llm.answers.AnswerBook` (``answers``), its connections are the
stream or whole-answer connections of :mod:`~tailwise.loadgen.transport.http_stream`, which time
each answer's chunks and hand what it says to the book: it classifies events with the
API kind's functions, counts tokens and writes their columns, and keeps the server's notes.

Unique prompts: an LLM body may carry a placeholder (``nonce``, 10 hex digits,
random per run); each request replaces it with its own 10 hex digits, a bijection
of its seq (plus worker index x 2^32) salted by the placeholder, so no two requests
of a run (or, but for a chance of about one in a trillion, of two runs) share a
prompt's first tokens.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

from tailwise.clock import now_ns
from tailwise.errors import error_kind
from tailwise.loadgen.llm.answers import AnswerBook
from tailwise.loadgen.transport import OnDone
from tailwise.loadgen.transport.http_conn import CONNECT, RESET, TIMEOUT, Conn
from tailwise.loadgen.transport.http_stream import (
    AnswerConn,
    StreamConn,
    on_stream_reads,
    stream_reader,
)
from tailwise.loadgen.transport.targets import Target
from tailwise.metrics.error_samples import ErrorSamples
from tailwise.records import RecordBlock, error_code

SWEEP_S = 0.01
# How long a reset that may be a keep-alive close's race waits for the target's closing
# pattern to be told (Pool.doubted): then it is booked a ``reset``, as it came.
DOUBT_NS = 100_000_000
MAX_CONNECTING = 32  # connection attempts in progress per target; more only feeds a storm
NONCE_DIGITS = 10
_NONCE_MASK = (1 << (4 * NONCE_DIGITS)) - 1
_NONCE_MIX = 0x9E3779B97F  # odd, so seq -> nonce is a bijection modulo 16**10


def nonce_for(seq: int, salt: int) -> bytes:
    """Request ``seq``'s nonce: consecutive seqs differ in their first digits too."""
    return b"%010x" % (((seq + salt) * _NONCE_MIX) & _NONCE_MASK)


def connect_failure(exc: BaseException) -> str:
    """Why a connection could not be opened, in words a user can act on."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "name not resolved"
    if isinstance(exc, TimeoutError):
        return "connect timeout"
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return f"TLS: {getattr(exc, 'reason', None) or exc}"
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        return "too many open files"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__


def _noop_done(block: RecordBlock, j: int) -> None:
    raise RuntimeError("transport used before start()")


class Pool:
    """Connections to one target: idle stack, requests waiting for a new connection."""

    def __init__(self, owner: HttpTransport, target: Target, payloads: list[bytes]) -> None:
        self.owner = owner
        self.target = target
        self.address = target.host  # replaced by a resolved IP literal in resolve()
        self.payloads = payloads
        self.idle: list[Conn] = []
        self.all: set[Conn] = set()
        self.waiting: deque[tuple[RecordBlock, int]] = deque()
        self.connecting = 0
        self.t0 = 0
        self.timeout_ns = owner.timeout_ns
        self.next_scan_ns = 0  # run-relative: when sweep() next looks at every connection
        self.on_done: OnDone = _noop_done
        self.rx: Any = None  # the transport's stream reader (start()), if one
        book = owner.answers
        self.conn_class: type[Conn] = (
            Conn if book is None else StreamConn if book.streams else AnswerConn
        )
        self.per_response = book is not None  # state reset per response
        self.retried: set[int] = set()  # seqs sent a second time (at most once each)
        self.reconnects = 0
        self.stray_answers = 0  # connections dropped for an answer nobody asked for
        # Reused connections the target closed in order between answers (a FIN): it
        # closes its keep-alive connections, so a reset under a request just written on
        # one is that close meeting the write (see Conn.close_raced).
        self.keepalive_closes = 0
        # Resets that may be the target closing every connection after its N-th answer
        # (see Conn.close_raced): the most answers any connection gave, the N of every
        # reset under an unanswered request so far (0: none yet; -1: they differed, or one
        # came on a fresh connection or within an answer), and how many came at it.
        self.most_served = 0
        self.close_after = 0
        self.close_resets = 0
        # Resets that fit the pattern while it is not yet told, held (not failed, not sent
        # again) until it is: (block, j, the reset's run-relative instant).
        self.doubted: deque[tuple[RecordBlock, int, int]] = deque()
        nonce = owner.nonce
        self.nonce_salt = int(nonce, 16) + owner.nonce_offset if nonce else 0
        # Where each payload's nonce placeholder starts (-1: none in it).
        # (Only a real list: multi-turn sessions render each body lazily, without one.)
        has_list = isinstance(payloads, list)
        self.nonce_at = [p.find(nonce) for p in payloads] if nonce and has_list else None

    def dispatch(self, block: RecordBlock, j: int) -> None:
        """Send request ``(block, j)``: on an idle connection now, else when one opens."""
        idle = self.idle
        if idle:
            conn = idle.pop()
            payloads = self.payloads
            i = 0 if len(payloads) == 1 else (block.base + j) % len(payloads)
            payload = payloads[i]
            if self.nonce_at is not None and self.nonce_at[i] >= 0:
                k = self.nonce_at[i]
                nonce = nonce_for(block.base + j, self.nonce_salt)
                payload = payload[:k] + nonce + payload[k + NONCE_DIGITS :]
            conn.block = block
            conn.j = j
            conn.first = True
            conn.head = None
            conn.nbytes = 0
            if self.per_response:
                conn.reset_stream()
            block.bytes_out[j] = len(payload)
            conn.transport.write(payload)
            return
        self.waiting.append((block, j))
        self._grow()

    def start_waiting(self, conn: Conn) -> None:
        self.idle.append(conn)
        block, j = self.waiting[0]
        if self.retried and conn.served and block.base + j in self.retried:
            return  # a request sent again goes on a fresh connection only: _grow opens one
        self.waiting.popleft()
        self.dispatch(block, j)

    def retry(self, block: RecordBlock, j: int) -> bool:
        """Queue ``(block, j)`` first for a fresh connection, once (see http_conn)."""
        seq = block.base + j
        if self.owner.closing or seq in self.retried:
            return False
        self.retried.add(seq)
        self.reconnects += 1
        self.waiting.appendleft((block, j))
        self._grow()
        return True

    def settle_doubts(self, raced: bool) -> None:
        """The closing pattern is told: each held request is sent again on a fresh
        connection (``raced``), or booked a ``reset`` at the instant it came."""
        doubted = self.doubted
        while doubted:
            block, j, t_ns = doubted.popleft()
            if raced and self.retry(block, j):
                continue
            block.done_ns[j] = t_ns
            block.error[j] = RESET
            self.on_done(block, j)

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
            self.owner.note_connect_failure(connect_failure(exc))
            # A connect timeout is a connect failure, not a request timeout.
            self._fail_one_waiting(
                CONNECT if isinstance(exc, TimeoutError) else error_code(error_kind(exc))
            )
            return
        self.connecting -= 1
        if self.owner.closing:
            conn.transport.abort()
            return
        if conn.closed:  # accepted, then closed before any request: unusable
            self.owner.note_connect_failure("closed by the target before any request")
            self._fail_one_waiting(CONNECT)
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

    def discard(self, conn: Conn) -> None:
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
        doubted = self.doubted
        while doubted and doubted[0][2] + DOUBT_NS <= now_rel_ns:
            block, j, t_ns = doubted.popleft()  # the pattern was not told in time
            block.done_ns[j] = t_ns
            block.error[j] = RESET
            self.on_done(block, j)
        waiting, timeout = self.waiting, self.timeout_ns
        while waiting and waiting[0][0].sent_ns[waiting[0][1]] + timeout <= now_rel_ns:
            block, j = waiting.popleft()
            block.done_ns[j] = now_rel_ns
            block.error[j] = TIMEOUT
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
                conn.fail(TIMEOUT)
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
        nonce: bytes | None = None,
        nonce_stream: int = 0,
        answers: AnswerBook | None = None,
    ) -> None:
        # LLM answers (streams or whole bodies): their connections read them with the
        # book, which counts their tokens and keeps what the server said (answers.py).
        # None: plain HTTP, only the status and the bytes.
        self.answers = answers
        self.streaming = answers is not None and answers.streams
        self.nonce = nonce  # the per-run placeholder each request replaces (see nonce_for)
        # Worker w of a scaled-out run numbers its requests from 0 too: its nonces come
        # from seqs offset by w x 2^32, so no two workers' requests share one.
        self.nonce_offset = nonce_stream << 32
        self.timeout_ns = timeout_ns
        self.connect_timeout_ns = connect_timeout_ns
        self._insecure = insecure
        self._ssl: ssl.SSLContext | None = None
        self._preconnect = preconnect
        self._pools = [Pool(self, t, p) for t, p in zip(targets, payloads, strict=True)]
        self._rr = 0
        self._sweeper: asyncio.TimerHandle | None = None
        self._t0 = 0
        self.rx: Any = None  # the stream reader, while started (streaming, where built)
        self.closing = False
        self.connect_failures: dict[str, int] = {}  # why connections failed, and how often
        self.samples = ErrorSamples()  # the first bodies of failed answers, per (kind, status)
        # The engine calls ``send`` once per request: with one target it is the pool's own
        # dispatch, with no round-robin hop in between.
        self.send: Callable[[RecordBlock, int], None] = (
            self._pools[0].dispatch if len(self._pools) == 1 else self._send_round_robin
        )

    @property
    def reconnects(self) -> int:
        """Requests sent once more after a reused connection died before any answer byte."""
        return sum(p.reconnects for p in self._pools)

    @property
    def stray_answers(self) -> int:
        """Connections dropped because an answer came that no request asked for."""
        return sum(p.stray_answers for p in self._pools)

    def note_connect_failure(self, why: str) -> None:
        self.connect_failures[why] = self.connect_failures.get(why, 0) + 1

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
        if self.streaming and self.rx is None:
            # Stream sockets are read in C, many per wake-up of the loop (see rx_c.h).
            self.rx = stream_reader()
            if self.rx is not None:
                self.rx.set_origin(self._t0)
                asyncio.get_running_loop().add_reader(self.rx.fileno(), on_stream_reads, self.rx)
        for p in self._pools:
            p.on_done = on_done
            p.rx = self.rx
        await asyncio.gather(*(p.resolve() for p in self._pools))
        await asyncio.gather(*(p.preconnect(self._preconnect) for p in self._pools))
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def set_origin(self, t0_ns: int) -> None:
        self._t0 = t0_ns
        if self.rx is not None:
            self.rx.set_origin(t0_ns)
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
            pool.settle_doubts(False)  # resets, as they came
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
        if self.rx is not None:
            asyncio.get_running_loop().remove_reader(self.rx.fileno())
            self.rx.close()
            self.rx = None
