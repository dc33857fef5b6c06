"""The protocol every API kind (``--api``) follows, and what its modules share.

An API kind is one module (``chat``, ``completions``, ``embeddings`` here) whose
``KIND`` says everything the load generator, preflight and calibrate ask of an API:
its standard path, whether it generates a token stream, whether it holds a
conversation, which model calibrate fits, how one request body is built, and how
an answer (one stream event, or one whole JSON body) is read. The registry in
:mod:`tailwise.loadgen.llm.apis` is the only list of them.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from tailwise.loadgen.llm.stream import Chunk

Prompt = str | list[dict[str, Any]]  # a completion prompt, or chat messages
CalibrateModel = Literal["llm", "batching", "http"]


class ApiKind(Protocol):
    """One ``--api`` value: a request shape and the reading of its answers."""

    name: str  # the --api value
    path: str  # appended to a bare base URL (http://host:8000 or .../v1)
    streams: bool  # generates tokens, streamed as SSE unless --no-stream (max_tokens, nonce)
    budget_field: str  # a generating kind's output-token budget in its body
    preflight_budget: int  # what preflight sets it to: the least the API accepts (1 mostly)
    sessions: bool  # holds a conversation: multi-turn sessions (--turns) may use it
    calibrate_as: CalibrateModel  # the model `tailwise calibrate` fits to its runs

    def body(self, model: str, prompt: Prompt, max_tokens: int, stream: bool) -> dict[str, Any]:
        """One request's JSON body (before ``--extra-body``); ``stream`` is ``--stream``."""
        ...

    def classify_event(self, data: str, event_type: str = "message") -> Chunk:
        """What one SSE event's ``data`` says (streaming kinds)."""
        ...

    def classify_answer(self, body: bytes) -> Chunk:
        """What one whole JSON answer says: usage, cached tokens, timings, error."""
        ...


def prompt_text(prompt: Prompt) -> str:
    """A prompt as plain text: chat messages' contents joined by newlines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(content_text(m.get("content", "")) for m in prompt if isinstance(m, dict))


def content_text(content: object) -> str:
    """A message's text: a string, or its ``text`` parts joined (images are not text)."""
    if isinstance(content, list):
        texts = (p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text")
        return " ".join(t for t in texts if isinstance(t, str))
    return str(content)


def generation_body(
    model: str, max_tokens: int, stream: bool, field: str, value: object
) -> dict[str, Any]:
    """An OpenAI-style generation body: the prompt under ``field``, usage asked for in a stream."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": stream}
    body[field] = value
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body
