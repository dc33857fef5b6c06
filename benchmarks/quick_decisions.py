"""How soon the decision engine decides a clear case, and how often it is then wrong.

Issue 39's bar: "a 42%-load M/M/1 run with p99 <= 2x the truth decides within 1,500
requests". Each case below is an M/M/1 queue (mean service 20 ms) at a light load,
capped at a number of requests, judged with ``--duration auto``'s looks (the sizes and
per-look confidences of :func:`tailwise.loadgen.engine.watch.plan_looks`, the cap the last
look) through :func:`validation_grid.engine_verdicts` (the product's summary). For each
threshold (times the closed-form p99) it reports the share of runs decided right, the
share decided wrong, and the median requests to the first decision (runs that never
decide count as past the cap). Side by side, in the same run on the same seeds, three
engines: the product's (counting, the tail model of ``tailwise.metrics.tail`` and the
FIFO queue model of ``tailwise.metrics.fifo``), without the FIFO model (its minimum
sample set out of reach), and counting alone (the tail model's idle gate set above 1
too, which no run meets).

Right: a pass where the threshold is at or above the true p99 (1.05x, 1.5x, 2x), a fail
where it is below (0.95x). Truth: the M/M/1 sojourn is exponential with rate
``mu - lambda``, so the p99 is ``ln(100) / (mu - lambda)``.

Usage::

    python benchmarks/quick_decisions.py [--runs 400] [--jobs 2] [--write-docs]
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import validation_grid as vg  # benchmarks/ is on sys.path when run
from docs_block import machine_label, write_block

import tailwise.metrics.fifo as fifo
import tailwise.metrics.tail as tail

ENGINES = ("both models", "tail model", "counting")  # what each engine adds to counting
CASES = ((0.42, 1_500), (0.54, 3_000), (0.6, 5_000))  # (load, requests cap)
FACTORS = (0.95, 1.05, 1.5, 2.0)
RUNS = 400
IDLE_GATE = tail.IDLE_GATE
FIFO_MIN = fifo.MIN_REQUESTS


def true_p99_s(rho: float) -> float:
    mu = 1.0 / vg.SERVICE_S
    return math.log(100.0) / (mu - rho * mu)


def one_run(task: tuple[float, int, int, str]) -> list[list[Any] | None]:
    """First deciding look per factor: ``[requests, "p" | "f"]`` or None."""
    rho, cap, seed, engine = task
    # Without a model: a gate no run meets (an idle share over 1, more requests than any
    # run has). Set for every task: the pool's processes outlive it.
    tail.IDLE_GATE = IDLE_GATE if engine != "counting" else 2.0
    fifo.MIN_REQUESTS = FIFO_MIN if engine == "both models" else 10**12
    cell = vg.Cell(f"mm1-{rho}", 1, rho, "exp")
    sched, done, _ = vg.sample_path(cell, cap, seed)
    p99_ns = true_p99_s(rho) * 1e9
    specs = [f"p99(latency)<={round(p99_ns * f)}ns" for f in FACTORS]
    sizes, confs = vg.look_plan(cap)
    first: list[list[Any] | None] = [None] * len(specs)
    for k, conf in zip(sizes, confs, strict=True):
        pending = [i for i, d in enumerate(first) if d is None]
        if not pending:
            break
        _, decided, _ = vg.engine_verdicts(
            sched[:k], done[:k], None, [specs[i] for i in pending], conf
        )
        for i, d in zip(pending, decided, strict=True):
            if d != "inconclusive":
                first[i] = [k, d[0]]
    return first


def summarise(runs: list[list[list[Any] | None]], cap: int) -> list[dict[str, Any]]:
    out = []
    for i, f in enumerate(FACTORS):
        right = "f" if f < 1.0 else "p"
        firsts = [r[i] for r in runs]
        ks = sorted(d[0] if d else math.inf for d in firsts)
        out.append(
            {
                "factor": f,
                "right": sum(1 for d in firsts if d and d[1] == right) / len(runs),
                "wrong": sum(1 for d in firsts if d and d[1] != right) / len(runs),
                "median_requests": statistics.median(ks),
                "cap": cap,
            }
        )
    return out


def _median_text(m: float, cap: int) -> str:
    return f"> {cap:,}" if not math.isfinite(m) else f"{m:,.0f}"


def table(results: dict[tuple[float, str], list[dict[str, Any]]]) -> str:
    heads = " / ".join(ENGINES)
    lines = [
        f"| load (cap) | threshold | decided right: {heads} | wrong | "
        "median requests to decide |",
        "|---|---:|---:|---:|---:|",
    ]
    for rho, cap in CASES:
        rows = zip(*(results[(rho, e)] for e in ENGINES), strict=True)
        for cells in rows:
            right = " / ".join(f"{c['right']:.1%}" for c in cells)
            wrong = " / ".join(f"{c['wrong']:.1%}" for c in cells)
            median = " / ".join(_median_text(c["median_requests"], cap) for c in cells)
            lines.append(
                f"| M/M/1 {rho} ({cap:,}) | {cells[0]['factor']}x p99 | {right} | {wrong} | "
                f"{median} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    vg.c_library()
    started = time.monotonic()
    results: dict[tuple[float, str], list[dict[str, Any]]] = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for rho, cap in CASES:
            for engine in ENGINES:
                tasks = [(rho, cap, args.seed * 100_000 + r, engine) for r in range(args.runs)]
                runs = list(pool.map(one_run, tasks, chunksize=20))
                results[(rho, engine)] = summarise(runs, cap)
                print(f"M/M/1 {rho} {engine}: done", file=sys.stderr, flush=True)
    wall_s = time.monotonic() - started
    text = table(results)
    print(text)
    if args.write_docs:
        begin, end = "<!-- quick_decisions:begin -->", "<!-- quick_decisions:end -->"
        block = f"""{begin}
### Clear cases, decided early: `benchmarks/quick_decisions.py` ({datetime.date.today()})

Machine: {machine_label()}; {args.runs} seeded runs per case from an empty M/M/1 queue
(mean service 20 ms), judged at `--duration auto`'s looks up to the cap; {wall_s:.0f} s.
Each cell: the engine with both models (the tail's and the FIFO queue's) / with the tail
model alone / counting alone (same seeds). Right = pass at 1.05x and above the true p99,
fail at 0.95x.

{text}
{end}"""
        write_block(begin, end, block)


if __name__ == "__main__":
    main()
