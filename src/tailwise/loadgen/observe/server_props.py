"""What an LLM server says of its own configuration, read once before a run.

llama.cpp's ``llama-server`` answers ``GET /props`` with its slot count (``-np``,
``total_slots``) and each slot's context (``default_generation_settings.n_ctx``).
Those are facts a model of the server must not guess: ``tailwise calibrate``
takes the slot count from here instead of fitting it, and schedules prompts
the way llama.cpp batches them (see :mod:`tailwise.calibrate.llm`).

The probe is one GET on the target's own host and port, before the first
request is scheduled, with no credentials, 2 s for the whole exchange
(connecting, the answer's head and its body: a server that trickles bytes does
not hold the run), and no body read past :data:`MAX_BYTES`; an answer
that says it is not JSON is not read at all. Any other server (vLLM, hosted APIs)
answers 404 or something else, and the run records nothing; a redirect is not
followed, a broken answer is no answer.
Values are bounded before they are kept; the summary's ``server_info`` holds
them.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

from tailwise.loadgen.observe.server_metrics import get_within

PROPS_PATH = "/props"
MAX_BYTES = 1 << 20  # llama.cpp's /props is a few kB (the chat template is the bulk)
TIMEOUT_S = 2.0
MAX_SLOTS = 65_536
MAX_CONTEXT_TOKENS = 1 << 24
BUILD_CHARS = 80
LLAMA_CPP = "llama.cpp"
LLAMA_CPP_BATCH_TOKENS = 2048  # llama-server's default -b (n_batch): not in /props


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

    def json_ok(status: int, kind: str) -> bool:
        # llama.cpp says application/json; an event stream is not props
        return status == 200 and (not kind or "json" in kind.lower())

    try:
        status, kind, body = get_within(
            target, timeout_s, MAX_BYTES, accept="application/json", read_if=json_ok
        )
    except (OSError, ValueError, http.client.HTTPException):
        return None  # TimeoutError (a trickle, the deadline) is an OSError
    if not json_ok(status, kind) or len(body) > MAX_BYTES:
        return None
    try:
        return parse_props(json.loads(body))
    except (ValueError, RecursionError):
        return None
