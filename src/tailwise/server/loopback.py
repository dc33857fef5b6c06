"""A tiny HTTP target whose latency law is known exactly (asyncio + httptools, no deps).

Law for a request arriving at server time ``a`` (seconds since the server
started), with service time ``s`` drawn from ``--service``:

* if ``a`` falls in a stall window ``[k*P, k*P + S)`` (``--stall S/P``), work
  starts at the end of that window, else at ``a``;
* with ``--workers c`` > 0, requests queue FCFS for ``c`` servers (computed in
  virtual time, so the queue is exact); with 0, every request is served in
  parallel;
* the response is sent when the work finishes.

So with ``--service 5ms --stall 1s/10s`` at a steady rate, the latency of a
request arriving ``x`` seconds into a stall is ``1 s - x + 5 ms``: the seed's
coordinated-omission exercise. A JSON body may steer one request:
``{"action": "reset" | "hang" | "close" | "early_hints" | "eof_body" | "truncate"}``,
``{"status": 503}``, ``{"delay_ms": 20}``, which the accounting tests use
(``early_hints`` sends a 103 at once and the answer when due; ``eof_body``
answers with a body delimited by closing the connection; ``truncate``
promises 100 bytes, sends 2 and closes).

Run: ``python -m tailwise.server.loopback --port 0`` prints ``listening on URL``.
It binds 127.0.0.1 and exits after ``--lifetime`` (default 10 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import sys
import time
from typing import Any

from tailwise.errors import BadInput
from tailwise.server import RequestProtocol
from tailwise.server.law import Law, QueueLab, parse_law
from tailwise.units import parse_duration_ns

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class _Http(RequestProtocol):
    def __init__(self, server: QueueLab) -> None:
        super().__init__()
        self.server = server

    def handle(self, url: bytes, body: bytes) -> None:
        srv = self.server
        arrival = time.monotonic() - srv.epoch
        steer = _steer(body)
        action = steer.get("action")
        if action == "reset":
            sock = self.transport.get_extra_info("socket")
            if sock is not None:  # SO_LINGER 0: close with RST, as a crashed peer would
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
            self.transport.abort()
            return
        if action == "hang":
            return
        status = int(steer.get("status", 404 if url.startswith(b"/missing") else 200))
        due = srv.finish_at(arrival, float(steer.get("delay_ms", 0.0)) / 1e3)
        if action == "early_hints":
            self.transport.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
        loop = asyncio.get_running_loop()
        loop.call_at(
            loop.time() + max(due - (time.monotonic() - srv.epoch), 0.0),
            self.respond,
            status,
            action if isinstance(action, str) else "",
        )

    def respond(self, status: int, action: str) -> None:
        if self.transport.is_closing():
            return
        self.server.served += 1
        if action == "eof_body":  # no length, not chunked: the body ends at the close
            self.transport.write(b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"ok":true}')
            self.transport.close()
            return
        if action == "truncate":  # promises 100 bytes, sends 2
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}")
            self.transport.close()
            return
        close = action == "close"
        payload = b'{"ok":true}' if status < 400 else b'{"error":"steered"}'
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        )
        self.transport.write(head.encode() + payload)
        if close:
            self.transport.close()


def _steer(body: bytes) -> dict[str, Any]:
    if not body or not body.startswith(b"{"):
        return {}
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


async def serve(
    law: Law, host: str, port: int, lifetime_s: float, tls: tuple[str, str] | None = None
) -> None:
    loop = asyncio.get_running_loop()
    server = QueueLab(law)
    ctx = None
    if tls:
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
    srv = await loop.create_server(lambda: _Http(server), host, port, backlog=4096, ssl=ctx)
    bound = srv.sockets[0].getsockname()
    print(f"listening on {'https' if tls else 'http'}://{bound[0]}:{bound[1]}", flush=True)
    try:
        await asyncio.sleep(lifetime_s)
    finally:
        srv.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m tailwise.server.loopback", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--service", default="5ms", help="<duration> or exp:<duration>")
    ap.add_argument("--workers", type=int, default=0, help="FCFS servers; 0 = unlimited")
    ap.add_argument("--stall", default=None, help="S/P: stall S at the start of every period P")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lifetime", default="600s")
    ap.add_argument("--tls-cert", default=None, help="PEM certificate: serve HTTPS")
    ap.add_argument("--tls-key", default=None, help="PEM private key for --tls-cert")
    a = ap.parse_args(argv)
    tls = (a.tls_cert, a.tls_key) if a.tls_cert else None
    try:
        law = parse_law(a.service, a.workers, a.stall, a.seed)
    except BadInput as exc:
        raise SystemExit(str(exc)) from None
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner, contextlib.suppress(KeyboardInterrupt):
        runner.run(
            serve(law, a.host, a.port, parse_duration_ns(a.lifetime, "--lifetime") / 1e9, tls)
        )
    sys.exit(0)


if __name__ == "__main__":
    main()
