"""API kinds behind one protocol: the built-in three, and a kind a test adds in one module.

The test kind below (``test-echo``) is what a new API costs: one class that builds its
body and reads its answer, and one :func:`tailwise.loadgen.llm.apis.register` call. A real
loopback run drives it end to end through the CLI: the URL gets its path, the server
receives its bodies, the summary's token totals come from its own usage field names.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tailwise.errors import BadInput
from tailwise.loadgen.llm import apis, openai
from tailwise.loadgen.llm import stream as llm_stream
from tailwise.loadgen.llm.apis import Prompt, prompt_text
from tailwise.loadgen.llm.apis.kind import CalibrateModel
from tests.clirun import run_cli
from tests.wire import ThreadedServer


class Echo:
    """A tiny non-streaming API: ``{"words", "budget"}`` in, ``{"result": {...}}`` out."""

    name = "test-echo"
    path = "/v1/echo"
    streams = False
    budget_field = ""
    preflight_budget = 0
    sessions = False
    calibrate_as: CalibrateModel = "http"
    classify_event = staticmethod(llm_stream.classify)

    def body(self, model: str, prompt: Prompt, max_tokens: int, stream: bool) -> dict[str, Any]:
        return {"model": model, "words": prompt_text(prompt), "budget": max_tokens}

    def classify_answer(self, body: bytes) -> llm_stream.Chunk:
        doc = json.loads(body)
        result = doc.get("result") if isinstance(doc, dict) else None
        if not isinstance(result, dict):
            return llm_stream.Chunk(error="no result")
        return llm_stream.Chunk(
            prompt_tokens=result["read"], completion_tokens=result["wrote"], finish_reason="stop"
        )


RESPONSES_USAGE = llm_stream.UsageFields(prompt="input_tokens", completion="output_tokens")


class Deltas:
    """A streaming API shaped like OpenAI's Responses: typed events, its own usage names."""

    name = "test-deltas"
    path = "/v1/deltas"
    streams = True
    budget_field = "budget"
    preflight_budget = 1
    sessions = False
    calibrate_as: CalibrateModel = "llm"

    def body(self, model: str, prompt: Prompt, max_tokens: int, stream: bool) -> dict[str, Any]:
        return {
            "model": model,
            "input": prompt_text(prompt),
            "budget": max_tokens,
            "stream": stream,
        }

    def classify_event(self, data: str, event_type: str = "message") -> llm_stream.Chunk:
        doc = json.loads(data)
        if doc["type"] == "delta":
            return llm_stream.Chunk(text=doc["delta"])
        return self.classify_answer(json.dumps(doc["response"]).encode())

    def classify_answer(self, body: bytes) -> llm_stream.Chunk:
        return llm_stream.classify_answer(body, RESPONSES_USAGE)


@pytest.fixture
def echo_kind() -> Iterator[apis.ApiKind]:
    kind = apis.register(Echo())
    try:
        yield kind
    finally:
        apis.unregister(kind.name)


@pytest.fixture
def deltas_kind() -> Iterator[apis.ApiKind]:
    kind = apis.register(Deltas())
    try:
        yield kind
    finally:
        apis.unregister(kind.name)


