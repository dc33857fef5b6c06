"""``--api openai-responses``: the OpenAI Responses API, read from vLLM's events and the demo's.

The demo LLM server answers ``/v1/responses`` with the chat law, so loopback runs here
check real streams and whole answers: the tokens the summary counts are the server's
usage, TTFT precedes the answer's end, and the compiled stream reader (which knows chat
chunks only) leaves the records as the Python reader makes them. A vLLM transcript
(tests/fixtures/responses) is read to its tokens, usage and first-token event, whole and
cut anywhere; small asyncio servers send what a broken or hostile server would.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tailwise
from tailwise.loadgen.llm import apis, openai
from tailwise.loadgen.llm.apis.responses import KIND
from tailwise.loadgen.llm.stream import MALFORMED, MAX_TOKEN_COUNT, Chunk
from tailwise.loadgen.prepare import preflight
from tailwise.loadgen.transport.sse import SSEParser
from tailwise.records import read_jsonl
from tests.clirun import run_cli
from tests.reliability.conftest import Answer, raw_servers

FIXTURES = Path(__file__).parent.parent / "fixtures" / "responses"


@pytest.fixture(scope="module")
def raw() -> Iterator[Callable[[Answer], str]]:
    with raw_servers() as start:
        yield start


# -- reading events ------------------------------------------------------------------------


def _events(body: bytes, cuts: list[int]) -> list[tuple[str, str]]:
    parser, events, at = SSEParser(), [], 0
    for cut in [*sorted(cuts), len(body)]:
        events += parser.feed(body[at:cut])
        at = cut
    return events


def _facts(body: bytes, cuts: list[int]) -> dict[str, Any]:
    chunks = [KIND.classify_event(data, etype) for etype, data in _events(body, cuts)]
    ends = [c for c in chunks if c.finish_reason]
    end = ends[-1] if ends else Chunk()
    first_text = next(i for i, c in enumerate(chunks) if c.text)
    return {
        "events": len(chunks),
        "content": "".join(c.text for c in chunks),
        "content_chunks": sum(1 for c in chunks if c.text),
        "reasoning": "".join(c.reasoning for c in chunks),
        "reasoning_chunks": sum(1 for c in chunks if c.reasoning),
        "first_content_event": first_text,
        "finish_reason": end.finish_reason,
        "usage": {
            "input_tokens": end.prompt_tokens,
            "output_tokens": end.completion_tokens,
            "reasoning_tokens": end.reasoning_tokens,
            "cached_tokens": end.cached_tokens,
        },
        "error": next((c.error for c in chunks if c.error), None),
    }


def test_the_vllm_transcript_reads_to_its_tokens_usage_and_first_token_event() -> None:
    body = (FIXTURES / "vllm_reasoning.sse").read_bytes()
    want = json.loads((FIXTURES / "vllm_reasoning.json").read_text())
    del want["source"]
    assert _facts(body, []) == want
    # TTFT is the first output_text.delta: 13 reasoning and bookkeeping events come before it
    events = _events(body, [])
    assert events[want["first_content_event"]][0] == "response.output_text.delta"
    assert all(e != "response.output_text.delta" for e, _ in events[: want["first_content_event"]])
    rng = random.Random(44)
    for _ in range(20):  # the same however the network cuts it
        assert _facts(body, rng.sample(range(len(body)), 8)) == want


def test_the_type_in_the_data_decides_and_the_event_name_stands_in_for_it() -> None:
    delta = {"type": "response.output_text.delta", "delta": "hi"}
    assert KIND.classify_event(json.dumps(delta), "message").text == "hi"  # no event: line
    unnamed = json.dumps({"delta": "hi"})
    assert KIND.classify_event(unnamed, "response.output_text.delta").text == "hi"
    assert KIND.classify_event(unnamed, "message") == Chunk()  # a part with no token
    summary = {"type": "response.reasoning_summary_text.delta", "delta": "think"}
    assert KIND.classify_event(json.dumps(summary)).reasoning == "think"
    args = {"type": "response.function_call_arguments.delta", "delta": '{"a":'}
    assert KIND.classify_event(json.dumps(args)).tool_args == '{"a":'
    assert KIND.classify_event("[DONE]").done  # where a proxy adds one


def test_the_end_events_say_how_the_answer_finished() -> None:
    usage = {"input_tokens": 5, "output_tokens": 7}
    done = {"type": "response.completed", "response": {"status": "completed", "usage": usage}}
    c = KIND.classify_event(json.dumps(done))
    assert (c.finish_reason, c.prompt_tokens, c.completion_tokens) == ("stop", 5, 7)
    cut = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "usage": usage,
    }
    c = KIND.classify_event(json.dumps({"type": "response.incomplete", "response": cut}))
    assert (c.finish_reason, c.completion_tokens) == ("length", 7)
    cut["incomplete_details"] = {"reason": "content_filter"}
    c = KIND.classify_event(json.dumps({"type": "response.incomplete", "response": cut}))
    assert c.finish_reason == "incomplete" and c.error is None
    # no usage (or a response that is not an object): the end, counted by the client
    c = KIND.classify_event(json.dumps({"type": "response.completed", "response": "x"}))
    assert (c.finish_reason, c.completion_tokens) == ("stop", None)


@pytest.mark.parametrize(
    ("data", "event", "error"),
    [
        ('{"type":"error","code":"server_error","message":"engine died"}', "error", "engine died"),
        ('{"type":"error","error":{"message":"overloaded"}}', "error", "overloaded"),
        ('{"message":"x"}', "error", "x"),
        (
            '{"type":"response.failed","response":{"status":"failed",'
            '"error":{"code":"server_error","message":"boom"}}}',
            "response.failed",
            "boom",
        ),
        ('{"type":"response.failed","response":null}', "response.failed", "response failed"),
        ('{"type":"error","message":' + json.dumps("m" * 10_000) + "}", "error", "m" * 500),
        ("{not json", "response.output_text.delta", MALFORMED),
        ("[1, 2]", "message", MALFORMED),
        ('{"type":"response.output_text.delta","delta":' + "[" * 100_000, "message", MALFORMED),
        (
            json.dumps(
                {"type": "response.completed", "response": {"usage": {"output_tokens": -1}}}
            ),
            "response.completed",
            MALFORMED,
        ),
        (
            json.dumps(
                {
                    "type": "response.completed",
                    "response": {"usage": {"input_tokens": MAX_TOKEN_COUNT + 1}},
                }
            ),
            "response.completed",
            MALFORMED,
        ),
    ],
)
def test_errors_and_hostile_events_are_classified_never_raised(
    data: str, event: str, error: str
) -> None:
    assert KIND.classify_event(data, event).error == error


def test_a_whole_answer_is_the_response_object() -> None:
    whole = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "error": None,  # present and null in every OpenAI response: not an error
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
        "usage": {
            "input_tokens": 9,
            "output_tokens": 4,
            "input_tokens_details": {"cached_tokens": 8},
            "output_tokens_details": {"reasoning_tokens": 2},
        },
    }
    c = KIND.classify_answer(json.dumps(whole).encode())
    assert (c.prompt_tokens, c.completion_tokens, c.cached_tokens, c.reasoning_tokens) == (
        9,
        4,
        8,
        2,
    )
    assert c.error is None and c.finish_reason == "stop"
    failed = {**whole, "status": "failed", "error": {"code": "server_error", "message": "oom"}}
    assert KIND.classify_answer(json.dumps(failed).encode()).error == "oom"
    assert KIND.classify_answer(b'{"error":{"message":"bad input"}}').error == "bad input"
    assert KIND.classify_answer(b'{"object":"error","message":"old vllm"}').error == "old vllm"
    queued = {**whole, "status": "queued"}
    assert KIND.classify_answer(json.dumps(queued).encode()).error == "response status queued"
    assert KIND.classify_answer(b'{"status":7}').error == "response status <int>"
    assert KIND.classify_answer(b"<html>").error == MALFORMED
    no_status = {k: v for k, v in whole.items() if k != "status"}
    assert KIND.classify_answer(json.dumps(no_status).encode()).completion_tokens == 4
    no_usage = {k: v for k, v in whole.items() if k != "usage"}
    c = KIND.classify_answer(json.dumps(no_usage).encode())
    assert c.error is None and c.completion_tokens is None


def test_bodies_carry_the_input_and_the_output_budget() -> None:
    (text,) = openai.bodies("openai-responses", "m", [5], ["a b"], True, {})
    assert json.loads(text) == {
        "model": "m",
        "input": "a b",
        "max_output_tokens": 5,
        "stream": True,
    }
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    ]
    (chat,) = openai.bodies("openai-responses", "m", [3], [messages], False, {"seed": 1})
    assert json.loads(chat) == {
        "model": "m",
        "input": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
        ],
        "max_output_tokens": 3,
        "stream": False,
        "seed": 1,
    }
    kind = apis.get("openai-responses")
    assert (kind.path, kind.streams, kind.budget_field) == (
        "/v1/responses",
        True,
        "max_output_tokens",
    )
    assert (kind.sessions, kind.calibrate_as) == (False, "llm")


# -- loopback runs against the demo server ----------------------------------------------


def _cli_run(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *more: str
) -> tuple[dict[str, Any], Any]:
    out = tmp_path / "r"
    argv = ["run", url, "--api", "openai-responses", "--model", "tailwise-demo"]
    argv += ["--rate", "40/s", "--requests", "24", "--max-tokens", "6", "--input-tokens", "12"]
    argv += ["--server-metrics", "off", "--out", str(out), *more]
    code, _, err = run_cli(argv, capsys)
    assert code in (0, 5), err  # pass, or a verdict 24 requests cannot decide
    return json.loads((out / "summary.json").read_text()), read_jsonl(out / "records.jsonl")


def test_a_streamed_run_counts_the_servers_tokens_and_times_each_token(
    llm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s, r = _cli_run(llm, tmp_path, capsys)
    assert s["target"].endswith("/v1/responses")
    assert s["requests"]["ok"] == s["requests"]["scheduled"] == 24
    assert s["preflight"]["status"] == 200  # max_output_tokens 16, answered as a stream
    assert s["tokens_counted_by"] == "server usage"
    assert s["tokens"]["output_total"] == 6 * 24
    # the demo counts the prompt's words: 12 words and the run's nonce
    assert set(r.input_tokens.tolist()) == {13} and s["tokens"]["input_total"] == 13 * 24
    assert s["ttft_ms"]["count"] == 24 and s["itl_ms"]["count"] == 24 * 5  # 6 deltas each
    assert (r.first_token_ns > r.sent_ns).all() and (r.first_token_ns < r.done_ns).all()
    assert all(len(times) == 6 for times in r.chunk_times)


def test_a_whole_answer_run_counts_the_servers_tokens(
    llm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s, r = _cli_run(llm, tmp_path, capsys, "--no-stream")
    assert s["requests"]["ok"] == 24
    assert s["tokens"]["output_total"] == 6 * 24 and s["tokens"]["input_total"] == 13 * 24
    assert s["ttft_ms"] is None and (r.first_token_ns < 0).all()  # no stream: no token times
    assert (r.done_ns > r.sent_ns).all()


def test_without_the_compiled_reader_the_records_are_the_same(
    llm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled reader declines every Responses event (none is a chat chunk): the
    Python path reads them all, so turning the reader off changes nothing counted."""
    _, with_reader = _cli_run(llm, tmp_path / "a", capsys)
    monkeypatch.setenv("TAILWISE_STREAM_READER", "0")
    _, without = _cli_run(llm, tmp_path / "b", capsys)
    for column in ("input_tokens", "output_tokens", "error"):
        assert getattr(with_reader, column).tolist() == getattr(without, column).tolist()
    assert [len(t) for t in with_reader.chunk_times] == [len(t) for t in without.chunk_times]


