"""The fast path of an LLM stream: one SSE event that is a plain content delta, read cheaply.

Nearly every event of a chat stream is the same shape: one HTTP chunk holding one
``data: {...}\\n\\n`` line whose JSON says nothing but ``choices[0].delta.content``.
:func:`content` returns that content for exactly such a piece of a response body, and
``None`` for anything else; :class:`~tailwise.loadgen.http_stream.StreamConn` then runs
the full path (:class:`~tailwise.loadgen.sse.SSEParser` and
:func:`~tailwise.loadgen.llm_stream.classify`). ``None`` is never wrong, only slower, so
the two implementations below may differ in what they accept, never in what they return:

* the compiled one (``tailwise.loadgen.sse_c``, C, built by ``pip install`` where a
  compiler is present) validates the JSON in one pass without building objects;
* the pure-Python one parses with :func:`json.loads` and checks the keys.

Both accept a piece only if it is one whole event (``data:``, one optional space, valid
JSON, ``\\n\\n``, no other line break) whose object has only the keys id, object,
created, model, system_fingerprint and choices (``object`` not "error"), whose first
choice has only index, delta, logprobs, finish_reason (null) and stop_reason, and whose
delta has only content (a string) and role. The caller uses it only between events (the
SSE parser holds nothing). ``TAILWISE_PURE_PYTHON=1`` forces the pure-Python one;
:data:`IMPLEMENTATION` says which is active (``tailwise run --version`` does not; see
docs/llm.md for the one-liner).
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable

_TOP = frozenset({"id", "object", "created", "model", "system_fingerprint", "choices"})
_CHOICE = frozenset({"index", "delta", "logprobs", "finish_reason", "stop_reason"})
_DELTA = frozenset({"content", "role"})
_loads = json.loads


def content_py(body: bytes) -> str | None:
    """The pure-Python :func:`content`."""
    if not body.startswith(b"data:") or not body.endswith(b"\n\n"):
        return None
    if body.count(b"\n") != 2 or b"\r" in body:
        return None
    try:
        # Decoded first: json.loads(bytes) would also take UTF-16 and a BOM, which the
        # full path (UTF-8, then JSON) calls malformed.
        obj = _loads(body[6 if body[5:6] == b" " else 5 : -2].decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if type(obj) is not dict or not obj.keys() <= _TOP or obj.get("object") == "error":
        return None
    choices = obj.get("choices")
    if type(choices) is not list or not choices:
        return None
    choice = choices[0]
    if type(choice) is not dict or not choice.keys() <= _CHOICE:
        return None
    delta = choice.get("delta")
    if choice.get("finish_reason", None) is not None or type(delta) is not dict:
        return None
    text = delta.get("content")
    if type(text) is not str or not delta.keys() <= _DELTA:
        return None
    return text


def _pick() -> tuple[Callable[[bytes], str | None], str]:
    if os.environ.get("TAILWISE_PURE_PYTHON", "") not in ("", "0"):
        return content_py, "python (TAILWISE_PURE_PYTHON)"
    try:
        compiled = importlib.import_module("tailwise.loadgen.sse_c")
    except ImportError:
        return content_py, "python (no compiled module)"
    fn: Callable[[bytes], str | None] = compiled.content
    return fn, "compiled"


content, IMPLEMENTATION = _pick()
