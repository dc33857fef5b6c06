"""One request to each target before the plan starts: a wrong target stops at once.

A wrong ``--model``, a path that answers 404, a missing API key (401) or a
port where nothing listens would otherwise cost a whole measurement window of
failures before the verdict says "check the URL". The preflight sends the run's
own first request, made as cheap as the API allows, to each target:

- an API kind that generates tokens (``openai-chat``, ``openai-completions``,
  ``openai-responses``): its budget field (``max_tokens``; ``max_output_tokens`` for
  the Responses API; and ``max_completion_tokens`` when the body has it) set to the
  kind's ``preflight_budget``, the least the API accepts (1; 16 for the Responses API),
  ``stream`` as the run asks; a stream is read up to its first event, not to its end;
- any other kind (``openai-embeddings``): the run's first body (one input);
- plain HTTP: the run's first request as it is.

It fails, and the run never starts, when the target cannot be reached (exit
code 6, as a run where nothing could connect), or answers with a status of 400
or more, an OpenAI ``{"error": ...}`` body (also as a stream's first event), a
non-streaming answer where a stream was asked, or nothing within ``--timeout``
(exit code 7). The message names the status and the server's own message,
cut to :data:`MESSAGE_CHARS` characters with control characters dropped and
every header value the run sends (API keys) masked; nothing of it is written
to disk.

Its outcome is recorded apart from the measurement (``preflight`` in
``summary.json``, ``sweep.json`` or ``knee.json``): the request is never a
record and never in the window. ``--no-preflight`` skips it. A sweep or a knee
search sends it once, before its first step.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any

from tailwise.errors import ExitCode, PreflightFailed, excerpt
from tailwise.loadgen.llm import apis
from tailwise.loadgen.prepare.plan import Prepared
from tailwise.loadgen.transport.http import connect_failure
from tailwise.loadgen.transport.targets import Target, render

MESSAGE_CHARS = 200
MAX_BODY_BYTES = 65_536  # an error page or a 1-token answer; never read further
EXIT_UNREACHABLE = ExitCode.UNREACHABLE  # as a run where no request could connect
EXIT_REFUSED = ExitCode.REFUSED  # the target answered, but not with what the run needs


@dataclass(frozen=True)
class Answer:
    """What a target answered: status, reason, whether it streamed, and the body's start."""

    status: int
    reason: str
    streamed: bool
    body: bytes
    latency_ms: float


def check(p: Prepared) -> dict[str, Any]:
    """Send the preflight request to each target; raise :class:`PreflightFailed` on the first
    that fails. Returns ``{status, latency_ms, targets: [{url, status, latency_ms}]}``."""
    done: list[dict[str, Any]] = []
    for i, target in enumerate(p.targets):
        request = cheapest(p, i)
        answer = _ask(p, target, request)
        _judge(p, target, answer)
        done.append(
            {"url": target.url, "status": answer.status, "latency_ms": round(answer.latency_ms, 3)}
        )
    return {
        "status": max(int(d["status"]) for d in done),
        "latency_ms": max(float(d["latency_ms"]) for d in done),
        "targets": done,
    }


def cheapest(p: Prepared, i: int) -> bytes:
    """Target ``i``'s first request, with the least token budget a generating API takes."""
    raw = p.payloads[i][0]
    kind = apis.find(p.api)
    if kind is None or not kind.streams:
        return raw
    body = raw.partition(b"\r\n\r\n")[2]
    try:
        doc = json.loads(body)
    except ValueError:
        return raw
    if not isinstance(doc, dict):
        return raw
    doc[kind.budget_field] = kind.preflight_budget
    if "max_completion_tokens" in doc:
        doc["max_completion_tokens"] = kind.preflight_budget
    doc.pop("ignore_eos", None)
    return render(p.targets[i], p.method, p.headers, json.dumps(doc).encode())


