"""The built-in targets of ``tailwise serve-demo``: engine logic, wire, robustness, truth.

Engine scheduling is tested in-process (no server). Everything else runs a real
``serve-demo`` process on 127.0.0.1 and talks to it with the standard library,
so what is checked is what any client would see. Timing checks use wide margins:
they catch a wrong cost model, not a noisy machine.
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import tailwise
from tailwise.instrument import promtext as prom
from tailwise.laws.llm import EngineConfig
from tailwise.server import spawn_demo
from tailwise.server.engine import ABORTED, FINISHED, Engine, QueueFull
from tailwise.server.llm_app import WORDS

Demo = Callable[..., str]


# -- helpers --------------------------------------------------------------------


@pytest.fixture
def demo() -> Iterator[Demo]:
    """``demo("llm", "--max-num-seqs", "1")`` -> base URL of a fresh target, stopped after."""
    procs: list[subprocess.Popen[str]] = []

    def start(kind: str, *args: str) -> str:
        proc, url = spawn_demo(kind, *args, lifetime="120s")
        procs.append(proc)
        return url

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _addr(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


def call(
    url: str, method: str, path: str, body: Any = None, timeout: float = 20.0
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: (status, lower-cased headers, body bytes)."""
    conn = http.client.HTTPConnection(*_addr(url), timeout=timeout)
    try:
        raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if raw is not None else {}
        conn.request(method, path, raw, headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def post(url: str, path: str, body: Any, timeout: float = 20.0) -> tuple[int, Any]:
    status, _, raw = call(url, "POST", path, body, timeout)
    return status, json.loads(raw)


def metrics(url: str) -> dict[str, float]:
    status, headers, raw = call(url, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    return prom.parse(raw.decode())


def wait_for(url: str, cond: Callable[[dict[str, float]], bool], timeout: float = 5.0) -> dict:
    """Poll /metrics until ``cond`` holds; returns the last sample either way."""
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(url)
        if cond(m) or time.monotonic() > deadline:
            return m
        time.sleep(0.02)


def stream(
    url: str, path: str, body: dict[str, Any], timeout: float = 30.0
) -> tuple[int, list[tuple[float, Any]]]:
    """POST and read SSE: (status, [(seconds since the send, event JSON or "[DONE]")])."""
    conn = http.client.HTTPConnection(*_addr(url), timeout=timeout)
    try:
        conn.connect()  # keep the connect out of the measured times
        t0 = time.monotonic()
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        events: list[tuple[float, Any]] = []
        while line := resp.readline():
            if line.startswith(b"data: "):
                data = line[6:].strip()
                event = "[DONE]" if data == b"[DONE]" else json.loads(data)
                events.append((time.monotonic() - t0, event))
        return resp.status, events
    finally:
        conn.close()


def raw_stream(url: str, body: dict[str, Any], chunks: int) -> socket.socket:
    """Start a streamed completion on a raw socket and read until ``chunks`` events came."""
    sock = socket.create_connection(_addr(url), timeout=10)
    payload = json.dumps(body).encode()
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(payload)
    )
    sock.sendall(head + payload)
    data = b""
    while data.count(b"data: ") < chunks:
        more = sock.recv(65536)
        assert more, "the server closed the stream early"
        data += more
    assert data.startswith(b"HTTP/1.1 200")
    return sock


def words(n: int) -> str:
    return " ".join(["tok"] * n)


def text_of(n: int) -> str:
    return "".join(WORDS[i % len(WORDS)] for i in range(n))


def content_events(events: list[tuple[float, Any]], chat: bool) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = []
    for t, ev in events:
        if ev == "[DONE]" or not ev.get("choices"):
            continue
        choice = ev["choices"][0]
        text = choice["delta"].get("content") if chat else choice["text"]
        if text:
            out.append((t, text))
    return out


def assert_openai_error(body: Any, status: int, kind: str | None = None) -> str:
    err = body["error"]
    assert err["code"] == status
    assert isinstance(err["message"], str) and err["message"]
    if kind is not None:
        assert err["type"] == kind
    return str(err["message"])


# -- 1. the engine, without a server ----------------------------------------------


def _decoding(*seqs: Any) -> None:
    """Mark admitted sequences as fully prefilled (they decode from now on)."""
    for seq in seqs:
        seq.prefilled = seq.prompt_tokens


def _submit(engine: Engine, prompt_tokens: int, max_tokens: int) -> Any:
    """Submit, then admit as the loop does at the next step boundary."""
    seq = engine.submit(prompt_tokens, max_tokens)
    engine._admit()
    return seq


def test_plan_without_chunked_prefill_runs_prefill_only_steps() -> None:
    engine = Engine(EngineConfig(max_num_seqs=4))
    a = _submit(engine, 10, 5)
    _decoding(a)
    assert engine.running == [a]
    assert engine._plan() == ([], [a])  # nothing to prefill: decode everyone
    b, c = _submit(engine, 30, 5), _submit(engine, 7, 5)
    prefill, decoding = engine._plan()
    assert prefill == [(b, 30), (c, 7)]  # whole prompts, all at once
    assert decoding == []  # the decode of `a` pauses for the prefill step
    engine._apply(prefill, decoding, time.monotonic())
    assert (a.generated, b.generated, c.generated) == (0, 1, 1)  # prefill samples a token
    assert b.first_token_s > 0 and engine.stats.prompt_tokens == 37
    assert engine._plan() == ([], [a, b, c])
    cfg = engine.config
    assert cfg.step_s(37, 0) == pytest.approx(cfg.base_s + 37 * cfg.prefill_s_per_token)


def test_plan_with_chunked_prefill_gives_decodes_a_token_first() -> None:
    engine = Engine(EngineConfig(max_num_seqs=8, prefill_chunk_tokens=16))
    a, b = _submit(engine, 4, 50), _submit(engine, 4, 50)
    _decoding(a, b)
    c, d = _submit(engine, 40, 5), _submit(engine, 10, 5)
    chunks: list[list[tuple[Any, int]]] = []
    for _ in range(3):
        prefill, decoding = engine._plan()
        assert decoding == [a, b]  # decodes never pause with chunked prefill
        chunks.append(prefill)
        engine._apply(prefill, decoding, time.monotonic())
    # 16 tokens a step, 2 of them for the decodes: c gets 14, 14, then 12 and d the last 2
    assert chunks == [[(c, 14)], [(c, 14)], [(c, 12), (d, 2)]]
    assert c.generated == 1 and d.generated == 0 and d.prefilled == 2
    assert a.generated == b.generated == 3
    assert engine.stats.prompt_tokens == 42

    # more decodes than budget: prefill waits, decodes still run
    tight = Engine(EngineConfig(max_num_seqs=8, prefill_chunk_tokens=2))
    seqs = [_submit(tight, 1, 50) for _ in range(3)]
    _decoding(*seqs)
    late = _submit(tight, 5, 5)
    assert tight._plan() == ([], seqs)
    assert late in tight.running and late.prefilled == 0


def test_kv_cache_admission_is_fcfs_and_the_head_blocks() -> None:
    engine = Engine(EngineConfig(max_num_seqs=8, kv_cache_tokens=100))
    s1 = _submit(engine, 50, 10)  # 60 reserved
    s2 = _submit(engine, 40, 10)  # needs 50: does not fit
    s3 = _submit(engine, 5, 5)  # would fit, but the head blocks it
    assert engine.running == [s1]
    assert list(engine.waiting) == [s2, s3]
    assert engine.kv_used_tokens == 60
    engine.abort(s1, "client_disconnected")
    assert engine.kv_used_tokens == 0
    engine._admit()
    assert engine.running == [s2, s3] and not engine.waiting
    assert engine.kv_used_tokens == 60
    assert engine.stats.admitted == 3


def test_abort_frees_slot_and_kv_at_once() -> None:
    engine = Engine(EngineConfig(max_num_seqs=1, kv_cache_tokens=1000))
    s1 = _submit(engine, 100, 100)
    s2 = _submit(engine, 10, 10)
    assert engine.running == [s1] and list(engine.waiting) == [s2]
    assert engine.kv_used_tokens == 200
    engine.abort(s1, "client_disconnected")
    assert engine.running == [] and engine.kv_used_tokens == 0
    assert s1.done and s1.abort_reason == "client_disconnected"
    assert s1.events.get_nowait() == ABORTED
    engine._admit()
    assert engine.running == [s2] and engine.kv_used_tokens == 20
    engine.abort(s1, "timeout")  # a second abort is a no-op
    assert engine.stats.aborted == {"client_disconnected": 1}
    s3 = _submit(engine, 1, 1)
    assert list(engine.waiting) == [s3]
    engine.abort(s3, "timeout")  # a waiting sequence leaves the queue
    assert not engine.waiting and engine.kv_used_tokens == 20
    assert engine.stats.aborted == {"client_disconnected": 1, "timeout": 1}


def test_queue_full_at_max_waiting() -> None:
    engine = Engine(EngineConfig(max_num_seqs=1, max_waiting=2))
    _submit(engine, 1, 5)  # runs
    _submit(engine, 1, 5)
    _submit(engine, 1, 5)
    with pytest.raises(QueueFull):
        engine.submit(1, 5)
    assert len(engine.waiting) == 2 and len(engine.running) == 1
    assert engine.stats.rejected == {"queue_full": 1}


def test_zero_length_queue_still_serves_free_slots() -> None:
    """--max-waiting 0: no queue, but a request that a free slot can take runs."""
    engine = Engine(EngineConfig(max_num_seqs=2, max_waiting=0))
    first, second = engine.submit(1, 5), engine.submit(1, 5)
    assert engine.running == [first, second]
    with pytest.raises(QueueFull):
        engine.submit(1, 5)
    assert not engine.waiting and engine.stats.rejected == {"queue_full": 1}


def test_check_explains_what_can_never_run() -> None:
    engine = Engine(EngineConfig(max_model_len=100, kv_cache_tokens=80))
    assert engine.check(30, 40) == ""
    msg = engine.check(90, 20)
    assert "maximum context length is 100 tokens" in msg
    assert "110" in msg and "90 in the prompt" in msg and "20 to generate" in msg
    kv = engine.check(60, 40)  # within max_model_len, over the whole KV cache
    assert "KV" in kv and "80" in kv


def test_engine_loop_generates_exactly_and_times_out() -> None:
    async def main() -> None:
        cfg = EngineConfig(
            base_s=0.001, prefill_s_per_token=0.0, decode_s_per_seq=0.0, request_timeout_s=0.3
        )
        engine = Engine(cfg)
        engine.start()
        try:
            seqs = [engine.submit(3, 5), engine.submit(4, 7)]

            async def drain(seq: Any) -> list[int]:
                out = []
                while (ev := await seq.events.get()) not in (FINISHED, ABORTED):
                    out.append(ev)
                return [*out, ev]

            got = await asyncio.wait_for(asyncio.gather(*map(drain, seqs)), 5)
            assert got == [[1] * 5 + [FINISHED], [1] * 7 + [FINISHED]]
            st = engine.stats
            assert (st.finished, st.generated_tokens, st.prompt_tokens) == (2, 12, 7)
            assert engine.kv_used_tokens == 0 and not engine.running
            slow = engine.submit(1, 100_000)  # ~100 s of steps: the deadline drops it
            assert (await asyncio.wait_for(drain(slow), 5))[-1] == ABORTED
            assert slow.abort_reason == "timeout" and engine.kv_used_tokens == 0
        finally:
            await engine.stop()

    asyncio.run(main())


# -- 2. the llm server: wire ------------------------------------------------------


def test_llm_models_and_health(demo: Demo) -> None:
    url = demo("llm", "--model", "my-model", "--max-model-len", "512")
    status, body = post(url, "/v1/completions", {"model": "other", "prompt": "hi"})
    assert status == 404
    assert "other" in assert_openai_error(body, 404)
    status, _, raw = call(url, "GET", "/v1/models")
    assert status == 200
    models = json.loads(raw)
    assert models["object"] == "list"
    assert [(m["id"], m["max_model_len"]) for m in models["data"]] == [("my-model", 512)]
    status, _, raw = call(url, "GET", "/health")
    assert status == 200 and json.loads(raw) == {"status": "ok", "kind": "llm"}
    status, body = post(
        url, "/v1/completions", {"model": "my-model", "prompt": "hi", "max_tokens": 2}
    )
    assert status == 200 and body["model"] == "my-model"


def test_llm_non_streaming_returns_whole_text_and_usage(demo: Demo) -> None:
    url = demo("llm")
    status, body = post(url, "/v1/completions", {"prompt": words(12), "max_tokens": 9})
    assert status == 200
    assert body["object"] == "text_completion"
    [choice] = body["choices"]
    assert choice["text"] == text_of(9) and choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}

    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "three more words"}]},
    ]
    status, body = post(
        url, "/v1/chat/completions", {"messages": messages, "max_completion_tokens": 4}
    )
    assert status == 200
    assert body["object"] == "chat.completion"
    [choice] = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": text_of(4)}
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}


