"""The ASGI middleware, driven directly (no server) with a fake clock: every number is exact."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tailwise.instrument import LatencyMiddleware
from tests.instrument.conftest import FakeClock

MS = 1_000_000
S = 1_000_000_000
Scope = dict[str, Any]


class Route:
    """Stands in for a Starlette route: the middleware reads ``scope["route"].path``."""

    def __init__(self, path: str) -> None:
        self.path = path


def app_for(clock: FakeClock, chunks_ms: list[int], status: int = 200, route: str = "") -> Any:
    """An ASGI app that waits ``chunks_ms[0]`` then sends one body chunk per entry."""

    async def app(scope: Scope, receive: Any, send: Callable[[Any], Awaitable[None]]) -> None:
        if route:
            scope["route"] = Route(route)
        await send({"type": "http.response.start", "status": status, "headers": []})
        for i, wait_ms in enumerate(chunks_ms):
            clock.advance(wait_ms * MS)
            more = i < len(chunks_ms) - 1
            await send({"type": "http.response.body", "body": b"x", "more_body": more})

    return app


async def call(app: Any, path: str = "/x") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "method": "GET"}, receive, send)
    return sent


def test_latency_and_first_chunk_of_a_stream(clock: FakeClock) -> None:
    inner = app_for(clock, [30, 5, 5, 10], route="/v1/stream/{id}")
    mw = LatencyMiddleware(inner, clock=clock)
    sent = asyncio.run(call(mw, "/v1/stream/7"))
    assert len(sent) == 5  # passed through untouched
    rs = mw.routes["/v1/stream/{id}"]  # the template, not the raw path
    assert rs.latency.stats().max_ns == 50 * MS
    assert rs.first_chunk.stats().max_ns == 30 * MS
    assert mw.tracker.stats().count == 1 and mw.in_flight.level == 0


def test_plain_responses_have_no_first_chunk_series_and_errors_fail(clock: FakeClock) -> None:
    mw = LatencyMiddleware(app_for(clock, [4]), clock=clock)
    asyncio.run(call(mw, "/a"))
    assert mw.routes["/a"].first_chunk.stats().count == 0
    mw500 = LatencyMiddleware(app_for(clock, [4], status=503), clock=clock)
    asyncio.run(call(mw500, "/a"))
    assert mw500.tracker.stats().failed == 1

    async def broken(scope: Scope, receive: Any, send: Any) -> None:
        clock.advance(2 * MS)
        raise RuntimeError("boom")

    mw_err = LatencyMiddleware(broken, clock=clock)
    with pytest.raises(RuntimeError):
        asyncio.run(call(mw_err, "/b"))
    s = mw_err.routes["/b"].latency.stats()
    assert s.failed == 1 and s.max_ns == 2 * MS and mw_err.in_flight.level == 0


def test_unbounded_paths_fold_into_other_and_metrics_are_skipped(clock: FakeClock) -> None:
    mw = LatencyMiddleware(app_for(clock, [1]), clock=clock, max_routes=3)
    for i in range(6):
        asyncio.run(call(mw, f"/item/{i}"))
    asyncio.run(call(mw, "/metrics"))
    asyncio.run(call(mw, "/item/0"))  # a known path keeps its own series
    assert sorted(mw.routes) == ["(other)", "/item/0", "/item/1", "/item/2"]
    assert mw.routes["(other)"].latency.stats().count == 3
    assert mw.routes["/item/0"].latency.stats().count == 2
    assert mw.tracker.stats().count == 7  # /metrics not counted


def test_littles_law_from_a_known_schedule(clock: FakeClock) -> None:
    """Requests every 10 ms, each 25 ms long: L = 2.5 exactly in steady state."""
    mw = LatencyMiddleware(app_for(clock, [0]), clock=clock, window="1s", bucket="100ms")
    loop = asyncio.new_event_loop()
    starts = [i * 10 * MS for i in range(400)]
    events = sorted(
        [(t, "start", i) for i, t in enumerate(starts)]
        + [(t + 25 * MS, "end", i) for i, t in enumerate(starts)]
    )
    base = clock.now_ns
    pending: dict[int, asyncio.Future[None]] = {}
    tasks = []

    def app_waiting(i: int) -> Any:
        async def app(scope: Scope, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await pending[i]
            await send({"type": "http.response.body", "body": b"ok"})

        return app

    async def drive() -> None:
        for t, what, i in events:
            clock.now_ns = base + t
            if what == "start":
                pending[i] = loop.create_future()
                mw.app = app_waiting(i)
                tasks.append(loop.create_task(call(mw)))
                await asyncio.sleep(0)  # let it enter the middleware now
            else:
                pending[i].set_result(None)
                await asyncio.sleep(0)
                await asyncio.sleep(0)

    loop.run_until_complete(drive())
    loop.close()
    law = mw.littles_law()
    assert law["w_ms"] == pytest.approx(25.0)
    assert law["lambda_rps"] == pytest.approx(100.0, rel=0.02)
    assert law["l_measured"] == pytest.approx(2.5, rel=0.02)
    assert law["rel_gap"] < 0.02
