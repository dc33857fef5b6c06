"""What each event of an LLM token stream says: text, reasoning, tool calls, usage, end, error.

One function, :func:`classify`, reads the ``data`` of one SSE event in any of
the shapes servers send:

* OpenAI chat completions (vLLM, SGLang, TGI's Messages API, Ollama's and
  llama.cpp's ``/v1`` routes): ``choices[0].delta.content``, plus
  ``reasoning_content`` (or ``reasoning``) and ``tool_calls[].function.arguments``;
  a role-only or empty delta carries no text; usage arrives in a last chunk
  with empty ``choices`` when ``stream_options.include_usage`` is set;
* OpenAI completions: ``choices[0].text``;
* TGI ``/generate_stream``: ``token.text`` (special tokens are not text),
  ``details.finish_reason``, ``generated_tokens`` and ``input_length`` at the end;
* llama.cpp ``/completion``: ``content``, ``stop`` and ``timings``;
* what the server says of its own work, on any route (:func:`server_side`): cached
  prompt tokens (``usage.prompt_tokens_details.cached_tokens``, llama.cpp's
  ``tokens_cached`` and ``timings.cache_n``) and llama.cpp's ``timings`` (prompt
  and decode times, on ``/completion`` and on the last chunk of the ``/v1`` routes);
* ``[DONE]``; error events (an ``error`` object or string, or an SSE event of
  type ``error``); anything that is not JSON is ``malformed``.

Metrics count a *content chunk* (one carrying generated text) as a token
arrival for TTFT and ITL, as vLLM's serving benchmark does.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple


class Timings(NamedTuple):
    """llama.cpp's own account of one request (its ``timings`` object), in ms and tokens.

    ``prompt_n`` counts the prompt tokens it processed, not those it took from its cache.
    """

    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float


class Chunk(NamedTuple):
    text: str = ""  # generated text in this event
    reasoning: str = ""
    tool_args: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    done: bool = False  # the [DONE] marker
    error: str | None = None  # the server's error message, or "malformed chunk"
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    cached_tokens: int | None = None  # prompt tokens the server served from its cache
    timings: Timings | None = None


class UsageFields(NamedTuple):
    """Where an API's ``usage`` object counts the prompt's and the answer's tokens."""

    prompt: str = "prompt_tokens"
    completion: str = "completion_tokens"


OPENAI_USAGE = UsageFields()  # chat, completions and embeddings
DONE = Chunk(done=True)
MALFORMED = "malformed chunk"


def classify(data: str, event_type: str = "message", usage: UsageFields = OPENAI_USAGE) -> Chunk:
    if data == "[DONE]":
        return DONE
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):  # nested past the interpreter's depth: malformed
        return Chunk(error=MALFORMED)
    if not isinstance(obj, dict):
        return Chunk(error=MALFORMED)
    if event_type == "error" or "error" in obj or obj.get("object") == "error":
        return Chunk(error=_error_message(obj))
    try:
        return _shape(obj, usage)
    except _NotACount:
        return Chunk(error=MALFORMED)


def classify_answer(body: bytes, usage: UsageFields = OPENAI_USAGE) -> Chunk:
    """What a whole (not streamed) JSON answer says: usage, cached tokens, timings, error.

    The shapes of :func:`classify` plus embeddings (``usage.prompt_tokens`` only) and
    non-streamed chat (``choices[0].message.content``); the text itself is not kept.
    """
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return Chunk(error=MALFORMED)
    if not isinstance(obj, dict):
        return Chunk(error=MALFORMED)
    if "error" in obj or obj.get("object") == "error":
        return Chunk(error=_error_message(obj))
    try:
        if isinstance(obj.get("choices"), list) or isinstance(obj.get("data"), list):
            prompt, completion = _usage(obj, usage)
            cached, timings = server_side(obj)
            return Chunk(
                prompt_tokens=prompt,
                completion_tokens=completion,
                finish_reason="stop",
                cached_tokens=cached,
                timings=timings,
            )
        return _shape(obj, usage)
    except _NotACount:
        return Chunk(error=MALFORMED)


def _shape(obj: dict[str, Any], usage: UsageFields) -> Chunk:
    choices = obj.get("choices")
    if isinstance(choices, list):
        return _openai(obj, choices, usage)
    if isinstance(obj.get("token"), dict):
        return _tgi(obj)
    if "content" in obj or "stop" in obj:
        return _llamacpp(obj)
    return Chunk()


def _error_message(obj: dict[str, Any]) -> str:
    err = obj.get("error", obj)
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or err)
    return str(err if err is not None else obj.get("message", "error"))


def _usage(obj: dict[str, Any], fields: UsageFields) -> tuple[int | None, int | None]:
    u = obj.get("usage")
    if not isinstance(u, dict):
        return None, None
    return _int(u.get(fields.prompt)), _int(u.get(fields.completion))


