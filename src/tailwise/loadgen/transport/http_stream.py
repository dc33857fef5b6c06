"""HTTP connections whose responses are LLM answers: token streams (SSE) or whole JSON bodies.

A connection reads the framing (HTTP, SSE) and times each content chunk's arrival; what
an answer says (its tokens, usage, errors, the server's notes) it leaves to its
transport's :class:`~tailwise.loadgen.llm.answers.AnswerBook`, which writes those columns.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tailwise.clock import now_ns
from tailwise.loadgen.llm.answers import AnswerBook, answer_error
from tailwise.loadgen.llm.stream import Timings
from tailwise.loadgen.transport.http_conn import Conn, ConnPool
from tailwise.loadgen.transport.sse import SSEParser
from tailwise.loadgen.transport.sse_fast import chunk as fast_chunk
from tailwise.loadgen.transport.sse_fast import compiled_module
from tailwise.loadgen.transport.sse_fast import content as fast_content
from tailwise.loadgen.transport.sse_fast import finish as fast_finish
from tailwise.loadgen.transport.sse_fast import usage as fast_usage
from tailwise.metrics.error_samples import SAMPLE_BYTES
from tailwise.records import ERROR_KINDS, RecordBlock, error_code

_TRUNCATED, _TOO_LARGE = error_code("truncated"), error_code("too_large")
_NOT_A_STREAM = error_code("not_a_stream")
# Bounds on what one stream may hold in memory. A plain response is never buffered
# (only its length is counted), but a stream keeps its unfinished event and one
# arrival time per content chunk. An event over 4 MiB, or over 2^18 content chunks
# (far above any max_tokens served today), fails the request as ``too_large``
# instead of growing without bound until the timeout.
MAX_EVENT_BYTES = 4 << 20
MAX_STREAM_CHUNKS = 1 << 18
# An answer's text is kept only when it is needed (local token counting, a multi-turn
# session carrying it into the next turn): past 4 Mi characters, too_large too, so that a
# 900 MB answer is not held twice over (it was: 1.9 GB resident). Whole plain chunks the
# compiled reader books are bounded by MAX_STREAM_CHUNKS instead (each is one small delta).
MAX_KEPT_TEXT = 4 << 20


def answer_book(pool: ConnPool) -> AnswerBook:
    """The book of the transport that opened ``pool``: an answer connection needs one."""
    book = pool.owner.answers
    if book is None:
        raise ValueError("an LLM answer connection on a transport without an AnswerBook")
    return book


def stream_reader() -> Any:
    """A compiled stream reader (``sse_c.Reader``, see rx_c.h), or None.

    None where it is not built (not Linux, no compiler, ``TAILWISE_PURE_PYTHON``) or
    ``TAILWISE_STREAM_READER=0`` turns it off (to compare): the loop's transport reads
    every stream socket then, one Python call per read.
    """
    if os.environ.get("TAILWISE_STREAM_READER", "1") == "0":
        return None
    module = compiled_module("transport.sse_c")
    reader = getattr(module, "Reader", None)
    return reader() if reader is not None else None


def on_stream_reads(reader: Any) -> None:
    """The loop's callback when the reader's sockets are ready: read them, hand back."""
    backs = reader.poll()
    if backs is None:
        return
    for conn, data, t, err, nbytes, t_last in backs:
        try:
            conn.rx_back(data, t, err, nbytes, t_last)
        except Exception as exc:  # a bug; as the loop does for data_received: that
            # connection closes with the exception (its request fails, not as an orderly
            # close), the batch's others go on (one hand-back per connection per batch).
            asyncio.get_running_loop().call_exception_handler(
                {"message": "reading a stream failed", "exception": exc, "protocol": conn}
            )
            conn.rx_exc = exc
            conn.transport.abort()


def is_event_stream(head: bytes | None) -> bool:
    """Whether a response's headers say ``Content-Type: text/event-stream``."""
    if head is None:
        return False
    end = head.find(b"\r\n\r\n")
    headers = (head if end < 0 else head[:end]).lower()
    at = headers.find(b"\ncontent-type:")
    if at < 0:
        return False
    line_end = headers.find(b"\n", at + 1)
    return b"text/event-stream" in headers[at : len(headers) if line_end < 0 else line_end]