class EchoServer(ThreadedServer):
    """An HTTP/1.1 keep-alive server on 127.0.0.1, in a thread, answering as ``Echo`` reads."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict[str, Any]]] = []  # (path, body) per request

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length:\s*(\d+)", head)
            req = json.loads(await reader.readexactly(int(length.group(1)) if length else 0))
            self.seen.append((head.split(b" ")[1].decode(), req))
            if req.get("stream"):
                await self._stream(writer, req)
                continue
            result = {"read": len(req["words"].split()), "wrote": req["budget"]}
            body = json.dumps({"result": result}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        """``Deltas``' stream: one HTTP chunk per event, 2 ms apart, usage in the last."""
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        usage = {"input_tokens": len(req["input"].split()), "output_tokens": req["budget"]}
        events = [{"type": "delta", "delta": f"w{i} "} for i in range(req["budget"])]
        events.append({"type": "completed", "response": {"data": [], "usage": usage}})
        for event in events:
            data = b"data: %s\n\n" % json.dumps(event).encode()
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def test_a_registered_kind_runs_end_to_end_through_the_cli(
    echo_kind: apis.ApiKind, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = EchoServer()
    with server as url:
        argv = ["run", url, "--api", "test-echo", "--model", "m", "--rate", "50/s"]
        argv += ["--requests", "20", "--max-tokens", "3", "--input-tokens", "uniform:4-9"]
        argv += ["--server-metrics", "off", "--out", str(tmp_path / "r")]
        code, _, err = run_cli(argv, capsys)
    assert code in (0, 5), err  # pass, or a verdict 20 requests cannot decide
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["requests"]["ok"] == s["requests"]["scheduled"] == 20
    assert {path for path, _ in server.seen} == {"/v1/echo"}  # the kind's path, appended
    assert all(set(body) == {"model", "words", "budget"} for _, body in server.seen)
    measured = server.seen[-20:]  # after the preflight's request
    assert s["tokens"]["input_total"] == sum(len(b["words"].split()) for _, b in measured)
    assert s["tokens"]["output_total"] == 3 * 20  # read from the kind's own field names


def test_a_registered_streaming_kind_reads_its_own_events(
    deltas_kind: apis.ApiKind, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = EchoServer()
    with server as url:
        argv = ["run", url, "--api", "test-deltas", "--model", "m", "--rate", "50/s"]
        argv += ["--requests", "20", "--max-tokens", "4", "--input-tokens", "6"]
        argv += ["--no-unique-prompts", "--server-metrics", "off", "--out", str(tmp_path / "r")]
        code, _, err = run_cli(argv, capsys)
    assert code in (0, 5), err
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["requests"]["ok"] == s["requests"]["scheduled"] == 20
    assert {path for path, _ in server.seen} == {"/v1/deltas"}
    assert server.seen[0][1]["budget"] == 1  # the preflight's, in the kind's own field
    assert s["ttft_ms"]["count"] == 20 and s["itl_ms"]["count"] == 20 * 3  # 4 deltas each
    assert s["tokens_counted_by"] == "server usage"  # input_tokens / output_tokens
    assert (s["tokens"]["input_total"], s["tokens"]["output_total"]) == (6 * 20, 4 * 20)


def test_an_unknown_api_is_one_line_listing_the_known_kinds(
    echo_kind: apis.ApiKind, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["run", "http://127.0.0.1:9", "--api", "responses"], capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line == (
        "tailwise: error: --api: got 'responses', expected one of openai-chat, "
        "openai-completions, openai-embeddings, openai-responses, rerank, score, tei-rerank, "
        "test-echo"
    )


def test_the_registry_names_its_kinds_and_refuses_a_second_of_a_name(
    echo_kind: apis.ApiKind,
) -> None:
    assert apis.get("openai-chat").sessions and not apis.get("openai-completions").sessions
    assert [k.streams for k in apis.BUILTIN] == [True, True, False, True, False, False, False]
    assert apis.find("nope") is None and apis.find(None) is None
    with pytest.raises(ValueError, match="already registered"):
        apis.register(Echo())
    with pytest.raises(BadInput, match="--api: got 'nope'"):
        apis.get("nope")
    apis.unregister("openai-chat")  # a built-in kind stays
    assert "openai-chat" in apis.names()


@pytest.mark.parametrize(
    ("api", "stream", "expected"),
    [
        (
            "openai-chat",
            True,
            '{"model":"m","max_tokens":5,"stream":true,'
            '"messages":[{"role":"user","content":"a b"}],'
            '"stream_options":{"include_usage":true},"seed":1}',
        ),
        (
            "openai-chat",
            False,
            '{"model":"m","max_tokens":5,"stream":false,'
            '"messages":[{"role":"user","content":"a b"}],"seed":1}',
        ),
        (
            "openai-completions",
            True,
            '{"model":"m","max_tokens":5,"stream":true,"prompt":"a b",'
            '"stream_options":{"include_usage":true},"seed":1}',
        ),
        ("openai-embeddings", True, '{"model":"m","input":"a b","seed":1}'),
        (
            "openai-responses",
            True,
            '{"model":"m","input":"a b","max_output_tokens":5,"stream":true,"seed":1}',
        ),
    ],
)
def test_built_in_bodies_are_byte_for_byte_what_they_were(
    api: str, stream: bool, expected: str
) -> None:
    (body,) = openai.bodies(api, "m", [5], ["a b"], stream, {"seed": 1})
    assert body.decode() == expected


def test_usage_field_names_are_the_kinds_to_choose() -> None:
    answer = b'{"data":[],"usage":{"input_tokens":7,"output_tokens":2,"prompt_tokens":1}}'
    fields = llm_stream.UsageFields(prompt="input_tokens", completion="output_tokens")
    c = llm_stream.classify_answer(answer, fields)
    assert (c.prompt_tokens, c.completion_tokens) == (7, 2)
    assert llm_stream.classify_answer(answer).prompt_tokens == 1  # OpenAI's names by default
