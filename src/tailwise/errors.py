"""Tailwise's exception tree.

Exceptions are for the *tool* going wrong or being misused. A request that fails
against a target is data, not an exception: it becomes an error kind in its
record (see :mod:`tailwise.records`).

::

    TailwiseError
    ├── BadInput            user input is malformed (exit code 2); names the field
    │   ├── MissingExtra    an optional dependency is not installed; names the extra
    │   └── PoorFit         a calibrated model whose fit is POOR, asked without
    │                       --accept-poor-fit (tailwise.sim.trust: it needs the model's fit)
    ├── PreflightFailed     the request sent before a run failed (exit code 6 or 7)
    └── TransportError      raised inside a transport, mapped to an error kind
        ├── ConnectError    kind "connect": refused, unreachable, DNS, connect timeout
        ├── TLSError        kind "tls": handshake or certificate failure
        ├── ResetError      kind "reset": the peer closed or reset mid-request
        ├── ReadTimeout     kind "timeout": the total request timeout expired
        └── ProtocolError   kind "protocol": the response was not valid HTTP

The mapping from a raised transport exception to a record's error kind lives
in one place, :func:`error_kind`, so every producer uses the same names.
"""

from __future__ import annotations


class TailwiseError(Exception):
    """Base of every exception tailwise raises on purpose."""


class BadInput(TailwiseError):
    """Malformed user input. The message is one line: field, what was given, expected form."""

    exit_code = 2

    def __init__(self, field: str, given: object, expected: str) -> None:
        self.field = field
        self.given = given
        self.expected = expected
        # What was given may be a line of any file (trace:/etc/passwd) or a server's
        # bytes: quoted as a short excerpt with control characters dropped, never whole.
        shown = repr(excerpt(given)) if isinstance(given, str) else excerpt(repr(given))
        super().__init__(f"{excerpt(field, 160)}: got {shown}, expected {excerpt(expected, 400)}")


EXCERPT_CHARS = 80


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` fit for one line of an error message: control characters (and other
    unprintable ones, ANSI escapes included) dropped, at most ``limit`` characters."""
    clean = "".join(c for c in text if c.isprintable())
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


class MissingExtra(BadInput):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, feature: str, extra: str, module: str) -> None:
        super().__init__(
            feature, f"module {module} not installed", f"pip install 'tailwise[{extra}]'"
        )
        self.extra = extra


class PreflightFailed(TailwiseError):
    """The one request sent before a run failed (see :mod:`tailwise.loadgen.preflight`):
    one line naming the status and the server's message, and the exit code for it."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TransportError(TailwiseError):
    """Raised inside a transport; never escapes a run (it becomes an error kind)."""

    kind = "protocol"


class ConnectError(TransportError):
    kind = "connect"


class TLSError(TransportError):
    kind = "tls"


class ResetError(TransportError):
    kind = "reset"


class ReadTimeout(TransportError):
    kind = "timeout"


class ProtocolError(TransportError):
    kind = "protocol"


def error_kind(exc: BaseException) -> str:
    """The most specific record error kind for an exception raised while sending."""
    import ssl

    if isinstance(exc, TransportError):
        return exc.kind
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return "tls"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return "reset"
    if isinstance(exc, OSError):
        # Refused, unreachable, name resolution: all happen before a request is on the wire.
        return "connect"
    return "protocol"
