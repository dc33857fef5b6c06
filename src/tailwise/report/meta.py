"""What a shared report says about how it was made: command line, version, date, host.

The command line is stored with its secrets removed: the values of ``-H``,
``--header`` and ``--api-key`` become ``***`` and any credential-like text in
the other arguments (an ``sk-...`` key in ``--extra-body``) is redacted, so a
report can be attached to a ticket as it is.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import socket
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tailwise.metrics.error_samples import REDACTED, redact
from tailwise.version import __version__

SECRET_OPTIONS = ("-H", "--header", "--api-key")
MAX_ARG_CHARS = 300  # a long literal body is cut, not pasted whole into the page


def _arg(text: str) -> str:
    for option in SECRET_OPTIONS:
        if option.startswith("--") and text.startswith(option + "="):
            return f"{option}={REDACTED}"
    text = _masked_url(text)
    cut = text if len(text) <= MAX_ARG_CHARS else text[:MAX_ARG_CHARS] + "..."
    return redact(cut)


def _masked_url(text: str) -> str:
    """A URL as the run's outputs show a target: no user or password, query values masked
    (``?key=...`` is how some gateways take an API key)."""
    if not text.lower().startswith(("http://", "https://")):
        return text
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return REDACTED
    query = "&".join(p.split("=", 1)[0] + f"={REDACTED}" for p in parts.query.split("&") if p)
    return urlunsplit((parts.scheme, host + port, parts.path, query, ""))


def command_line(argv: list[str]) -> str:
    """``argv`` as one shell line, with secret values replaced by ``***``."""
    out: list[str] = []
    hide_next = False
    for text in argv:
        out.append(REDACTED if hide_next else _arg(str(text)))
        hide_next = text in SECRET_OPTIONS
    return shlex.join(out)


def collect(argv: list[str] | None) -> dict[str, Any]:
    """The metadata of a report made now on this machine (``argv`` without the program)."""
    return {
        "command": command_line(["tailwise", *argv]) if argv is not None else None,
        "tool_version": __version__,
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }
