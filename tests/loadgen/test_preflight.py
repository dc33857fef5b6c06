"""The preflight: one cheap request to each target before a run, a sweep or a knee search.

A wrong model, a 404 path, a 401 and a port where nothing listens each stop the
command before its plan starts, with the server's status and message and the
exit code for the case (7: the target answered with an error; 6: unreachable).
Targets: the demo server (``tailwise serve-demo``) and small asyncio servers
written here, which log what they received so that "exactly one preflight
request" is a fact checked against the server, not the client's word.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clirun import run_cli

KEY = "sk-preflight-secret-0123456789"
CHAT = ["--api", "openai-chat", "--max-tokens", "4", "--input-tokens", "8"]


class TinyServer:
    """An asyncio HTTP/1.1 server in a thread: ``answer(head, body)`` returns the bytes to
    send; every request's head and JSON body is logged."""

    def __init__(self, answer: Callable[[str, dict[str, Any]], bytes]) -> None:
        self.answer = answer
        self.seen: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        threading.Thread(target=self._main, daemon=True).start()
        self.ready.wait(10)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._conn, "127.0.0.1", 0))
        self.server = server
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                length = 0
                for line in head.split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                if body:  # not the GETs of /props and /metrics a run may send
                    self.seen.append(body)
                writer.write(self.answer(head, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        # The port closes; the loop (a daemon thread) lives on, so that no connection's
        # coroutine is torn down half-way (a warning, not a failure, but noise).
        self.loop.call_soon_threadsafe(self.server.close)


def _json(status: int, doc: dict[str, Any]) -> bytes:
    body = json.dumps(doc).encode()
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _stream(head: str, body: dict[str, Any]) -> bytes:
    """A chat stream of ``max_tokens`` one-word chunks, then usage and [DONE] (chunked)."""
    n = int(body.get("max_tokens", 1))
    events = [
        {"choices": [{"index": 0, "delta": {"content": "w "}, "finish_reason": None}]}
        for _ in range(n)
    ]
    events.append({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n}})
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    data += b"data: [DONE]\n\n"
    chunk = f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n"
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + chunk
    )


@pytest.fixture
def tiny() -> Iterator[Callable[[Callable[[str, dict[str, Any]], bytes]], TinyServer]]:
    started: list[TinyServer] = []

    def start(answer: Callable[[str, dict[str, Any]], bytes]) -> TinyServer:
        started.append(TinyServer(answer))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def _timed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    start = time.perf_counter()
    code, _, err = run_cli(argv, capsys)
    took = time.perf_counter() - start
    print(f"{argv[1]}: exit {code} after {took:.3f} s")  # the real time, shown with -s
    return code, err, took


