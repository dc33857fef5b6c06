"""OpenAI-compatible wire for the demo LLM target: request parsing and the engine's responses.

Prompt length is counted in words (whitespace-separated), the same unit
tailwise's synthetic prompts use, so ``--input-tokens 128`` means 128 prompt
tokens here. Output text is synthetic: one word per token, always exactly
``max_tokens`` of them (``finish_reason: "length"``). A chat message's images
(``image_url`` parts) add tokens by the law of :mod:`tailwise.server.llm_images`.

Three APIs share the engine, and so its cost law: completions and chat
(:class:`Renderer`) and the Responses API (:class:`ResponsesRenderer`:
``/v1/responses``, typed ``response.*`` events; having generated exactly
``max_output_tokens``, an answer ends as OpenAI ends one cut at its budget,
``response.incomplete`` with ``incomplete_details.reason: "max_output_tokens"``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass
from typing import Any

from tailwise.server.engine import ABORTED, FINISHED, Engine, Sequence
from tailwise.server.llm_images import ImageRefused, request_image_tokens

WORDS = (" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".")
DEFAULT_MAX_TOKENS = 128
_ids = itertools.count(1)

Scope = dict[str, Any]
Message = dict[str, Any]


class WireError(Exception):
    """A request the server refuses: HTTP status, OpenAI error type, message."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def error_body(status: int, message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise WireError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise WireError(400, "the body must be a JSON object")
    return body


@dataclass(frozen=True)
class LLMRequest:
    chat: bool
    model: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    responses: bool = False  # the Responses API: ResponsesRenderer


