"""The fast path of a stream (compiled or pure Python) gives the records the full path gives.

:func:`tailwise.loadgen.transport.sse_fast.content` may decline any piece (``None``: the full
SSE parser and classifier run instead), but what it accepts must be exactly what the
full path would have read. Checked three ways: each accepted piece against
:class:`SSEParser` + :func:`classify`; whole fixture streams cut at random places
through :class:`StreamConn`, whose records must not depend on the path taken; and
hostile pieces, which must be declined or read the same.
"""

from __future__ import annotations

import importlib
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailwise.loadgen.llm.stream import Chunk, classify
from tailwise.loadgen.transport import http_conn, http_stream, sse_fast
from tailwise.loadgen.transport.sse import SSEParser
from tailwise.records import RecordBlock
from tests.wire import FakeWire, hand_pool

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse"
SSE_FILES = sorted(FIXTURES.glob("*.sse"))
try:
    _sse_c: Any = importlib.import_module("tailwise.loadgen.transport.sse_c")
    COMPILED, COMPILED_FINISH, COMPILED_CHUNK = _sse_c.content, _sse_c.finish, _sse_c.chunk
    COMPILED_USAGE = _sse_c.usage
except ImportError:  # no compiler where this was installed: the Python path is still checked
    COMPILED = COMPILED_FINISH = COMPILED_CHUNK = COMPILED_USAGE = None


def _declined(body: bytes) -> None:
    return None


# Each path's reader of one event (content), of an answer's end (finish), of the usage
# chunk (usage) and of one whole HTTP chunk (chunk). "full" declines everything: every
# byte goes through httptools, SSEParser and classify.
PATHS = {"full": _declined, "python": sse_fast.content_py}
FINISHES = {"full": _declined, "python": sse_fast.finish_py}
CHUNKS = {"full": _declined, "python": sse_fast.chunk_py}
USAGES = {"full": _declined, "python": sse_fast.usage_py}
if COMPILED is not None:
    USAGES["compiled"] = COMPILED_USAGE
    PATHS["compiled"] = COMPILED
    FINISHES["compiled"] = COMPILED_FINISH
    CHUNKS["compiled"] = COMPILED_CHUNK


def full_path(body: bytes) -> Chunk | None:
    """What the full path reads of ``body`` when it is one event on an idle parser."""
    events = SSEParser().feed(body)
    return classify(events[0][1], events[0][0]) if len(events) == 1 else None


VLLM = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"%s"},"logprobs":null,"finish_reason":null}]}\n\n'
)
LAB = (
    b'data: {"object": "chat.completion.chunk", "model": "lab", "choices": '
    b'[{"index": 0, "delta": {"content": "%s"}, "finish_reason": null}]}\n\n'
)


@pytest.mark.parametrize("name", sorted(PATHS))
def test_a_plain_delta_is_read(name: str) -> None:
    if name == "full":
        pytest.skip("declines everything")
    read = PATHS[name]
    assert read(VLLM % b" Paris") == " Paris"
    assert read(LAB % b" tok7") == " tok7"
    assert read(VLLM % "déjà ✓".encode()) == "déjà ✓"
    assert read(VLLM % b"") == ""


@pytest.mark.parametrize("name", sorted(set(FINISHES) - {"full"}))
def test_an_answers_plain_end_is_read_with_its_reason(name: str) -> None:
    end = FINISHES[name]
    stop = VLLM.replace(b'"finish_reason":null', b'"finish_reason":"stop"')
    assert end(stop % b"") == ("", "stop")
    assert end(stop % b" last") == (" last", "stop")
    lab_end = b'data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}\n\n'  # noqa: E501
    assert end(lab_end) == ("", "length")
    assert end(VLLM % b"x") is None  # not the end: content() reads it
    assert PATHS[name](stop % b"x") is None  # and content() leaves the end to finish()
    assert end(VLLM.replace(b'"finish_reason":null', b'"finish_reason":""') % b"x") is None
    assert end(b"data: [DONE]\n\n") is None


USAGE = b'data: {"object":"chat.completion.chunk","choices":[],"usage":%s}\n\n'


@pytest.mark.parametrize("name", sorted(set(USAGES) - {"full"}))
def test_a_plain_usage_chunk_is_read(name: str) -> None:
    usage = USAGES[name]
    assert usage(USAGE % b'{"prompt_tokens":7,"completion_tokens":32,"total_tokens":39}') == (
        7,
        32,
    )
    assert usage(USAGE % b'{"completion_tokens":2147483647}') == (None, 2**31 - 1)
    assert usage(USAGE % b"{}") == (None, None)
    for declined in (
        b'{"completion_tokens":2147483648}',  # not a count: the classifier refuses it
        b'{"completion_tokens":-1}',
        b'{"completion_tokens":3.0}',
        b'{"completion_tokens":true}',
        b'{"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}',
        b"null",
    ):
        assert usage(USAGE % declined) is None, declined
    assert usage(VLLM % b"x") is None
    assert PATHS[name](USAGE % b"{}") is None