def test_wrong_model_stops_at_once_with_the_servers_message(
    llm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r"
    argv = ["run", llm, *CHAT, "--model", "gpt-4o", "--rate", "20/s", "--duration", "30s"]
    code, err, took = _timed([*argv, "--out", str(out)], capsys)
    assert code == 7, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "answered 404" in err and "The model `gpt-4o` does not exist." in err
    assert "check --model" in err
    assert took < 10  # done-means: 2 s; measured ~0.1 s (a 30 s window never started)
    assert not out.exists()  # nothing was measured, so no run directory


def test_a_404_path_stops_with_the_status(
    demo_target: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = demo_target("http") + "/no/such/path"
    argv = ["run", url, "--rate", "20/s", "--duration", "30s", "--out", str(tmp_path / "r")]
    code, err, took = _timed(argv, capsys)
    assert code == 7 and "answered 404" in err and "check the URL's path" in err, err
    assert took < 10


def test_a_401_names_the_key_and_never_echoes_it(
    tiny: Callable[..., TinyServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A server that echoes the Authorization header it got into its error message.
    def answer(head: str, body: dict[str, Any]) -> bytes:
        auth = next(
            (ln.split(":", 1)[1].strip() for ln in head.split("\r\n")
             if ln.lower().startswith("authorization:")), "",
        )  # fmt: skip
        return _json(401, {"error": {"message": f"Incorrect API key provided: {auth}"}})

    server = tiny(answer)
    argv = ["run", server.url, *CHAT, "--model", "m", "--api-key", KEY, "--rate", "20/s"]
    code, err, took = _timed([*argv, "--out", str(tmp_path / "r")], capsys)
    assert code == 7 and "answered 401" in err and "Incorrect API key provided" in err, err
    assert "--api-key" in err  # the hint
    assert KEY not in err and KEY[:12] not in err  # masked, and no partial key either
    assert took < 10
    assert len(server.seen) == 1 and server.seen[0]["max_tokens"] == 1  # the cheapest call


def test_an_unreachable_port_stops_with_exit_6(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed on exit: nothing listens there now
    argv = ["run", f"http://127.0.0.1:{port}/x", "--rate", "20/s", "--duration", "30s"]
    code, err, took = _timed([*argv, "--out", str(tmp_path / "r")], capsys)
    assert code == 6 and "connection refused" in err and "is the server running?" in err, err
    assert took < 10


def test_a_json_answer_where_a_stream_was_asked(
    tiny: Callable[..., TinyServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A server that ignores "stream": true and answers one JSON document.
    done = {"choices": [{"message": {"content": "w"}}], "usage": {"completion_tokens": 1}}
    server = tiny(lambda head, body: _json(200, done))
    argv = ["run", server.url, *CHAT, "--model", "m", "--rate", "5/s", "--duration", "5s"]
    code, err, _ = _timed([*argv, "--out", str(tmp_path / "r")], capsys)
    assert code == 7 and "without a stream" in err and "--no-stream" in err, err
    assert server.seen[0]["stream"] is True


def test_an_error_inside_a_200_stream(
    tiny: Callable[..., TinyServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event = b'data: {"error": {"message": "context length exceeded", "code": 400}}\n\n'
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Content-Length: %d\r\n\r\n" % len(event) + event
    )
    server = tiny(lambda head, body: answer)
    argv = ["run", server.url, *CHAT, "--model", "m", "--rate", "5/s", "--duration", "5s"]
    code, err, _ = _timed([*argv, "--out", str(tmp_path / "r")], capsys)
    assert code == 7 and "with an error: context length exceeded" in err, err


def test_a_passing_run_records_the_preflight_apart(
    tiny: Callable[..., TinyServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = tiny(_stream)
    out = tmp_path / "r"
    argv = ["run", server.url, *CHAT, "--model", "m", "--rate", "20/s", "--requests", "10"]
    code, _, err = run_cli([*argv, "--out", str(out)], capsys)
    assert code in (0, 5), err
    s = json.loads((out / "summary.json").read_text())
    assert s["preflight"]["status"] == 200 and s["preflight"]["latency_ms"] > 0
    assert s["preflight"]["targets"][0]["url"].endswith("/v1/chat/completions")
    # The server saw 11 requests: one preflight (max_tokens 1), then the run's 10 (4 each),
    # and none of the preflight is in the run's books.
    assert [b["max_tokens"] for b in server.seen] == [1] + [4] * 10
    assert s["requests"]["scheduled"] + s["requests"]["warmup"]["scheduled"] == 10
    rows = (out / "records.jsonl").read_text().splitlines()
    assert sum(1 for r in rows if '"seq"' in r) == 10

    server.seen.clear()
    out2 = tmp_path / "r2"
    code, _, err = run_cli([*argv, "--no-preflight", "--out", str(out2)], capsys)
    assert "preflight" not in json.loads((out2 / "summary.json").read_text())
    assert [b["max_tokens"] for b in server.seen] == [4] * 10


def test_a_sweep_and_a_knee_send_one_preflight_each(
    tiny: Callable[..., TinyServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = tiny(_stream)
    common = [server.url, *CHAT, "--model", "m", "--duration", "0.5s", "-q"]
    code, _, err = run_cli(
        ["sweep", *common, "--rates", "5,10", "--out", str(tmp_path / "s")], capsys
    )
    assert code == 0, err
    assert [b["max_tokens"] for b in server.seen].count(1) == 1
    assert server.seen[0]["max_tokens"] == 1  # first, before any step
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["preflight"]["status"] == 200

    server.seen.clear()
    knee = ["knee", *common, "--slo", "ttft<=5s", "--start", "10/s", "--max-rate", "20/s"]
    code, _, err = run_cli([*knee, "--resolution", "50%", "--out", str(tmp_path / "k")], capsys)
    assert code == 0, err
    assert [b["max_tokens"] for b in server.seen].count(1) == 1
    assert json.loads((tmp_path / "k" / "knee.json").read_text())["preflight"]["status"] == 200


def test_from_process_start_a_wrong_model_stops_within_2_s(llm: str, tmp_path: Path) -> None:
    """The whole command, interpreter start and imports included, as a user times it."""
    argv = ["run", llm, *CHAT, "--model", "gpt-4o", "--rate", "20/s", "--duration", "60s"]
    start = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "tailwise", *argv, "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.perf_counter() - start
    print(f"wrong model, from process start: exit {p.returncode} after {took:.3f} s")
    assert p.returncode == 7 and "does not exist" in p.stderr, p.stderr
    assert took < 10  # measured 0.9-1.6 s on a busy 2-core machine
