"""What in-process instrumentation costs a service: ns per record, per stage, per request.

Measured in one process, each the median of REPEATS runs of CALLS calls:

* ``LatencyTracker.record`` (the hot path: lock, clock read, append), alone and
  with two threads recording into one tracker at once;
* ``with tracker.stage(...)`` and a request holding one stage (two clock reads,
  a contextvar set and reset, the record);
* the ASGI middleware around a trivial app, minus the bare app;
* the reference: ``hdrh``'s ``HdrHistogram.record_value`` per value, the
  obvious way to feed an HdrHistogram from Python;
* a read (``tracker.stats()``) of a full 60 s window at 1,000 requests/s:
  first (folding every pending value) and again (merge only).

Target (issue 9): ``record`` under 2 microseconds.

Usage: ``python benchmarks/instrument_overhead.py [--write-docs]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

from tailwise.instrument import LatencyMiddleware, LatencyTracker
from tailwise.metrics.histogram import new_histogram

CALLS = 200_000
REPEATS = 7
TARGET_NS = 2_000
BUDGET_DATE = "2026-11-21"


def per_call_ns(body: Callable[[int], None], calls: int = CALLS) -> float:
    """Median over REPEATS of the wall time of ``body(calls)`` divided by ``calls``."""
    samples = []
    for _ in range(REPEATS):
        t0 = time.perf_counter_ns()
        body(calls)
        samples.append((time.perf_counter_ns() - t0) / calls)
    return statistics.median(samples)


def bench_record() -> float:
    record = LatencyTracker().record

    def body(n: int) -> None:
        for i in range(n):
            record(1_000_000 + i)

    return per_call_ns(body)


def bench_record_two_threads() -> float:
    """Wall time per record with two threads recording into one tracker at once."""
    record = LatencyTracker().record

    def body(n: int) -> None:
        half = n // 2

        def work() -> None:
            for i in range(half):
                record(1_000_000 + i)

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    return per_call_ns(body)


def bench_stage() -> float:
    tracker = LatencyTracker()

    def body(n: int) -> None:
        for _ in range(n):
            with tracker.stage("embed"):
                pass

    return per_call_ns(body, CALLS // 4)


def bench_request_with_stage() -> float:
    tracker = LatencyTracker()

    def body(n: int) -> None:
        for _ in range(n):
            with tracker.request(), tracker.stage("embed"):
                pass

    return per_call_ns(body, CALLS // 4)


def bench_empty_loop() -> float:
    def body(n: int) -> None:
        for _ in range(n):
            pass

    return per_call_ns(body)


def bench_hdrh_record_value() -> float:
    h = new_histogram()

    def body(n: int) -> None:
        for i in range(n):
            h.record_value(1_000_000 + i)

    return per_call_ns(body, CALLS // 4)


async def _bare(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def bench_middleware() -> tuple[float, float]:
    """(ns per request through the middleware, ns for the bare app), driven directly."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def send(message: Any) -> None:
        return None

    scope = {"type": "http", "path": "/predict", "method": "GET"}

    def runner(app: Any) -> Callable[[int], None]:
        async def many(n: int) -> None:
            for _ in range(n):
                await app(dict(scope), receive, send)

        return lambda n: asyncio.run(many(n))

    wrapped = per_call_ns(runner(LatencyMiddleware(_bare)), CALLS // 10)
    bare = per_call_ns(runner(_bare), CALLS // 10)
    return wrapped, bare


def bench_read() -> tuple[float, float, int]:
    """(first read ms, second read ms, values): a 60 s window filled at 1,000/s."""
    now = [0]
    tracker = LatencyTracker(clock=lambda: now[0])
    for i in range(60_000):
        now[0] = i * 1_000_000
        tracker.record(1_000_000 + (i * 7919) % 50_000_000)
    t0 = time.perf_counter_ns()
    first = tracker.stats()
    t1 = time.perf_counter_ns()
    tracker.stats().percentile_ms(99)
    t2 = time.perf_counter_ns()
    return (t1 - t0) / 1e6, (t2 - t1) / 1e6, first.count


def measure() -> dict[str, Any]:
    wrapped, bare = bench_middleware()
    first_ms, again_ms, values = bench_read()
    record = bench_record()
    return {
        "record_ns": round(record),
        "record_two_threads_ns": round(bench_record_two_threads()),
        "stage_ns": round(bench_stage()),
        "request_with_stage_ns": round(bench_request_with_stage()),
        "middleware_ns": round(wrapped - bare),
        "bare_app_ns": round(bare),
        "hdrh_record_value_ns": round(bench_hdrh_record_value()),
        "empty_loop_ns": round(bench_empty_loop()),
        "read_first_ms": round(first_ms, 1),
        "read_again_ms": round(again_ms, 1),
        "read_values": values,
        "ratio_to_target": round(record / TARGET_NS, 3),
    }


def rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    n = r["read_values"]
    return [
        ("`tracker.record(latency_ns)`", f"**{r['record_ns']} ns**"),
        (
            "`tracker.record`, two threads, one tracker (wall per record)",
            f"{r['record_two_threads_ns']} ns",
        ),
        ('`with tracker.stage("embed")`', f"{r['stage_ns']} ns"),
        ('`with tracker.request(), tracker.stage("embed")`', f"{r['request_with_stage_ns']} ns"),
        (
            f"`LatencyMiddleware` per request (bare app: {r['bare_app_ns']} ns)",
            f"{r['middleware_ns']} ns",
        ),
        ("reference: `hdrh` `HdrHistogram.record_value`", f"{r['hdrh_record_value_ns']} ns"),
        (
            f"`tracker.stats()`, full 60 s window ({n:,} values), first read",
            f"{r['read_first_ms']} ms",
        ),
        ("the same read again (already folded)", f"{r['read_again_ms']} ms"),
    ]


def write_docs(r: dict[str, Any], machine: str) -> None:
    begin, end = "<!-- instrument_overhead:begin -->", "<!-- instrument_overhead:end -->"
    table = "\n".join(f"| {label} | {cost} |" for label, cost in rows(r))
    block = f"""{begin}
## In-process instrumentation: `benchmarks/instrument_overhead.py` ({BUDGET_DATE})

What `tailwise.instrument` costs the service it measures. Each number is the
median of {REPEATS} runs in one process (ns per call, the Python loop included;
an empty loop costs {r["empty_loop_ns"]} ns an iteration). Machine: {machine}.

| operation | cost |
|---|---:|
{table}

Target (issue 9): `record` under 2 us. Measured {r["record_ns"]} ns, **{r["ratio_to_target"]:.2f}x
the target**. Recording appends one integer to the current bucket's
`array('q')` under a lock; binning into HdrHistogram cells (vectorized, the
same cells `record_value` picks) waits for a read, which is why the first
read of a full window costs milliseconds and the hot path does not. The
reference `record_value` is a single unlocked histogram: no window, not
thread-safe, and still slower per value. Two threads recording at once pay
for the GIL and lock hand-offs between them; stages pay for two clock reads
and a contextvar set and reset; the middleware for a request scope, two
records (app-wide and per route) and the in-flight integral.
{end}"""
    write_block(begin, end, block)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    result = measure()
    print(json.dumps(result, indent=2), flush=True)
    if a.write_docs:
        write_docs(result, machine_label())


if __name__ == "__main__":
    main()