HOSTILE = [
    VLLM % b"a\\nb",  # an escape: the compiled path declines, the Python one reads it right
    VLLM % b"\xff\xfe",  # invalid UTF-8
    VLLM % b"\xed\xa0\x80",  # a UTF-8-encoded surrogate
    VLLM % b"\xc0\xaf",  # an overlong form
    VLLM % b"a\x01b",  # a control character inside a string
    VLLM[:-4] + b"\n\n",  # truncated JSON
    VLLM.replace(b'"created":1', b'"created":NaN') % b"x",
    VLLM.replace(b'"created":1', b'"created":' + b"9" * 5000) % b"x",
    VLLM.replace(b'"created":1', b'"created":' + b"[" * 100 + b"]" * 100) % b"x",
    VLLM.replace(b'"object":"chat.completion.chunk"', b'"object":"error"') % b"x",
    VLLM.replace(b'"finish_reason":null', b'"finish_reason":"stop"') % b"x",
    VLLM.replace(b'"model":"m"', b'"usage":{"completion_tokens":3}') % b"x",
    VLLM.replace(b'"model":"m"', b'"error":{"message":"boom"}') % b"x",
    VLLM.replace(b'"model":"m"', b'"us\\u0061ge":null') % b"x",
    VLLM.replace(b'{"content"', b'{"reasoning_content":"r","content"') % b"x",
    VLLM.replace(b'{"content"', b'{"content":"a","content"') % b"x",
    VLLM.replace(b'"choices":[{', b'"choices":[{"text":"t",') % b"x",
    VLLM.replace(b'"created":1', b'"created":1,"created":2') % b"x",
    (VLLM % b"x").replace(b"\n\n", b"\r\n\r\n"),
    (VLLM % b"x") + b"data: [DONE]\n\n",
    b"data: [DONE]\n\n",
    b'data: {"choices":[]}\n\n',
    b'data: {"choices":[{"index":0,"delta":null}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":null}}]}\n\n',
    b"\xef\xbb\xbf" + VLLM % b"x",
    b"data: \xef\xbb\xbf" + (VLLM % b"x")[6:],
    b'data: {"\x00":1}\n\n',
    b"data: " + b"{" * 100_000 + b"\n\n",
    b"data: " + b"x" * 1_000_000 + b"\n\n",
    VLLM.replace(b"data: ", b"data:") % b"x",
    VLLM.replace(b"data: ", b"data:  \t") % b"x",
    VLLM.replace(b"data: ", b"event: error\ndata: ") % b"x",
    (VLLM % b"x")[:-1] + b" \n",
]


