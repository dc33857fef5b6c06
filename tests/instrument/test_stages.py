"""Stages nest into requests in sync code, asyncio tasks and threads; the budget adds up."""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor

import pytest

from tailwise.capacity import amdahl_speedup
from tailwise.instrument import LatencyTracker
from tests.instrument.conftest import FakeClock

MS = 1_000_000


def rag_request(t: LatencyTracker, clock: FakeClock, embed_ms: int, search_ms: int) -> None:
    """embed, search (with a nested rerank of 2 ms), generate 30 ms, and 1 ms of glue."""
    with t.request():
        with t.stage("embed"):
            clock.advance(embed_ms * MS)
        with t.stage("search"):
            clock.advance(search_ms * MS)
            with t.stage("rerank"):
                clock.advance(2 * MS)
        clock.advance(1 * MS)  # glue code outside any stage
        with t.stage("generate"):
            clock.advance(30 * MS)


def test_stages_nest_and_the_budget_table_adds_up(clock: FakeClock) -> None:
    budgets = {"embed": "5ms", "search": "10ms", "generate": "40ms"}
    t = LatencyTracker("rag", budgets=budgets, clock=clock)
    for i in range(100):
        rag_request(t, clock, embed_ms=4 if i < 98 else 20, search_ms=6)
    assert t.stage_paths == ["embed", "search/rerank", "search", "generate", "(unattributed)"]
    report = t.budget(speedup=3.0)
    rows = {r.stage: r for r in report.rows}
    assert [r.stage for r in report.rows] == [
        "request",
        "embed",
        "search",
        "search/rerank",
        "generate",
        "(unattributed)",
    ]
    total_ms = 98 * 43 + 2 * 59
    assert rows["request"].mean_ms == pytest.approx(total_ms / 100)
    assert rows["embed"].share == pytest.approx((98 * 4 + 2 * 20) / total_ms)
    assert rows["search"].share == pytest.approx(100 * 8 / total_ms)  # includes its rerank
    assert rows["(unattributed)"].mean_ms == pytest.approx(1.0)  # measured per request
    top = ["embed", "search", "generate", "(unattributed)"]
    assert sum(rows[p].share for p in top) == pytest.approx(1.0)
    g = rows["generate"].share
    assert rows["generate"].speedup == pytest.approx(amdahl_speedup([g, 1 - g], [3.0, 1.0]))
    assert rows["generate"].ceiling == pytest.approx(1 / (1 - g))
    assert rows["search/rerank"].speedup is None  # nested: inside its parent's share
    # the tail, not the mean, is judged against the budget (seed 001)
    assert rows["embed"].mean_ms < 5 and rows["embed"].tail_ms == pytest.approx(20, rel=1e-3)
    assert rows["embed"].over is True and rows["generate"].over is False
    assert rows["request"].budget_ms == pytest.approx(55.0)
    table = report.markdown()
    assert "OVER" in table and "| **request** | 100 |" in table and "↳ rerank" in table
    assert report.as_dict()["rows"][0]["stage"] == "request"


def test_decorators_time_sync_and_awaited_bodies(clock: FakeClock) -> None:
    t = LatencyTracker(clock=clock)

    @t.stage("parse")
    def parse() -> str:
        clock.advance(3 * MS)
        return "parsed"

    @t.stage("fetch")
    async def fetch() -> str:
        await asyncio.sleep(0)
        clock.advance(7 * MS)  # after a suspension: the awaited body is what counts
        return "fetched"

    @t.request()
    async def handle() -> tuple[str, str]:
        return parse(), await fetch()

    assert asyncio.run(handle()) == ("parsed", "fetched")
    assert t.stage_stats("parse").max_ns == 3 * MS
    assert t.stage_stats("fetch").max_ns == 7 * MS
    assert t.stats().sum_ns == 10 * MS


def test_concurrent_async_requests_keep_their_own_stage_trees(clock: FakeClock) -> None:
    t = LatencyTracker(clock=clock)
    seen: list[tuple[str, str]] = []

    async def one(name: str) -> None:
        async with t.request():
            async with t.stage(name):
                await asyncio.sleep(0)  # interleave with the other request
                async with t.stage("inner"):
                    await asyncio.sleep(0)
                    seen.append((name, "inner"))
            # a task created inside the request inherits it
            await asyncio.create_task(child())

    async def child() -> None:
        with t.stage("child"):
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(one("a"), one("b"))

    asyncio.run(main())
    assert sorted(t.stage_paths) == ["(unattributed)", "a", "a/inner", "b", "b/inner", "child"]
    assert t.stats().count == 2 and t.stage_stats("child").count == 2


def test_context_follows_into_threads_that_copy_it(clock: FakeClock) -> None:
    t = LatencyTracker(clock=clock)

    def work() -> None:
        with t.stage("in_thread"):
            clock.advance(MS)

    async def main() -> None:
        with t.stage("outer"):
            await asyncio.to_thread(work)  # copies the context
            with ThreadPoolExecutor(1) as pool:
                ctx = contextvars.copy_context()
                pool.submit(ctx.run, work).result()
                pool.submit(work).result()  # plain submit: no context, a top-level stage

    asyncio.run(main())
    assert t.stage_stats("outer/in_thread").count == 2
    assert t.stage_stats("in_thread").count == 1


def test_a_failing_stage_counts_as_failed_and_still_raises(clock: FakeClock) -> None:
    t = LatencyTracker(clock=clock)
    with pytest.raises(ValueError), t.request(), t.stage("embed"):
        clock.advance(MS)
        raise ValueError("model down")
    with t.request() as req:
        req.ok = False  # failed without raising (e.g. a degraded answer)
    assert t.stage_stats("embed").failed == 1
    assert t.stats().failed == 2 and t.stats().ok == 0
