"""The fast path of an LLM stream: one SSE event that is a plain content delta, read cheaply.

Nearly every event of a chat stream is the same shape: one HTTP chunk holding one
``data: {...}\\n\\n`` line whose JSON says nothing but ``choices[0].delta.content``.
:func:`content` returns that content for exactly such a piece of a response body, and
``None`` for anything else; :class:`~tailwise.loadgen.transport.http_stream.StreamConn` then runs
the full path (:class:`~tailwise.loadgen.transport.sse.SSEParser` and
:func:`~tailwise.loadgen.llm.stream.classify`). ``None`` is never wrong, only slower, so
the two implementations below may differ in what they accept, never in what they return:

* the compiled one (``tailwise.loadgen.transport.sse_c``, C, built by ``pip install`` where a
  compiler is present) validates the JSON in one pass without building objects;
* the pure-Python one parses with :func:`json.loads` and checks the keys.

Both accept a piece only if it is one whole event (``data:``, one optional space, valid
JSON, ``\\n\\n``, no other line break) whose object has only the keys id, object,
created, model, system_fingerprint and choices (``object`` not "error"), whose first
choice has only index, delta, logprobs, finish_reason (null) and stop_reason, and whose
delta has only content (a string) and role. The caller uses it only between events (the
SSE parser holds nothing). :func:`finish` reads the same shape with a string
``finish_reason`` (the answer's end, with or without a last piece of content) as
``(content or "", finish_reason)``; :func:`usage` the usage chunk (empty choices, a
usage object of prompt_tokens, completion_tokens and total_tokens only, the counts
plain integers up to 2^31 - 1) as ``(prompt_tokens, completion_tokens)``, None where
absent. :func:`chunk` reads the same from one whole HTTP chunk (its
hex size line, CRLF, exactly that many bytes, CRLF; nothing else) as the connection
read it off the socket, so that a read between chunks needs no HTTP parser at all: the
caller uses it only when its parser stands between two chunks, which one whole chunk
leaves unchanged. ``TAILWISE_PURE_PYTHON=1`` forces the pure-Python one;
:data:`IMPLEMENTATION` says which is active (``tailwise run --version`` does not; see
docs/llm.md for the one-liner).
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tailwise.loadgen.llm.stream import MAX_TOKEN_COUNT  # over it, the classifier refuses

_TOP = frozenset({"id", "object", "created", "model", "system_fingerprint", "choices"})
_CHOICE = frozenset({"index", "delta", "logprobs", "finish_reason", "stop_reason"})
_DELTA = frozenset({"content", "role"})
_TOP_USAGE = _TOP | {"usage"}
_loads = json.loads


def _event_object(body: bytes, keys: frozenset[str]) -> dict[str, Any] | None:
    """The JSON object of one whole ``data:`` event whose keys are among ``keys``."""
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
    if type(obj) is not dict or not obj.keys() <= keys or obj.get("object") == "error":
        return None
    return obj


def _plain(body: bytes) -> tuple[str | None, object] | None:
    """(the delta's content or None, finish_reason) of a piece of the shape read here."""
    obj = _event_object(body, _TOP)
    if obj is None:
        return None
    choices = obj.get("choices")
    if type(choices) is not list or not choices:
        return None
    choice = choices[0]
    if type(choice) is not dict or not choice.keys() <= _CHOICE:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or not delta.keys() <= _DELTA:
        return None
    text = delta.get("content")
    if "content" in delta and type(text) is not str:
        return None
    return text, choice.get("finish_reason")


_USAGE = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})


def usage_py(body: bytes) -> tuple[int | None, int | None] | None:
    """The pure-Python :func:`usage`."""
    obj = _event_object(body, _TOP_USAGE)
    if obj is None:
        return None
    usage = obj.get("usage")
    if obj.get("choices") != [] or type(usage) is not dict or not usage.keys() <= _USAGE:
        return None
    counts = usage.get("prompt_tokens"), usage.get("completion_tokens")
    for v in counts:
        if v is not None and not (type(v) is int and 0 <= v <= MAX_TOKEN_COUNT):
            return None
    return counts


def content_py(body: bytes) -> str | None:
    """The pure-Python :func:`content`."""
    read = _plain(body)
    if read is None or read[1] is not None or read[0] is None:
        return None
    return read[0]


def finish_py(body: bytes) -> tuple[str, str] | None:
    """The pure-Python :func:`finish`."""
    read = _plain(body)
    if read is None or type(read[1]) is not str or not read[1]:
        return None  # "" is no finish to the classifier: declined
    return read[0] or "", read[1]


_HEX_DIGITS = b"0123456789abcdefABCDEF"
MAX_CHUNK_DIGITS = 7  # a chunk under 256 MiB, far above any event a stream may hold


def chunk_py(data: bytes) -> str | None:
    """The pure-Python :func:`chunk`."""
    size_line, crlf, rest = data.partition(b"\r\n")
    if not crlf or not 0 < len(size_line) <= MAX_CHUNK_DIGITS or size_line.strip(_HEX_DIGITS):
        return None  # int(x, 16) alone would also take "+", "_", "0x" and spaces
    size = int(size_line, 16)
    if size == 0 or size != len(rest) - 2 or not rest.endswith(b"\r\n"):
        return None
    return content_py(rest[:-2])


Read = Callable[[bytes], str | None]
ReadEnd = Callable[[bytes], tuple[str, str] | None]
ReadUsage = Callable[[bytes], tuple[int | None, int | None] | None]


def pure_python() -> bool:
    """Whether ``TAILWISE_PURE_PYTHON`` asks for the pure-Python paths."""
    return os.environ.get("TAILWISE_PURE_PYTHON", "") not in ("", "0")


def compiled_module(name: str) -> ModuleType | None:
    """``tailwise.loadgen.<name>`` (a C extension: ``transport.sse_c``, ``transport.http_c``,
    ``execute.writer_c``), or None if not built or not wanted."""
    if pure_python():
        return None
    try:
        return importlib.import_module(f"tailwise.loadgen.{name}")
    except ImportError:
        return None


def _pick() -> tuple[Read, ReadEnd, ReadUsage, Read, str]:
    compiled = compiled_module("transport.sse_c")
    if compiled is None:
        why = "TAILWISE_PURE_PYTHON" if pure_python() else "no compiled module"
        return content_py, finish_py, usage_py, chunk_py, f"python ({why})"
    return compiled.content, compiled.finish, compiled.usage, compiled.chunk, "compiled"


content, finish, usage, chunk, IMPLEMENTATION = _pick()