@pytest.mark.parametrize("name", sorted(PATHS))
@pytest.mark.parametrize("body", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_pieces_are_declined_or_read_as_the_full_path_reads_them(
    name: str, body: bytes
) -> None:
    got = PATHS[name](body)
    if got is not None:
        assert full_path(body) == Chunk(text=got)
    for stop in (b'"stop"', b'"length"', b'"st\\u006fp"', b"1", b"true", b"{}"):
        ended = body.replace(b'"finish_reason":null', b'"finish_reason":' + stop)
        pair = FINISHES[name](ended)
        if pair is not None:
            assert full_path(ended) == Chunk(text=pair[0], finish_reason=pair[1])


def framed(event: bytes, size_line: bytes | None = None) -> bytes:
    return (size_line or b"%x" % len(event)) + b"\r\n" + event + b"\r\n"


PLAIN = LAB % b"tok"
FRAMINGS = {
    "whole": (framed(PLAIN), "tok"),
    "upper-case hex": (framed(PLAIN, b"%X" % len(PLAIN)), "tok"),
    "leading zeros": (framed(PLAIN, b"000%x" % len(PLAIN)), "tok"),
    "size one short": (framed(PLAIN, b"%x" % (len(PLAIN) - 1)), None),
    "size one over": (framed(PLAIN, b"%x" % (len(PLAIN) + 1)), None),
    "an extension": (framed(PLAIN, b"%x;a=b" % len(PLAIN)), None),
    "a sign": (framed(PLAIN, b"+%x" % len(PLAIN)), None),
    "an 0x prefix": (framed(PLAIN, b"0x%x" % len(PLAIN)), None),
    "an underscore": (framed(PLAIN, b"0_%x" % len(PLAIN)), None),
    "a space": (framed(PLAIN, b" %x" % len(PLAIN)), None),
    "eight digits": (framed(PLAIN, b"0000%04x" % len(PLAIN)), None),
    "no final CRLF": (framed(PLAIN)[:-2], None),
    "LF only": (framed(PLAIN).replace(b"\r\n", b"\n"), None),
    "two chunks": (framed(PLAIN) * 2, None),
    "the last chunk": (b"0\r\n\r\n", None),
    "empty": (b"", None),
    "the size line alone": (b"%x\r\n" % len(PLAIN), None),
    "a finish chunk": (framed(VLLM.replace(b"null}]", b'"stop"}]') % b"x"), None),
    "[DONE]": (framed(b"data: [DONE]\n\n"), None),
}


@pytest.mark.parametrize("name", sorted(set(CHUNKS) - {"full"}))
@pytest.mark.parametrize("case", sorted(FRAMINGS))
def test_a_chunk_is_read_only_when_it_is_one_whole_chunk_of_one_delta(name: str, case: str) -> None:
    data, want = FRAMINGS[case]
    assert CHUNKS[name](data) == want
    got = CHUNKS[name](framed(data)) if data else None  # a chunk inside a chunk
    assert got is None


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.text(max_size=8))
json_like = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
keys = st.sampled_from(
    ["id", "object", "created", "model", "choices", "usage", "error", "index", "delta",
     "content", "role", "finish_reason", "logprobs", "reasoning", "tool_calls", "text"]
)  # fmt: skip
shaped = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.one_of(
        shaped,
        st.fixed_dictionaries(
            {"choices": st.lists(st.fixed_dictionaries({"delta": shaped}), min_size=1)},
            optional={
                "object": st.sampled_from(["error", "chat.completion.chunk"]),
                "id": json_like,
            },
        ),
        st.fixed_dictionaries(
            {
                "choices": st.just([]),
                "usage": st.dictionaries(
                    st.sampled_from(["prompt_tokens", "completion_tokens", "total_tokens", "x"]),
                    st.one_of(
                        st.integers(-3, 2**32),
                        st.sampled_from([2**31 - 1, 2**31, 0]),
                        st.floats(),
                        st.none(),
                        st.booleans(),
                    ),
                ),
            },
            optional={"object": st.sampled_from(["error", "x"]), "model": json_like},
        ),
        st.fixed_dictionaries(
            {"choices": st.just([{"index": 0, "delta": {"content": "x"}}])},
            optional={"finish_reason": json_leaf, "model": json_like},
        ),
    ),
    st.booleans(),
    st.booleans(),
)
def test_any_json_is_declined_or_read_as_the_full_path_reads_it(
    obj: Any, compact: bool, ascii_only: bool
) -> None:
    sep = (",", ":") if compact else (", ", ": ")
    body = b"data: " + json.dumps(obj, separators=sep, ensure_ascii=ascii_only).encode() + b"\n\n"
    for read in PATHS.values():
        got = read(body)
        if got is not None:
            assert full_path(body) == Chunk(text=got)
    for end in FINISHES.values():
        pair = end(body)
        if pair is not None:
            assert full_path(body) == Chunk(text=pair[0], finish_reason=pair[1])
    for usage in USAGES.values():
        counts = usage(body)
        if counts is not None:
            assert full_path(body) == Chunk(prompt_tokens=counts[0], completion_tokens=counts[1])


# ---- whole streams through StreamConn ----------------------------------------------------