_DONE = (b"data: [DONE]\n\n", b"data:[DONE]\n\n")


def is_one_event(body: bytes) -> bool:
    """Whether ``body`` is exactly one SSE event of one ``data`` line (``data:...\\n\\n``).

    The SSE parser would give it as ``("message", the line after "data:" and one optional
    space)``: a caller between events may take it so without the parser.
    """
    return (
        body.startswith(b"data:")
        and body.endswith(b"\n\n")
        and body.count(b"\n") == 2
        and b"\r" not in body
    )


class StreamConn(Conn):
    """A connection whose responses are LLM token streams (Server-Sent Events).

    Every content chunk's arrival time is the arrival of the read that carried
    it (``t_last``): chunks that arrive together share a time, as they did on
    the wire. A stream that ends without ``[DONE]`` or a finish reason is
    ``truncated``; an answer with no stream event and no ``text/event-stream`` type
    (plain JSON, say) is ``not_a_stream``; an error event is ``stream_error``; unparsable data is
    ``malformed_chunk``; a stream over the memory bounds above is ``too_large``
    (the connection is dropped). Partial data (first token, chunk times) is kept.

    Nearly every read of a live stream is one whole HTTP chunk holding one plain content
    delta. Between two chunks (``at_chunk``: the HTTP parser has just completed one, the
    read ended there, and the SSE parser holds nothing) such a read is taken whole by
    :func:`~.sse_fast.chunk` (compiled where built) and never reaches the HTTP parser,
    whose state one whole chunk would leave as it was. A piece of body that is one plain
    content delta takes :func:`~.sse_fast.content`, the answer's plain finish
    :func:`~.sse_fast.finish`, a plain usage chunk :func:`~.sse_fast.usage`; ``[DONE]``
    is compared whole; one other whole event goes to the API kind's ``classify_event``
    (:mod:`tailwise.loadgen.llm.apis`; OpenAI's :func:`~tailwise.loadgen.llm.stream.classify`)
    without the SSE parser; anything else, the SSE parser and ``classify_event``. The
    records are the same either way (a property test over random cuts). What the answer
    gathered (chunk times, text, usage, the server's notes:
    :class:`~tailwise.loadgen.llm.answers.StreamTally`) becomes its token and chunk columns
    in the transport's :class:`~tailwise.loadgen.llm.answers.AnswerBook`, at its end or
    failure.

    Where the compiled stream reader runs (Linux: :func:`stream_reader`, rx_c.h), the
    connection's socket is read by it from the first request on: it books the whole
    plain content chunks that :func:`~tailwise.loadgen.transport.sse_fast.chunk` would read while
    the connection is *armed* (:meth:`rx_arm`: between chunks, mid-answer), and hands
    every other read back, with its arrival time, to :meth:`rx_back`, which reads it here
    as above. :meth:`rx_booked` counts what the reader booked (bytes, latest time, the
    first token) before anything that reads those counts: the next hand-back, a failure,
    the close. The records are the same with and without it (test_stream_reader).
    """

    __slots__ = (
        "at_chunk",
        "book",
        "cached",
        "chunks",
        "events",
        "finished",
        "keep_text",
        "kept",
        "lead",
        "prompt_tokens",
        "reasoning_chunks",
        "reasoning_text",
        "reasoning_usage",
        "rx",
        "rx_exc",
        "rx_fd",
        "rx_wait",
        "sse",
        "stream_err",
        "text",
        "timings",
        "usage_tokens",
    )

    def __init__(self, pool: ConnPool) -> None:
        super().__init__(pool)
        self.book = answer_book(pool)
        self.read_whole = None  # the body is read: every answer goes through httptools
        self.rx: Any = None  # the stream reader that reads this socket, if one does
        self.rx_fd = -1
        self.rx_wait: Any = None  # the reader to take the socket at the first request
        # A read error the reader met, or an exception reading its hand-back (see rx_back)
        self.rx_exc: Exception | None = None
        self.reset_stream()

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        rx = self.pool.rx
        if rx is not None and transport.get_extra_info("sslcontext") is None:
            # Not now: the loop starts reading right after connection_made (uvloop and
            # asyncio alike), which would undo a pause_reading here. (TLS bytes are the
            # TLS layer's to read: never taken.)
            self.rx_wait = rx

    def rx_take_over(self) -> None:
        """From the first request on, the reader reads the socket, not the loop."""
        rx, self.rx_wait = self.rx_wait, None
        sock = self.transport.get_extra_info("socket")
        if sock is None or self.closed:
            return
        fd = sock.fileno()
        try:
            rx.add(fd, self)
        except (OSError, ValueError):  # no room in the set: the loop reads it, as before
            return
        self.transport.pause_reading()
        self.rx, self.rx_fd = rx, fd

    def rx_arm(self) -> None:
        """Between chunks, mid-answer, past the first token: let the reader book whole
        plain content chunks. The first token is always booked here, in the block as it
        comes: the SLO-loss watch and the sequential looks read ``first_token_ns`` while
        the answer streams on, and a reader's booking reaches the block only when it
        hands back (at the answer's end), so a streaming request would read as having
        no first token and, past the threshold, as a certain TTFT miss. One Python read
        per answer; the rest stay the reader's."""
        chunks = self.chunks
        if chunks:
            self.rx.arm(
                self.rx_fd, chunks, self.text if self.keep_text else None, MAX_STREAM_CHUNKS
            )

    def rx_booked(self, nbytes: int, t_last: int) -> None:
        """What the reader booked since it last handed back, counted as if read here."""
        self.nbytes += nbytes
        self.t_last = t_last

    def rx_let_go(self) -> None:
        """The reader stops reading this socket; what it booked counts as read here."""
        nbytes, t_last = self.rx.remove(self.rx_fd)
        self.rx, self.rx_fd = None, -1
        if nbytes:
            self.rx_booked(nbytes, t_last)

    def rx_back(self, data: bytes | None, t: int, err: int, nbytes: int, t_last: int) -> None:
        """A read the reader handed back (see rx_c.h): the answer goes on from it here."""
        if nbytes:
            self.rx_booked(nbytes, t_last)
        if self.closed:
            return
        if data is not None:
            self.data_received(data, t)
            return
        # The connection's end: no longer the reader's. The loop's transport reads what
        # is left (the same bytes and the same end as without the reader), or, where the
        # reader's read met the error, the transport closes with it.
        self.rx, self.rx_fd = None, -1
        if err:
            self.rx_exc = OSError(err, os.strerror(err))  # ECONNRESET: ConnectionResetError
            self.transport.abort()
        else:
            self.transport.resume_reading()

    def reset_stream(self) -> None:
        if self.rx_wait is not None:  # the connection's first request (see connection_made)
            self.rx_take_over()
        self.sse = SSEParser()
        self.chunks: list[int] = []
        # Events that were an answer's part (not [DONE], not an error); read only as "any",
        # so the path of whole chunks (data_received) does not count on.
        self.events = 0
        self.finished = False
        self.stream_err = 0
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.cached: int | None = None
        self.timings: Timings | None = None
        self.text: list[str] = []  # kept only when the book keeps it
        self.kept = 0  # characters in text (what the Python paths appended)
        self.keep_text = self.book.keeps_text
        self.reasoning_chunks = 0  # events carrying reasoning_content (or reasoning)
        self.reasoning_usage: int | None = None
        self.reasoning_text: list[str] = []  # kept only when tokens are counted locally
        self.lead = b""  # the body's start until its first event: a sample if it is none
        self.at_chunk = False  # between HTTP chunks and SSE events, mid-answer (see class)

    def data_received(self, data: bytes, t: int | None = None) -> None:
        if self.at_chunk:
            text = fast_chunk(data)
            if text is not None:  # one whole chunk, one plain delta: no parser needed
                # (events counts on: at_chunk means one was read, and only "any" matters)
                if t is None:
                    t = now_ns() - self.pool.t0
                self.t_last = t
                self.nbytes += len(data)
                if text:
                    chunks = self.chunks
                    if not chunks and self.block is not None:  # after a role-only delta
                        self.block.first_token_ns[self.j] = t
                    chunks.append(t)
                    if self.keep_text:
                        self.text.append(text)
                        self.kept += len(text)
                    if len(chunks) > MAX_STREAM_CHUNKS or self.kept > MAX_KEPT_TEXT:
                        self.fail(_TOO_LARGE)
                        self.transport.abort()
                        return
                if self.rx is not None:
                    self.rx_arm()
                return
            self.at_chunk = False
        super().data_received(data, t)
        # A read that stopped inside the next chunk's size line is not between chunks.
        if self.at_chunk:
            if data[-2:] != b"\r\n":
                self.at_chunk = False
            elif self.rx is not None and self.block is not None:
                self.rx_arm()

    def on_chunk_header(self) -> None:
        self.at_chunk = False

    def on_chunk_complete(self) -> None:
        # Between chunks, with an answer under way whose SSE parser holds nothing: the
        # next whole chunk may skip the HTTP parser (data_received).
        self.at_chunk = (
            self.block is not None
            and self.events > 0
            and self.sse.idle
            and self.parser.get_status_code() < 300
        )

    def on_body(self, body: bytes) -> None:
        block = self.block
        if block is None or self.parser.get_status_code() >= 300:
            return
        if not self.events:
            if len(self.lead) < SAMPLE_BYTES:
                self.lead += body[:SAMPLE_BYTES]
            if not self.sse.idle:
                self.sse.skip_start(body)  # no BOM: the first event may take a fast path
        if self.sse.idle:
            text = fast_content(body)  # one plain content delta: most of a stream
            if text is not None:
                self.events += 1
                if text:
                    self._on_text(block, text)
                    if len(self.chunks) > MAX_STREAM_CHUNKS and self.block is not None:
                        self.fail(_TOO_LARGE)
                        self.transport.abort()
                return
            if is_one_event(body):  # the finish, the usage, [DONE]: no SSE parser needed
                self._one_event(block, body)
                return
        for etype, data in self.sse.feed(body):
            self._on_event(block, etype, data)
            if self.block is None:  # failed on it (too_large): the rest is not this answer's
                return
        # Checked once per read, not per event: the bounds only need to hold roughly.
        if self.sse.pending_bytes > MAX_EVENT_BYTES or len(self.chunks) > MAX_STREAM_CHUNKS:
            self.fail(_TOO_LARGE)
            self.transport.abort()

    def _one_event(self, block: RecordBlock, body: bytes) -> None:
        """One whole ``data:`` event, read between events: the fast readers, else classify."""
        if body in _DONE:
            self.finished = True
            return
        end = fast_finish(body)
        if end is not None:
            self.events += 1
            if end[0]:
                self._on_text(block, end[0])
            self.finished = True
            return
        counts = fast_usage(body)
        if counts is not None:
            self.events += 1
            if counts[0] is not None:
                self.prompt_tokens = counts[0]
            if counts[1] is not None:
                self.usage_tokens = counts[1]
            return
        self._on_event(block, "message", body[6 if body[5:6] == b" " else 5 : -2])

    def _on_event(self, block: RecordBlock, etype: str, data: str | bytes) -> None:
        """One whole SSE event: what it says goes into this answer's state."""
        # One plain data line (is_one_event) is decoded as the SSE parser would.
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        c = self.book.classify_event(text, etype)
        if not c.done and c.error is None:
            self.events += 1
        if c.text:
            self._on_text(block, c.text)
        if c.reasoning:
            if not self.reasoning_chunks:
                block.first_reasoning_ns[self.j] = self.t_last
            self.reasoning_chunks += 1
            if self.book.counter is not None:
                self.reasoning_text.append(c.reasoning)
        if c.reasoning_tokens is not None:
            self.reasoning_usage = c.reasoning_tokens
        if c.done or c.finish_reason:
            self.finished = True
        if c.completion_tokens is not None:
            self.usage_tokens = c.completion_tokens
        if c.prompt_tokens is not None:
            self.prompt_tokens = c.prompt_tokens
        if c.cached_tokens is not None:
            self.cached = c.cached_tokens
        if c.timings is not None:
            self.timings = c.timings
        if c.error is not None and not self.stream_err:
            self.stream_err = answer_error(c.error)

    def _on_text(self, block: RecordBlock, text: str) -> None:
        """A content chunk: a token arrival at the time of the read that carried it."""
        chunks = self.chunks
        if not chunks:
            block.first_token_ns[self.j] = self.t_last
        chunks.append(self.t_last)
        if self.keep_text:
            self.text.append(text)
            self.kept += len(text)
            if self.kept > MAX_KEPT_TEXT and self.block is not None:
                self.fail(_TOO_LARGE)
                self.transport.abort()

    def on_message_complete(self) -> None:
        self.at_chunk = False  # the last chunk's completion came just before
        block = self.block
        if block is None:
            return
        status = self.parser.get_status_code()
        if 200 <= status < 300:
            self.book.keep_stream(block, self.j, self)
            if self.stream_err:
                block.error[self.j] = self.stream_err
            elif not self.events and not self.finished and not is_event_stream(self.head):
                # A plain (JSON, HTML) answer to a streaming request: the endpoint does not
                # stream (wrong --api, or a proxy), which a cut stream would hide.
                block.error[self.j] = _NOT_A_STREAM
            elif not self.finished or self.sse.close():
                block.error[self.j] = _TRUNCATED
            elif not self.events:
                # A [DONE] after nothing the stream format knows (lines without ``data:``,
                # or none at all): not an answer with zero tokens, an answer of another kind.
                block.error[self.j] = _NOT_A_STREAM
            self.book.answered(block, self.j, self.text)
        super().on_message_complete()

    def sample(self, code: int, status: int) -> None:
        if status >= 300:
            super().sample(code, status)
        else:  # a 2xx that failed as a stream: what its body began with
            self.pool.owner.samples.add(ERROR_KINDS[code], status, self.lead)

    def fail(self, code: int) -> None:
        self.at_chunk = False
        if self.rx is not None:
            # The reader lets go first: nothing it reads may join the kept chunk times
            # (a failed request's connection is closed next: it is not read again).
            self.rx_let_go()
        if self.block is not None:
            self.book.keep_stream(self.block, self.j, self)
        super().fail(code)

    def connection_lost(self, exc: Exception | None) -> None:
        self.rx_wait = None
        if self.rx is not None:
            self.rx_let_go()
        if exc is None and self.rx_exc is not None:
            exc = self.rx_exc  # the reader's read met it: as the transport would have
        super().connection_lost(exc)


