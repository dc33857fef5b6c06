"""Do tailwise's confidence intervals cover the truth? M/M/1 and M/M/4 against closed forms.

For each cell (M/M/1 and M/M/4, utilisation 0.5, 0.8, 0.95) the benchmark
simulates ``--runs`` independent runs (default 200) and asks, for each run,
whether the 95% interval of :mod:`tailwise.metrics.uncertainty` for the p50,
the p99 and the mean of latency (sojourn time: wait + service) contains the
closed-form value. A valid interval covers it in about 95% of runs; the
issue's target is at least 90% in every cell.

How a run is made, as a measured run would be:

* arrivals: tailwise's own seeded Poisson schedule (:class:`tailwise.arrivals.Schedule`),
  service ``exp:1ms`` drawn by :func:`tailwise.distributions.parse_distribution`;
* the simulator's vectorised FCFS fast path (:func:`tailwise.sim.fast.fcfs_servers`,
  the path ``tailwise simulate`` takes for one FCFS station), started **empty**;
* latencies in arrival order; the initial transient is cut by MSER-5
  (:mod:`tailwise.metrics.steady`), not by starting from a sampled steady state;
* intervals from the kept latencies, at confidence 0.95.

Closed forms (:mod:`tailwise.capacity`): M/M/1 latency is ``Exp(mu - lam)``;
M/M/c latency is an ``Exp(mu)`` service plus, with the Erlang C probability,
an independent ``Exp(c mu - lam)`` wait, whose quantile is found by bisection
on the closed-form survival function (``mmc_sojourn_quantile``); the mean is
``1/mu + C/(c mu - lam)`` (``mmc_mean_wait_s``).

Run lengths grow with the load, because a queue at 95% load remembers its past
for thousands of requests (the p99's variance is ~1,000x the iid one): each
cell's length is chosen so that a p99 rests on about 30+ effective tail values.
A second table repeats every cell with runs 10x shorter, to show what the
method does when a run is too short: it says "n too small" rather than print a
number it cannot support.

Usage: ``python benchmarks/ci_coverage.py [--runs 200] [--jobs 2] [--write-docs]``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

from tailwise.arrivals import Poisson, Schedule, Steady
from tailwise.capacity import mmc_mean_wait_s, mmc_sojourn_quantile
from tailwise.distributions import parse_distribution
from tailwise.metrics.steady import steady_state
from tailwise.metrics.uncertainty import Estimate, mean_ci, quantile_ci
from tailwise.sim.fast import fcfs_servers

SERVICE_S = 0.001
CONFIDENCE = 0.95
TARGET = 0.90
# (servers, utilisation, requests per run)
CELLS = [
    (1, 0.50, 100_000),
    (1, 0.80, 400_000),
    (1, 0.95, 4_000_000),
    (4, 0.50, 100_000),
    (4, 0.80, 400_000),
    (4, 0.95, 4_000_000),
]
SHORT = 10  # the second table's runs are this many times shorter
STATS = ("p50", "p99", "mean")


def truth_s(stat: str, servers: int, rho: float) -> float:
    """The closed-form p50, p99 or mean latency of M/M/``servers`` at utilisation ``rho``."""
    lam = rho * servers / SERVICE_S
    if stat == "mean":
        return SERVICE_S + mmc_mean_wait_s(servers, SERVICE_S, lam)
    return mmc_sojourn_quantile(float(stat[1:]) / 100.0, servers, SERVICE_S, lam)


def latencies_s(servers: int, rho: float, n: int, seed: int) -> np.ndarray:
    """One run from empty: latency (s) of ``n`` requests, in arrival order."""
    rate = rho * servers / SERVICE_S
    schedule = Schedule(Poisson(), Steady(rate), seed=seed, max_count=n)
    arrivals_ns = np.concatenate(list(schedule.blocks()))
    service = parse_distribution(f"exp:{SERVICE_S * 1e3:g}ms")
    service_ns = service.sample(np.random.default_rng([seed, 7]), len(arrivals_ns))
    done_ns = fcfs_servers(arrivals_ns, service_ns, servers)
    return (done_ns - arrivals_ns).astype(np.float64) / 1e9


@dataclass(frozen=True)
class Outcome:
    """One run's answer for one statistic: covered / missed / unsupported, and width."""

    stat: str
    status: str
    rel_half_width: float  # (hi - lo) / 2 / truth; nan when unsupported


