"""The HTTP transport's timeout sweep: it looks at connections only when a deadline can be due."""

from __future__ import annotations

from typing import Any

from tailwise.loadgen.transport.http import HttpTransport
from tailwise.loadgen.transport.http_conn import Conn
from tailwise.loadgen.transport.targets import parse_url
from tailwise.records import RecordBlock, error_code
from tests.wire import FakeWire

S = 1_000_000_000
TIMEOUT = error_code("timeout")


def _setup() -> tuple[Any, RecordBlock, list[int], HttpTransport]:
    """A pool with a 10 s timeout, a block, and the seqs it completes, in order."""
    t = HttpTransport(
        [parse_url("http://127.0.0.1:9/")],
        [[b"GET / HTTP/1.1\r\n\r\n"]],
        timeout_ns=10 * S,
        connect_timeout_ns=S,
    )
    pool = t._pools[0]
    done: list[int] = []
    pool.on_done = lambda block, j: done.append(block.base + j)
    return pool, RecordBlock(0, 8), done, t


def _busy(pool: Any, block: RecordBlock, j: int, sent_ns: int) -> Conn:
    conn = Conn(pool)
    conn.connection_made(FakeWire())
    block.sent_ns[j] = sent_ns
    conn.block, conn.j = block, j
    pool.all.add(conn)
    return conn


def test_a_request_times_out_at_its_deadline_and_not_before() -> None:
    pool, block, done, _ = _setup()
    conn = _busy(pool, block, 0, sent_ns=1 * S)
    pool.sweep(5 * S)
    assert done == [] and pool.next_scan_ns == 11 * S  # the earliest deadline seen
    pool.sweep(11 * S)
    assert done == [0] and block.error[0] == TIMEOUT and conn.transport.aborted


def test_passes_are_skipped_until_a_deadline_can_be_due() -> None:
    pool, block, done, _ = _setup()
    _busy(pool, block, 0, sent_ns=2 * S)
    pool.sweep(3 * S)  # a pass: next one at 12 s
    late = _busy(pool, block, 1, sent_ns=4 * S)  # sent after that pass: due at 14 s
    pool.sweep(11 * S)
    assert done == []  # no pass before 12 s
    pool.sweep(12 * S)
    assert done == [0] and pool.next_scan_ns == 14 * S
    pool.sweep(14 * S)
    assert done == [0, 1] and late.transport.aborted


def test_a_request_that_waited_for_a_connection_keeps_its_send_time_deadline() -> None:
    # Queued at 1 s (waiting for a connection), on the wire at 6 s after a pass at 5 s:
    # its deadline is 11 s, earlier than anything sent after the pass, and must hold.
    pool, block, done, _ = _setup()
    block.sent_ns[0] = 1 * S
    pool.waiting.append((block, 0))
    pool.sweep(5 * S)
    assert pool.next_scan_ns == 11 * S  # the queue's head bounds the next pass
    pool.waiting.popleft()
    _busy(pool, block, 0, sent_ns=1 * S)
    pool.sweep(11 * S)
    assert done == [0] and block.error[0] == TIMEOUT


def test_a_new_origin_forgets_the_scan_time_of_the_old_one() -> None:
    # Scale-out workers sweep while they wait at the start barrier, on the old time base
    # (t0 = 0, so "now" is the host's uptime): that must not postpone the run's passes.
    pool, block, done, t = _setup()
    pool.sweep(50_000 * S)  # before the origin: no request, next pass "at 50,010 s"
    t.set_origin(50_000 * S)
    _busy(pool, block, 0, sent_ns=0)
    pool.sweep(10 * S)
    assert done == [0] and block.error[0] == TIMEOUT
