"""The secret values this process was given, and their removal from everything it writes.

Patterns (:func:`tailwise.metrics.error_samples.redact`) catch what looks like a
credential; they cannot catch ``Incorrect API key provided: SECRET123`` echoed by a
server, nor a key in a custom header. But tailwise knows the exact values it was
given, so it removes those, by value, wherever they would go out:

* recorded here by the code that takes them in: the ``--api-key`` (or
  ``OPENAI_API_KEY``) value, the values of ``-H`` headers whose name says
  credential (``Authorization``, ``*key*``, ``*token*``, ``*secret*``, ``*auth*``,
  ``*password*``, ``Cookie``, ...) or whose value looks like one (``Bearer ...``),
  and a URL's user, password and credential-named query values
  (``--server-metrics 'http://u:p@host/metrics?token=...'``);
* removed by :func:`scrub`, which every file writer (:func:`tailwise.files.atomic_writer`),
  the error samples and the CLI's stdout and stderr (:class:`ScrubbedStream`) apply.

Values shorter than :data:`MIN_CHARS` are not recorded (vLLM's ``EMPTY``, ``dummy``,
``test``: replacing them everywhere would mangle the output and protect nothing).
The registry only grows, and only with values given to this process; it is
process-wide because secrets are.
"""

from __future__ import annotations

import io
import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

REDACTED = "***"
MIN_CHARS = 8
_CREDENTIAL_NAME = re.compile(
    r"(?i)(auth|key|token|secret|pass|cookie|session|sig|cred|bearer|jwt)"
)
_SCHEMES = ("bearer ", "basic ", "token ", "apikey ")

_known: set[str] = set()
_ordered: list[str] = []  # longest first, so a value inside another goes with it


def remember(value: str | None) -> None:
    """Record a secret value (and, for ``Bearer X``, ``X`` alone)."""
    if not value:
        return
    value = value.strip()
    values = [value]
    low = value.lower()
    for scheme in _SCHEMES:
        if low.startswith(scheme):
            values.append(value[len(scheme) :].strip())
    for v in values:
        if len(v) >= MIN_CHARS and v not in _known:
            _known.add(v)
            _ordered.append(v)
    _ordered.sort(key=len, reverse=True)


def remember_header(name: str, value: str) -> None:
    """Record a header's value if its name or its value says it is a credential."""
    if _CREDENTIAL_NAME.search(name) or value.strip().lower().startswith(_SCHEMES):
        remember(value)


def remember_url(url: str | None) -> None:
    """Record a URL's user, password and credential-named query values."""
    if not url:
        return
    try:
        parts = urlsplit(url.strip())
        remember(parts.password)
        remember(parts.username)
        for name, value in parse_qsl(parts.query, keep_blank_values=False):
            if _CREDENTIAL_NAME.search(name):
                remember(value)
    except ValueError:
        return


def masked_url(url: str) -> str:
    """A URL as outputs show it: no user or password, every query value ``***``."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return REDACTED
    query = "&".join(p.split("=", 1)[0] + f"={REDACTED}" for p in parts.query.split("&") if p)
    return f"{parts.scheme}://{host}{port}{parts.path}" + (f"?{query}" if query else "")


def known() -> bool:
    """Whether any secret was recorded (writers skip :func:`scrub` when none was)."""
    return bool(_ordered)


def scrub(text: str) -> str:
    """``text`` with every recorded secret value replaced by ``***``."""
    for value in _ordered:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def forget_all() -> None:
    """Empty the registry (tests that run several commands in one process)."""
    _known.clear()
    _ordered.clear()


class ScrubbedStream(io.TextIOBase):
    """A text stream that scrubs what it writes (the CLI's stdout and stderr).

    Everything else (``isatty``, ``fileno``, ``encoding``, ``buffer``) is the wrapped
    stream's, so terminal detection and libraries that check the stream see no change.
    """

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self._inner = inner

    def write(self, text: str) -> int:
        self._inner.write(scrub(text) if _ordered else text)
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return bool(self._inner.isatty())

    def fileno(self) -> int:
        return int(self._inner.fileno())

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._inner, "encoding", "utf-8") or "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
