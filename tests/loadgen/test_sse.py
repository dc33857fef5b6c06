"""SSE framing and LLM event classification: the spec's corners, properties, real server shapes."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailwise.loadgen.llm.stream import MALFORMED, classify
from tailwise.loadgen.transport.sse import SSEParser

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse"


def parse(body: bytes, cuts: list[int] | None = None) -> tuple[list[tuple[str, str]], bool]:
    p, events, last = SSEParser(), [], 0
    for cut in sorted(cuts or []):
        events += p.feed(body[last:cut])
        last = cut
    events += p.feed(body[last:])
    return events, p.close()


def test_the_format_in_brief() -> None:
    body = (
        b"\xef\xbb\xbf: keep-alive\r\n"
        b'data: {"a":1}\r\n\r\n'
        b"event: error\rdata:no-space\rdata:  two spaces\r\r"
        b"data\n\n"  # a field with no colon: empty value
        b"id: 7\nretry: 10\nunknown: x\ndata: last\n\n"
    )
    events, truncated = parse(body)
    assert events == [
        ("message", '{"a":1}'),
        ("error", "no-space\n two spaces"),
        ("message", ""),
        ("message", "last"),
    ]
    assert not truncated


def test_crlf_split_between_reads_is_one_line_end() -> None:
    events, _ = parse(b"data: x\r\n\r\ndata: y\r\n\r\n", cuts=[8, 9, 10])
    assert events == [("message", "x"), ("message", "y")]


def test_multibyte_character_split_between_reads() -> None:
    body = "data: déjà vu ✓\n\n".encode()
    events, _ = parse(body, cuts=[9, 10, 17])
    assert events == [("message", "déjà vu ✓")]


@pytest.mark.parametrize(
    ("body", "skipped"),
    [
        (b"data: x\n\n", True),
        (b"\xef\xbb\xbfdata: x\n\n", False),  # a BOM: only feed() may read it
        (b"\xef", False),  # perhaps a BOM's first byte
        (b"", False),
    ],
)
def test_skipping_the_start_reads_the_same_events(body: bytes, skipped: bool) -> None:
    p = SSEParser()
    p.skip_start(body)
    assert p.idle is skipped  # idle: the caller may read an event without feed()
    rest = b"data: y\n\n"
    assert p.feed(body) + p.feed(rest) == parse(body + rest)[0]
    p.skip_start(b"data: z")  # once started, nothing changes
    assert p.feed(b"data: z\n\n") == [("message", "z")]


def test_a_stream_cut_mid_event_is_truncated() -> None:
    assert parse(b'data: {"a":1}\n\ndata: {"b"')[1] is True
    assert parse(b'data: {"a":1}\n\ndata: x\n')[1] is True  # no blank line: not dispatched
    assert parse(b'data: {"a":1}\n\n')[1] is False


_line_end = st.sampled_from([b"\n", b"\r\n", b"\r"])
_value = st.text(
    alphabet=st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)),
    max_size=20,
)


@st.composite
def streams(draw: Any) -> tuple[bytes, list[tuple[str, str]]]:
    """A valid event stream and the events it must give.

    One line-end style per stream: a CR line end followed by an LF blank line
    would be a single CRLF line end, as the format says.
    """
    end = draw(_line_end)
    body, expected = b"", []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            body += b":" + draw(_value).encode() + end
        etype = draw(st.sampled_from(["", "message", "error", "delta"]))
        if etype:
            body += b"event: " + etype.encode() + end
        lines = draw(st.lists(_value, min_size=1, max_size=3))
        for v in lines:
            body += b"data: " + v.encode() + end
        body += end
        expected.append((etype or "message", "\n".join(lines)))
    return body, expected


@settings(max_examples=200, deadline=None)
@given(streams(), st.lists(st.integers(0, 400), max_size=12))
def test_any_chunking_gives_the_same_events(
    stream: tuple[bytes, list[tuple[str, str]]], cuts: list[int]
) -> None:
    body, expected = stream
    events, truncated = parse(body, [c for c in cuts if c <= len(body)])
    assert events == expected
    assert not truncated


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=8))
def test_arbitrary_bytes_never_raise(body: bytes, cuts: list[int]) -> None:
    whole, _ = parse(body)
    pieces, _ = parse(body, [c for c in cuts if c <= len(body)])
    assert pieces == whole
    for etype, data in whole:
        classify(data, etype)  # never raises either


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_classify_never_raises(data: str) -> None:
    classify(data)


def chat(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    return json.dumps(
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
    )


def test_openai_chat_shapes() -> None:
    assert classify(chat({"role": "assistant", "content": ""})).text == ""  # role-only
    assert classify(chat({})).text == ""  # empty delta
    assert classify(chat({"content": "Hi"})).text == "Hi"
    assert classify(chat({"reasoning_content": "hmm"})).reasoning == "hmm"
    assert classify(chat({"reasoning": "hmm"})).reasoning == "hmm"
    call = {"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}
    assert classify(chat(call)).tool_args == '{"x":'
    assert classify(chat({}, "stop")).finish_reason == "stop"
    usage = classify(
        json.dumps({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 34}})
    )
    assert (usage.prompt_tokens, usage.completion_tokens, usage.text) == (12, 34, "")
    assert classify("[DONE]").done


def test_other_shapes_and_errors() -> None:
    assert classify(json.dumps({"choices": [{"text": "ab", "finish_reason": None}]})).text == "ab"
    tgi = {"token": {"id": 1, "text": "x", "special": False}, "generated_text": None}
    assert classify(json.dumps(tgi)).text == "x"
    tgi["token"]["special"] = True
    assert classify(json.dumps(tgi)).text == ""
    end = classify(
        json.dumps({"content": "", "stop": True, "timings": {"prompt_n": 5, "predicted_n": 9}})
    )
    assert (end.finish_reason, end.prompt_tokens, end.completion_tokens) == ("stop", 5, 9)
    assert (
        classify(json.dumps({"error": {"message": "overloaded", "code": 503}})).error
        == "overloaded"
    )
    assert classify(json.dumps({"error": "bad"})).error == "bad"
    assert classify(json.dumps({"message": "x"}), "error").error == "x"
    assert classify("{not json").error == MALFORMED
    assert classify("[1, 2]").error == MALFORMED


FIXTURE_FILES = sorted(FIXTURES.glob("*.sse")) if FIXTURES.exists() else []


def facts(body: bytes, cuts: list[int]) -> dict[str, Any]:
    events, _ = parse(body, cuts)
    chunks = [classify(data, etype) for etype, data in events]
    finish = [c.finish_reason for c in chunks if c.finish_reason]
    prompt = [c.prompt_tokens for c in chunks if c.prompt_tokens is not None]
    completion = [c.completion_tokens for c in chunks if c.completion_tokens is not None]
    errors = [c.error for c in chunks if c.error]
    return {
        "events": len(events),
        "content": "".join(c.text for c in chunks),
        "content_chunks": sum(1 for c in chunks if c.text),
        "reasoning": "".join(c.reasoning for c in chunks),
        "tool_arguments": "".join(c.tool_args for c in chunks),
        "finish_reason": finish[-1] if finish else None,
        "usage": (
            {
                "prompt_tokens": prompt[-1] if prompt else None,
                "completion_tokens": completion[-1] if completion else None,
            }
            if prompt or completion
            else None
        ),
        "done_marker": bool(chunks) and chunks[-1].done,
        "error": errors[-1] if errors else None,
    }


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_server_fixtures(path: Path) -> None:
    body = path.read_bytes()
    want = json.loads(path.with_suffix(".json").read_text())
    want = {k: v for k, v in want.items() if k != "source"}
    assert facts(body, []) == want
    rng = random.Random(path.name)
    for _ in range(20):  # and the same, however the network splits it
        assert facts(body, rng.sample(range(len(body)), min(8, len(body)))) == want


def test_fixtures_cover_the_servers() -> None:
    names = {p.stem for p in FIXTURE_FILES}
    for server in ("vllm", "sglang", "tgi", "ollama", "llamacpp"):
        assert any(n.startswith(server) for n in names), server
