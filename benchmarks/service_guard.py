"""The bare-service guard against the validation grid's stored runs (issue 39).

:func:`tailwise.metrics.uncertainty.heavy_service` refuses a pass and every interval
where the requests that found the system empty (the service alone) fall off heavier
than an exponential. It only ever turns a pass into "inconclusive" and declines
intervals; it never makes or changes a fail. So its effect on the grid's full-size
verdicts can be computed exactly from the grid's stored runs
(``benchmarks/results/validation_grid.json``: each run's decisions, in
``slo_list`` order) and each run's own sample path, rebuilt from the same seed by the
same C recursion (``validation_grid.sample_path``): a run the guard flags keeps its
fails and loses its passes. The looks of ``--duration auto`` (requests to decide) are
not recomputed here; the next full grid run (``validation_grid.py``) measures them.

For each cell and size: the share of runs whose bare service the guard flags, the
worst false pass (a pass at 0.7x or 0.95x the truth) before and after, and the passes
at 1.5x the truth (the decided share there) before and after.

Usage::

    python benchmarks/service_guard.py [--sizes 5000,50000] [--cells lognormal,pareto]
        [--big lognormal2-c1-0.7,pareto2.5-c1-0.7] [--write-docs]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import validation_grid as vg
from docs_block import machine_label, write_block

from tailwise.metrics import uncertainty
from tailwise.metrics.steady import auto_start_ns
from tailwise.metrics.tail import idle_on_arrival, regeneration
from tailwise.metrics.uncertainty import decide_within, heavy_service, heavy_tailed

GRID = Path(__file__).resolve().parent / "results" / "validation_grid.json"
BIG = "lognormal2-c1-0.7,pareto2.5-c1-0.7"  # the 500,000-request cells with a false pass


def flags(cell: vg.Cell, n: int, run: int) -> tuple[bool, bool]:
    """(bare service heavy, values heavy) of one run, judged as the grid judges it."""
    sched, done, first = vg.sample_path(cell, n, vg.seed_of(1, cell, n, run))
    lat = (done if first is None else first) - sched
    start, _ = auto_start_ns(sched, done - sched, np.ones(n, bool), (0, int(sched[-1]) + 1))
    window = sched >= start
    x = lat[window].astype(np.float64)
    idle = idle_on_arrival(sched, done)[window]
    return heavy_service(regeneration(idle, x)), heavy_tailed(x)


def rejudge(cell: vg.Cell, n: int, runs: list[list[Any]], decided_at: int) -> dict[str, Any]:
    svc = np.zeros(len(runs), dtype=bool)
    refused = np.zeros(len(runs), dtype=bool)
    for i in range(len(runs)):
        s, v = flags(cell, n, i)
        svc[i], refused[i] = s, s or v
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    for j, (stat, factor) in enumerate(vg.slo_list(n)):
        passed = np.array([r[decided_at][j] == "p" for r in runs])
        before[f"{stat}@{factor}"] = float(passed.mean())
        after[f"{stat}@{factor}"] = float((passed & ~refused).mean())
    return {"cell": cell.name, "label": cell.label(), "n": n, "runs": len(runs),
            "flagged": float(svc.mean()), "before": before, "after": after}  # fmt: skip


def _worst_false(p: dict[str, float]) -> tuple[str, float]:
    wrong = {k: v for k, v in p.items() if float(k.split("@")[1]) < 1.0}
    key = max(wrong, key=lambda k: wrong[k])
    return key, wrong[key]


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| cell | n | bare service flagged | worst false pass (before → now) "
        "| passed at 1.5x, p99 (before → now) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        key, b = _worst_false(r["before"])
        a = r["after"][key]
        worst_after = max(v for k, v in r["after"].items() if float(k.split("@")[1]) < 1.0)
        out.append(
            f"| {r['label']} | {r['n']:,} | {r['flagged']:.1%} | {b:.1%} → {worst_after:.1%} "
            f"({key}: {a:.1%}) | {r['before']['p99@1.5']:.1%} → {r['after']['p99@1.5']:.1%} |"
        )
    return "\n".join(out)


def lognormal_one(runs: int = 100, n: int = 50_000) -> str:
    """The guard's price on a moderately heavy service it was not tuned on: M/G/1 at 70%
    load, lognormal service (sigma 1, mean 20 ms), ``n`` requests a run, truth from one
    run of 2 x 10^7 customers (numpy Lindley); passes at 0.95x and 1.5x the true p99
    with the guard and without it (same runs)."""
    rng = np.random.default_rng(7)

    def path(m: int) -> tuple[np.ndarray, np.ndarray]:
        service = 0.02 * rng.lognormal(-0.5, 1.0, m)
        u = np.concatenate(([0.0], np.cumsum(service[:-1] - rng.exponential(0.02 / 0.7, m)[1:])))
        wait = u - np.minimum.accumulate(np.minimum(u, 0.0))
        return wait + service, wait <= 0.0

    truth = float(np.quantile(path(20_000_000)[0][1_000_000:], 0.99))
    flagged, got = 0, {"guard": [0, 0], "without": [0, 0]}
    for _ in range(runs):
        x, idle = path(n)
        regen = regeneration(idle, x)
        flagged += heavy_service(regen)
        for name, bar in (("guard", uncertainty.HEAVY_SERVICE), ("without", float("inf"))):
            saved, uncertainty.HEAVY_SERVICE = uncertainty.HEAVY_SERVICE, bar
            for i, f in enumerate((0.95, 1.5)):
                got[name][i] += decide_within(x, f * truth, 0.99, 0.95, regen)[2] == "pass"
            uncertainty.HEAVY_SERVICE = saved
    return (
        f"M/LN(sigma 1)/1 at 70% load, {n:,} requests, {runs} runs (true p99 "
        f"{truth * 1e3:.0f} ms): bare service flagged in {flagged}; false passes at 0.95x "
        f"{got['guard'][0]} with the guard, {got['without'][0]} without; passes at 1.5x "
        f"{got['guard'][1]} with, {got['without'][1]} without."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,50000")
    ap.add_argument("--cells", default="", help="comma-separated substrings of cell names")
    ap.add_argument("--big", default=BIG, help="cells also re-judged at 500,000 requests")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    grid = json.loads(GRID.read_text())
    decided_at = grid["runs"]["fields"].index("decided")
    wanted = [s for s in args.cells.split(",") if s]
    cells = [c for c in vg.CELLS if not wanted or any(w in c.name for w in wanted)]
    tasks = [(c, int(n)) for n in args.sizes.split(",") for c in cells]
    tasks += [(c, 500_000) for c in vg.CELLS if c.name in args.big.split(",")]
    t0 = time.perf_counter()
    rows = []
    for cell, n in tasks:
        key = f"{cell.name}@{n}"
        if key not in grid["runs"]:
            continue
        rows.append(rejudge(cell, n, grid["runs"][key], decided_at))
        print(f"{key}: flagged {rows[-1]['flagged']:.1%}", file=sys.stderr, flush=True)
    price = lognormal_one()
    wall = time.perf_counter() - t0
    text = table(rows)
    print(text)
    print(price)
    if args.write_docs:
        begin, end = "<!-- service_guard:begin -->", "<!-- service_guard:end -->"
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        block = f"""{begin}
### The bare-service guard, re-judged on the grid's runs: `benchmarks/service_guard.py` ({date})

Machine: {machine_label()}; {wall:.0f} s. The grid's stored runs
(`benchmarks/results/validation_grid.json`, {grid["meta"]["date"]}; 200 per cell and
size) with each run's own sample path rebuilt from its seed: a run whose bare service
(the requests that found the system empty) the guard flags keeps its fails and loses
its passes, which is all the guard can do to a verdict. Worst false pass: the highest
pass rate at 0.7x or 0.95x the truth (p99, and p99.9 from 50,000 requests). Cells not
listed at 500,000 requests had no false pass there.

{text}

The price, on a service between the light and the heavy cells: {price}
{end}"""
        write_block(begin, end, block)


if __name__ == "__main__":
    main()