class AnswerConn(Conn):
    """A connection whose responses are whole JSON answers (not streamed, or embeddings).

    The body is kept (up to :data:`MAX_EVENT_BYTES`; more fails as ``too_large``) and
    read once at its end by the book (:meth:`~tailwise.loadgen.llm.answers.AnswerBook.keep_answer`)
    for the server's usage, cached prompt tokens and timings; an answer that is not JSON,
    or an error object under a 2xx status, is ``malformed_chunk`` or ``stream_error`` as in
    a stream. With no usage, token columns stay unknown (-1).
    """

    __slots__ = ("body", "book")

    def __init__(self, pool: ConnPool) -> None:
        super().__init__(pool)
        self.book = answer_book(pool)
        self.read_whole = None  # the body is read: every answer goes through httptools
        self.body: list[bytes] = []

    def reset_stream(self) -> None:
        self.body = []

    def on_body(self, body: bytes) -> None:
        if self.block is None or self.parser.get_status_code() >= 300:
            return
        self.body.append(body)
        if self.nbytes > MAX_EVENT_BYTES:
            self.fail(_TOO_LARGE)
            self.transport.abort()

    def on_message_complete(self) -> None:
        block = self.block
        if block is not None and 200 <= self.parser.get_status_code() < 300:
            self.book.keep_answer(block, self.j, b"".join(self.body))
        self.body = []
        super().on_message_complete()
