"""Multi-turn sessions against a loopback server that records every conversation it got."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tailwise
from tailwise.errors import BadInput
from tailwise.loadgen.runner import RunOptions, prepare
from tests.wire import read_json_request

THINK_MS = 50
TURNS = 3
SESSIONS = 4


class Recorder:
    def __init__(self) -> None:
        self.got: list[tuple[int, list[dict[str, Any]]]] = []  # (monotonic ns, messages)
        self.sent: list[str] = []  # the answer of each request, in arrival order
        self.max_tokens: list[int | None] = []


@pytest.fixture(scope="module")
def chat() -> Iterator[tuple[str, Recorder]]:
    rec = Recorder()
    loop = asyncio.new_event_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                body = await read_json_request(reader)
                rec.got.append((time.monotonic_ns(), body["messages"]))
                rec.max_tokens.append(body.get("max_tokens"))
                answer = f"answer {len(rec.sent)}"
                rec.sent.append(answer)
                usage = {"prompt_tokens": 10 * len(body["messages"]), "completion_tokens": 2}
                events = [
                    {"choices": [{"index": 0, "delta": {"content": answer[:6]}}]},
                    {"choices": [{"index": 0, "delta": {"content": answer[6:]}}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {"choices": [], "usage": usage},
                ]
                data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
                data += b"data: [DONE]\n\n"
                await asyncio.sleep(0.01)  # a little service time
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(data), data)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", rec
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


@pytest.fixture(scope="module")
def ran(chat: tuple[str, Recorder], tmp_path_factory: pytest.TempPathFactory) -> Any:
    url, rec = chat
    res = tailwise.run(
        url,
        api="openai-chat",
        model="m",
        rate="10/s",
        requests=SESSIONS,
        turns=TURNS,
        think=f"{THINK_MS}ms",
        max_tokens=4,
        input_tokens=8,
        out=str(tmp_path_factory.mktemp("sessions") / "run"),
        server_metrics="off",
    )
    return res, rec


def test_every_turn_of_every_session_is_sent_once(ran: Any) -> None:
    res, rec = ran
    req = res.summary["requests"]
    assert req["scheduled"] == req["ok"] == SESSIONS * TURNS and req["accounted"]
    assert len(rec.got) == SESSIONS * TURNS


def test_history_grows_with_the_servers_own_answers(ran: Any) -> None:
    _, rec = ran
    by_session: dict[str, list[tuple[list[dict[str, Any]], str]]] = defaultdict(list)
    for (_, messages), answer in zip(rec.got, rec.sent, strict=True):
        by_session[messages[0]["content"]].append((messages, answer))
    assert len(by_session) == SESSIONS
    for turns in by_session.values():
        assert [len(m) for m, _ in turns] == [1, 3, 5]  # user, +answer +user, ...
        for k in range(1, TURNS):
            messages, _ = turns[k]
            previous, answer = turns[k - 1]
            assert messages[: len(previous)] == previous  # the conversation so far, unchanged
            assert messages[len(previous)] == {"role": "assistant", "content": answer}
            assert messages[-1]["role"] == "user"


def test_think_time_and_latency_from_the_intended_instant(ran: Any) -> None:
    res, rec = ran
    r = res.records
    by_session: dict[str, list[int]] = defaultdict(list)
    for t_ns, messages in rec.got:
        by_session[messages[0]["content"]].append(t_ns)
    for times in by_session.values():
        # the server got turn k+1 no sooner than THINK after it got turn k (it answered between)
        assert all(b - a >= THINK_MS * 1_000_000 for a, b in itertools.pairwise(times))
    turns = res.summary["sessions"]["by_turn"]
    assert [t["ttft_ms"]["count"] for t in turns] == [SESSIONS] * TURNS
    # each later turn (its parent: the session's previous turn) is due exactly THINK after
    # the previous answer ended, and its latency counts from there
    later = np.flatnonzero(r.parent >= 0)
    assert len(later) == SESSIONS * (TURNS - 1)
    prev = r.parent[later]
    assert (r.scheduled_ns[later] == r.done_ns[prev] + THINK_MS * 1_000_000).all()
    assert (r.sent_ns >= r.scheduled_ns).all()
    latency = res.summary["latency_ms"]
    assert latency["max"] == pytest.approx(float((r.done_ns - r.scheduled_ns).max()) / 1e6)
    # the server's prompt count grows with the history: 10 tokens a message
    assert [t["input_tokens_mean"] for t in turns] == [10.0, 30.0, 50.0]


def test_session_options_are_checked() -> None:
    base = {"urls": ["http://127.0.0.1:1/"], "model": "m", "rate": "1/s"}
    with pytest.raises(BadInput, match="--turns"):
        prepare(RunOptions(api="openai-completions", turns=2, **base))  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="--turns"):
        prepare(RunOptions(api="openai-chat", turns="0", **base))  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="--turns"):
        prepare(RunOptions(api="openai-chat", turns=2, workers=2, **base))  # type: ignore[arg-type]


def test_sharegpt_conversations_replay_their_real_turns(
    chat: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rec = chat
    convs = [
        [
            ("human", "first question"),
            ("gpt", "a b"),
            ("human", "second"),
            ("gpt", "a b c d e"),
            ("human", "third"),
        ],
        [("human", "only one"), ("gpt", "x y z")],
    ]
    path = tmp_path / "sharegpt.jsonl"
    rows = [{"conversations": [{"from": f, "value": v} for f, v in c]} for c in convs]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    seen = len(rec.got)
    res = tailwise.run(
        url,
        api="openai-chat",
        model="m",
        rate="10/s",
        requests=2,
        turns=3,
        think="10ms",
        max_tokens=9,
        prompts=str(path),
        out=str(tmp_path / "run"),
        server_metrics="off",
    )
    assert res.summary["requests"]["ok"] == 4  # 3 real turns, then 1: never more than recorded
    assert res.summary["sessions"]["ended_early"] == 0
    got = rec.got[seen:]
    longest = max(([x["content"] for x in m if x["role"] == "user"] for _, m in got), key=len)
    assert longest == ["first question", "second", "third"]
    # max_tokens: the recorded answers' lengths in words, then --max-tokens where none
    asked = {m[-1]["content"]: n for (_, m), n in zip(got, rec.max_tokens[seen:], strict=True)}
    assert asked == {"first question": 2, "second": 5, "third": 9, "only one": 3}