# -- broken and hostile servers ----------------------------------------------------------


def _named(*events: tuple[str, str]) -> bytes:
    return "".join(f"event: {name}\ndata: {data}\n\n" for name, data in events).encode()


def _serve(body: bytes, status: bytes = b"200 OK", ctype: bytes = b"text/event-stream") -> Answer:
    answer = b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        ctype,
        len(body),
        body,
    )

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await r.readexactly(int(line.split(b":")[1]))
            w.write(answer)
            await w.drain()

    return serve


def _run(url: str, tmp_path: Path, name: str, stream: bool = True) -> tuple[dict[str, Any], Any]:
    out = tmp_path / name
    res = tailwise.run(
        url,
        rate="20/s",
        requests=4,
        api="openai-responses",
        model="m",
        stream=stream,
        out=str(out),
        progress=False,
        server_metrics="off",
    )
    return res.summary, read_jsonl(out / "records.jsonl")


CREATED = ("response.created", '{"type":"response.created","response":{"status":"in_progress"}}')


def _delta(text: str) -> tuple[str, str]:
    return (
        "response.output_text.delta",
        json.dumps({"type": "response.output_text.delta", "delta": text}),
    )


def _completed(usage: object) -> tuple[str, str]:
    response = {"status": "completed", "usage": usage}
    return ("response.completed", json.dumps({"type": "response.completed", "response": response}))