def parse_request(body: dict[str, Any], chat: bool, served_model: str) -> LLMRequest:
    model = body.get("model", served_model)
    if model != served_model:
        raise WireError(404, f"The model `{model}` does not exist.", "NotFoundError")
    text = _chat_text(body) if chat else _prompt_text(body)
    max_tokens = body.get("max_completion_tokens" if chat else "max_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise WireError(400, f"max_tokens: expected an integer >= 1, got {max_tokens!r}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise WireError(400, f"stream: expected true or false, got {stream!r}")
    options = body.get("stream_options") or {}
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    prompt_tokens = max(len(text.split()), 1) + (_image_tokens(body) if chat else 0)
    return LLMRequest(chat, model, prompt_tokens, max_tokens, stream, include_usage)


def _image_tokens(body: dict[str, Any]) -> int:
    """The chat body's image tokens by the demo's law (see server.llm_images); 400 if unreadable."""
    try:
        return request_image_tokens(body)
    except ImageRefused as exc:
        raise WireError(400, f"messages: {exc}") from None


def parse_responses_request(body: dict[str, Any], served_model: str) -> LLMRequest:
    """A ``/v1/responses`` body: ``input`` (a string or items), ``max_output_tokens``."""
    model = body.get("model", served_model)
    if model != served_model:
        raise WireError(404, f"The model `{model}` does not exist.", "NotFoundError")
    text = _input_text(body.get("input"))
    instructions = body.get("instructions")
    if isinstance(instructions, str):  # a system message ahead of the input (as vLLM does)
        text = f"{instructions} {text}"
    max_tokens = body.get("max_output_tokens")
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise WireError(400, f"max_output_tokens: expected an integer >= 1, got {max_tokens!r}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise WireError(400, f"stream: expected true or false, got {stream!r}")
    return LLMRequest(False, model, max(len(text.split()), 1), max_tokens, stream, True, True)


def _input_text(value: object) -> str:
    """The words of a Responses ``input``: a string, or items with string or part contents."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise WireError(400, "input: expected a string or a non-empty list of input items")
    texts: list[str] = []
    for item in value:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list):  # input_text parts (input_image and others: no words)
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise WireError(400, "input: each item needs a string content or content parts")
        texts.append(content)
    return " ".join(texts)


def _prompt_text(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise WireError(400, "prompt: expected a string")
    return prompt


def _chat_text(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages: expected a non-empty list of {role, content}")
    texts: list[str] = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):  # content parts: keep the text ones
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise WireError(400, "messages: each message needs a string content")
        texts.append(content)
    return " ".join(texts)


class Renderer:
    """OpenAI JSON for one request: stream chunks and the whole response."""

    def __init__(self, req: LLMRequest) -> None:
        self.req = req
        self.id = f"{'chatcmpl' if req.chat else 'cmpl'}-{next(_ids)}"
        self.created = int(time.time())
        self.object = "chat.completion" if req.chat else "text_completion"

    def _head(self, suffix: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.object + suffix,
            "created": self.created,
            "model": self.req.model,
        }

    def _choice(self, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        if not self.req.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        delta: dict[str, Any] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def event(self, payload: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

    def failure(self, status: int, message: str) -> bytes:
        """The stream's last event when the engine drops the request (timeout, shutdown)."""
        return self.event(error_body(status, message, "server_error"))

    def opening(self) -> bytes:
        """Chat streams start with a role-only delta, as OpenAI and vLLM do."""
        if not self.req.chat:
            return b""
        return self.event({**self._head(".chunk"), "choices": [self._choice("", None, True)]})

    def token(self, index: int) -> bytes:
        text = WORDS[index % len(WORDS)]
        suffix = ".chunk" if self.req.chat else ""
        return self.event({**self._head(suffix), "choices": [self._choice(text, None)]})

    def closing(self) -> bytes:
        suffix = ".chunk" if self.req.chat else ""
        out = self.event({**self._head(suffix), "choices": [self._choice(None, "length")]})
        if self.req.include_usage:
            out += self.event({**self._head(suffix), "choices": [], "usage": self.usage()})
        return out + b"data: [DONE]\n\n"

    def usage(self) -> dict[str, int]:
        p, n = self.req.prompt_tokens, self.req.max_tokens
        return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}

    def whole(self) -> dict[str, Any]:
        text = "".join(WORDS[i % len(WORDS)] for i in range(self.req.max_tokens))
        if self.req.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        return {**self._head(""), "choices": [choice], "usage": self.usage()}


class ResponsesRenderer:
    """The Responses API's JSON for one request: typed events and the whole response object.

    A stream is what vLLM and OpenAI send for one text answer: ``response.created``,
    ``response.in_progress``, the message item and its text part opened, one
    ``response.output_text.delta`` per token, the text, part and item closed, and the end
    (``response.incomplete``: the answer stopped at ``max_output_tokens``) carrying the
    response with its ``usage``. Each event is ``event: TYPE`` then ``data: {...}``.
    """

    def __init__(self, req: LLMRequest) -> None:
        self.req = req
        n = next(_ids)
        self.id, self.item_id = f"resp_{n}", f"msg_{n}"
        self.created = int(time.time())
        self.seq = 0  # sequence_number: every event's place in the stream

    def event(self, payload: dict[str, Any]) -> bytes:
        kind = str(payload["type"])
        payload = {"type": kind, "sequence_number": self.seq, **payload}
        self.seq += 1
        data = json.dumps(payload, separators=(",", ":")).encode()
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "output_index": 0, "content_index": 0}

    def _item(self, status: str, text: str | None) -> dict[str, Any]:
        parts = [] if text is None else [self._part(text)]
        return {
            "id": self.item_id,
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": parts,
        }

    def _part(self, text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def response(self, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        """The response object; usage and the end's details only once it has ended."""
        ended = status in ("completed", "incomplete")
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "model": self.req.model,
            "output": output,
            "max_output_tokens": self.req.max_tokens,
            "usage": self.usage() if ended else None,
        }

    def usage(self) -> dict[str, Any]:
        p, n = self.req.prompt_tokens, self.req.max_tokens
        return {
            "input_tokens": p,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": n,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": p + n,
        }

    def opening(self) -> bytes:
        started = self.response("in_progress", [])
        return b"".join(
            (
                self.event({"type": "response.created", "response": started}),
                self.event({"type": "response.in_progress", "response": started}),
                self.event(
                    {
                        "type": "response.output_item.added",
                        "output_index": 0,
                        "item": self._item("in_progress", None),
                    }
                ),
                self.event(
                    {"type": "response.content_part.added", **self._where(), "part": self._part("")}
                ),
            )
        )

    def token(self, index: int) -> bytes:
        text = WORDS[index % len(WORDS)]
        return self.event(
            {"type": "response.output_text.delta", **self._where(), "delta": text, "logprobs": []}
        )

    def _text(self) -> str:
        return "".join(WORDS[i % len(WORDS)] for i in range(self.req.max_tokens))

    def closing(self) -> bytes:
        text = self._text()
        item = self._item("incomplete", text)
        where = self._where()
        return b"".join(
            (
                self.event({"type": "response.output_text.done", **where, "text": text}),
                self.event(
                    {"type": "response.content_part.done", **where, "part": item["content"][0]}
                ),
                self.event({"type": "response.output_item.done", "output_index": 0, "item": item}),
                self.event(
                    {"type": "response.incomplete", "response": self.response("incomplete", [item])}
                ),
            )
        )

    def failure(self, status: int, message: str) -> bytes:
        """``response.failed``: the response, its status ``failed`` and its ``error``."""
        failed = self.response("failed", [])
        failed["error"] = {"code": "server_error", "message": message}
        return self.event({"type": "response.failed", "response": failed})

    def whole(self) -> dict[str, Any]:
        return self.response("incomplete", [self._item("incomplete", self._text())])


def renderer(req: LLMRequest) -> Renderer | ResponsesRenderer:
    """The wire format of ``req``'s API."""
    return ResponsesRenderer(req) if req.responses else Renderer(req)


_ABORT_STATUS = {"timeout": 504, "shutdown": 503}


class EngineResponse:
    """An ASGI response that follows one sequence through the engine.

    A watcher reads ``receive()`` for the whole response: the moment the client
    disconnects, the sequence is aborted and its batch slot and KV space are
    free, whether it was still queued, mid-stream or waiting for a whole answer.
    """

    def __init__(self, engine: Engine, seq: Sequence, render: Renderer | ResponsesRenderer) -> None:
        self.engine = engine
        self.seq = seq
        self.render = render

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        watcher = asyncio.ensure_future(self._watch(receive))
        try:
            if self.render.req.stream:
                await self._stream(send)
            else:
                await self._whole(send)
        except OSError:
            pass  # the client went away while we wrote
        finally:
            watcher.cancel()
            self.engine.abort(self.seq, "client_disconnected")  # no-op once finished

    async def _watch(self, receive: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.engine.abort(self.seq, "client_disconnected")
                return

    async def _stream(self, send: Any) -> None:
        await send(_start(200, b"text/event-stream"))
        await send(_body(self.render.opening(), more=True))
        sent = 0
        while True:
            events = [await self.seq.events.get()]
            while not self.seq.events.empty():  # the writer fell behind: batch the write
                events.append(self.seq.events.get_nowait())
            parts: list[bytes] = []
            for ev in events:
                if ev > 0:
                    parts.extend(self.render.token(sent + i) for i in range(ev))
                    sent += ev
                elif ev == FINISHED:
                    parts.append(self.render.closing())
                elif ev == ABORTED and self.seq.abort_reason != "client_disconnected":
                    status = _ABORT_STATUS.get(self.seq.abort_reason, 500)
                    msg = f"request {self.seq.abort_reason.replace('_', ' ')}"
                    parts.append(self.render.failure(status, msg))
            final = events[-1] in (FINISHED, ABORTED)
            await send(_body(b"".join(parts), more=not final))
            if final:
                return

    async def _whole(self, send: Any) -> None:
        while (ev := await self.seq.events.get()) not in (FINISHED, ABORTED):
            pass
        if ev == FINISHED:
            await _send_json(send, 200, self.render.whole())
        elif self.seq.abort_reason != "client_disconnected":
            status = _ABORT_STATUS.get(self.seq.abort_reason, 500)
            reason = f"request {self.seq.abort_reason.replace('_', ' ')}"
            await _send_json(send, status, error_body(status, reason, "server_error"))


def _start(status: int, content_type: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> Any:
    headers = [(b"content-type", content_type), (b"cache-control", b"no-cache"), *(extra or [])]
    return {"type": "http.response.start", "status": status, "headers": headers}


def _body(data: bytes, more: bool) -> Any:
    return {"type": "http.response.body", "body": data, "more_body": more}


async def _send_json(send: Any, status: int, payload: dict[str, Any]) -> None:
    await send(_start(status, b"application/json"))
    await send(_body(json.dumps(payload).encode(), more=False))
