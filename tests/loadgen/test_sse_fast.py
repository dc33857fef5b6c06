"""The fast path of a stream (compiled or pure Python) gives the records the full path gives.

:func:`tailwise.loadgen.sse_fast.content` may decline any piece (``None``: the full
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

from tailwise.loadgen import http_conn, http_stream, sse_fast
from tailwise.loadgen.http import HttpTransport
from tailwise.loadgen.llm_stream import Chunk, classify
from tailwise.loadgen.sse import SSEParser
from tailwise.loadgen.targets import parse_url
from tailwise.records import RecordBlock

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse"
SSE_FILES = sorted(FIXTURES.glob("*.sse"))
try:
    COMPILED: Any = importlib.import_module("tailwise.loadgen.sse_c").content
except ImportError:  # no compiler where this was installed: the Python path is still checked
    COMPILED = None


def _declined(body: bytes) -> None:
    return None


PATHS = {"full": _declined, "python": sse_fast.content_py}
if COMPILED is not None:
    PATHS["compiled"] = COMPILED


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


# ---- whole streams through StreamConn ----------------------------------------------------


class _Wire:
    aborted = closed = False

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def write(self, data: bytes) -> None:
        pass


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


def drive(read: Any, answer: bytes, cuts: list[int], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The record (and the stream's notes) one answer, read in pieces at ``cuts``, leaves."""
    clock = itertools.count(1_000, 1_000)
    monkeypatch.setattr(http_conn, "now_ns", lambda: next(clock))
    monkeypatch.setattr(http_stream, "fast_content", read)
    transport = HttpTransport(
        [parse_url("http://127.0.0.1:9/")],
        [[b"GET / HTTP/1.1\r\n\r\n"]],
        timeout_ns=10**10,
        connect_timeout_ns=10**9,
        streaming=True,
    )
    pool = transport._pools[0]
    pool.on_done = lambda block, j: None
    pool.start_waiting = lambda conn: None
    block = RecordBlock(0, 1)
    conn = http_stream.StreamConn(pool)
    conn.connection_made(_Wire())
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
    owner = pool.owner
    return columns, dict(block.chunk_times), owner.usage_rows, dict(owner.server_notes)


@pytest.mark.parametrize("path", SSE_FILES, ids=[p.stem for p in SSE_FILES])
def test_fixtures_give_identical_records_on_every_path(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sse = path.read_bytes()
    answer = http_answer(sse, events_as_chunks(sse))
    records = [drive(read, answer, [], monkeypatch) for read in PATHS.values()]
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

        return wrapped

    fast = [drive(counted(k, read), answer, at, monkeypatch) for k, read in PATHS.items()]
    assert all(r == fast[0] for r in fast)
    sizes = itertools.accumulate(events_as_chunks(sse), initial=0)
    pieces = [sse[a:b] for a, b in itertools.pairwise(sizes)]
    for name, read in PATHS.items():
        if any(read(p) is not None for p in pieces):
            assert name in taken


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
    with pytest.MonkeyPatch.context() as mp:
        records = [drive(read, answer, cuts, mp) for read in PATHS.values()]
    assert all(r == records[0] for r in records), path.name


def test_the_switch_forces_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILWISE_PURE_PYTHON", "1")
    assert sse_fast._pick() == (sse_fast.content_py, "python (TAILWISE_PURE_PYTHON)")
    monkeypatch.setenv("TAILWISE_PURE_PYTHON", "0")
    _, name = sse_fast._pick()
    assert name == ("compiled" if COMPILED is not None else "python (no compiled module)")
