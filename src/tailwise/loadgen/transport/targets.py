"""What to send and where: URLs, methods, headers and bodies, pre-encoded as HTTP/1.1 bytes.

Requests are rendered to bytes once before the run, so the hot path only
writes a prepared buffer. Several URLs are served round-robin (a fleet with no
balancer in front). Header values never reach disk or logs: :func:`describe`
keeps header *names* only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from tailwise.errors import BadInput
from tailwise.files import read_bounded_bytes, read_bounded_utf8

URL_FORM = "an http:// or https:// URL such as http://127.0.0.1:8000/predict"
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass(frozen=True)
class Target:
    url: str  # for outputs: no credentials, query values masked
    scheme: str
    host: str
    port: int
    path: str

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def parse_url(url: str, field: str = "URL") -> Target:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise BadInput(field, url, URL_FORM) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(field, url, URL_FORM)
    if parts.username or parts.password:
        raise BadInput(
            field, "<url with credentials>", "a URL without user:password (use --header)"
        )
    host = _ascii_host(parts.hostname, url, field)
    # The request line is ASCII: a non-ASCII or control character in the path or query
    # goes percent-encoded as UTF-8 (what curl and browsers send); %XX escapes stay.
    path = quote(parts.path or "/", safe=_URL_SAFE)
    query = quote(parts.query, safe=_URL_SAFE)
    shown = path
    if query:
        path += "?" + query
        # Query values may be credentials (?key=...): sent, never shown or saved.
        shown += "?" + "&".join(p.split("=", 1)[0] + "=***" for p in query.split("&"))
    scheme = parts.scheme
    port = port or (443 if scheme == "https" else 80)
    netloc = parts.netloc if host == parts.hostname else parts.netloc.replace(parts.hostname, host)
    safe = f"{scheme}://{netloc}{shown}"
    return Target(safe, scheme, host, port, path)


# RFC 3986 reserved and unreserved characters, and '%' (an escape already made).
_URL_SAFE = "/:@!$&'()*+,;=-._~%?[]"


def _ascii_host(hostname: str, url: str, field: str) -> str:
    """The host as it goes on the wire: an internationalised name in its IDNA form."""
    if hostname.isascii():
        if any(c.isspace() or not c.isprintable() for c in hostname):
            raise BadInput(field, url, URL_FORM)
        return hostname
    if not hostname.isprintable():
        raise BadInput(field, url, URL_FORM)
    try:
        return hostname.encode("idna").decode("ascii")
    except UnicodeError:
        raise BadInput(field, url, URL_FORM + " (a host name IDNA can encode)") from None


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    bad = any(c in text for c in "\r\n\0")
    if not sep or not _HEADER_NAME.match(name) or bad or not _latin1(value):
        # The value may be a credential: never echoed back.
        raise BadInput("--header", "<header>" if sep else text, "'Name: value' on one line")
    return name, value


# An HTTP token (RFC 9110); values go on the wire as Latin-1 (render()).
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def read_body(text: str) -> bytes:
    """A literal body, or ``@path`` for a file's bytes."""
    if not text.startswith("@"):
        return text.encode()
    return read_bounded_bytes(text[1:], "--body", given=text)


def read_bodies_jsonl(path: str) -> list[bytes]:
    """Per-request bodies: each non-empty line of a JSONL file is one JSON body, used in turn."""
    try:
        lines = read_bounded_utf8(path, "--bodies").splitlines()
    except BadInput as exc:
        raise BadInput(
            "--bodies", path, exc.expected.replace("file", "UTF-8 JSONL file", 1)
        ) from None
    bodies: list[bytes] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, RecursionError):  # nested past the interpreter's depth
            raise BadInput(f"{path}:{lineno}", line[:40], "one JSON value per line") from None
        bodies.append(json.dumps(value, separators=(",", ":")).encode())
    if not bodies:
        raise BadInput("--bodies", path, "a JSONL file with at least one body")
    return bodies


def render(
    target: Target, method: str, headers: list[tuple[str, str]], body: bytes | None
) -> bytes:
    """One complete HTTP/1.1 request, keep-alive."""
    lines = [f"{method} {target.path} HTTP/1.1", f"Host: {target.host_header}"]
    names = {n.lower() for n, _ in headers}
    if "user-agent" not in names:
        lines.append("User-Agent: tailwise")
    if body is not None and "content-type" not in names:
        lines.append("Content-Type: application/json")
    lines += [f"{n}: {v}" for n, v in headers]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="strict")
    return head + (body or b"")


def describe(
    targets: list[Target], method: str, headers: list[tuple[str, str]]
) -> dict[str, object]:
    """What run.json may say about the requests: no header values, ever."""
    return {
        "urls": [t.url for t in targets],
        "method": method,
        "header_names": [n for n, _ in headers],
    }


def parse_method(text: str) -> str:
    m = text.strip().upper()
    if m not in METHODS:
        raise BadInput("--method", text, f"one of {', '.join(sorted(METHODS))}")
    return m
