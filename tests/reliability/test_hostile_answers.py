"""Answers a hostile or broken server sends: each becomes an error kind in the record, never an
exception, and the run ends with its summary (regressions from the red-team issue).

Each test serves scripted raw bytes from a small asyncio server on 127.0.0.1, in a
thread of the test process; every connection gets the same answer.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import tailwise
from tailwise.loadgen.execute import results
from tailwise.loadgen.llm.stream import MALFORMED, classify
from tailwise.loadgen.transport.sse import SSEParser
from tailwise.records import read_jsonl
from tests.reliability.conftest import Answer


async def _read_head(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))


def _sse(*events: str) -> bytes:
    body = "".join(f"data: {e}\n\n" for e in events).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + (
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


def _chunk(text: str) -> str:
    return json.dumps({"choices": [{"delta": {"content": text}}]})


def _llm_run(url: str, tmp_path: Path, name: str) -> dict[str, object]:
    res = tailwise.run(
        url,
        rate="20/s",
        requests=4,
        api="openai-chat",
        model="m",
        out=str(tmp_path / name),
        progress=False,
    )
    return res.summary


def test_an_absurd_or_negative_usage_is_a_malformed_chunk(
    raw_server: Callable[[Answer], str], tmp_path: Path
) -> None:
    for name, usage in (("huge", 99999999999999999999999), ("negative", -5)):
        answer = _sse(
            _chunk("hi"),
            json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": usage}}),
            "[DONE]",
        )

        async def serve(
            r: asyncio.StreamReader, w: asyncio.StreamWriter, a: bytes = answer
        ) -> None:
            while True:
                await _read_head(r)
                w.write(a)
                await w.drain()

        s = _llm_run(raw_server(serve) + "/v1", tmp_path, name)
        requests = s["requests"]
        assert isinstance(requests, dict)
        assert requests["errors"] == {"malformed_chunk": 4}, name  # no OverflowError, no crash
        assert requests["accounted"] and s["verdict"] == "fail"
    assert classify('{"usage": {"completion_tokens": 1e400}}').error is None  # a float: no count
    assert classify('{"choices": [], "usage": {"completion_tokens": 2147483648}}').error == (
        MALFORMED
    )


def test_lines_without_data_then_done_are_not_an_answer(
    raw_server: Callable[[Answer], str], tmp_path: Path
) -> None:
    body = b'{"id": 1}\n{"id": 2}\n\ndata: [DONE]\n\n'
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            await _read_head(r)
            w.write(answer)
            await w.drain()

    s = _llm_run(raw_server(serve) + "/v1", tmp_path, "plain")
    requests = s["requests"]
    assert isinstance(requests, dict)
    assert requests["errors"] == {"not_a_stream": 4} and requests["ok"] == 0


def test_an_unasked_protocol_switch_is_a_protocol_error(
    raw_server: Callable[[Answer], str], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_head(r)
        w.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n")
        w.write(b"Connection: Upgrade\r\n\r\n\x81\x05hello")
        await w.drain()
        await asyncio.sleep(0.5)

    res = tailwise.run(
        raw_server(serve) + "/x", rate="20/s", requests=4, out=str(tmp_path / "u"), progress=False
    )
    assert res.summary["requests"]["errors"] == {"protocol": 4}
    assert "Traceback" not in capfd.readouterr().err


def test_a_close_delimited_body_after_a_separate_head_is_complete(
    raw_server: Callable[[Answer], str], tmp_path: Path
) -> None:
    # HTTP/1.0 style: no Content-Length, the body ends when the server closes; the head
    # and the body arrive in separate reads (the old check looked at the first read only).
    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_head(r)
        w.write(b"HTTP/1.1 200 OK\r\n")
        await w.drain()
        await asyncio.sleep(0.02)
        w.write(b"Content-Type: text/plain\r\nConnection: close\r\n\r\n")
        await w.drain()
        await asyncio.sleep(0.02)
        w.write(b"a body that ends at the close")
        await w.drain()

    res = tailwise.run(
        raw_server(serve) + "/x", rate="20/s", requests=4, out=str(tmp_path / "c"), progress=False
    )
    s = res.summary
    assert s["requests"]["ok"] == 4 and s["requests"]["errors"] == {}, s["requests"]


def test_endless_empty_data_lines_are_bounded() -> None:
    parser = SSEParser()
    for _ in range(1000):
        assert parser.feed(b"data:\n" * 1000) == []
    # A million empty data lines hold a million line ends: the stream's event bound
    # (4 MiB) catches an endless one, where counting only values saw zero bytes.
    assert parser.pending_bytes == 1_000_000


@pytest.mark.parametrize("sig", ["KILL", "STOP"])
def test_a_killed_or_stopped_records_writer_loses_no_row(
    raw_server: Callable[[Answer], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sig: str,
) -> None:
    """kill -9 (or -STOP) of the records writer mid-run: every row still reaches records.jsonl."""
    monkeypatch.setattr(results, "WAIT_S", 2.0)  # a stopped writer is given up on sooner

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            await _read_head(r)
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await w.drain()

    out = tmp_path / sig
    target = f"tailwise.loadgen.execute.writer {out}/records.jsonl"
    timer = threading.Timer(
        0.8, subprocess.run, (["pkill", f"-{sig}", "-f", target],), {"check": False}
    )
    timer.start()
    res = tailwise.run(
        raw_server(serve) + "/x", rate="200/s", duration="2s", out=str(out), progress=False
    )
    timer.join()
    s = res.summary
    writer = s["records_writer"]
    assert writer["state"] in ("failed", "short") and "rewritten from memory" in writer["note"]
    total = s["requests"]["scheduled"] + s["requests"]["warmup"]["scheduled"]
    back = read_jsonl(out / "records.jsonl")
    assert len(back) == total == writer["rows_on_disk"] > 300
    assert s["requests"]["accounted"] and s["requests"]["records_on_disk"] == total
