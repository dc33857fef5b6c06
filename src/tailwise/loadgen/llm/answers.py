"""What an LLM answer says, booked into its record: tokens, chunks, usage, server notes.

The transport (:mod:`tailwise.loadgen.transport.http`) moves bytes, and its connections
(:mod:`tailwise.loadgen.transport.http_stream`) read the framing (HTTP, SSE) and time each content
chunk's arrival. What an answer *means* is this module's: an :class:`AnswerBook` reads
stream events and whole answers with the API kind's functions
(:mod:`tailwise.loadgen.llm.apis`; no kind: OpenAI's shapes), and at each answer's end
writes its token and chunk columns:

* output tokens: the server's usage where it gave one (``usage_rows``), else the local
  tokenizer's count of the answer's text where one is set (``tokenizer_rows``), else one
  per content chunk; reasoning included, as servers' usage counts it, with
  ``reasoning_tokens`` saying how many were reasoning;
* input tokens: the server's usage, else the request body's prompt tokens as counted
  when it was prepared;
* the server's notes (cached prompt tokens, llama.cpp timings) per seq, for
  :mod:`tailwise.loadgen.observe.server_view`.

It also hands a stream that ended well to ``on_answer`` (multi-turn sessions carry the
answer into the next turn). One book per transport, so per worker process; connections
call it once per answer, and per event only where the fast readers decline one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tailwise.loadgen.llm.apis.kind import ApiKind
from tailwise.loadgen.llm.openai import TokenCounter
from tailwise.loadgen.llm.stream import MALFORMED, Chunk, Timings, classify, classify_answer
from tailwise.records import RecordBlock, error_code

_MALFORMED, _STREAM_ERROR = error_code("malformed_chunk"), error_code("stream_error")
OnAnswer = Callable[[int, str], None]  # (seq, answer text)
# seq -> (cached prompt tokens, llama.cpp timings), for rows where the server said
ServerNotes = dict[int, tuple[int | None, Timings | None]]


def answer_error(error: str) -> int:
    """The error code of an answer that says ``error``: unreadable, or the server's error."""
    return _MALFORMED if error == MALFORMED else _STREAM_ERROR


class StreamTally(Protocol):
    """What a stream connection gathered of one answer (``http_stream.StreamConn``)."""

    chunks: list[int]  # each content chunk's arrival, ns since the run's origin
    text: list[str]  # the content, kept only when the book keeps_text
    reasoning_chunks: int  # events carrying reasoning
    reasoning_text: list[str]  # kept only with a tokenizer
    reasoning_usage: int | None  # the server's usage, where it said
    usage_tokens: int | None
    prompt_tokens: int | None
    cached: int | None
    timings: Timings | None


class AnswerBook:
    """How one transport's LLM answers are read and counted (see the module docstring).

    ``streams``: the answers are SSE token streams (else whole JSON bodies: not
    streamed, or embeddings). ``counter`` counts output tokens locally when the server
    gives no usage; ``prompt_tokens`` holds each request body's prompt tokens (request
    ``seq`` sends body ``seq % len``), for input tokens the server does not give.
    """

    def __init__(
        self,
        api: ApiKind | None = None,
        *,
        streams: bool = False,
        counter: TokenCounter | None = None,
        prompt_tokens: list[int] | None = None,
        on_answer: OnAnswer | None = None,
    ) -> None:
        self.streams = streams
        self.classify_event: Callable[[str, str], Chunk] = (
            api.classify_event if api is not None else classify
        )
        self.classify_answer: Callable[[bytes], Chunk] = (
            api.classify_answer if api is not None else classify_answer
        )
        self.counter = counter
        self.prompt_tokens = prompt_tokens
        self.on_answer = on_answer  # the answer's text is kept only when set (or counted)
        self.usage_rows = 0  # rows whose output tokens came from the server's usage
        self.tokenizer_rows = 0  # ... from the local tokenizer
        self.server_notes: ServerNotes = {}

    @property
    def keeps_text(self) -> bool:
        """Whether a stream's content text is kept: to count it, or to hand it on."""
        return self.counter is not None or self.on_answer is not None

    def counted_by(self) -> str:
        """How output tokens were counted, in words (``tokens_counted_by``)."""
        if self.usage_rows:
            return "server usage"
        if self.tokenizer_rows and self.counter is not None:
            return f"tokenizer {self.counter.name}"
        return "content chunks (approximation)"

    def keep_stream(self, block: RecordBlock, j: int, s: StreamTally) -> None:
        """Row ``j``'s token and chunk columns from what its stream gathered (at its end,
        or at its failure: partial answers keep what came)."""
        if s.chunks:
            block.chunk_times[j] = s.chunks
        # Output tokens count every generated token, reasoning included (as servers' usage
        # does); reasoning_tokens says how many of them were reasoning.
        reasoning = s.reasoning_chunks  # no usage: one token per chunk
        if s.reasoning_usage is not None:
            reasoning = s.reasoning_usage
        elif self.counter is not None and s.reasoning_text:
            reasoning = self.counter.count("".join(s.reasoning_text))
        if s.reasoning_chunks or s.reasoning_usage is not None:
            block.reasoning_tokens[j] = reasoning
        if s.usage_tokens is not None:
            block.output_tokens[j] = s.usage_tokens
            self.usage_rows += 1
        elif self.counter is not None:  # once per request, not per token
            block.output_tokens[j] = self.counter.count("".join(s.text)) + reasoning
            self.tokenizer_rows += 1
        elif s.chunks or s.reasoning_chunks:
            block.output_tokens[j] = len(s.chunks) + reasoning
        self._keep_input(block, j, s.prompt_tokens)
        self._note(block, j, s.cached, s.timings)

    def answered(self, block: RecordBlock, j: int, text: list[str]) -> None:
        """Row ``j``'s stream ended: its text to ``on_answer``, if set and it ended well."""
        on_answer = self.on_answer
        if on_answer is not None and block.error[j] == 0:
            on_answer(block.base + j, "".join(text))

    def keep_answer(self, block: RecordBlock, j: int, body: bytes) -> None:
        """Row ``j``'s columns from one whole 2xx answer: its usage, or its error. With
        no usage, output tokens stay unknown (-1)."""
        c = self.classify_answer(body)
        if c.error is not None:
            block.error[j] = answer_error(c.error)
            return
        if c.completion_tokens is not None:
            block.output_tokens[j] = c.completion_tokens
            self.usage_rows += 1
        self._keep_input(block, j, c.prompt_tokens)
        self._note(block, j, c.cached_tokens, c.timings)

    def _keep_input(self, block: RecordBlock, j: int, told: int | None) -> None:
        if told is not None:
            block.input_tokens[j] = told
        elif self.prompt_tokens:
            block.input_tokens[j] = self.prompt_tokens[(block.base + j) % len(self.prompt_tokens)]

    def _note(
        self, block: RecordBlock, j: int, cached: int | None, timings: Timings | None
    ) -> None:
        if cached is not None or timings is not None:
            self.server_notes[block.base + j] = (cached, timings)