def test_llm_streaming_chat_and_completions(demo: Demo) -> None:
    url = demo("llm")
    chat_body = {
        "messages": [{"role": "user", "content": words(7)}],
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, events = stream(url, "/v1/chat/completions", chat_body)
    assert status == 200
    evs = [e for _, e in events]
    assert evs[-1] == "[DONE]"
    assert evs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = content_events(events, chat=True)
    assert len(content) == 6
    assert "".join(t for _, t in content) == text_of(6)
    assert all(e["object"] == "chat.completion.chunk" for e in evs[:-1])
    assert len({e["id"] for e in evs[:-1]}) == 1
    finish = [e["choices"][0]["finish_reason"] for e in evs[:-1] if e["choices"]]
    assert finish == [None] * 7 + ["length"]
    usage = [e for e in evs[:-1] if e.get("usage")]
    assert [u["usage"] for u in usage] == [
        {"prompt_tokens": 7, "completion_tokens": 6, "total_tokens": 13}
    ]
    assert usage[0] is evs[-2] and usage[0]["choices"] == []

    # completions, no usage asked for: tokens, a finish chunk, [DONE]
    status, events = stream(
        url, "/v1/completions", {"prompt": "a b", "max_tokens": 11, "stream": True}
    )
    assert status == 200
    evs = [e for _, e in events]
    assert len(content_events(events, chat=False)) == 11
    assert len(evs) == 11 + 2 and evs[-1] == "[DONE]"
    assert evs[-2]["choices"][0]["finish_reason"] == "length"
    assert not any(e.get("usage") for e in evs[:-1])


def test_llm_responses_api_streamed_and_whole(demo: Demo) -> None:
    """``/v1/responses``: typed events in order, the text one delta per token, and the end
    (``response.incomplete``: the answer stopped at its budget) carrying the usage."""
    url = demo("llm", "--request-timeout", "300ms")
    body = {"input": [{"role": "user", "content": words(7)}], "max_output_tokens": 5}
    status, events = stream(url, "/v1/responses", {**body, "stream": True})
    assert status == 200
    evs = [e for _, e in events]
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    kinds = [e["type"] for e in evs]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 5,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert "".join(e["delta"] for e in evs if "delta" in e) == text_of(5)
    end = evs[-1]["response"]
    assert end["status"] == "incomplete"
    assert end["incomplete_details"] == {"reason": "max_output_tokens"}
    assert (end["usage"]["input_tokens"], end["usage"]["output_tokens"]) == (7, 5)
    assert evs[0]["response"]["usage"] is None
    # not streamed: the whole response object; a text input counts its words too
    status, whole = post(url, "/v1/responses", {"input": words(3), "max_output_tokens": 4})
    assert status == 200 and whole["object"] == "response" and whole["error"] is None
    assert whole["output"][0]["content"][0]["text"] == text_of(4)
    assert (whole["usage"]["input_tokens"], whole["usage"]["output_tokens"]) == (3, 4)
    for raw in (b'{"input": 5}', b'{"input": []}', b'{"input": "x", "max_output_tokens": 0}'):
        status, err = post(url, "/v1/responses", raw)
        assert status == 400, raw
        assert_openai_error(err, 400, "invalid_request_error")
    # a stream that runs out of time ends with response.failed, its error the reason
    status, events = stream(
        url, "/v1/responses", {"input": "x", "max_output_tokens": 3000, "stream": True}
    )
    last = events[-1][1]
    assert status == 200 and last["type"] == "response.failed"
    assert last["response"]["error"] == {"code": "server_error", "message": "request timeout"}


# -- 3. robustness ----------------------------------------------------------------


def test_llm_malformed_requests_get_openai_errors(demo: Demo) -> None:
    url = demo("llm")
    status, body = post(url, "/v1/completions", b'{"prompt": "hi", "max_tokens": ')
    assert status == 400
    assert "JSON" in assert_openai_error(body, 400, "invalid_request_error")
    bad = [
        ("/v1/chat/completions", b"[1, 2]"),
        ("/v1/chat/completions", b'{"messages": []}'),
        ("/v1/completions", b'{"prompt": 5}'),
        ("/v1/completions", b'{"prompt": "x", "max_tokens": 0}'),
        ("/v1/completions", b'{"prompt": "x", "stream": "yes"}'),
        ("/v1/completions", b"\xff\xfe"),
    ]
    for path, raw in bad:
        status, body = post(url, path, raw)
        assert status == 400, raw
        assert_openai_error(body, 400, "invalid_request_error")
    m = metrics(url)
    assert m['tailwise_demo_requests_rejected_total{reason="bad_request"}'] == 1 + len(bad)
    assert m["tailwise_demo_requests_admitted_total"] == 0
    status, body = post(url, "/v1/completions", {"prompt": "still alive", "max_tokens": 2})
    assert status == 200 and body["usage"]["completion_tokens"] == 2


def test_llm_context_over_max_model_len_is_400(demo: Demo) -> None:
    url = demo("llm", "--max-model-len", "64")
    status, body = post(url, "/v1/completions", {"prompt": words(50), "max_tokens": 15})
    assert status == 400
    msg = assert_openai_error(body, 400, "invalid_request_error")
    assert "maximum context length is 64" in msg and "65" in msg
    chat = {"messages": [{"role": "user", "content": words(60)}], "max_tokens": 5}
    status, body = post(url, "/v1/chat/completions", chat)
    assert status == 400
    status, body = post(url, "/v1/completions", {"prompt": words(50), "max_tokens": 14})
    assert status == 200  # exactly at the limit is fine
    m = metrics(url)
    assert m['tailwise_demo_requests_rejected_total{reason="context_length"}'] == 2
    assert m["tailwise_demo_requests_finished_total"] == 1


def test_llm_queue_full_is_429_with_retry_after(demo: Demo) -> None:
    url = demo("llm", "--max-num-seqs", "1", "--max-waiting", "1")
    long = raw_stream(url, {"prompt": "x", "max_tokens": 4000, "stream": True}, chunks=2)
    with ThreadPoolExecutor(1) as pool:
        try:
            waiting = pool.submit(post, url, "/v1/completions", {"prompt": "y", "max_tokens": 3})
            m = wait_for(url, lambda m: m["tailwise_demo_queue_depth"] == 1)
            assert m["tailwise_demo_queue_depth"] == 1 and m["tailwise_demo_running_seqs"] == 1
            status, headers, raw = call(url, "POST", "/v1/completions", {"prompt": "z"})
            assert status == 429
            assert int(headers["retry-after"]) >= 1
            assert_openai_error(json.loads(raw), 429, "rate_limit_error")
        finally:
            long.close()
        status, body = waiting.result(timeout=10)  # the slot freed: the queued one runs
    assert status == 200 and body["usage"]["completion_tokens"] == 3
    m = metrics(url)
    assert m['tailwise_demo_requests_rejected_total{reason="queue_full"}'] == 1
    assert m["tailwise_demo_requests_finished_total"] == 1


def test_llm_client_disconnect_mid_stream_frees_the_slot(demo: Demo) -> None:
    url = demo("llm", "--max-num-seqs", "1")
    # 4000 tokens at ~4.3 ms a step: ~17 s if the slot were not freed
    sock = raw_stream(url, {"prompt": "x", "max_tokens": 4000, "stream": True}, chunks=5)
    m = metrics(url)
    assert m["tailwise_demo_running_seqs"] == 1
    assert m["tailwise_demo_kv_cache_used_tokens"] == 4001
    sock.close()
    t0 = time.monotonic()
    status, body = post(url, "/v1/completions", {"prompt": "short", "max_tokens": 5}, timeout=10)
    assert status == 200 and body["usage"]["completion_tokens"] == 5
    assert time.monotonic() - t0 < 3.0
    m = wait_for(url, lambda m: m["tailwise_demo_running_seqs"] == 0)
    assert m['tailwise_demo_requests_aborted_total{reason="client_disconnected"}'] == 1
    assert m["tailwise_demo_running_seqs"] == 0
    assert m["tailwise_demo_kv_cache_used_tokens"] == 0
    assert m["tailwise_demo_requests_finished_total"] == 1
    assert m["tailwise_demo_generation_tokens_total"] < 4000


def test_llm_request_timeout_is_504(demo: Demo) -> None:
    url = demo("llm", "--request-timeout", "300ms")
    t0 = time.monotonic()
    status, body = post(url, "/v1/completions", {"prompt": "x", "max_tokens": 3000}, timeout=10)
    elapsed = time.monotonic() - t0
    assert status == 504
    assert "timeout" in assert_openai_error(body, 504, "server_error")
    assert 0.25 < elapsed < 5.0  # 3000 tokens would take ~13 s
    # a stream that runs out of time ends with an error event and no [DONE]
    status, events = stream(
        url, "/v1/completions", {"prompt": "x", "max_tokens": 3000, "stream": True}
    )
    assert status == 200
    last = events[-1][1]
    assert last != "[DONE]" and last["error"]["code"] == 504
    assert 0 < len(content_events(events, chat=False)) < 3000
    m = wait_for(url, lambda m: m["tailwise_demo_running_seqs"] == 0)
    assert m['tailwise_demo_requests_aborted_total{reason="timeout"}'] == 2
    assert m["tailwise_demo_kv_cache_used_tokens"] == 0


# -- 4. /metrics is the truth -----------------------------------------------------


def test_llm_metrics_match_what_was_served(demo: Demo, tmp_path: Path) -> None:
    url = demo("llm")
    res = tailwise.run(
        url + "/v1/completions",
        api="openai-completions",
        model="tailwise-demo",
        rate="20/s",
        duration="2s",
        max_tokens=8,
        input_tokens=16,
        warmup="0s",  # every request counted in the window, as the server counts them
        out=str(tmp_path / "run"),
    )
    req = res.summary["requests"]
    n = req["ok"]
    assert n >= 10 and n == req["scheduled"] and req["accounted"]
    assert res.summary["tokens"]["output_total"] == 8 * n
    # direct requests on top: streamed and not
    for stream_it in (True, False):
        status, _ = (
            stream(url, "/v1/completions", {"prompt": words(16), "max_tokens": 8, "stream": True})
            if stream_it
            else post(url, "/v1/completions", {"prompt": words(16), "max_tokens": 8})
        )
        assert status == 200
    n += 2
    m = metrics(url)
    assert m["tailwise_demo_requests_admitted_total"] == n
    assert m["tailwise_demo_requests_finished_total"] == n
    assert m["tailwise_demo_generation_tokens_total"] == n * 8
    # 16 words and, for tailwise's own requests, the unique-prompt nonce the server counts
    prompts = int(res.records.input_tokens.sum()) + 2 * 16
    assert (n - 2) * 16 < prompts - 2 * 16 <= (n - 2) * 17
    assert m["tailwise_demo_prompt_tokens_total"] == prompts
    assert m["tailwise_demo_running_seqs"] == 0 and m["tailwise_demo_queue_depth"] == 0
    assert m["tailwise_demo_kv_cache_used_tokens"] == 0
    assert sum(v for k, v in m.items() if "rejected" in k or "aborted" in k) == 0
    steps = m["tailwise_demo_step_seconds_count"]
    assert steps == m['tailwise_demo_step_seconds_bucket{le="+Inf"}']
    assert steps >= 8  # at least the steps of one whole request


# -- 5. idle timing follows the cost model ----------------------------------------


def test_llm_idle_ttft_and_itl_follow_the_cost_model(demo: Demo) -> None:
    a, b, c = 0.004, 0.00002, 0.002  # step base, per prefill token, per decoding seq
    url = demo("llm", "--step-base", "4ms", "--per-prefill-token", "20us", "--per-seq", "2ms")
    prompt = 1000
    prefill_s = a + b * prompt  # 24 ms
    decode_s = a + c  # 6 ms with one sequence decoding
    ttfts: list[float] = []
    gaps: list[float] = []
    for _ in range(3):
        status, events = stream(
            url, "/v1/completions", {"prompt": words(prompt), "max_tokens": 30, "stream": True}
        )
        assert status == 200
        content = content_events(events, chat=False)
        assert len(content) == 30
        ttfts.append(content[0][0])
        gaps.extend(t2 - t1 for (t1, _), (t2, _) in itertools.pairwise(content))
        time.sleep(0.05)  # idle again
    assert min(ttfts) >= prefill_s - 0.001, ttfts  # never faster than the prefill step
    assert min(ttfts) <= prefill_s + 0.015, ttfts
    median = statistics.median(gaps)
    assert decode_s - 0.0015 <= median <= decode_s + 0.003, median


# -- 6. embed ---------------------------------------------------------------------


def test_embed_strings_lists_and_errors(demo: Demo) -> None:
    url = demo("embed", "--dim", "8", "--max-waiting-inputs", "64")
    status, one = post(url, "/v1/embeddings", {"input": "hello world", "model": "tailwise-demo"})
    assert status == 200
    assert one["object"] == "list" and len(one["data"]) == 1
    vec = one["data"][0]["embedding"]
    assert len(vec) == 8 and all(-1.0 <= v <= 1.0 for v in vec)
    assert one["usage"] == {"prompt_tokens": 2, "total_tokens": 2}
    status, many = post(url, "/v1/embeddings", {"input": ["a", "hello world", "b c d"]})
    assert status == 200
    assert [d["index"] for d in many["data"]] == [0, 1, 2]
    assert many["data"][1]["embedding"] == vec  # same text, same embedding
    assert many["data"][0]["embedding"] != many["data"][2]["embedding"]
    assert many["usage"]["prompt_tokens"] == 1 + 2 + 3
    for raw in (b"{oops", b'{"input": []}', b'{"input": 3}', b'{"text": "x"}', b'"x"'):
        status, body = post(url, "/v1/embeddings", raw)
        assert status == 400, raw
        assert_openai_error(body, 400, "invalid_request_error")
    # more inputs than the queue can ever hold: a retry would never help, so 400, not 429
    status, body = post(url, "/v1/embeddings", {"input": ["x"] * 65})
    assert status == 400
    assert "64" in assert_openai_error(body, 400)
    status, _, raw = call(url, "GET", "/health")
    assert status == 200 and json.loads(raw)["kind"] == "embed"
    assert metrics(url)["tailwise_demo_inputs_total"] == 4


def test_embed_burst_is_batched_and_counted(demo: Demo) -> None:
    url = demo("embed", "--max-wait", "30ms", "--max-batch", "16")
    requests = 24
    start = threading.Barrier(requests)

    def one(i: int) -> tuple[int, Any]:
        start.wait(timeout=10)
        return post(url, "/v1/embeddings", {"input": [f"text {i}", "shared"]})

    with ThreadPoolExecutor(requests) as pool:
        results = list(pool.map(one, range(requests)))
    assert all(status == 200 for status, _ in results)
    assert all(len(body["data"]) == 2 for _, body in results)
    shared = {json.dumps(body["data"][1]["embedding"]) for _, body in results}
    assert len(shared) == 1  # deterministic across requests and batches
    m = metrics(url)
    sent = 2 * requests
    assert m["tailwise_demo_inputs_total"] == sent
    assert m["tailwise_demo_batch_size_sum"] == sent
    batches = m["tailwise_demo_batches_total"]
    assert m["tailwise_demo_batch_size_count"] == batches
    assert batches < requests  # requests shared batches
    assert m['tailwise_demo_batch_size_bucket{le="2"}'] < batches  # some batch had > 2 inputs
    assert m['tailwise_demo_batch_size_bucket{le="16"}'] == batches  # none over --max-batch
    assert m["tailwise_demo_queue_depth"] == 0 and m["tailwise_demo_running_batch_size"] == 0


# -- 7. http ----------------------------------------------------------------------


def test_http_predict_and_errors(demo: Demo) -> None:
    url = demo("http", "--service", "exp:0ms")  # a zero mean is valid: no work at all
    for method, body in (("GET", None), ("POST", {"x": 1}), ("POST", b"")):
        status, _, raw = call(url, method, "/predict", body)
        assert status == 200 and json.loads(raw) == {"ok": True}
    status, _, raw = call(url, "POST", "/predict", b"{nope")
    assert status == 400
    assert_openai_error(json.loads(raw), 400, "invalid_request_error")
    status, _, raw = call(url, "GET", "/health")
    assert status == 200 and json.loads(raw)["kind"] == "http"
    m = metrics(url)
    assert m["tailwise_demo_requests_served_total"] == 3
    assert m["tailwise_demo_in_flight"] == 0


def test_http_stragglers_are_the_configured_share(demo: Demo) -> None:
    service, factor, n = 0.003, 10, 200
    url = demo("http", "--service", "3ms", "--workers", "0", "--straggler", "20%x10")
    conn = http.client.HTTPConnection(*_addr(url), timeout=10)
    latencies: list[float] = []
    try:
        for _ in range(n):
            t0 = time.monotonic()
            conn.request("GET", "/predict")
            resp = conn.getresponse()
            resp.read()
            latencies.append(time.monotonic() - t0)
            assert resp.status == 200
    finally:
        conn.close()
    m = metrics(url)
    assert m["tailwise_demo_requests_served_total"] == n
    # server truth: busy = n*s + k*(factor-1)*s, so k stragglers exactly
    k = round((m["tailwise_demo_busy_seconds_total"] - n * service) / ((factor - 1) * service))
    assert 0.12 * n <= k <= 0.28 * n, k  # 20% of 200: binomial sd 2.8%
    slow = [t for t in latencies if t > 0.015]
    assert abs(len(slow) - k) <= 3, (len(slow), k)  # the client sees the same ones
    assert statistics.median(slow) >= factor * service - 0.003  # ~10x slower, not noise
    assert statistics.median(latencies) < 0.015


SERVE_DEMO = [sys.executable, "-m", "tailwise", "serve-demo"]


@pytest.mark.parametrize("value", ["nonsense", "20%", "1%xnan", "1%xinf", "150%x10"])
def test_serve_demo_bad_straggler_is_one_line_exit_2(value: str) -> None:
    proc = subprocess.run(
        [*SERVE_DEMO, "--kind", "http", "--port", "0", "--lifetime", "5s", "--straggler", value],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--straggler" in lines[0] and lines[0].startswith("tailwise: error:")
    assert "Traceback" not in proc.stderr
    assert "listening" not in proc.stdout
