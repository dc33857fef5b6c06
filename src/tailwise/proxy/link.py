"""One proxied connection: the client's side, the target's side, and the requests between them.

Bytes are forwarded as they come, in both directions, through two
:class:`~tailwise.proxy.pipe.Pipe` objects. Beside them, httptools parsers
follow the HTTP/1.1 messages (request and response starts and ends, never
header values), which is what lets a fault hit one request on a keep-alive
connection and the ground truth name it:

* a request's fate is drawn when its first byte arrives; its bytes then wait
  ``delay`` before they go on; a reset aborts the client's connection (RST)
  instead; a drop swallows it and everything after on that connection;
* its response is held ``(K-1)`` times the target's time to first byte when
  it is a slow one; a truncated one is cut after the first read that carries
  body bytes (less its last byte when that read would complete it), and the
  connection closed;
* Server-Sent Events pass read by read: a stream keeps its pace.

Anything the parsers cannot follow (a protocol upgrade, a HEAD request whose
response has no body, bytes that are not HTTP) turns the connection into a
plain tunnel: link-level faults (stall, bandwidth) still apply, per-request ones
no longer do.
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import httptools

from tailwise.proxy.faults import Faults
from tailwise.proxy.pipe import Pipe
from tailwise.proxy.truth import Exchange

MAX_PIPELINED = 32  # requests parsed ahead of their answers, per connection


def _through_heads(held: bytearray, n: int) -> int:
    """How much of ``held`` to parse now: through the end of the ``n``-th request head in it
    (a blank line; one inside a body only cuts sooner), or all of it when it has fewer."""
    end = 0
    for _ in range(n):
        i = held.find(b"\r\n\r\n", end)
        if i < 0:
            return len(held)
        end = i + 4
    return end


class Hub(Protocol):
    """What a link needs from the proxy it belongs to (:class:`tailwise.proxy.server.Proxy`).

    Owned here, by the consumer, so that this module never imports the server.
    """

    @property
    def faults(self) -> Faults: ...

    @property
    def origin_ns(self) -> int: ...

    def now(self) -> int:
        """Proxy time: ns since the proxy started."""

    def new_exchange(self, conn: int, t_ns: int) -> Exchange:
        """A request that began at ``t_ns`` on connection ``conn``, its fate drawn."""

    def finish(self, ex: Exchange, t_ns: int) -> None:
        """Log a request once, when it is finished with."""

    def link_closed(self, link: Link, t_ns: int) -> None:
        """Both sides of ``link`` are closed."""


class _RequestEvents:
    """httptools callbacks for the client's bytes."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def on_message_begin(self) -> None:
        self.link.request_begins()

    def on_url(self, url: bytes) -> None:
        ex = self.link.receiving
        if ex is not None and len(ex.url) < 2048:
            ex.url += url

    def on_headers_complete(self) -> None:
        link = self.link
        ex = link.receiving
        if ex is not None:
            ex.method = link.req_parser.get_method().decode("latin-1")
            if ex.method == "HEAD":  # its response has a length but no body: can't follow
                link.wants_tunnel = "HEAD request"


