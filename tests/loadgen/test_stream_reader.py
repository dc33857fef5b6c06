"""The compiled stream reader (``sse_c.Reader``, rx_c.h): stream sockets read in C.

Two layers. The Reader alone, on real loopback TCP sockets: what it books, what it hands
back (bytes, times, hang-ups, errors), its bounds and its refusals. Then whole answers
through :class:`~tailwise.loadgen.transport.http.HttpTransport` against a small asyncio server, with
the reader and without it (``TAILWISE_STREAM_READER=0``): the records must be the same in
everything but the instants, and the instants must keep their invariants (the first
token is the first chunk time, times never go back, every time lies in the request's
span). The rest of the suite (fault matrix, reliability, loopback runs) runs with the
reader on, as a user's run does.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import itertools
import socket
import struct
import termios
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailwise.loadgen.llm.answers import AnswerBook
from tailwise.loadgen.transport import http_stream
from tailwise.loadgen.transport.http import HttpTransport
from tailwise.loadgen.transport.targets import parse_url
from tailwise.records import ERROR_KINDS, RecordBlock
from tests.loadgen.test_sse_fast import SSE_FILES, events_as_chunks, http_answer

T = TypeVar("T")
Reader: Any = getattr(http_stream.compiled_module("transport.sse_c"), "Reader", None)
pytestmark = pytest.mark.skipif(Reader is None, reason="no compiled stream reader (not Linux?)")


def plain(text: str) -> bytes:
    """One HTTP chunk holding one plain content delta (what the reader books)."""
    event = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % text.encode()
    return b"%x\r\n%s\r\n" % (len(event), event)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(client, server) ends of one loopback TCP connection; the client is non-blocking."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    client.setblocking(False)
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    yield client, server
    client.close()
    server.close()


def poll_until(reader: Any, want: int = 1, timeout_s: float = 5.0) -> list[Any]:
    """Hand-backs from polls until ``want`` arrived (or the time is up)."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        out += reader.poll() or []
        time.sleep(0.001)
    return out


def queued(sock: socket.socket, request: int) -> int:
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), request, b"\0" * 4))[0])


def drained(reader: Any, client: socket.socket, server: socket.socket) -> list[Any]:
    """Polls until all the server sent was read off the client's socket (the server has
    it acknowledged, none is left to read): the hand-backs meanwhile. No sleep decides it,
    so a busy machine only makes it slower."""
    out: list[Any] = []
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        out += reader.poll() or []
        if queued(server, termios.TIOCOUTQ) == 0 and queued(client, termios.FIONREAD) == 0:
            return out
        time.sleep(0.001)
    raise AssertionError("the reader did not read what the server sent")


class Conn:
    """Stands for the connection the reader hands back to."""


def taken(pair: tuple[socket.socket, socket.socket]) -> tuple[Any, Any, Any, Conn]:
    """(client, server, reader, conn): the client's socket read by a new reader for conn."""
    client, server = pair
    reader, conn = Reader(), Conn()
    reader.add(client.fileno(), conn)
    return client, server, reader, conn


