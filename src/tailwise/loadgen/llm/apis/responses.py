"""``--api openai-responses``: the OpenAI Responses API (``/v1/responses``), as vLLM serves it.

The body is ``{"model", "input", "max_output_tokens", "stream"}``: a text prompt is the
``input`` string, chat messages (a ``--prompts`` row) become input items (``role`` and
``content``; a chat content part ``text`` becomes ``input_text``).

A stream is a sequence of typed events, each an SSE event named after its ``type``
(``event: response.output_text.delta`` then ``data: {"type": ..., ...}``; vLLM's
``responses/api_router.py`` and OpenAI write both). What each one says (the JSON
``type`` decides; the SSE event name is read only when the JSON has no ``type``):

* ``response.output_text.delta``: answer text (``delta``): a token arrival, so TTFT is
  the first of them, and ITL the gaps between them, as a chat stream's ``content``;
* ``response.reasoning_text.delta`` (vLLM's reasoning parser, gpt-oss) and
  ``response.reasoning_summary_text.delta`` (OpenAI's summaries): reasoning, booked as a
  chat stream's ``reasoning_content`` is (its own first instant and token count; TTFT stays
  the first *answer* token, docs/llm.md "Reasoning models");
* ``response.function_call_arguments.delta``: tool-call arguments;
* ``response.completed`` (finish ``stop``) and ``response.incomplete`` (``length`` when
  ``incomplete_details.reason`` is ``max_output_tokens``): the answer's end, carrying the
  whole response object with ``usage``: ``input_tokens``, ``output_tokens``,
  ``output_tokens_details.reasoning_tokens`` and ``input_tokens_details.cached_tokens``;
* ``response.failed`` (the response's ``error.message``) and ``error`` (its ``message``):
  a ``stream_error``;
* anything else (``response.created``, ``response.in_progress``, ``output_item.added``,
  ``content_part.done``, ...): a part of the answer that carries no token.

There is no ``[DONE]`` (one is accepted where a proxy adds it): a stream that ends before
``response.completed``, ``response.incomplete`` or ``response.failed`` is ``truncated``.
Data that is not a JSON object (or nested past the interpreter's depth) is
``malformed_chunk``; a token count outside 0 to 2^31 - 1 makes its event malformed, as in
:mod:`~tailwise.loadgen.llm.stream`.

None of these events takes the compiled fast paths (:mod:`~tailwise.loadgen.transport.sse_fast`,
``sse_c``'s stream reader): they read OpenAI chat and completions chunks of one ``data``
line only, and decline an event that starts with ``event:``; every Responses event goes
through the SSE parser and :meth:`Responses.classify_event`. The records are the same, one
Python call per event dearer (docs/llm.md, "The Responses API").
"""

from __future__ import annotations

import json
from typing import Any

from tailwise.loadgen.llm.apis.kind import CalibrateModel, Prompt
from tailwise.loadgen.llm.stream import DONE, MALFORMED, MAX_TOKEN_COUNT, Chunk

REASONING_DELTAS = frozenset(
    {"response.reasoning_text.delta", "response.reasoning_summary_text.delta"}
)
ENDS = frozenset({"response.completed", "response.incomplete"})
MESSAGE_CHARS = 500  # a server's error message, kept for the error samples: bounded


class _NotACount(ValueError):
    """A usage value that is no token count: the event is malformed."""


