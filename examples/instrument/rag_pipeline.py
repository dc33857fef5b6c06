"""A RAG pipeline instrumented with tailwise: stages simulated by sleeps with known laws.

Stages and their laws (ms), so the measured table can be checked by hand:

* ``embed``: constant 8
* ``search``: uniform 10-30 (mean 20)
* ``rerank``: exponential, mean 15 (p99 = 15 ln 100 = 69)
* ``generate``: ``prefill`` constant 40, then ``decode`` 2 per token for
  uniform 20-80 tokens (mean 100)

plus about 1 ms of glue outside any stage. Requests arrive open-loop (Poisson,
``--rate``) for ``--duration`` seconds and run concurrently on one event loop;
``asyncio.sleep`` wakes a little late, and that lateness is measured too.

Run: ``python examples/instrument/rag_pipeline.py [--rate 20] [--duration 10]``.
Prints the latency-budget table, the SLO verdicts, the laws' means beside the
measured ones, and (with the ``otel`` extra) the span tree of one request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random

from tailwise.instrument import LatencyTracker

BUDGETS = {
    "embed": "10ms",
    "search": "30ms",
    "rerank": "50ms",
    "generate": "250ms",
    "total": "300ms",
}
SLOS = ["latency<=300ms@99%", "p99(latency)<=350ms", "error_rate<=1%"]
LAW_MEAN_MS = {"embed": 8, "search": 20, "rerank": 15, "generate/prefill": 40,
               "generate/decode": 100}  # fmt: skip


def make_tracker() -> LatencyTracker:
    return LatencyTracker("rag", window="60s", slos=SLOS, budgets=BUDGETS)


async def stages(tracker: LatencyTracker, rng: random.Random) -> int:
    """The pipeline's work, each stage timed; returns the tokens generated."""
    async with tracker.stage("embed"):
        await asyncio.sleep(0.008)
    async with tracker.stage("search"):
        await asyncio.sleep(rng.uniform(0.010, 0.030))
    async with tracker.stage("rerank"):
        await asyncio.sleep(rng.expovariate(1 / 0.015))
    await asyncio.sleep(0.001)  # prompt assembly: glue, outside any stage
    tokens = rng.randint(20, 80)
    async with tracker.stage("generate"):
        async with tracker.stage("prefill"):
            await asyncio.sleep(0.040)
        async with tracker.stage("decode"):
            await asyncio.sleep(0.002 * tokens)
    return tokens


async def answer(tracker: LatencyTracker, rng: random.Random) -> None:
    """One request: its stages nest under it."""
    async with tracker.request("rag_pipeline"):
        await stages(tracker, rng)


async def drive(tracker: LatencyTracker, rate_rps: float, duration_s: float, seed: int) -> None:
    """Open loop: Poisson arrivals, each request its own task, all awaited at the end."""
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    start = loop.time()
    due = 0.0
    tasks = []
    while (due := due + rng.expovariate(rate_rps)) < duration_s:
        await asyncio.sleep(max(start + due - loop.time(), 0.0))
        tasks.append(asyncio.create_task(answer(tracker, random.Random(rng.random()))))
    await asyncio.gather(*tasks)


def laws_vs_measured(tracker: LatencyTracker) -> str:
    lines = ["| stage | law mean | measured mean | measured - law |", "|---|---:|---:|---:|"]
    for path, law_ms in LAW_MEAN_MS.items():
        got = tracker.stage_stats(path).mean_ms
        lines.append(f"| {path} | {law_ms:.1f} ms | {got:.2f} ms | {got - law_ms:+.2f} ms |")
    return "\n".join(lines)


def span_tree(tracker: LatencyTracker) -> str | None:
    """One request's spans, through an in-memory OpenTelemetry exporter (None without otel)."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    from tailwise.instrument import instrument_otel

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    instrument_otel(tracker, tracer_provider=provider)
    asyncio.run(answer(tracker, random.Random(1)))
    done = spans.get_finished_spans()

    def render(span: object, depth: int) -> list[str]:
        ms = (span.end_time - span.start_time) / 1e6  # type: ignore[attr-defined]
        me = span.context.span_id  # type: ignore[attr-defined]
        out = [f"{'    ' * depth}{span.name} ({ms:.1f} ms)"]  # type: ignore[attr-defined]
        kids = sorted(
            (s for s in done if s.parent is not None and s.parent.span_id == me),
            key=lambda s: s.start_time or 0,
        )
        for kid in kids:
            out += render(kid, depth + 1)
        return out

    root = next(s for s in done if s.parent is None)
    return "\n".join(render(root, 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rate", type=float, default=20.0, help="requests per second")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of arrivals")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    tracker = make_tracker()
    asyncio.run(drive(tracker, a.rate, a.duration, a.seed))
    print(tracker.budget(speedup=2.0).markdown())
    print()
    print(json.dumps(tracker.slo_report(), indent=1))
    print()
    print(laws_vs_measured(tracker))
    tree = span_tree(tracker)
    if tree:
        print()
        print(tree)


if __name__ == "__main__":
    main()