def test_the_vllm_transcript_served_is_booked_with_its_usage(
    raw: Callable[[Answer], str], tmp_path: Path
) -> None:
    body = (FIXTURES / "vllm_reasoning.sse").read_bytes()
    s, r = _run(raw(_serve(body)), tmp_path, "vllm")
    assert s["requests"]["ok"] == 4 and s["tokens_counted_by"] == "server usage"
    assert r.output_tokens.tolist() == [17] * 4 and r.input_tokens.tolist() == [18] * 4
    assert r.reasoning_tokens.tolist() == [10] * 4  # the server's count, not the 9 deltas
    assert (r.first_reasoning_ns >= 0).all() and (r.first_token_ns >= r.first_reasoning_ns).all()
    assert [len(t) for t in r.chunk_times] == [7] * 4  # answer deltas only


@pytest.mark.parametrize(
    ("name", "events", "kind"),
    [
        (
            "failed",
            (
                CREATED,
                _delta("a"),
                (
                    "response.failed",
                    '{"type":"response.failed","response":{"status":"failed",'
                    '"error":{"code":"server_error","message":"engine died"}}}',
                ),
            ),
            "stream_error",
        ),
        ("error", (CREATED, ("error", '{"type":"error","message":"overloaded"}')), "stream_error"),
        ("not_json", (CREATED, ("response.output_text.delta", "not json")), "malformed_chunk"),
        (
            "nested",
            (CREATED, ("response.output_text.delta", '{"delta":' + "[" * 200_000)),
            "malformed_chunk",
        ),
        ("absurd_usage", (_delta("a"), _completed({"output_tokens": 10**30})), "malformed_chunk"),
        ("cut", (CREATED, _delta("a"), _delta("b")), "truncated"),
        ("huge_delta", (CREATED, _delta("x" * (5 << 20))), "too_large"),
    ],
)
def test_a_broken_or_hostile_stream_is_an_error_of_its_kind(
    raw: Callable[[Answer], str],
    tmp_path: Path,
    name: str,
    events: tuple[tuple[str, str], ...],
    kind: str,
) -> None:
    s, _ = _run(raw(_serve(_named(*events))), tmp_path, name)
    assert s["requests"]["errors"] == {kind: 4}, name
    assert s["requests"]["accounted"]


