"""What an LLM server says of its own configuration, read once before a run.

llama.cpp's ``llama-server`` answers ``GET /props`` with its slot count (``-np``,
``total_slots``) and each slot's context (``default_generation_settings.n_ctx``).
Those are facts a model of the server must not guess: ``tailwise calibrate``
takes the slot count from here instead of fitting it, and schedules prompts
the way llama.cpp batches them (see :mod:`tailwise.calibrate.llm`).

The probe is one GET on the target's own host and port, before the first
request is scheduled, with no credentials, a 2 s timeout for the connection and
the answer's head and 2 s more for its body as a whole (a server that trickles
bytes does not hold the run), and no body read past :data:`MAX_BYTES`; an answer
that says it is not JSON is not read at all. Any other server (vLLM, hosted APIs)
answers 404 or something else, and the run records nothing; a redirect is not
followed, a broken answer is no answer.
Values are bounded before they are kept; the summary's ``server_info`` holds
them.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from tailwise.loadgen.server_metrics import read_by

PROPS_PATH = "/props"
MAX_BYTES = 1 << 20  # llama.cpp's /props is a few kB (the chat template is the bulk)
TIMEOUT_S = 2.0
MAX_SLOTS = 65_536
MAX_CONTEXT_TOKENS = 1 << 24
BUILD_CHARS = 80
LLAMA_CPP = "llama.cpp"
LLAMA_CPP_BATCH_TOKENS = 2048  # llama-server's default -b (n_batch): not in /props


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not an address to follow: the probe talks to the target
    alone (a 3xx then raises HTTPError, and the run keeps nothing)."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def props_url(url: str) -> str | None:
    """``scheme://host:port/props`` for a target URL (None for a non-HTTP one)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{PROPS_PATH}"


def _bounded_int(value: Any, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= high else None


def parse_props(doc: Any) -> dict[str, Any] | None:
    """``server_info`` from a ``/props`` answer (None when it is not llama.cpp's)."""
    if not isinstance(doc, dict):
        return None
    slots = _bounded_int(doc.get("total_slots"), MAX_SLOTS)
    if slots is None:
        return None
    settings = doc.get("default_generation_settings")
    n_ctx = (
        _bounded_int(settings.get("n_ctx"), MAX_CONTEXT_TOKENS)
        if isinstance(settings, dict)
        else None
    )
    build = doc.get("build_info")
    info: dict[str, Any] = {"engine": LLAMA_CPP, "slots": slots}
    if n_ctx is not None:
        info["slot_context_tokens"] = n_ctx
    if isinstance(build, str):
        info["build"] = "".join(c for c in build[:BUILD_CHARS] if c.isprintable())
    return info


def probe(url: str, timeout_s: float = TIMEOUT_S) -> dict[str, Any] | None:
    """The server's ``server_info``, or None when it does not answer like llama.cpp."""
    target = props_url(url)
    if target is None:
        return None
    req = urllib.request.Request(target, headers={"Accept": "application/json"})
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:  # http(s) only: props_url
            kind = resp.headers.get("Content-Type", "")
            if resp.status != 200 or (kind and "json" not in kind.lower()):
                return None  # llama.cpp says application/json; an event stream is not props
            body = read_by(resp, time.monotonic() + timeout_s, MAX_BYTES)
    except (OSError, urllib.error.URLError, ValueError, http.client.HTTPException):
        return None  # TimeoutError (a trickle) is an OSError
    if len(body) > MAX_BYTES:
        return None
    try:
        return parse_props(json.loads(body))
    except (ValueError, RecursionError):
        return None