def test_plain_chunks_are_booked_with_their_times_and_nothing_is_handed_back(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server = pair
    reader, conn, chunks, text = Reader(), Conn(), [7], []
    t0 = time.monotonic_ns()
    reader.set_origin(t0)
    reader.add(client.fileno(), conn)
    reader.arm(client.fileno(), chunks, text, 100)
    sent = 0
    for word in ("Hello", "", "world"):  # an empty content is no token, but its bytes count
        before = time.monotonic_ns() - t0
        server.sendall(plain(word))
        sent += len(plain(word))
        assert drained(reader, client, server) == []
        after = time.monotonic_ns() - t0
        if word:
            assert before <= chunks[-1] <= after
    assert len(chunks) == 3 and chunks[1] <= chunks[2] and text == ["Hello", "world"]
    nbytes, t_last = reader.remove(client.fileno())
    assert nbytes == sent and t_last >= chunks[-1]
    assert reader.remove(client.fileno()) == (0, 0)  # no longer read here


def test_any_other_read_is_handed_back_as_it_came_and_disarms(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server, reader, conn = taken(pair)
    chunks = [1]
    reader.arm(client.fileno(), chunks, None, 100)
    server.sendall(plain("a"))
    assert drained(reader, client, server) == []
    finish = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    odd = b"%x\r\n%s\r\n" % (len(finish), finish)
    server.sendall(odd)
    (back,) = poll_until(reader)
    assert back[0] is conn and back[1] == odd and back[3] == 0
    assert back[4] == len(plain("a"))  # what was booked since the last hand-back
    server.sendall(plain("b"))  # disarmed: even a plain chunk now goes to Python
    (back,) = poll_until(reader)
    assert back[1] == plain("b") and back[4] == 0 and len(chunks) == 2


def test_two_chunks_in_one_read_and_a_chunk_cut_in_two_go_to_python(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server, reader, _conn = taken(pair)
    chunks = [1]
    reader.arm(client.fileno(), chunks, None, 100)
    server.sendall(plain("a") + plain("b"))
    (back,) = poll_until(reader)
    assert back[1] == plain("a") + plain("b") and chunks == [1]
    reader.arm(client.fileno(), chunks, None, 100)
    server.sendall(plain("c")[:5])
    (back,) = poll_until(reader)
    assert back[1] == plain("c")[:5] and chunks == [1]


def test_a_full_chunk_list_goes_to_python_which_fails_the_answer(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server, reader, _conn = taken(pair)
    chunks = [1, 2]
    reader.arm(client.fileno(), chunks, None, 3)
    server.sendall(plain("a"))
    assert drained(reader, client, server) == [] and len(chunks) == 3
    server.sendall(plain("b"))
    (back,) = poll_until(reader)
    assert back[1] == plain("b") and len(chunks) == 3


def test_a_close_comes_back_after_the_data_before_it_and_the_socket_leaves_the_set(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server, reader, conn = taken(pair)
    server.sendall(b"tail bytes")
    server.close()
    time.sleep(0.01)
    data, end = poll_until(reader, want=2)
    assert data[0] is conn and data[1] == b"tail bytes" and data[3] == 0
    assert end[0] is conn and end[1] is None and end[3] == 0
    assert client.recv(100) == b""  # the end, left for the loop's transport to meet
    assert reader.remove(client.fileno()) == (0, 0)


def test_a_reset_is_handed_back_unread_for_the_transport_to_meet(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server, reader, _conn = taken(pair)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    server.close()  # RST
    (back,) = poll_until(reader)
    assert back[1] is None
    with pytest.raises(ConnectionResetError):
        client.recv(100)


def test_a_read_that_fails_is_handed_back_with_its_errno() -> None:
    # A listening socket is reported readable when a connection waits, and read(2) on
    # it fails (ENOTCONN): the path of a read error epoll did not flag.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        reader, conn = Reader(), Conn()
        reader.add(listener.fileno(), conn)
        with socket.create_connection(listener.getsockname()):
            (back,) = poll_until(reader)
        assert back[0] is conn and back[1] is None and back[3] == errno.ENOTCONN
        assert reader.remove(listener.fileno()) == (0, 0)


def test_more_ready_sockets_than_one_poll_takes_are_all_read() -> None:
    reader = Reader()
    with socket.create_server(("127.0.0.1", 0), backlog=400) as listener:
        pairs = []
        for _ in range(300):  # over RX_EVENTS (256): the rest wait in epoll's queue
            c = socket.create_connection(listener.getsockname())
            s, _ = listener.accept()
            c.setblocking(False)
            pairs.append((c, s))
        try:
            conns = [Conn() for _ in pairs]
            for (c, s), conn in zip(pairs, conns, strict=True):
                reader.add(c.fileno(), conn)
                s.sendall(b"x")
            backs = poll_until(reader, want=300)
            assert sorted(id(b[0]) for b in backs) == sorted(id(c) for c in conns)
        finally:
            for c, s in pairs:
                c.close()
                s.close()


def test_a_large_answer_comes_back_whole_and_in_order(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    _client, server, reader, _conn = taken(pair)
    body = bytes(range(256)) * 4096  # 1 MiB: more than one poll reads of one socket
    server.setblocking(False)
    got = bytearray()
    at = 0
    deadline = time.monotonic() + 10
    while len(got) < len(body) and time.monotonic() < deadline:
        if at < len(body):
            with contextlib.suppress(BlockingIOError):  # the client's buffer is full
                at += server.send(body[at : at + 262144])
        for back in reader.poll() or []:
            got += back[1]
    assert bytes(got) == body


def test_bad_calls_are_refused_with_a_clear_error(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, _ = pair
    reader = Reader()
    with pytest.raises(ValueError, match="out of range"):
        reader.add(-1, Conn())
    with pytest.raises(KeyError, match="not read here"):
        reader.arm(client.fileno(), [], None, 10)
    reader.add(client.fileno(), Conn())
    with pytest.raises(TypeError):
        reader.arm(client.fileno(), (), None, 10)
    with pytest.raises(TypeError):
        reader.arm(client.fileno(), [], "text", 10)
    with pytest.raises(OSError):
        reader.add(10**5, Conn())  # no such descriptor: epoll refuses it
    with pytest.raises(TypeError):
        Reader(1)
    reader.close()
    assert reader.poll() is None
    assert reader.remove(client.fileno()) == (0, 0)
    with pytest.raises(ValueError, match="closed"):
        reader.add(client.fileno(), Conn())


# ---- whole answers through the transport, with the reader and without -----------------

TIME_COLUMNS = {"scheduled_ns", "sent_ns", "first_byte_ns", "first_token_ns", "done_ns"}
TIME_COLUMNS |= {"first_reasoning_ns"}
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\n\r\n{}"
)


CLOSE = b"<close>"  # a piece that closes the connection (FIN) right after the one before


async def _serve(pieces: list[list[bytes]], gap_s: float) -> tuple[asyncio.Server, str]:
    """A server answering its i-th request (one per connection) with ``pieces[i]``, one
    write per piece, ``gap_s`` apart (so that each piece is usually one read)."""
    answers = iter(pieces)

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                await r.readuntil(b"\r\n\r\n")
                await r.readexactly(2)
                for piece in next(answers):
                    if piece == CLOSE:
                        return
                    w.write(piece)
                    await w.drain()
                    await asyncio.sleep(gap_s)
        except (asyncio.IncompleteReadError, ConnectionError, StopIteration):
            pass
        finally:
            w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/chat/completions"


async def _answers(pieces: list[list[bytes]], gap_s: float, timeout_s: float = 5.0) -> Any:
    """The block of one request per answer in ``pieces``, each on a fresh connection."""
    server, url = await _serve(pieces, gap_s)
    texts: list[tuple[int, str]] = []
    transport = HttpTransport(
        [parse_url(url)],
        [[REQUEST]],
        timeout_ns=int(timeout_s * 1e9),
        connect_timeout_ns=10**9,
        preconnect=0,
        # on_answer keeps the text
        answers=AnswerBook(streams=True, on_answer=lambda seq, text: texts.append((seq, text))),
    )
    rows = len(pieces)
    block = RecordBlock(0, rows)
    done: list[int] = []
    try:
        await transport.start(lambda b, j: done.append(j))
        t0 = time.monotonic_ns()
        transport.set_origin(t0)
        reader_on = transport.rx is not None
        for j in range(rows):
            block.sent_ns[j] = time.monotonic_ns() - t0
            # One connection per answer: close the previous one's keep-alive first.
            for conn in list(transport._pools[0].idle):
                conn.transport.close()
            transport._pools[0].idle.clear()
            transport.send(block, j)
            deadline = time.monotonic() + timeout_s + 2
            while len(done) <= j and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
        end_ns = time.monotonic_ns() - t0
    finally:
        await transport.close()
        server.close()
    return block, reader_on, end_ns, sorted(texts)


def records(block: RecordBlock) -> dict[str, Any]:
    """A block's columns but the instants, and how many chunk times each row has."""
    out: dict[str, Any] = {
        name: list(getattr(block, name))
        for name in block.__slots__
        if name not in TIME_COLUMNS | {"base", "rows", "chunk_times"}
    }
    out["chunks"] = {j: len(t) for j, t in block.chunk_times.items()}
    return out


def instants_hold(block: RecordBlock, end_ns: int) -> None:
    for j in range(block.rows):
        times = block.chunk_times.get(j, [])
        assert times == sorted(times)
        if times:
            assert block.first_token_ns[j] == times[0]
            assert block.sent_ns[j] <= times[0] and times[-1] <= block.done_ns[j] <= end_ns
            assert block.first_byte_ns[j] <= times[0]


LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
try:
    import uvloop

    LOOPS["uvloop"] = uvloop.new_event_loop  # what a run uses where installed
except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
    pass


def on_loop(loop: str, coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(coro)


BOOKED: list[int] = []  # bytes the reader booked, per hand-back (see both_ways)


def both_ways(
    pieces: list[list[bytes]], gap_s: float, monkeypatch: pytest.MonkeyPatch
) -> tuple[RecordBlock, RecordBlock]:
    """The blocks with the reader and without it, on each event loop (all of them must
    agree: the reader's block is the first, the loop's own reading the second); every
    run's instants are checked."""
    blocks, seen = [], []
    booked = http_stream.StreamConn.rx_booked

    def counted(conn: Any, nbytes: int, t_last: int) -> None:
        BOOKED.append(nbytes)
        booked(conn, nbytes, t_last)

    monkeypatch.setattr(http_stream.StreamConn, "rx_booked", counted)
    for setting, loop in itertools.product(("1", "0"), LOOPS):
        monkeypatch.setenv("TAILWISE_STREAM_READER", setting)
        block, reader_on, end_ns, texts = on_loop(loop, _answers(pieces, gap_s))
        assert reader_on == (setting == "1")
        instants_hold(block, end_ns)
        blocks.append(block)
        seen.append((records(block), texts))  # the answers' texts: kept by the reader too
    assert all(r == seen[0] for r in seen)
    return blocks[0], blocks[-1]


def by_http_chunk(answer: bytes) -> list[bytes]:
    """The answer as its head and one piece per HTTP chunk (as a live stream is read)."""
    head_end = answer.find(b"\r\n\r\n") + 4
    out, at = [answer[:head_end]], head_end
    while at < len(answer):
        nl = answer.find(b"\r\n", at)
        size = int(answer[at:nl], 16)
        end = nl + 2 + size + 2
        out.append(answer[at:end])
        at = end
    return out


def test_every_fixture_gives_the_same_records_with_the_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = []
    for path in SSE_FILES:
        sse = path.read_bytes()
        answers.append(by_http_chunk(http_answer(sse, events_as_chunks(sse))))
    del BOOKED[:]
    with_reader, without = both_ways(answers, 0.001, monkeypatch)
    assert sum(BOOKED) > 0  # the reader did book chunks (one HTTP chunk per write)
    assert records(with_reader) == records(without)
    kinds = {ERROR_KINDS[e] for e in with_reader.error}
    assert "" in kinds and len(kinds) > 1  # good answers and failed ones were both read
    assert sum(len(t) for t in with_reader.chunk_times.values()) > 50


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_cuts_give_the_same_records_with_the_reader(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(SSE_FILES))
    sse = path.read_bytes()
    sizes = data.draw(
        st.one_of(
            st.just(events_as_chunks(sse)),
            st.lists(st.integers(1, 300), min_size=1, max_size=6),
        )
    )
    answer = http_answer(sse, sizes)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(answer) - 1), max_size=12))))
    pieces = [answer[a:b] for a, b in itertools.pairwise([0, *cuts, len(answer)])]
    with pytest.MonkeyPatch.context() as mp:
        with_reader, without = both_ways([pieces], 0.0005, mp)
    assert records(with_reader) == records(without), path.name


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


async def read_request(r: asyncio.StreamReader) -> None:
    await r.readuntil(b"\r\n\r\n")
    await r.readexactly(2)  # REQUEST's body


async def one_request(
    handle: Handler, timeout_ns: int, linger_s: float = 0.0
) -> tuple[RecordBlock, int, list[int]]:
    """One streamed request to a server that answers with ``handle``: its block, how many
    times it settled, and its chunk times as they stood when it settled (the transport
    closes ``linger_s`` later)."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    transport = HttpTransport(
        [parse_url(url)], [[REQUEST]], timeout_ns=timeout_ns,
        connect_timeout_ns=10**9, preconnect=0, answers=AnswerBook(streams=True),
    )  # fmt: skip
    block, done = RecordBlock(0, 1), []
    await transport.start(lambda b, j: done.append(j))
    transport.set_origin(time.monotonic_ns())
    transport.send(block, 0)
    deadline = time.monotonic() + timeout_ns / 1e9 + 5
    while not done and time.monotonic() < deadline:
        await asyncio.sleep(0.002)
    kept = list(block.chunk_times.get(0, []))
    await asyncio.sleep(linger_s)
    await transport.close()
    server.close()
    return block, len(done), kept


def test_a_stream_cut_by_a_reset_fails_the_same_way_with_the_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sse = (SSE_FILES[0].parent / "vllm_chat.sse").read_bytes()
    pieces = by_http_chunk(http_answer(sse, events_as_chunks(sse)))

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        for piece in pieces[:6]:
            w.write(piece)
            await w.drain()
            await asyncio.sleep(0.002)
        sock = w.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        w.transport.abort()  # RST mid-stream

    results = set()
    for setting, loop in itertools.product(("1", "0"), LOOPS):
        monkeypatch.setenv("TAILWISE_STREAM_READER", setting)
        block, settled, _ = on_loop(loop, one_request(handle, 5 * 10**9))
        assert settled == 1
        results.add((ERROR_KINDS[block.error[0]], len(block.chunk_times.get(0, []))))
    ((kind, chunks),) = results  # one outcome on every path
    assert kind == "reset" and chunks >= 2


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_stalled_stream_times_out_and_its_chunk_times_stay_as_kept(
    loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timeout while the reader holds the socket: later bytes never join the record."""
    monkeypatch.setenv("TAILWISE_STREAM_READER", "1")
    sse = (SSE_FILES[0].parent / "vllm_chat.sse").read_bytes()
    chunks = by_http_chunk(http_answer(sse, events_as_chunks(sse)))
    stall = [*chunks[:5], b"", *chunks[5:]]  # the empty piece: the server sleeps 0.6 s there

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        try:
            for piece in stall:
                w.write(piece)
                await w.drain()
                await asyncio.sleep(0.6 if not piece else 0.002)
        except ConnectionError:
            pass

    # 0.5 s after the timeout, the rest of the stream would have come by now.
    block, settled, kept = on_loop(loop, one_request(handle, 300 * 10**6, linger_s=0.5))
    assert settled == 1 and ERROR_KINDS[block.error[0]] == "timeout"
    assert len(kept) >= 2 and block.chunk_times[0] == kept


def test_no_reader_where_it_is_turned_off_or_the_pure_path_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert http_stream.stream_reader() is not None
    monkeypatch.setenv("TAILWISE_STREAM_READER", "0")
    assert http_stream.stream_reader() is None
    monkeypatch.delenv("TAILWISE_STREAM_READER")
    monkeypatch.setenv("TAILWISE_PURE_PYTHON", "1")
    assert http_stream.stream_reader() is None


def close_delimited(sse: bytes) -> list[bytes]:
    """``sse`` as an answer whose body ends at the close (no length, not chunked)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    events = [sse[a:b] for a, b in itertools.pairwise(itertools.accumulate(
        events_as_chunks(sse), initial=0))]  # fmt: skip
    return [head, *events, CLOSE]


def test_answers_that_end_with_the_close_give_the_same_records_with_the_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last event and the FIN arrive together: the reader reads (and times) the event
    before it hands the end to the loop's transport."""
    sse = (SSE_FILES[0].parent / "vllm_chat.sse").read_bytes()
    by_chunk = by_http_chunk(http_answer(sse, events_as_chunks(sse)))
    answers = [close_delimited(sse), [*by_chunk, CLOSE], [*by_chunk[:-1], CLOSE]]
    with_reader, _ = both_ways(answers, 0.001, monkeypatch)
    kinds = [ERROR_KINDS[e] for e in with_reader.error]
    assert kinds == ["", "", "reset"]  # a chunked body cut by the close: as without the reader


def test_data_that_comes_with_the_close_is_read_and_timed_before_the_end(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server, reader, _conn = taken(pair)
    chunks = [1]
    reader.arm(client.fileno(), chunks, None, 100)
    server.sendall(plain("a"))
    assert drained(reader, client, server) == [] and len(chunks) == 2
    server.sendall(plain("b"))
    server.shutdown(socket.SHUT_WR)
    time.sleep(0.01)  # the chunk and the FIN are both queued before the poll
    (end,) = poll_until(reader)
    assert end[1] is None and end[3] == 0 and end[4] == 2 * len(plain("a"))
    assert len(chunks) == 3  # booked here, not left for the loop to read (and time) later
    assert reader.remove(client.fileno()) == (0, 0)


def test_one_hand_back_per_socket_per_poll_and_the_end_after_the_data(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    _client, server, reader, _conn = taken(pair)
    body = bytes(range(256)) * 1024  # 256 KiB: several reads' worth, then the FIN
    server.sendall(body[:100_000])
    time.sleep(0.01)
    got, polls = bytearray(), 0
    server.sendall(body[100_000:])
    server.shutdown(socket.SHUT_WR)
    ended = False
    deadline = time.monotonic() + 5
    while not ended and time.monotonic() < deadline:
        backs = reader.poll() or []
        polls += 1
        assert len(backs) <= 1  # one socket: at most one hand-back per poll
        for back in backs:
            if back[1] is None:
                ended = True
            else:
                assert not ended
                got += back[1]
    assert ended and bytes(got) == body
