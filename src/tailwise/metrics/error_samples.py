"""What failed requests said: per (error kind, HTTP status), the first few response bodies.

A count by kind (``http_4xx 9``) does not tell a wrong model name from a
missing key or a rate limit; the server's own words do. The transport keeps,
per (kind, status), the first :data:`SAMPLES_PER_KEY` bodies, each cut to
:data:`SAMPLE_BYTES` and with anything that looks like a credential replaced
by ``***`` before it is stored (a server may echo the request's headers).

Counts come from the records (every request has its status and kind there);
this module only holds the words. It costs nothing on success: the transport
calls :meth:`ErrorSamples.wants` on the error path, once per failed response.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from tailwise import credentials
from tailwise.records import ERROR_KINDS, Records

SAMPLES_PER_KEY = 3
SAMPLE_BYTES = 512
MAX_KEYS = 64  # distinct (kind, status) pairs kept; a hostile server cannot grow this
REDACTED = "***"

# Credentials a body may carry. Order matters: the key=value form first, so the
# value of ``"api_key": "sk-..."`` is replaced whole.
_SECRET_PATTERNS = (
    re.compile(
        r"(?i)((?:authorization|proxy-authorization|api[-_]?key|x-api-key|access[-_]?token"
        r"|token|secret|password)[\"']?\s*[:=]\s*[\"']?)(?:bearer\s+|basic\s+)?[^\"'\s,;}&]+"
    ),
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"),
    re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{6,}"),
    re.compile(r"\b(hf|gh[pousr])_[A-Za-z0-9]{10,}"),
)


def redact(text: str) -> str:
    """``text`` with credential-like values replaced by ``***`` (the names are kept)."""
    text = _SECRET_PATTERNS[0].sub(lambda m: m.group(1) + REDACTED, text)
    text = _SECRET_PATTERNS[1].sub(lambda m: m.group(1) + " " + REDACTED, text)
    text = _SECRET_PATTERNS[2].sub(lambda m: m.group(1) + "-" + REDACTED, text)
    return _SECRET_PATTERNS[3].sub(lambda m: m.group(1) + "_" + REDACTED, text)


def _dechunk(body: bytes) -> bytes:
    """The data of a chunked body, as far as it is present (a prefix is enough here)."""
    out = bytearray()
    pos = 0
    while pos < len(body):
        end = body.find(b"\r\n", pos)
        if end < 0:
            break
        try:
            size = int(body[pos:end].split(b";")[0].strip() or b"0", 16)
        except ValueError:
            return bytes(body)  # not chunked after all: keep it as it came
        if size == 0:
            break
        out += body[end + 2 : end + 2 + size]
        pos = end + 2 + size + 2
    return bytes(out)


def body_of(response_head: bytes) -> bytes:
    """The body part of the first bytes of an HTTP response (headers dropped, de-chunked)."""
    end = response_head.find(b"\r\n\r\n")
    if end < 0:
        return b""
    headers = response_head[:end].lower()
    body = response_head[end + 4 :]
    if b"\ntransfer-encoding:" in headers and b"chunked" in headers:
        return _dechunk(body)
    return body


def clean_sample(body: bytes) -> str:
    """A body as a stored sample: at most :data:`SAMPLE_BYTES`, text, secrets stripped."""
    cut = body[:SAMPLE_BYTES]
    text = cut.decode("utf-8", errors="replace").replace("\x00", "")
    text = redact(credentials.scrub(text))  # the values given first, then what looks like one
    return text + (" ..." if len(body) > SAMPLE_BYTES else "")


class ErrorSamples:
    """Bodies of failed responses by (error kind, HTTP status); bounded in keys and size."""

    def __init__(self) -> None:
        self.bodies: dict[tuple[str, int], list[str]] = {}

    def wants(self, kind: str, status: int) -> bool:
        held = self.bodies.get((kind, status))
        if held is None:
            return len(self.bodies) < MAX_KEYS
        return len(held) < SAMPLES_PER_KEY

    def add(self, kind: str, status: int, body: bytes) -> None:
        if self.wants(kind, status):
            self.bodies.setdefault((kind, status), []).append(clean_sample(body))

    def add_response(self, kind: str, status: int, response_head: bytes | None) -> None:
        """Keep the body found in a response's first bytes (headers included)."""
        if response_head is not None and self.wants(kind, status):
            self.add(kind, status, body_of(response_head))

    def doc(self) -> list[dict[str, Any]]:
        """JSON form: ``[{"kind", "status", "samples"}]`` (crosses processes, lands on disk)."""
        return [{"kind": k, "status": s, "samples": list(v)} for (k, s), v in self.bodies.items()]

    def merge(self, doc: list[dict[str, Any]] | None) -> None:
        """Take in another process's :meth:`doc` (ignores malformed entries: it is a file)."""
        for entry in doc or []:
            if not isinstance(entry, dict):
                continue
            kind, status, samples = entry.get("kind"), entry.get("status"), entry.get("samples")
            if not isinstance(kind, str) or not isinstance(status, int):
                continue
            for s in samples if isinstance(samples, list) else []:
                if isinstance(s, str):
                    self.add(kind, status, s.encode("utf-8", errors="replace"))


def breakdown(r: Records, samples: ErrorSamples | None = None) -> list[dict[str, Any]]:
    """The summary's ``errors``: per (kind, status) the count in the window, in warm-up,
    and sample bodies; most frequent first. Status 0 means no HTTP answer (a timeout, a
    refused connection, a request never sent)."""
    failed = r.error != 0
    if not failed.any():
        return []
    codes = r.error[failed].astype(np.int64)
    status = r.status[failed]
    window = r.in_window[failed]
    pairs, inverse = np.unique(np.stack([codes, status]), axis=1, return_inverse=True)
    inverse = inverse.reshape(-1)
    in_window = np.bincount(inverse, weights=window, minlength=pairs.shape[1])
    total = np.bincount(inverse, minlength=pairs.shape[1])
    held = samples.bodies if samples is not None else {}
    out: list[dict[str, Any]] = []
    for i in range(pairs.shape[1]):
        kind, code = ERROR_KINDS[int(pairs[0, i])], int(pairs[1, i])
        out.append(
            {
                "kind": kind,
                "status": code,
                "count": int(in_window[i]),
                "warmup": int(total[i] - in_window[i]),
                "samples": list(held.get((kind, code), [])),
            }
        )
    out.sort(key=lambda e: (-(e["count"] + e["warmup"]), e["kind"], e["status"]))
    return out
