"""One HTTP/1.1 keep-alive connection of the transport (:mod:`tailwise.loadgen.transport.http`).

A connection carries at most one request at a time (no pipelining) and writes
its outcome straight into the request's record block: first byte, completion,
status, error kind, bytes in. It knows its pool only through :class:`ConnPool`.
:mod:`~tailwise.loadgen.transport.http_stream` extends it for LLM token streams.

A reused connection that dies before any byte of the response arrived is not a
failure of the request but a race with the server's close: a server may close
an idle keep-alive connection at any moment (llama.cpp's ``llama-server``
closes one after each streamed response although it promised ``Keep-Alive``),
and a request written in the meantime meets a closed socket. Such a request is
sent once more on a fresh connection (:meth:`ConnPool.retry`), as browsers and
curl do, and counted as a *reconnect*. It is sent again only when the server
gave no sign of having taken it up: not one response byte, an orderly close (a
FIN came first: the end of the stream, or EPIPE when our write then met the
closed socket; a server that closes before our request arrives sends one), on a
connection that had already served a request (so the close ends the server's
keep-alive, it does not refuse this request). A reset (RST) counts the same
once the target has been seen closing reused connections in order
(``keepalive_closes``): its socket, closed with our request unread in it,
answers with a reset instead of a FIN (a closed-loop user writes its next
request the instant an answer ends, and meets this often), or once it has reset
three connections right after their N-th answer, every reset of it so far at
that same N, while none of its connections ever answered more (it closes after
N answers, whatever it announces: then every close may meet a write, and no FIN
is ever seen). A reset that fits that pattern before it is told is held, neither
failed nor sent again, until it is (``Pool.doubted``; at most
:data:`~tailwise.loadgen.transport.http.DOUBT_NS`, then booked as it came). Otherwise a reset
(a crashed or overloaded peer, or a proxy injecting faults), a failure on a
fresh connection, a second failure of the same request, or any response byte:
the request fails as ``reset`` and is never sent again. What remains possible is a
server that read the request and then closed in order without a word; the
resend is counted, never hidden. The record keeps its intended and first send
instants, so the latency includes the lost attempt and the reconnect.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import httptools

from tailwise.clock import now_ns
from tailwise.loadgen.llm.answers import AnswerBook
from tailwise.loadgen.transport import OnDone
from tailwise.loadgen.transport.sse_fast import compiled_module
from tailwise.metrics.error_samples import ErrorSamples
from tailwise.records import ERROR_KINDS, RecordBlock, error_code

OK, HTTP_4XX, HTTP_5XX = error_code(""), error_code("http_4xx"), error_code("http_5xx")
RESET, PROTOCOL, TIMEOUT = error_code("reset"), error_code("protocol"), error_code("timeout")
CONNECT = error_code("connect")
# Resets right after a connection's N-th answer, every one at the same N and no connection
# ever answering more: from the third on, the target's close racing our write
# (Conn.close_raced).
CLOSE_RESETS = 3
HEAD_MAX_BYTES = 65_536  # how much of a response is kept to read its headers at a close
# A 4xx/5xx answer keeps reading into ``head`` past its headers (bounded by HEAD_MAX_BYTES)
# so that its body can be sampled; told by the status line's first digit: "HTTP/1.1 4".
ERROR_DIGITS = (b"4", b"5")
ReadWhole = Callable[[bytes], int]
_http_c = compiled_module("transport.http_c")
# The status of one read that is one whole plain answer, else 0 (see http_c.c); None
# where not built or TAILWISE_PURE_PYTHON is set: httptools reads every answer then.
READ_WHOLE: ReadWhole | None = _http_c.response if _http_c is not None else None


class ConnOwner(Protocol):
    """What a connection reads and counts on its transport."""

    samples: ErrorSamples
    closing: bool  # the run is ending: nothing is sent again
    answers: AnswerBook | None  # how LLM answers are read and counted (http_stream)


class ConnPool(Protocol):
    """What a connection needs of the pool that opened it (:class:`.http.Pool`)."""

    t0: int
    on_done: OnDone
    rx: Any  # the stream reader of stream connections (http_stream.stream_reader), or None
    idle: list[Conn]
    waiting: deque[tuple[RecordBlock, int]]
    stray_answers: int
    keepalive_closes: int
    most_served: int
    close_after: int
    close_resets: int
    doubted: deque[tuple[RecordBlock, int, int]]

    @property
    def owner(self) -> ConnOwner: ...

    def settle_doubts(self, raced: bool) -> None:
        """Send the held requests again (``raced``) or book each a reset."""
        ...

    def start_waiting(self, conn: Conn) -> None: ...

    def discard(self, conn: Conn) -> None: ...

    def retry(self, block: RecordBlock, j: int) -> bool:
        """Send ``(block, j)`` again on a fresh connection; False if it was already retried."""
        ...


def ends_at_close(head: bytes | None) -> bool:
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


def status_of(head: bytes | None) -> int:
    """The status code of a response that began with ``head`` (``HTTP/1.x NNN``), else 0.

    A request that fails after its answer's head came (a reset, a stream too large, a
    timeout) keeps the status the server sent: the error is the client's reading of it.
    """
    if head is None or len(head) < 12 or not head.startswith(b"HTTP/") or head[8:9] != b" ":
        return 0
    code = head[9:12]
    return int(code) if code.isdigit() else 0


class Conn(asyncio.Protocol):
    """One keep-alive connection; carries at most one request at a time (no pipelining).

    A read that starts an answer and is one whole plain answer (a Content-Length body,
    2xx/3xx, keep-alive: see ``http_c.c``) is booked from :data:`READ_WHOLE`'s status
    without httptools, whose state between two messages one whole message leaves as it
    was. Subclasses that read the body set ``read_whole`` to None.
    """

    __slots__ = (
        "block",
        "closed",
        "first",
        "head",
        "head_open",
        "held",
        "j",
        "nbytes",
        "parser",
        "parsing",
        "pool",
        "read_whole",
        "served",
        "stray",
        "t_last",
        "transport",
    )

    def __init__(self, pool: ConnPool) -> None:
        self.pool = pool
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.block: RecordBlock | None = None
        self.j = 0
        self.first = True
        self.nbytes = 0
        self.closed = False
        self.t_last = 0  # run-relative ns of the latest chunk
        # The current response's first bytes, up to its header end (see connection_lost).
        self.head: bytes | None = None
        self.head_open = False  # the head so far has no header end yet
        self.served = 0  # final responses completed on this connection
        self.read_whole = READ_WHOLE
        # Inside the parser's feed: an answer completed there releases the connection
        # only when the feed returns (``held``: 1 keep it, 2 close it), so that nothing
        # is sent on it while the same read is still parsed (see release).
        self.parsing = False
        self.held = 0
        self.stray = False  # bytes followed an answer's end in the same read

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes, t: int | None = None) -> None:
        """One read of the socket; ``t``: its run-relative arrival, when read elsewhere."""
        block = self.block
        if block is None:  # bytes nobody asked for: the connection can't be trusted
            self.drop_stray()
            return
        if t is None:
            t = now_ns() - self.pool.t0
        self.t_last = t
        if self.first:
            self.first = False
            block.first_byte_ns[self.j] = t
        head = self.head
        if head is None:
            read_whole = self.read_whole
            if read_whole is not None:
                status = read_whole(data)
                if status:  # one whole plain answer: httptools would say the same
                    self.nbytes += len(data)
                    self.complete(block, status, True)
                    return
            self.head = data
            # One search per response; an error answer keeps its body's start too.
            self.head_open = b"\r\n\r\n" not in data or data[9:10] in ERROR_DIGITS
        elif self.head_open:  # headers split across reads (rare): see ends_at_close
            head += data
            self.head = head
            self.head_open = len(head) < HEAD_MAX_BYTES and (
                b"\r\n\r\n" not in head or head[9:10] in ERROR_DIGITS
            )
        self.nbytes += len(data)
        self.parsing = True
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            # Unparsable, or a protocol switch nobody asked for: not an HTTP answer.
            self.fail(PROTOCOL)
            self.transport.abort()
        finally:
            self.parsing = False
        if self.held:
            self.release()

    def on_message_begin(self) -> None:
        if self.block is None:  # a second answer in the read that ended the first
            self.stray = True

    def drop_stray(self) -> None:
        """An answer nobody asked for (a server that answered one request twice): what
        follows on this connection cannot be paired with a request, so it is closed, and
        counted (``stray_answers``); the request already booked keeps its own answer."""
        self.pool.stray_answers += 1
        self.pool.discard(self)
        self.transport.abort()

    def release(self) -> None:
        """After the read that completed an answer: the connection serves the next one."""
        keep, self.held = self.held == 1, 0
        if self.stray:
            self.drop_stray()
            return
        pool = self.pool
        if keep and not self.closed:
            if pool.waiting:
                pool.start_waiting(self)
            else:
                pool.idle.append(self)
        else:
            self.transport.close()

    def on_message_complete(self) -> None:
        block = self.block
        if block is None:
            return
        parser = self.parser
        status = parser.get_status_code()
        if status == 101:  # Switching Protocols, unasked: what follows is not HTTP
            self.fail(PROTOCOL)
            self.transport.abort()
            return
        if 100 <= status < 200:
            self.head = None  # an interim response; the final one follows on this connection
            return
        self.complete(block, status, parser.should_keep_alive())

    def complete(self, block: RecordBlock, status: int, keep: bool) -> None:
        """Book the final answer (``status``) of ``block``'s request; keep the connection?"""
        j = self.j
        block.done_ns[j] = self.t_last
        block.status[j] = status
        if status >= 400:
            block.error[j] = HTTP_5XX if status >= 500 else HTTP_4XX
        if block.error[j]:
            self.sample(block.error[j], status)
        block.bytes_in[j] = self.nbytes
        self.block = None
        self.served += 1
        if self.served > self.pool.most_served:
            self.pool.most_served = self.served  # the target keeps connections this long
            if self.pool.doubted:
                self.pool.settle_doubts(False)  # it does not close after fewer answers
        self.pool.on_done(block, j)
        # Released once the parser is done with this read, never from inside its callback:
        # a request sent now would be credited with what the read holds after this answer.
        self.held = 1 if keep else 2
        if not self.parsing:
            self.release()

    def sample(self, code: int, status: int) -> None:
        """Keep the body of a failed answer (the error path only; bounded per kind)."""
        self.pool.owner.samples.add_response(ERROR_KINDS[code], status, self.head)

    def fail(self, code: int) -> None:
        block = self.block
        if block is None:
            return
        self.block = None
        block.done_ns[self.j] = now_ns() - self.pool.t0
        block.error[self.j] = code
        if not block.status[self.j]:  # the status the server sent, if its head came
            block.status[self.j] = status_of(self.head)
        block.bytes_in[self.j] = self.nbytes
        self.pool.on_done(block, self.j)

    def reset_stream(self) -> None:
        """Only stream connections keep per-response stream state."""

    def close_raced(self, exc: Exception | None) -> bool:
        """Whether a reset under an unanswered request on a reused connection is the
        target's keep-alive close meeting our write (a socket closed with our request
        unread in it answers with a reset, not a FIN). It is, once this target has been
        seen closing reused connections in order, or once it has reset
        :data:`CLOSE_RESETS` connections right after their N-th answer, every reset of it
        so far at that same N, while no connection of it ever answered more (it closes
        after N answers, whatever it announces; a closed-loop user can meet the reset every
        time, and then no FIN is ever seen). Before that, a reset is a failure."""
        if not isinstance(exc, ConnectionResetError):
            return False
        pool = self.pool
        n = self.served
        if pool.close_after == 0:
            pool.close_after = n
        if pool.close_after == n:
            pool.close_resets += 1
        else:
            pool.close_after = -1  # resets at different counts: not one closing pattern
            if pool.doubted:
                pool.settle_doubts(False)
        if pool.keepalive_closes > 0:
            return True
        regular = pool.close_after == n and pool.most_served == n
        return regular and pool.close_resets >= CLOSE_RESETS

    def may_race(self) -> bool:
        """After :meth:`close_raced` said no to a reset: whether the closing pattern is
        still possible (every reset so far after this connection's count of answers, and
        no connection answering more), so that more resets may yet tell it."""
        pool = self.pool
        n = self.served
        return pool.close_after == n and pool.most_served == n and not pool.owner.closing

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        block = self.block
        pool = self.pool
        orderly = exc is None or isinstance(exc, BrokenPipeError)
        if block is None:
            if orderly and self.served and self in pool.idle:
                pool.keepalive_closes += 1  # the target closed a connection kept for reuse
                if pool.doubted:
                    pool.settle_doubts(True)
        elif isinstance(exc, ConnectionResetError) and (not self.served or self.nbytes):
            pool.close_after = -1  # a reset no keep-alive close explains (close_raced)
            if pool.doubted:
                pool.settle_doubts(False)
        elif self.served and not self.nbytes and (orderly or self.close_raced(exc)):
            # Closed under a request it never answered, after serving others: the
            # server's close raced our write (module docstring).
            if orderly:
                pool.keepalive_closes += 1
            pool.discard(self)
            self.block = None
            if pool.doubted:
                pool.settle_doubts(True)  # the resets held meanwhile were that race too
            if pool.retry(block, self.j):
                return
            self.block = block
        elif self.served and not self.nbytes and self.may_race():
            # A reset that fits the closing pattern before it is told: held until it is
            # (sent again then), or booked a reset at this instant (Pool.settle_doubts).
            pool.discard(self)
            self.block = None
            pool.doubted.append((block, self.j, now_ns() - pool.t0))
            return
        if block is not None and exc is None and ends_at_close(self.head):
            # HTTP/1.1 allows a body that ends when the server closes: the close is the
            # answer's end, read as any other end (a stream's tokens, its truncation).
            self.t_last = now_ns() - self.pool.t0
            self.on_message_complete()
        self.fail(RESET)
        self.pool.discard(self)