def judge_run(task: tuple[int, float, int, int]) -> tuple[list[Outcome], int, bool]:
    """Simulate one run; its outcomes, the MSER-5 truncation and whether it was steady."""
    servers, rho, n, seed = task
    lat = latencies_s(servers, rho, n, seed)
    steady = steady_state(lat)
    kept = lat[steady.truncate :]
    outcomes = []
    for stat in STATS:
        est = mean_ci(kept, CONFIDENCE) if stat == "mean" else _quantile(kept, stat)
        outcomes.append(_outcome(stat, est, truth_s(stat, servers, rho)))
    return outcomes, steady.truncate, steady.steady


def _quantile(kept: np.ndarray, stat: str) -> Estimate:
    return quantile_ci(kept, float(stat[1:]) / 100.0, CONFIDENCE)


def _outcome(stat: str, est: Estimate, truth: float) -> Outcome:
    if not est.supported:
        return Outcome(stat, "unsupported", math.nan)
    status = "covered" if est.lo <= truth <= est.hi else "missed"
    return Outcome(stat, status, est.half_width / truth)


def cell_rows(
    servers: int, rho: float, n: int, results: Iterable[tuple[list[Outcome], int, bool]]
) -> list[dict[str, Any]]:
    """One table row per statistic of a cell."""
    results = list(results)
    not_steady = sum(1 for _, _, steady in results if not steady)
    cuts = [t for _, t, _ in results]
    rows = []
    for i, stat in enumerate(STATS):
        outs = [r[0][i] for r in results]
        judged = [o for o in outs if o.status != "unsupported"]
        covered = sum(o.status == "covered" for o in judged)
        widths = [o.rel_half_width for o in judged]
        rows.append({
            "queue": f"M/M/{servers}", "rho": rho, "n": n, "stat": stat,
            "truth_ms": truth_s(stat, servers, rho) * 1e3, "runs": len(outs),
            "judged": len(judged), "unsupported": len(outs) - len(judged),
            "coverage": covered / len(judged) if judged else math.nan,
            "median_rel_half_width": statistics.median(widths) if widths else math.nan,
            "missed": len(judged) - covered, "not_steady": not_steady,
            "median_truncation": statistics.median(cuts), "max_truncation": max(cuts),
        })  # fmt: skip
    return rows


def run_cells(
    cells: list[tuple[int, float, int]], runs: int, jobs: int, base_seed: int
) -> list[dict[str, Any]]:
    tasks = [
        (c, rho, n, base_seed + 10_000 * i + r) for i, (c, rho, n) in enumerate(cells)
        for r in range(runs)
    ]  # fmt: skip
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(judge_run, tasks, chunksize=4))
    rows = []
    for i, (c, rho, n) in enumerate(cells):
        rows += cell_rows(c, rho, n, results[i * runs : (i + 1) * runs])
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| queue | rho | requests/run | statistic | closed form | coverage | "
        "median half-width | n too small | wrong interval |\n|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        cov = "n/a" if math.isnan(r["coverage"]) else f"{r['coverage']:.1%}"
        width = r["median_rel_half_width"]
        width_text = "n/a" if math.isnan(width) else f"±{width:.1%}"
        below = not math.isnan(r["coverage"]) and r["coverage"] < TARGET
        mark = " **below target**" if below else ""
        lines.append(
            f"| {r['queue']} | {r['rho']:.2f} | {r['n']:,} | {r['stat']} | "
            f"{r['truth_ms']:.3f} ms | {cov}{mark} ({r['judged']} runs) | {width_text} | "
            f"{r['unsupported']} of {r['runs']} | {r['missed']} of {r['runs']} |"
        )
    return "\n".join(lines)


