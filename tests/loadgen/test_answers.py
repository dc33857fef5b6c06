"""The answer book: what an answer says, in its record's token columns (loadgen/llm/answers.py).

The connections that feed it are tested end to end elsewhere (test_llm, test_sse_fast,
test_stream_reader); here the book alone, with a stream's tally written by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tailwise.loadgen.llm.answers import AnswerBook
from tailwise.loadgen.llm.stream import Timings
from tailwise.loadgen.transport.http import HttpTransport
from tailwise.loadgen.transport.http_conn import Conn
from tailwise.loadgen.transport.http_stream import AnswerConn, StreamConn
from tailwise.loadgen.transport.targets import parse_url
from tailwise.records import RecordBlock, error_code


class Words:
    """A tokenizer stand-in: one token per word."""

    name = "words.json"

    def count(self, text: str) -> int:
        return len(text.split())


@dataclass
class Tally:
    chunks: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    reasoning_chunks: int = 0
    reasoning_text: list[str] = field(default_factory=list)
    reasoning_usage: int | None = None
    usage_tokens: int | None = None
    prompt_tokens: int | None = None
    cached: int | None = None
    timings: Timings | None = None


def test_a_whole_answer_with_usage_is_counted_from_it_and_noted() -> None:
    book = AnswerBook(prompt_tokens=[100])
    block = RecordBlock(10, 2)
    usage = {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 5},
    }
    answer = {"choices": [{"message": {"content": "a b c"}}], "usage": usage}
    book.keep_answer(block, 1, json.dumps(answer).encode())
    assert (block.input_tokens[1], block.output_tokens[1]) == (7, 3)
    assert book.usage_rows == 1 and book.server_notes == {11: (5, None)}
    assert book.counted_by() == "server usage"


def test_a_whole_answer_without_usage_takes_the_prompt_count_and_no_output() -> None:
    book = AnswerBook(prompt_tokens=[4, 9])
    block = RecordBlock(0, 2)
    book.keep_answer(block, 1, b'{"data": []}')
    assert (block.input_tokens[1], block.output_tokens[1]) == (9, -1)  # body 1 % 2
    assert book.usage_rows == 0 and book.server_notes == {}
    assert book.counted_by() == "content chunks (approximation)"


def test_an_unreadable_whole_answer_is_a_malformed_chunk() -> None:
    block = RecordBlock(0, 1)
    AnswerBook().keep_answer(block, 0, b"<html>")
    assert block.error[0] == error_code("malformed_chunk")


def test_a_stream_without_usage_is_counted_by_the_tokenizer_reasoning_included() -> None:
    book = AnswerBook(streams=True, counter=Words())  # type: ignore[arg-type]
    block = RecordBlock(0, 1)
    tally = Tally(
        chunks=[5, 9],
        text=["two ", "words"],
        reasoning_chunks=1,
        reasoning_text=["three more words"],
    )
    book.keep_stream(block, 0, tally)
    assert block.chunk_times[0] == [5, 9]
    assert (block.output_tokens[0], block.reasoning_tokens[0]) == (5, 3)
    assert book.tokenizer_rows == 1 and book.counted_by() == "tokenizer words.json"


def test_a_stream_without_usage_or_tokenizer_counts_one_token_per_chunk() -> None:
    book = AnswerBook(streams=True)
    block = RecordBlock(0, 1)
    book.keep_stream(block, 0, Tally(chunks=[1, 2, 3], usage_tokens=None, prompt_tokens=6))
    assert (block.output_tokens[0], block.input_tokens[0]) == (3, 6)
    assert not book.keeps_text and (book.usage_rows, book.tokenizer_rows) == (0, 0)


def test_only_a_stream_that_ended_well_is_handed_on() -> None:
    got: list[tuple[int, str]] = []
    book = AnswerBook(streams=True, on_answer=lambda seq, text: got.append((seq, text)))
    block = RecordBlock(20, 2)
    block.error[1] = error_code("truncated")
    book.answered(block, 0, ["hel", "lo"])
    book.answered(block, 1, ["cut"])
    assert book.keeps_text and got == [(20, "hello")]


def test_the_book_decides_the_transports_connections() -> None:
    def conn_class(answers: Any) -> type[Conn]:
        t = HttpTransport(
            [parse_url("http://127.0.0.1:9/")],
            [[b"GET / HTTP/1.1\r\n\r\n"]],
            timeout_ns=10**9,
            connect_timeout_ns=10**9,
            answers=answers,
        )
        return t._pools[0].conn_class

    assert conn_class(None) is Conn
    assert conn_class(AnswerBook()) is AnswerConn
    assert conn_class(AnswerBook(streams=True)) is StreamConn