def _context(insecure: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _ask(p: Prepared, target: Target, request: bytes) -> Answer:
    """One request on a fresh connection; connect and read bounded by the run's timeouts."""
    where = f"{p.method} {target.url}"
    start = time.perf_counter()
    try:
        sock = socket.create_connection(
            (target.host, target.port), timeout=p.connect_timeout_ns / 1e9
        )
    except OSError as exc:
        raise PreflightFailed(
            f"preflight: {where}: {connect_failure(exc)} (is the server running? check the "
            "host and port; --no-preflight skips this check)",
            EXIT_UNREACHABLE,
        ) from None
    deadline = start + p.timeout_ns / 1e9
    try:
        if target.tls:
            sock.settimeout(max(deadline - time.perf_counter(), 0.001))
            sock = _context(p.insecure).wrap_socket(sock, server_hostname=target.host)
        sock.settimeout(max(deadline - time.perf_counter(), 0.001))
        sock.sendall(request)
        resp = http.client.HTTPResponse(sock, method=p.method)
        resp.begin()
        streamed = "text/event-stream" in (resp.getheader("content-type") or "").lower()
        body = _read(resp, deadline, first_event=p.streaming and streamed)
        latency_ms = (time.perf_counter() - start) * 1e3
        if not streamed and p.streaming:
            streamed = body.lstrip().startswith((b"data:", b"event:"))
        return Answer(resp.status, resp.reason or "", streamed, body, latency_ms)
    except ssl.SSLError as exc:
        raise PreflightFailed(
            f"preflight: {where}: {connect_failure(exc)} (--insecure accepts a self-signed "
            "certificate)",
            EXIT_UNREACHABLE,
        ) from None
    except TimeoutError:
        timeout = f"{p.timeout_ns / 1e9:g}s"
        raise PreflightFailed(
            f"preflight: {where}: no complete answer within --timeout {timeout}",
            EXIT_REFUSED,
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        what = excerpt(str(exc) or type(exc).__name__, MESSAGE_CHARS)
        raise PreflightFailed(
            f"preflight: {where}: not a valid HTTP answer ({what})", EXIT_REFUSED
        ) from None
    finally:
        sock.close()


def _read(resp: http.client.HTTPResponse, deadline: float, *, first_event: bool) -> bytes:
    """The body, at most :data:`MAX_BODY_BYTES`; a stream only up to its first complete event."""
    parts: list[bytes] = []
    size = 0
    while size < MAX_BODY_BYTES:
        if time.perf_counter() > deadline:
            raise TimeoutError
        part = resp.read1(4096)
        if not part:
            break
        parts.append(part)
        size += len(part)
        if first_event and b"\n\n" in b"".join(parts).replace(b"\r\n", b"\n"):
            break
    return b"".join(parts)[:MAX_BODY_BYTES]


def _judge(p: Prepared, target: Target, a: Answer) -> None:
    """Raise :class:`PreflightFailed` unless the answer is one the run can measure."""
    where = f"{p.method} {target.url}"
    message = _server_message(a.body, p.headers)
    if a.status >= 400:
        said = f": {message}" if message else ""
        raise PreflightFailed(
            f"preflight: {where} answered {a.status} {excerpt(a.reason, 40)}{said} "
            f"({_hint(p, a.status, message)}; --no-preflight skips this check)",
            EXIT_REFUSED,
        )
    error = _error_in(a.body) if p.api else None
    if error is not None:
        raise PreflightFailed(
            f"preflight: {where} answered {a.status} with an error: "
            f"{_bounded(error, p.headers)} ({_hint(p, a.status, error)})",
            EXIT_REFUSED,
        )
    if p.streaming and not a.streamed:
        raise PreflightFailed(
            f"preflight: {where} answered {a.status} without a stream (no text/event-stream) "
            "where --stream asked for one: TTFT and ITL need the tokens as they come (use "
            "--no-stream for a server that cannot stream)",
            EXIT_REFUSED,
        )


def _hint(p: Prepared, status: int, message: str) -> str:
    if status in (401, 403):
        return "check the API key: --api-key, OPENAI_API_KEY or --header"
    if "model" in message.lower() and p.api:
        return f"check --model, which asked for {excerpt(str(p.opts.model), 60)!r}"
    if status == 404:
        return "check the URL's path" + (" and --model" if p.api else "")
    if status == 405:
        return "check --method"
    if 400 <= status < 500:
        return "check the request: --body, --header, --extra-body"
    return "the server failed on the run's first request"


def _error_in(body: bytes) -> str | None:
    """The message of an OpenAI-style error (a JSON body or a stream's first event), or None.

    A stream's first event may be named (``event: error`` then ``data:``, as the Responses
    API sends its events): its data line is read; ``{"type": "error", "message": ...}`` is
    that API's error event, ``{"error": ...}`` everyone else's.
    """
    text = body.decode("utf-8", "replace").strip()
    if text.startswith("event:"):
        text = text.partition("\n")[2].lstrip()
    if text.startswith("data:"):
        text = text[5:].split("\n", 1)[0].strip()
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, dict) and doc.get("type") == "error" and "error" not in doc:
        return str(doc.get("message") or doc.get("code") or "error")
    if not isinstance(doc, dict) or not doc.get("error"):
        return None
    err = doc["error"]
    msg = err.get("message") if isinstance(err, dict) else err
    return str(msg or err)


def _server_message(body: bytes, headers: list[tuple[str, str]]) -> str:
    """The server's message: an error's ``message`` or the body's start, bounded and masked."""
    found = _error_in(body)
    if found is None:
        try:
            doc = json.loads(body)
            found = (
                str(doc.get("detail") or doc.get("message") or "") if isinstance(doc, dict) else ""
            )
        except (ValueError, RecursionError):  # nested past the interpreter's depth: text
            found = ""
        found = found or body.decode("utf-8", "replace")
    return _bounded(found, headers)


def _bounded(text: str, headers: list[tuple[str, str]]) -> str:
    """``text`` on one line, every header value the run sends masked (a server may echo
    the API key back), then cut to :data:`MESSAGE_CHARS` with control characters dropped."""
    for _, value in headers:
        for secret in sorted({value, *value.split()}, key=len, reverse=True):
            if len(secret) >= 8:  # "Bearer sk-..." and "sk-..." alone
                text = text.replace(secret, "***")
    return excerpt(" ".join(text.split()), MESSAGE_CHARS)