def server_side(obj: dict[str, Any]) -> tuple[int | None, Timings | None]:
    """(cached prompt tokens, llama.cpp timings) of an answer or a chunk, where it says.

    Raises :class:`_NotACount` (caught by :func:`classify`) for values that are not
    counts or times: a server's numbers are bounded before anything adds them up.
    """
    cached = None
    u = obj.get("usage")
    if isinstance(u, dict) and isinstance(u.get("prompt_tokens_details"), dict):
        cached = _int(u["prompt_tokens_details"].get("cached_tokens"))
    if cached is None:
        cached = _int(obj.get("tokens_cached"))  # llama.cpp /completion
    t = obj.get("timings")
    if not isinstance(t, dict):
        return cached, None
    if cached is None:
        cached = _int(t.get("cache_n"))
    prompt_n, predicted_n = _int(t.get("prompt_n")), _int(t.get("predicted_n"))
    prompt_ms, predicted_ms = _ms(t.get("prompt_ms")), _ms(t.get("predicted_ms"))
    if prompt_n is None or predicted_n is None or prompt_ms is None or predicted_ms is None:
        return cached, None
    per_token = _ms(t.get("predicted_per_token_ms"))
    if per_token is None:
        per_token = predicted_ms / predicted_n if predicted_n else 0.0
    return cached, Timings(prompt_n, prompt_ms, predicted_n, predicted_ms, per_token)


# A token count a server may report: anything else (negative, 1e23) is not a count, and
# would overflow the records' int64 columns: the event is malformed, the run goes on.
MAX_TOKEN_COUNT = (1 << 31) - 1


class _NotACount(ValueError):
    pass


def _int(v: object) -> int | None:
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    if not 0 <= v <= MAX_TOKEN_COUNT:
        raise _NotACount(v)
    return v


MAX_MS = 1e9  # a server-reported time above ~11 days is not a time


def _ms(v: object) -> float | None:
    if not isinstance(v, int | float) or isinstance(v, bool):
        return None
    if not 0.0 <= v <= MAX_MS:  # also false for NaN
        raise _NotACount(v)
    return float(v)


def _text(v: object) -> str:
    return v if isinstance(v, str) else ""


def _reasoning_usage(obj: dict[str, Any]) -> int | None:
    """OpenAI's and vLLM's reasoning count, inside the completion tokens (absent: None)."""
    u = obj.get("usage")
    details = u.get("completion_tokens_details") if isinstance(u, dict) else None
    return _int(details.get("reasoning_tokens")) if isinstance(details, dict) else None


def _openai(obj: dict[str, Any], choices: list[Any], usage: UsageFields) -> Chunk:
    prompt, completion = _usage(obj, usage)
    cached, timings = server_side(obj)
    if not choices or not isinstance(choices[0], dict):
        return Chunk(
            prompt_tokens=prompt,
            completion_tokens=completion,
            reasoning_tokens=_reasoning_usage(obj),
            cached_tokens=cached,
            timings=timings,
        )
    choice = choices[0]
    delta = choice.get("delta")
    text = reasoning = tool_args = ""
    if isinstance(delta, dict):
        text = _text(delta.get("content"))
        reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            tool_args = "".join(
                _text(c.get("function", {}).get("arguments"))
                for c in calls
                if isinstance(c, dict) and isinstance(c.get("function"), dict)
            )
    else:
        text = _text(choice.get("text"))  # the completions API
    finish = choice.get("finish_reason")
    return Chunk(
        text,
        reasoning,
        tool_args,
        finish if isinstance(finish, str) else None,
        prompt,
        completion,
        reasoning_tokens=_reasoning_usage(obj),
        cached_tokens=cached,
        timings=timings,
    )


def _tgi(obj: dict[str, Any]) -> Chunk:
    token = obj["token"]
    text = "" if token.get("special") else _text(token.get("text"))
    details = obj.get("details")
    if isinstance(details, dict):  # on the last event; input_length in newer TGI only
        finish = details.get("finish_reason")
        return Chunk(
            text,
            finish_reason=finish if isinstance(finish, str) else None,
            prompt_tokens=_int(details.get("input_length")),
            completion_tokens=_int(details.get("generated_tokens")),
        )
    return Chunk(text)


def _llamacpp(obj: dict[str, Any]) -> Chunk:
    cached, timings = server_side(obj)
    raw = obj.get("timings")
    prompt = completion = None
    if isinstance(raw, dict):
        prompt, completion = _int(raw.get("prompt_n")), _int(raw.get("predicted_n"))
        # prompt_n leaves out the cached tokens; tokens_evaluated is the whole prompt.
        evaluated = _int(obj.get("tokens_evaluated"))
        if evaluated is not None:
            prompt = evaluated
        elif prompt is not None and cached:
            prompt += cached
    finish = None
    if obj.get("stop") is True:
        finish = "stop" if not obj.get("stopped_limit") else "length"
    return Chunk(
        _text(obj.get("content")),
        finish_reason=finish,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        timings=timings,
    )