def test_a_stream_without_usage_is_counted_by_its_deltas(
    raw: Callable[[Answer], str], tmp_path: Path
) -> None:
    body = _named(CREATED, _delta("a"), _delta("b"), _delta("c"), _completed(None))
    s, r = _run(raw(_serve(body)), tmp_path, "no_usage")
    assert s["requests"]["ok"] == 4 and s["tokens_counted_by"] != "server usage"
    assert r.output_tokens.tolist() == [3] * 4


def test_an_http_400_is_booked_as_one(raw: Callable[[Answer], str], tmp_path: Path) -> None:
    body = b'{"error":{"message":"max_output_tokens too large","type":"invalid_request_error"}}'
    s, r = _run(raw(_serve(body, b"400 Bad Request", b"application/json")), tmp_path, "400")
    assert s["requests"]["errors"] == {"http_4xx": 4}
    assert r.status.tolist() == [400] * 4


def test_a_whole_answer_that_failed_is_a_stream_error(
    raw: Callable[[Answer], str], tmp_path: Path
) -> None:
    failed = {"object": "response", "status": "failed", "error": {"message": "boom"}}
    body = json.dumps(failed).encode()
    s, _ = _run(raw(_serve(body, ctype=b"application/json")), tmp_path, "whole", stream=False)
    assert s["requests"]["errors"] == {"stream_error": 4}


# -- preflight -------------------------------------------------------------------------


def test_preflight_refuses_an_error_event_and_a_400(
    raw: Callable[[Answer], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = _named(("error", '{"type":"error","code":"server_error","message":"no GPU left"}'))
    nested_400 = b"[" * 60_000  # a hostile error page: no traceback, one line
    for name, url, said in (
        ("error", raw(_serve(error)), "with an error: no GPU left"),
        ("400", raw(_serve(nested_400, b"400 Bad Request", b"application/json")), "answered 400"),
    ):
        argv = ["run", url, "--api", "openai-responses", "--model", "m", "--rate", "9/s"]
        argv += ["--requests", "2", "--server-metrics", "off"]
        code, _, err = run_cli([*argv, "--out", str(tmp_path / name)], capsys)
        assert code == preflight.EXIT_REFUSED, err
        (line,) = err.strip().splitlines()
        assert line.startswith("tailwise: preflight: POST ") and said in line, line


def test_preflight_asks_for_the_least_budget_openai_accepts(
    raw: Callable[[Answer], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[dict[str, Any]] = []
    answer = _named(_delta("a"), _completed({"input_tokens": 1, "output_tokens": 1}))

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            seen.append(json.loads(await r.readexactly(length)))
            w.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer)
            )
            await w.drain()

    argv = ["run", raw(serve), "--api", "openai-responses", "--model", "m", "--rate", "9/s"]
    argv += ["--requests", "3"]
    argv += ["--max-tokens", "9", "--server-metrics", "off", "--out", str(tmp_path / "p")]
    code, _, err = run_cli(argv, capsys)
    assert code in (0, 5), err
    # 16, the least OpenAI accepts ("Expected a value >= 16, but got 1"), not 1
    assert seen[0]["max_output_tokens"] == 16 and seen[0]["stream"] is True
    assert [b["max_output_tokens"] for b in seen[1:]] == [9] * 3