class _ResponseEvents:
    """httptools callbacks for the target's bytes."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def on_message_begin(self) -> None:
        self.link.response_begins()

    def on_body(self, body: bytes) -> None:
        self.link.body_in_read = True

    def on_message_complete(self) -> None:
        self.link.response_complete()


class Link:
    """A client connection and its connection to the target."""

    def __init__(self, proxy: Hub, conn_id: int, client: Any) -> None:
        self.proxy = proxy
        self.id = conn_id
        self.client = client
        self.upstream: Any = None
        self.opened_ns = proxy.now()
        origin = proxy.origin_ns
        self.up = Pipe(proxy.faults, origin, client)
        self.down = Pipe(proxy.faults, origin, None)
        self.req_parser = httptools.HttpRequestParser(_RequestEvents(self))
        self.resp_parser = httptools.HttpResponseParser(_ResponseEvents(self))
        self.pending: deque[Exchange] = deque()  # requests still owed a response, in order
        # Responses read whole from the target but still held here (a stall, a slow one):
        # not finished until their last byte leaves, and logged if the client leaves first.
        self.delivering: set[Exchange] = set()
        self.receiving: Exchange | None = None  # the request whose bytes are arriving
        self.begun: list[Exchange] = []  # requests that began in the current read
        self.answering: Exchange | None = None  # the request whose response is arriving
        self.hold_until_ns = 0
        self.slow_extra_ns = 0
        self.body_in_read = False
        self.completed_in_read: Exchange | None = None
        self.black_hole: Exchange | None = None
        self.tunnel = ""  # why this connection is a plain tunnel ("" while HTTP is followed)
        self.wants_tunnel = ""
        self.cut = False
        self.held = bytearray()  # the client's bytes not yet parsed (a deep pipeline waits here)
        self.closed_by = ""
        self.requests = 0

    # -- client -> target ------------------------------------------------------------

    def request_begins(self) -> None:
        t = self.proxy.now()
        ex = self.proxy.new_exchange(self.id, t)
        self.requests += 1
        self.receiving = ex
        self.pending.append(ex)
        self.begun.append(ex)

    def from_client(self, data: bytes) -> None:
        if self.black_hole is not None:
            self.black_hole.bytes_up += len(data)
            return
        if self.tunnel:
            self._forward(data)
            return
        self.held += data
        self._feed()

    def _feed(self) -> None:
        """Parse and forward held bytes a slice at a time while few requests are owed answers.

        A client that pipelines thousands of requests is read no further than
        :data:`MAX_PIPELINED` requests ahead of their answers: the rest of its read
        waits here, unparsed, and its socket is not read meanwhile.
        """
        held = self.held
        while held and (self.tunnel or len(self.pending) < MAX_PIPELINED):
            if self.black_hole is not None or self.client.is_closing():
                held.clear()
                break
            budget = MAX_PIPELINED - len(self.pending)
            size = len(held) if self.tunnel else _through_heads(held, budget)
            if size == len(held):
                piece = bytes(held)
                held.clear()
            else:
                piece = bytes(held[:size])
                del held[:size]
            self._forward(piece)
        self.up.hold(bool(held))

    def _forward(self, data: bytes) -> None:
        """Follow ``data``'s requests (unless a tunnel), then send it on when due."""
        t = self.proxy.now()
        if not self.tunnel:
            self._parse(self.req_parser, data)
        begun, self.begun = self.begun, []
        current = self.receiving
        if current is not None:
            current.bytes_up += len(data)
        for new in begun:
            d = new.decision
            if d.reset:
                self._reset(new)
                return
            if d.drop:
                self._swallow(new)
                return
            self.hold_until_ns = max(self.hold_until_ns, new.t_ns + d.delay_ns)
        first = begun[-1] if begun else None
        stalled, _ = self.up.push(data, max(t, self.hold_until_ns), on_first=self._forwarded(first))
        if first is not None:
            first.stall_ns += stalled

    def _forwarded(self, ex: Exchange | None) -> Any:
        if ex is None:
            return None

        def mark(t: int) -> None:
            if ex.fwd_ns is None:
                ex.fwd_ns = t

        return mark

    def _parse(self, parser: Any, data: bytes) -> None:
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.wants_tunnel = "protocol upgrade"
        except httptools.HttpParserError:
            self.wants_tunnel = "not HTTP/1.1"
        if self.wants_tunnel and not self.tunnel:
            self.tunnel = self.wants_tunnel

    def _reset(self, ex: Exchange) -> None:
        """Answer with a TCP reset, as a crashed or overloaded peer would."""
        ex.outcome = "reset"
        self.pending.remove(ex)
        self.proxy.finish(ex, self.proxy.now())
        sock = self.client.get_extra_info("socket")
        if sock is not None:  # SO_LINGER 0: the close sends RST, not FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.closed_by = "reset"
        self.client.abort()

    def _swallow(self, ex: Exchange) -> None:
        """Forward nothing more: the client waits until it gives up (its own timeout)."""
        ex.outcome = "dropped"
        self.black_hole = ex
        self.up.close()
        if self.upstream is not None:
            self.upstream.abort()

    # -- target -> client ------------------------------------------------------------

    def response_begins(self) -> None:
        ex = self.pending[0] if self.pending else None
        if ex is None or self.answering is ex:
            return  # the final response after an interim 1xx: timing already set
        self.answering = ex
        t = self.proxy.now()
        ex.up_first_ns = t
        k = ex.decision.slow_factor
        since = ex.fwd_ns if ex.fwd_ns is not None else ex.t_ns
        self.slow_extra_ns = int((k - 1.0) * (t - since)) if k != 1.0 else 0

    def response_complete(self) -> None:
        status = self.resp_parser.get_status_code()
        ex = self.answering
        if ex is None or (100 <= status < 200 and status != 101):
            return  # an interim response: the final one follows
        ex.status = status
        ex.up_done_ns = self.proxy.now()
        self.completed_in_read = ex

    def from_upstream(self, data: bytes) -> None:
        if self.cut:
            return
        t = self.proxy.now()
        if self.tunnel:
            self.down.push(data, t)
            return
        self.body_in_read = False
        self.completed_in_read = None
        self._parse(self.resp_parser, data)
        ex, done = self.answering, self.completed_in_read
        if ex is None:
            self.down.push(data, t)
            return
        ex.bytes_down += len(data)
        on_last = self._delivered(ex) if done is ex else None
        if ex.decision.truncate and (self.body_in_read or done is ex):
            data = data[:-1] if done is ex else data
            on_last = self._cut(ex)
            self.cut = True
        if done is ex:
            self.pending.popleft()
            self.delivering.add(ex)
            self.answering = None
        stalled, shaped = self.down.push(
            data, t + self.slow_extra_ns, on_first=self._first_out(ex), on_last=on_last
        )
        ex.stall_ns += stalled
        ex.shaped_ns += shaped
        if done is ex and self.held:
            self._feed()  # an answer is in: a request pipelined behind it may go

    def _first_out(self, ex: Exchange) -> Any:
        def mark(t: int) -> None:
            if ex.out_first_ns is None:
                ex.out_first_ns = t

        return mark

    def _delivered(self, ex: Exchange) -> Any:
        def done(t: int) -> None:
            self.delivering.discard(ex)
            ex.outcome = "ok"
            self.proxy.finish(ex, t)

        return done

    def _cut(self, ex: Exchange) -> Any:
        def cut(t: int) -> None:
            ex.outcome = "truncated"
            if ex in self.pending:
                self.pending.remove(ex)
            self.delivering.discard(ex)
            self.proxy.finish(ex, t)
            self.closed_by = "truncate"
            self.client.close()
            if self.upstream is not None:
                self.upstream.abort()

        return cut

    # -- connection events -----------------------------------------------------------

    def upstream_connected(self, transport: Any) -> None:
        self.upstream = transport
        if self.black_hole is not None or self.client.is_closing():
            transport.abort()
            return
        self.down.source = transport
        self.up.attach(transport)
        self.down.attach(self.client)

    def upstream_failed(self) -> None:
        self.closed_by = "upstream_unreachable"
        self._finish_open(lambda ex: "upstream_closed", self.proxy.now())
        self.client.close()

    def upstream_lost(self) -> None:
        """The target closed: pass on what it sent, then close the client's side."""
        if self.black_hole is not None or self.cut:
            return
        self.up.close()  # nothing more can reach the target on this connection

        def close(t: int) -> None:
            self._finish_open(lambda ex: "upstream_closed", t)
            if not self.closed_by:
                self.closed_by = "upstream"
            self.client.close()

        self.down.push(b"", self.proxy.now(), on_last=close)

    def client_eof(self) -> None:
        """The client finished sending: tell the target once what it sent has gone."""
        upstream = self.upstream

        def eof(t: int) -> None:
            if upstream is not None and upstream.can_write_eof() and not upstream.is_closing():
                upstream.write_eof()

        self.up.push(b"", self.proxy.now(), on_last=eof)

    def _finish_open(self, outcome: Callable[[Exchange], str], t_ns: int) -> None:
        """Log every request not yet finished with, in order of arrival."""
        for ex in sorted(self.delivering, key=lambda e: e.n) + list(self.pending):
            ex.outcome = outcome(ex)
            self.proxy.finish(ex, t_ns)
        self.delivering.clear()
        self.pending.clear()

    def client_lost(self) -> None:
        """The client went away: whatever it still waited for is finished now."""
        t = self.proxy.now()
        self._finish_open(lambda ex: "dropped" if ex is self.black_hole else "client_closed", t)
        if not self.closed_by:
            self.closed_by = "client"
        self.up.close()
        self.down.close()
        if self.upstream is not None:
            self.upstream.abort()
        self.proxy.link_closed(self, t)

    def shut(self) -> None:
        """The proxy is stopping: requests still open are ``unfinished`` (or ``dropped``)."""
        t = self.proxy.now()
        self._finish_open(lambda ex: "dropped" if ex is self.black_hole else "unfinished", t)
        self.closed_by = self.closed_by or "proxy"
        self.client.abort()
