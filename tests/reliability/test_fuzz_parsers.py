"""Hostile bytes, fuzzed: the parsers at tailwise's boundaries never let an exception out.

A server controls every byte of its answer and a user every byte of a scenario
file or a saved summary. Over arbitrary input (hypothesis, a bounded number of
examples so this runs in seconds):

* the HTTP response head and body handling (httptools behind :class:`Conn`) and
  the LLM stream on top of it (:class:`StreamConn`): bytes in any split, then a
  close; the request is settled exactly once with a known error kind, and
  nothing raises;
* the SSE framing (:class:`SSEParser`) and the chunk classifier: no exception,
  token counts are whole, non-negative and bounded;
* YAML and scenario text (:func:`safe_yaml`, :func:`parse_scenario`), SLO specs
  and saved summaries (:func:`check_summary`): a result or a one-line
  :class:`BadInput`, nothing else.

``pytest -m long`` runs the same properties with fifty times the examples.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailwise.errors import BadInput
from tailwise.files import safe_yaml
from tailwise.loadgen.llm.stream import classify
from tailwise.loadgen.transport.http_conn import Conn, ends_at_close
from tailwise.loadgen.transport.http_stream import StreamConn
from tailwise.loadgen.transport.sse import SSEParser
from tailwise.metrics.shape import check_summary
from tailwise.metrics.slo import parse_slo
from tailwise.records import ERROR_KINDS, RecordBlock
from tailwise.sim.scenario import parse_scenario
from tests.wire import FakeWire, hand_pool

pytestmark = pytest.mark.reliability
QUICK = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=4000, deadline=None, suppress_health_check=list(HealthCheck))


def one_line(call: Any) -> Any:
    try:
        return call()
    except BadInput as exc:
        assert "\n" not in str(exc), str(exc)
        return None


# ---- the HTTP answer ---------------------------------------------------------------------

HEAD_PIECES = [
    b"HTTP/1.1 200 OK\r\n", b"HTTP/1.0 200 OK\r\n", b"HTTP/1.1 101 Switching Protocols\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 503 x\r\n", b"HTTP/9.9 999 ?\r\n",
    b"Content-Length: 5\r\n", b"Content-Length: -1\r\n",
    b"Content-Length: 99999999999999999999\r\n",
    b"Transfer-Encoding: chunked\r\n", b"Content-Type: text/event-stream\r\n",
    b"Connection: close\r\n", b"Upgrade: websocket\r\n", b"\r\n", b"\n", b"\r\n\r\n",
    b"5\r\nhello\r\n", b"0\r\n\r\n", b"ffffffffffffffff\r\n", b"hello", b"\x00\xff",
    b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", b"data: [DONE]\n\n",
    b"data: {\"usage\":{\"completion_tokens\":99999999999999999999999}}\n\n",
    b"data: {\"usage\":{\"completion_tokens\":-3}}\n\n", b"data:\n", b"event: error\n",
    b": comment\n", b"\r",
]  # fmt: skip
answers = st.lists(
    st.one_of(st.sampled_from(HEAD_PIECES), st.binary(max_size=24)), min_size=0, max_size=12
)


def _drive(conn_type: type[Conn], pieces: list[bytes], streaming: bool) -> None:
    pool, settled = hand_pool(streaming=streaming)
    block = RecordBlock(0, 4)
    conn = conn_type(pool)
    conn.connection_made(FakeWire())
    conn.block, conn.j = block, 0
    for piece in pieces:
        conn.data_received(piece)
        if conn.transport.aborted:
            break
    conn.connection_lost(None)
    assert settled == [0]  # exactly once, whatever the server sent
    assert 0 <= block.error[0] < len(ERROR_KINDS)


@QUICK
@given(answers)
def test_any_http_answer_settles_the_request_once(pieces: list[bytes]) -> None:
    _drive(Conn, pieces, streaming=False)


@QUICK
@given(answers)
def test_any_llm_stream_settles_the_request_once(pieces: list[bytes]) -> None:
    _drive(StreamConn, pieces, streaming=True)


@QUICK
@given(
    st.one_of(
        st.none(), st.binary(max_size=64), st.lists(st.sampled_from(HEAD_PIECES)).map(b"".join)
    )
)
def test_ends_at_close_is_total(head: bytes | None) -> None:
    assert ends_at_close(head) in (True, False)


# ---- SSE and chunks ----------------------------------------------------------------------

SSE_PIECES = [b"data:", b"data: ", b"event:", b"id:", b"retry:", b":", b"\n", b"\r", b"\r\n",
              b"[DONE]", b"{", b"}", b"\xef\xbb\xbf", b"\xff", b"x" * 50]  # fmt: skip


@QUICK
@given(st.lists(st.one_of(st.sampled_from(SSE_PIECES), st.binary(max_size=16)), max_size=30))
def test_sse_parser_takes_any_bytes(pieces: list[bytes]) -> None:
    parser = SSEParser()
    for piece in pieces:
        for kind, data in parser.feed(piece):
            assert isinstance(kind, str) and isinstance(data, str)
        assert parser.pending_bytes >= 0
    assert parser.close() in (True, False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=10,
)
usage_like = st.fixed_dictionaries(
    {},
    optional={
        "usage": st.dictionaries(
            st.sampled_from(["completion_tokens", "prompt_tokens", "total_tokens"]), json_values
        ),
        "choices": st.lists(
            st.dictionaries(
                st.sampled_from(["delta", "text", "finish_reason", "index"]), json_values
            ),
            max_size=2,
        ),
        "error": json_values,
        "token": json_values,
        "content": json_values,
        "stop": json_values,
    },
)


@QUICK
@given(
    st.one_of(usage_like.map(json.dumps), st.text(max_size=40)),
    st.sampled_from(["message", "error", ""]),
)
def test_chunk_classifier_is_total_and_counts_are_sane(data: str, event: str) -> None:
    chunk = classify(data, event)
    for count in (chunk.prompt_tokens, chunk.completion_tokens):
        assert count is None or (isinstance(count, int) and 0 <= count < 2**63)


# ---- files a user writes -----------------------------------------------------------------

YAML_PIECES = ["&a ", "*a", "&b ", "*b", "[", "]", "{", "}", ": ", ", ", "- ", "\n", "  ",
               "<<: ", "!!python/object:os.system ", "name", "replicas", "arrival", "1e9",
               "'", '"', "#", "---\n", "..."]  # fmt: skip
yaml_texts = st.lists(st.one_of(st.sampled_from(YAML_PIECES), st.text(max_size=5)), max_size=30)


@QUICK
@given(yaml_texts.map("".join))
def test_safe_yaml_gives_data_or_one_line(text: str) -> None:
    with contextlib.suppress(yaml.YAMLError):  # the file's own syntax: load_scenario's job
        one_line(lambda: safe_yaml(text, "SCENARIO", "s.yaml"))


SCENARIO_KEYS = "name arrival service replicas servers fanout stragglers failures autoscale delay"
SCENARIO_KEYS += " slo stages batching hedge"


@QUICK
@given(st.dictionaries(st.sampled_from(SCENARIO_KEYS.split()), json_values))
def test_scenarios_give_a_model_or_one_line(data: dict[str, Any]) -> None:
    one_line(lambda: parse_scenario(data))


@QUICK
@given(st.text(max_size=30))
def test_slo_specs_give_an_slo_or_one_line(text: str) -> None:
    one_line(lambda: parse_slo(text))


summary_like = st.fixed_dictionaries(
    {},
    optional={
        k: json_values
        for k in (
            "requests",
            "window",
            "rates",
            "latency_ms",
            "tokens",
            "verdict",
            "slos",
            "target",
        )
    },
)


@QUICK
@given(st.one_of(summary_like, json_values))
def test_saved_summaries_are_checked_or_one_line(doc: Any) -> None:
    one_line(lambda: check_summary(doc, "DIR summary.json"))


# ---- the same, longer --------------------------------------------------------------------


@pytest.mark.long
@LONG
@given(answers)
def test_long_http_answers(pieces: list[bytes]) -> None:
    _drive(Conn, pieces, streaming=False)
    _drive(StreamConn, pieces, streaming=True)


@pytest.mark.long
@LONG
@given(yaml_texts.map("".join), st.text(max_size=30))
def test_long_files(text: str, spec: str) -> None:
    with contextlib.suppress(yaml.YAMLError):
        one_line(lambda: safe_yaml(text, "SCENARIO", "s.yaml"))
    one_line(lambda: parse_slo(spec))
