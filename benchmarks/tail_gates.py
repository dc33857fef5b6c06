"""Where the tail model may decide: its gates and blocks, before and after, on the same seeds.

The tail model (``tailwise.metrics.tail``) passes a far p99 threshold from the top of
the sample, by a jackknife over 20 blocks of the run. Its first version cut equal
blocks and decided only where 40% of the requests found the system empty (a single
server under 60% load). Now each block starts at such a request (a regeneration
point), and the gate also opens at 10% of them when at least 1,000 did. For each queue
below (300 seeded runs of 8,000 requests from the independent C recursion of
``validation_grid.py``, judged through the product's summary at ``--duration auto``'s
looks) this reports, per threshold (times the true p99: closed form for M/M/c, else a
10^7-10^9-customer recursion), the share of runs decided right, decided wrong, and the
median requests to a right decision, with the gates and blocks of before and of now.

    python benchmarks/tail_gates.py [--runs 300] [--cap 8000] [--jobs 2] [--write-docs]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import validation_grid as vg  # benchmarks/ is on sys.path when run
from docs_block import machine_label, write_block

import tailwise.metrics.tail as tail

FACTORS = (0.7, 0.95, 1.05, 1.5)
CUSTOM = [
    vg.Cell("mm1-0.52", 1, 0.52, "exp"),
    vg.Cell("mm1-0.7", 1, 0.7, "exp"),
    vg.Cell("mm2-0.64", 2, 0.64, "exp"),
    vg.Cell("mm2-0.72", 2, 0.72, "exp"),
    vg.Cell("lognormal1-c1-0.5", 1, 0.5, "lognormal", 1.0),
    vg.Cell("pareto2.5-c1-0.5", 1, 0.5, "pareto", 2.5),
]
GRID = ("mm1-0.8", "mm4-0.8", "gamma-cv2-c1-0.7", "pareto2.5-c1-0.7", "lognormal1.5-c1-0.7")
NOW = (tail.IDLE_GATE, tail.SHORT_CYCLES, tail.MIN_CYCLES, tail.regeneration_blocks)


def _equal_blocks(n: int, idle: Any) -> list[tuple[int, int]]:
    return NOW[3](n, None)


def configure(before: bool) -> None:
    """The engine as it was (equal blocks, 40% gate) or as it is."""
    if before:
        tail.IDLE_GATE, tail.SHORT_CYCLES, tail.MIN_CYCLES = 0.4, 0.4, 0
        tail.regeneration_blocks = _equal_blocks  # type: ignore[assignment]
    else:
        tail.IDLE_GATE, tail.SHORT_CYCLES, tail.MIN_CYCLES, tail.regeneration_blocks = NOW


def one_run(task: tuple[vg.Cell, int, int, float, bool]) -> list[tuple[int, str] | None]:
    """The first deciding look per factor: ``(requests, "p" | "f")`` or None."""
    cell, cap, seed, p99_ms, before = task
    configure(before)  # every task: the pool's processes outlive one
    sched, done, first = vg.sample_path(cell, cap, seed)
    metric = "ttft" if cell.llm else "latency"
    specs = [f"p99({metric})<={round(p99_ms * 1e6 * f)}ns" for f in FACTORS]
    sizes, confs = vg.look_plan(cap)
    out: list[tuple[int, str] | None] = [None] * len(specs)
    for k, conf in zip(sizes, confs, strict=True):
        pending = [i for i, d in enumerate(out) if d is None]
        if not pending:
            break
        firsts = None if first is None else first[:k]
        _, decided, _ = vg.engine_verdicts(
            sched[:k], done[:k], firsts, [specs[i] for i in pending], conf
        )
        for i, d in zip(pending, decided, strict=True):
            if d != "inconclusive":
                out[i] = (k, d[0])
    return out


def score(runs: list[list[tuple[int, str] | None]]) -> list[tuple[float, float, float]]:
    """Per factor: (decided right, decided wrong, median requests to a right decision)."""
    out = []
    for i, f in enumerate(FACTORS):
        right = "f" if f < 1.0 else "p"
        firsts = [r[i] for r in runs]
        ok = sum(1 for d in firsts if d and d[1] == right) / len(runs)
        bad = sum(1 for d in firsts if d and d[1] != right) / len(runs)
        ks = sorted(d[0] if d and d[1] == right else math.inf for d in firsts)
        out.append((ok, bad, ks[len(ks) // 2]))
    return out


def measure(cells: list[vg.Cell], cap: int, runs: int, jobs: int) -> list[dict[str, Any]]:
    rows = []
    with ProcessPoolExecutor(jobs) as pool:
        for cell in cells:
            customers = 10**7 if cell in CUSTOM else vg.TRUTH_CUSTOMERS
            p99_ms = vg.truths([cell], int(customers), jobs)[cell.name]["ms"]["p99"]
            res = {}
            for before in (True, False):
                tasks = [(cell, cap, s, p99_ms, before) for s in range(runs)]
                res["before" if before else "now"] = score(list(pool.map(one_run, tasks)))
            idle = float(tail.idle_on_arrival(*vg.sample_path(cell, cap, 0)[:2]).mean())
            rows.append({"cell": cell.name, "p99_ms": p99_ms, "idle": idle, **res})
            print(f"{cell.name}: {res}", file=sys.stderr, flush=True)
    return rows


def _median(m: float, cap: int) -> str:
    return f"> {cap:,}" if math.isinf(m) else f"{m:,.0f}"


def table(rows: list[dict[str, Any]], cap: int) -> str:
    head = (
        "| queue (share finding it empty) | threshold | decided right: before / now "
        "| wrong: before / now | median requests: before / now |\n|---|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        for i, f in enumerate(FACTORS):
            b, n = r["before"][i], r["now"][i]
            lines.append(
                f"| {r['cell']} ({r['idle']:.0%}) | {f}x p99 | {b[0]:.1%} / {n[0]:.1%} | "
                f"{b[1]:.1%} / {n[1]:.1%} | {_median(b[2], cap)} / {_median(n[2], cap)} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--cap", type=int, default=8000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    cells = CUSTOM + [c for c in vg.CELLS if c.name in GRID]
    started = time.monotonic()
    rows = measure(cells, a.cap, a.runs, a.jobs)
    text = table(rows, a.cap)
    print(text)
    if a.write_docs:
        begin, end = "<!-- tail_gates:begin -->", "<!-- tail_gates:end -->"
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        write_block(
            begin,
            end,
            f"""{begin}
### Where the tail model decides: `benchmarks/tail_gates.py` ({when})

Machine: {machine_label()}; {a.runs} seeded runs of {a.cap:,} requests per queue from
empty, judged at `--duration auto`'s looks through the product's summary, the same
seeds before (equal jackknife blocks, a 40% gate) and now (blocks cut where a request
found the system empty; the gate open at 40%, or at 10% with 1,000 such requests);
{time.monotonic() - started:.0f} s. Right = fail at 0.7x and 0.95x the true p99, pass
at 1.05x and 1.5x.

{text}
{end}""",
        )


if __name__ == "__main__":
    main()
