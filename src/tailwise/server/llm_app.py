"""OpenAI-compatible wire for the demo LLM target: request parsing and the engine's responses.

Prompt length is counted in words (whitespace-separated), the same unit
tailwise's synthetic prompts use, so ``--input-tokens 128`` means 128 prompt
tokens here. Output text is synthetic: one word per token, always exactly
``max_tokens`` of them (``finish_reason: "length"``). A chat message's images
(``image_url`` parts) add tokens by the law of :mod:`tailwise.server.llm_images`.
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


_ABORT_STATUS = {"timeout": 504, "shutdown": 503}


class EngineResponse:
    """An ASGI response that follows one sequence through the engine.

    A watcher reads ``receive()`` for the whole response: the moment the client
    disconnects, the sequence is aborted and its batch slot and KV space are
    free, whether it was still queued, mid-stream or waiting for a whole answer.
    """

    def __init__(self, engine: Engine, seq: Sequence, render: Renderer) -> None:
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
                    parts.append(self.render.event(error_body(status, msg, "server_error")))
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