def steady_line(rows: list[dict[str, Any]]) -> str:
    cells = {(r["queue"], r["rho"]): r for r in rows}
    parts = [
        f"{q} at {rho:.2f}: {r['not_steady']} not steady, cut median {r['median_truncation']:g}, "
        f"max {r['max_truncation']:,} requests"
        for (q, rho), r in cells.items()
    ]
    return "; ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-short", action="store_true", help="skip the 10x shorter runs")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    started = time.monotonic()
    full = run_cells(CELLS, args.runs, args.jobs, args.seed)
    print(table(full), "\n\nMSER-5:", steady_line(full), flush=True)
    short: list[dict[str, Any]] = []
    if not args.no_short:
        cells = [(c, rho, n // SHORT) for c, rho, n in CELLS]
        short = run_cells(cells, args.runs, args.jobs, args.seed + 500_000)
        print("\nRuns 10x shorter:\n" + table(short), "\n\nMSER-5:", steady_line(short))
    wall_s = time.monotonic() - started
    print(f"\n{wall_s:.0f} s with {args.jobs} processes", file=sys.stderr)
    if args.write_docs:
        write_docs(full, short, args.runs, wall_s)


def write_docs(
    full: list[dict[str, Any]], short: list[dict[str, Any]], runs: int, wall_s: float
) -> None:
    begin, end = "<!-- ci_coverage:begin -->", "<!-- ci_coverage:end -->"
    short_part = (
        "\n\nThe same cells with runs 10x shorter (what a too-short run gets):\n\n" + table(short)
        if short
        else ""
    )
    block = f"""{begin}
## Confidence-interval coverage: `benchmarks/ci_coverage.py` (2026-11-24)

Machine: {machine_label()}; {runs} independent runs per cell, {wall_s:.0f} s of wall
time in all (two processes; load average {os.getloadavg()[0]:.1f} at the end). Each run
starts empty, drops its MSER-5 transient, and computes the 95% intervals of
`tailwise.metrics.uncertainty` for the p50, p99 and mean latency (batch
means over time, skewness-corrected t, never narrower than the iid
order-statistic interval). *Coverage* is the share of
runs whose interval holds the closed form, among the runs that gave a
number (target: at least {TARGET:.0%}; ideal 95%); *n too small* counts the
runs that declined to give one; *wrong interval* counts runs that printed an
interval missing the truth. Half-widths are relative to the closed form.

{table(full)}{short_part}

MSER-5 on the full-length runs: {steady_line(full)}.

{reading(full, short)}
{end}"""
    write_block(begin, end, block)


def reading(full: list[dict[str, Any]], short: list[dict[str, Any]]) -> str:
    """The paragraph under the tables, from the numbers above it."""
    covs = [r["coverage"] for r in full if not math.isnan(r["coverage"])]
    text = (
        f"Reading: at full length every cell covers in {min(covs):.1%}-{max(covs):.1%} of "
        "runs. At 95% load consecutive latencies are so correlated that the p99's variance "
        "is about 1,000 times the iid one, so a run needs about 4 million requests for its "
        "p99 to rest on ~30 independent-equivalent values beyond it; the iid interval there "
        "would be ~30x too narrow."
    )
    if not short:
        return text
    p99 = [r for r in short if r["stat"] == "p99" and r["rho"] == 0.95]
    worst = max(short, key=lambda r: r["missed"])
    text += (
        " With runs 10x shorter, most p99s at 95% load say *n too small* ("
        + " and ".join(f"{r['unsupported']} of {r['runs']} for {r['queue']}" for r in p99)
        + "). The few short runs that still give a p99 are those whose sample happened to "
        "look calm, so their coverage falls (a run cannot know about excursions it never "
        "saw): what protects the user is that such runs are few. In every short cell at "
        f"most {worst['missed']} of {worst['runs']} runs print a wrong interval "
        f"({worst['queue']} at {worst['rho']:.2f}, {worst['stat']})."
    )
    return text


if __name__ == "__main__":
    main()
