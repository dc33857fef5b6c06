"""llama.cpp's ``/props``: read once before a run, bounded, kept as the summary's ``server_info``.

The answers are llama-server's (llama.cpp in the llama-cpp-python 0.3.36 sdist),
trimmed; the server is a real HTTP server on loopback in a thread of the test.
"""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

import tailwise
from tailwise.loadgen.observe.server_props import MAX_BYTES, parse_props, probe, props_url

PROPS = {
    "default_generation_settings": {"id_slot": 0, "n_ctx": 1024},
    "total_slots": 8,
    "model_path": "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
    "build_info": "b0-unknown",
    "chat_template": "{% for message in messages %}...",
}
CHAT = {
    "choices": [{"finish_reason": "length", "message": {"content": "hi"}}],
    "usage": {"completion_tokens": 2, "prompt_tokens": 30, "total_tokens": 32},
}


class Answers:
    """What the loopback server says, per path (tests change it), and what it was asked."""

    def __init__(self) -> None:
        self.props: tuple[int, bytes] = (200, json.dumps(PROPS).encode())
        self.paths: list[str] = []


def _handler(answers: Answers) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            answers.paths.append(f"GET {self.path}")
            if self.path == "/props" and answers.props[0] == 302:
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{self.server.server_address[1]}/x")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == "/props":
                self._send(*answers.props)
            else:
                self._send(404, b"{}")

        def do_POST(self) -> None:
            answers.paths.append(f"POST {self.path}")
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self._send(200, json.dumps(CHAT).encode())

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Answers]]:
    answers = Answers()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(answers))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answers
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_llama_cpp_props_give_slots_and_context() -> None:
    info = parse_props(PROPS)
    assert info == {
        "engine": "llama.cpp",
        "slots": 8,
        "slot_context_tokens": 1024,
        "build": "b0-unknown",
    }


@pytest.mark.parametrize(
    "doc",
    [
        [],
        "props",
        {},
        {"total_slots": True},  # a bool is not a count
        {"total_slots": 0},
        {"total_slots": -3},
        {"total_slots": 10**9},
        {"total_slots": 8.0},
        {"total_slots": "8"},
    ],
)
def test_hostile_or_foreign_props_are_not_llama_cpp(doc: Any) -> None:
    assert parse_props(doc) is None


def test_out_of_range_context_and_odd_build_text_are_dropped_or_cleaned() -> None:
    doc = {
        "total_slots": 2,
        "default_generation_settings": {"n_ctx": 1 << 40},
        "build_info": "b1\x1b[31m" + "x" * 500,
    }
    info = parse_props(doc)
    assert info is not None and "slot_context_tokens" not in info
    assert info["build"].isprintable() and len(info["build"]) <= 80


def test_props_url_is_the_target_host_root() -> None:
    assert props_url("http://127.0.0.1:8080/v1/chat/completions") == "http://127.0.0.1:8080/props"
    assert props_url("https://u:p@h:1/x?q=1") == "https://h:1/props"
    assert props_url("unix:///tmp/s") is None


def test_probe_on_a_real_loopback_server(server: tuple[str, Answers]) -> None:
    url, answers = server
    assert probe(url + "/v1/chat/completions") == parse_props(PROPS)
    answers.props = (404, b'{"error": "not found"}')
    assert probe(url) is None
    answers.props = (200, b"<html>")
    assert probe(url) is None
    answers.props = (200, b"[" * (MAX_BYTES + 10))  # past the bound: not even parsed
    assert probe(url) is None
    answers.props = (302, b"")  # a redirect is not followed: the target alone is asked
    assert probe(url) is None
    assert "GET /x" not in answers.paths


def test_probe_of_a_closed_port_is_none_fast() -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as httpd:
        port = httpd.server_address[1]
    assert probe(f"http://127.0.0.1:{port}/v1") is None


class _Raw(socketserver.BaseRequestHandler):
    """Answers any request with the server's ``script``: a list of (bytes, pause s)."""

    script: ClassVar[list[tuple[bytes, float]]] = []

    def handle(self) -> None:
        self.request.recv(65_536)
        try:
            for data, pause_s in self.script:
                self.request.sendall(data)
                time.sleep(pause_s)
        except OSError:
            pass  # the probe gave up and closed: what this test wants


def _raw_server(script: list[tuple[bytes, float]]) -> socketserver.ThreadingTCPServer:
    handler = type("Handler", (_Raw,), {"script": script})
    httpd = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


JSON_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
)


@pytest.mark.parametrize(
    ("case", "script"),
    [
        # One byte every 50 ms, for ever: each read beats the socket timeout, the whole
        # answer does not (it took 26 s before the probe had a deadline of its own).
        ("trickle", [(JSON_CHUNKED, 0.0)] + [(b"1\r\n \r\n", 0.05)] * 400),
        # An endless event stream (a server that streams on every path) is not even read.
        (
            "event stream",
            [(JSON_CHUNKED.replace(b"application/json", b"text/event-stream"), 0.0)]
            + [(b"6\r\ndata: \r\n", 0.05)] * 400,
        ),
        # Broken answers raised http.client's errors out of the run, as a traceback.
        ("bad status line", [(b"garbage\r\n\r\n", 0.0)]),
        ("cut chunk", [(JSON_CHUNKED + b"ff\r\n{", 0.0)]),
    ],
)
def test_a_hostile_props_answer_is_no_answer_within_its_deadline(
    case: str, script: list[tuple[bytes, float]]
) -> None:
    httpd = _raw_server(script)
    try:
        started = time.monotonic()
        assert probe(f"http://127.0.0.1:{httpd.server_address[1]}/v1", timeout_s=0.5) is None
        # 0.5 s for the head and 0.5 s for the body at most; the script lasts 20 s.
        assert time.monotonic() - started < 5.0, case
    finally:
        httpd.shutdown()
        httpd.server_close()


def chat(url: str, out: Path, requests: int, **kw: Any) -> tailwise.loadgen.runner.RunResult:
    """Whole (not streamed) chat answers from the loopback server, one at a time."""
    opts: dict[str, Any] = dict(api="openai-chat", model="m", stream=False, concurrency=1)
    return tailwise.run(url, requests=requests, out=str(out), **opts, **kw)


def test_a_run_keeps_the_servers_slots_in_its_summary(
    server: tuple[str, Answers], tmp_path: Path
) -> None:
    url, answers = server
    res = chat(url, tmp_path / "r", 3)
    assert res.summary["requests"]["ok"] == 3
    on_disk = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert on_disk["server_info"] == res.summary["server_info"] == parse_props(PROPS)
    # One GET before the first request, none after (/metrics is the scraper's).
    assert answers.paths[0] == "GET /props" and answers.paths.count("GET /props") == 1
    posts = [p for p in answers.paths if p.startswith("POST")]
    assert posts == ["POST /v1/chat/completions"] * 3


def test_a_plain_http_run_asks_nothing(server: tuple[str, Answers], tmp_path: Path) -> None:
    url, answers = server
    res = tailwise.run(url + "/x", concurrency=1, requests=2, body="{}", out=str(tmp_path / "r"))
    assert "server_info" not in res.summary
    assert answers.paths == ["POST /x"] * 2


def test_server_metrics_off_asks_the_server_nothing_else(
    server: tuple[str, Answers], tmp_path: Path
) -> None:
    url, answers = server
    res = chat(url, tmp_path / "r", 2, server_metrics="off")
    assert "server_info" not in res.summary
    assert answers.paths == ["POST /v1/chat/completions"] * 2