class Responses:
    name = "openai-responses"
    path = "/v1/responses"
    streams = True
    budget_field = "max_output_tokens"
    # OpenAI (and Azure) refuse max_output_tokens under 16 with a 400: the preflight asks
    # for 16, which vLLM and the demo accept as they would 1
    preflight_budget = 16
    sessions = False  # --turns builds chat ``messages`` histories; not input items
    calibrate_as: CalibrateModel = "llm"

    def body(self, model: str, prompt: Prompt, max_tokens: int, stream: bool) -> dict[str, Any]:
        value: object = prompt if isinstance(prompt, str) else input_items(prompt)
        return {"model": model, "input": value, "max_output_tokens": max_tokens, "stream": stream}

    def classify_event(self, data: str, event_type: str = "message") -> Chunk:
        if data == "[DONE]":
            return DONE
        obj = _object(data)
        if obj is None:
            return Chunk(error=MALFORMED)
        kind = obj.get("type")
        if not isinstance(kind, str):
            kind = event_type  # a server that names the event only on its SSE line
        try:
            return _event(kind, event_type, obj)
        except _NotACount:
            return Chunk(error=MALFORMED)

    def classify_answer(self, body: bytes) -> Chunk:
        """A whole (not streamed) response object: its usage, or its error."""
        obj = _object(body)
        if obj is None:
            return Chunk(error=MALFORMED)
        error = obj.get("error")
        if error is not None or obj.get("object") == "error":
            return Chunk(error=_message(error if error is not None else obj))
        status = obj.get("status")  # absent: read as done (usage says the rest)
        if status is not None and status not in ("completed", "incomplete"):
            return Chunk(error=f"response status {_short(status)}")
        try:
            return _end(obj)
        except _NotACount:
            return Chunk(error=MALFORMED)


def input_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as Responses input items: role and content, text parts renamed."""
    items = []
    for m in messages:
        content = m.get("content", "")
        if isinstance(content, list):
            content = [_input_part(p) for p in content]
        items.append({"role": m.get("role", "user"), "content": content})
    return items


def _input_part(part: object) -> object:
    if isinstance(part, dict) and part.get("type") == "text":
        return {**part, "type": "input_text"}
    return part


def _object(data: str | bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):  # nested past the interpreter's depth: malformed
        return None
    return obj if isinstance(obj, dict) else None


def _event(kind: str, event_type: str, obj: dict[str, Any]) -> Chunk:
    if kind == "response.output_text.delta":
        return Chunk(text=_text(obj.get("delta")))
    if kind in REASONING_DELTAS:
        return Chunk(reasoning=_text(obj.get("delta")))
    if kind == "response.function_call_arguments.delta":
        return Chunk(tool_args=_text(obj.get("delta")))
    if kind == "error" or event_type == "error":
        nested = obj.get("error")  # {"type": "error", "error": {...}} from some proxies
        return Chunk(error=_message(nested if isinstance(nested, dict) else obj))
    response = obj.get("response")
    if kind == "response.failed":
        error = response.get("error") if isinstance(response, dict) else None
        return Chunk(error=_message(error if error is not None else "response failed"))
    if kind in ENDS:
        return _end(response if isinstance(response, dict) else {"status": kind[9:]})
    return Chunk()


def _end(response: dict[str, Any]) -> Chunk:
    """The answer's end: how it finished and the server's usage, where it says."""
    finish = "stop"
    if response.get("status") == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        finish = "length" if reason == "max_output_tokens" else "incomplete"
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return Chunk(finish_reason=finish)
    return Chunk(
        finish_reason=finish,
        prompt_tokens=_count(usage.get("input_tokens")),
        completion_tokens=_count(usage.get("output_tokens")),
        reasoning_tokens=_detail(usage, "output_tokens_details", "reasoning_tokens"),
        cached_tokens=_detail(usage, "input_tokens_details", "cached_tokens"),
    )


def _detail(usage: dict[str, Any], section: str, field: str) -> int | None:
    details = usage.get(section)
    return _count(details.get(field)) if isinstance(details, dict) else None


def _count(v: object) -> int | None:
    """A token count, or None where there is none; anything out of range is malformed."""
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    if not 0 <= v <= MAX_TOKEN_COUNT:
        raise _NotACount(v)
    return v


def _text(v: object) -> str:
    return v if isinstance(v, str) else ""


def _message(error: object) -> str:
    """An error's message (an object's ``message``, else its ``code`` or ``type``), bounded."""
    if isinstance(error, dict):
        error = error.get("message") or error.get("code") or error.get("type") or "error"
    return _short(error) or "error"


def _short(v: object) -> str:
    """A server's string, cut; of anything else only its JSON type (never its repr)."""
    if isinstance(v, str):
        return v[:MESSAGE_CHARS]
    return "null" if v is None else f"<{type(v).__name__}>"


KIND = Responses()
