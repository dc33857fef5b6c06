"""Tailwise's exception tree and its exit codes.

Exceptions are for the *tool* going wrong or being misused. A request that fails
against a target is data, not an exception: it becomes an error kind in its
record (see :mod:`tailwise.records`), written by the transport's callbacks into
preallocated arrays (design invariant 8); no exception class stands for it.

::

    TailwiseError           exit_code: every subclass names its own (ExitCode)
    ├── BadInput            user input is malformed (exit 2); names the field
    │   ├── MissingExtra    an optional dependency is not installed; names the extra
    │   └── PoorFit         a calibrated model whose fit is POOR, asked without
    │                       --accept-poor-fit (tailwise.sim.trust: it needs the model's fit)
    ├── PreflightFailed     the request sent before a run failed (exit 6 or 7)
    ├── OutputError         an output could not be written (tailwise.files): exit 9 when
    │                       the disk is full (no space, quota, file size, I/O error), else
    │                       exit 2 (read-only, not a directory, no permission: a bad --out)
    ├── HostFailure         this machine could not do its part (exit 9)
    │   ├── WorkerStartFailed  a worker process (--workers, --ray) did not start
    │   └── WorkerProtocolError  a worker sent what is no worker message (another version?)
    └── KneeAborted         a knee search stopped on a trial it could not judge (exit 3;
                            tailwise.knee)

:class:`ExitCode` is the one list of the command line's exit codes: every place
that exits with a code names one of its members, and the documented tables
(``cli/__init__.py``, README, docs/run.md) are checked against it by
``tests/test_exit_codes.py``. The CLI's one error handler
(:func:`tailwise.cli._main`) exits with the ``exit_code`` of what it caught.

:func:`error_kind` maps an exception raised while connecting (an ``OSError``, an
``ssl.SSLError``, a timeout) to a record's error kind, so every producer uses the
same names.
"""

from __future__ import annotations

import errno
from enum import IntEnum


class ExitCode(IntEnum):
    """Every exit code of the ``tailwise`` command; :data:`EXIT_MEANINGS` says each one's
    meaning in the words the documentation uses."""

    PASS = 0
    FAIL = 1
    BAD_INPUT = 2
    INVALID = 3
    INTERNAL = 4
    INCONCLUSIVE = 5
    UNREACHABLE = 6
    REFUSED = 7
    UNTRUSTED = 8
    HOST = 9
    ABORTED = 130


EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.PASS: "pass",
    ExitCode.FAIL: "an SLO failed",
    ExitCode.BAD_INPUT: "bad input",
    ExitCode.INVALID: "invalid run",
    ExitCode.INTERNAL: "internal error",
    ExitCode.INCONCLUSIVE: "inconclusive",
    ExitCode.UNREACHABLE: "target unreachable",
    ExitCode.REFUSED: "the target refused the preflight request",
    ExitCode.UNTRUSTED: "an answer from an untrusted model",
    ExitCode.HOST: "this machine failed",
    ExitCode.ABORTED: "aborted: Ctrl-C before a run began",
}


class TailwiseError(Exception):
    """Base of every exception tailwise raises on purpose. The CLI prints it as one line
    and exits with its ``exit_code``."""

    exit_code: int = ExitCode.INTERNAL


class BadInput(TailwiseError):
    """Malformed user input. The message is one line: field, what was given, expected form."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, field: str, given: object, expected: str) -> None:
        self.field = field
        self.given = given
        self.expected = expected
        super().__init__(one_line(field, given, expected))


def one_line(field: str, given: object, expected: str) -> str:
    """``field: got ..., expected ...``. What was given may be a line of any file
    (trace:/etc/passwd) or a server's bytes: quoted as a short excerpt with control
    characters dropped, never whole."""
    shown = repr(excerpt(given)) if isinstance(given, str) else excerpt(repr(given))
    return f"{excerpt(field, 160)}: got {shown}, expected {excerpt(expected, 400)}"


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
    """The one request sent before a run failed (see :mod:`tailwise.loadgen.prepare.preflight`):
    one line naming the status and the server's message, and the exit code for it."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# errno values that say the disk (or the machine's I/O) failed, not the place given
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


class HostFailure(TailwiseError):
    """This machine could not do its part of the command (not the input, not the target):
    one line, exit code 9."""

    exit_code = ExitCode.HOST

    def __init__(self, field: str, given: object, expected: str) -> None:
        self.field = field
        self.given = given
        self.expected = expected
        super().__init__(one_line(field, given, expected))


class WorkerStartFailed(HostFailure):
    """A worker process (``--workers``, ``--ray``) died or failed before it was ready."""


class WorkerProtocolError(HostFailure):
    """A worker (``--workers``, ``--ray``) sent something that is not one of the worker
    messages (:mod:`tailwise.loadgen.scale.messages`): a worker of another tailwise
    version on a Ray node, or a bug. The run stops; its workers are killed."""


def error_kind(exc: BaseException) -> str:
    """The most specific record error kind for an exception raised while sending."""
    import ssl

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