def http_answer(sse: bytes, sizes: list[int]) -> bytes:
    """``sse`` as a chunked HTTP/1.1 answer, cut into HTTP chunks of ``sizes`` (cycled)."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    parts, at = [head], 0
    for size in itertools.cycle(sizes):
        if at >= len(sse):
            break
        piece = sse[at : at + size]
        parts.append(b"%x\r\n%s\r\n" % (len(piece), piece))
        at += size
    return b"".join(parts) + b"0\r\n\r\n"


def events_as_chunks(sse: bytes) -> list[int]:
    """HTTP chunk sizes that put one SSE event in each (as vLLM and the stream lab send)."""
    sizes, at = [], 0
    while at < len(sse):
        end = sse.find(b"\n\n", at)
        end = len(sse) if end < 0 else end + 2
        sizes.append(end - at)
        at = end
    return sizes


def chunk_ends(answer: bytes) -> list[int]:
    """Where each HTTP chunk of a chunked ``answer`` ends (after its CRLF)."""
    ends, at = [], answer.find(b"\r\n\r\n") + 4
    while (nl := answer.find(b"\r\n", at)) > 0 and (size := int(answer[at:nl], 16)):
        at = nl + 2 + size + 2
        ends.append(at)
    return ends


def drive(
    read: Any, answer: bytes, cuts: list[int], monkeypatch: pytest.MonkeyPatch, chunk: Any = None
) -> Any:
    """The record (and the stream's notes) one answer, read in pieces at ``cuts``, leaves.

    ``read`` (and ``chunk``) stand for sse_fast's content (and chunk); with ``read`` the
    full path's, every event goes through the SSE parser.
    """
    clock = itertools.count(1_000, 1_000)
    monkeypatch.setattr(http_conn, "now_ns", lambda: next(clock))
    monkeypatch.setattr(http_stream, "now_ns", lambda: next(clock))
    monkeypatch.setattr(http_stream, "fast_content", read)
    monkeypatch.setattr(http_stream, "fast_chunk", chunk or _declined)
    name = next(k for k, v in PATHS.items() if v is getattr(read, "read", read))
    monkeypatch.setattr(http_stream, "fast_finish", FINISHES[name])
    monkeypatch.setattr(http_stream, "fast_usage", USAGES[name])
    if read is _declined:
        monkeypatch.setattr(http_stream, "is_one_event", lambda body: False)
    pool, _ = hand_pool(streaming=True)
    block = RecordBlock(0, 1)
    conn = http_stream.StreamConn(pool)
    conn.connection_made(FakeWire())
    conn.block, conn.j = block, 0
    last = 0
    for cut in [*sorted(set(cuts)), len(answer)]:
        if cut > last:
            conn.data_received(answer[last:cut])
            last = cut
    conn.connection_lost(None)
    columns = {
        name: list(getattr(block, name))
        for name in block.__slots__
        if name not in ("base", "rows", "chunk_times")
    }
    book = pool.owner.answers
    return columns, dict(block.chunk_times), book.usage_rows, dict(book.server_notes)


@pytest.mark.parametrize("path", SSE_FILES, ids=[p.stem for p in SSE_FILES])
def test_fixtures_give_identical_records_on_every_path(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sse = path.read_bytes()
    answer = http_answer(sse, events_as_chunks(sse))
    records = [drive(PATHS[k], answer, [], monkeypatch, CHUNKS[k]) for k in PATHS]
    assert all(r == records[0] for r in records)
    # One read per HTTP chunk, as on a live connection: where the stream has plain
    # deltas, the fast paths are taken (and still change nothing).
    at = [i for i in range(len(answer)) if answer.startswith(b"\r\n", i)]
    taken: list[str] = []

    def counted(name: str, read: Any) -> Any:
        def wrapped(body: bytes) -> str | None:
            out = read(body)
            if out is not None:
                taken.append(name)
            return out

        wrapped.read = read  # type: ignore[attr-defined]  # drive() finds the path by it
        return wrapped

    fast = [
        drive(counted(k, read), answer, at, monkeypatch, counted(k + " chunk", CHUNKS[k]))
        for k, read in PATHS.items()
    ]
    assert all(r == fast[0] for r in fast)
    sizes = itertools.accumulate(events_as_chunks(sse), initial=0)
    pieces = [sse[a:b] for a, b in itertools.pairwise(sizes)]
    for name, read in PATHS.items():
        if any(read(p) is not None for p in pieces):
            assert name in taken
    # Read one HTTP chunk per read, as a live stream arrives, and plain deltas after
    # the first skip the HTTP parser on the paths that have a chunk reader.
    del taken[:]
    by_chunk = [
        drive(PATHS[k], answer, chunk_ends(answer), monkeypatch, counted(k + " chunk", CHUNKS[k]))
        for k in PATHS
    ]
    assert all(r == by_chunk[0] for r in by_chunk)
    for name, read in PATHS.items():
        if name != "full" and sum(read(p) is not None for p in pieces) >= 3:
            assert name + " chunk" in taken


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_chunkings_give_identical_records(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(SSE_FILES))
    sse = path.read_bytes()
    if data.draw(st.booleans()):
        sizes = events_as_chunks(sse)
    else:
        sizes = data.draw(st.lists(st.integers(1, 400), min_size=1, max_size=8))
    answer = http_answer(sse, sizes)
    cuts = data.draw(st.lists(st.integers(0, len(answer)), max_size=30))
    if data.draw(st.booleans()):  # cut at HTTP chunk ends too: the chunk reader's case
        cuts += chunk_ends(answer)
    with pytest.MonkeyPatch.context() as mp:
        records = [drive(PATHS[k], answer, cuts, mp, CHUNKS[k]) for k in PATHS]
    assert all(r == records[0] for r in records), path.name


def test_the_switch_forces_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILWISE_PURE_PYTHON", "1")
    assert sse_fast._pick() == (
        sse_fast.content_py,
        sse_fast.finish_py,
        sse_fast.usage_py,
        sse_fast.chunk_py,
        "python (TAILWISE_PURE_PYTHON)",
    )
    monkeypatch.setenv("TAILWISE_PURE_PYTHON", "0")
    *_, name = sse_fast._pick()
    assert name == ("compiled" if COMPILED is not None else "python (no compiled module)")
