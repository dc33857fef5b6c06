"""The default knee search, emulated over many seeds: how long it takes and where its band lands.

`benchmarks/knee_default.py` times one real search per target (11 minutes for an M/M/1
server on two cores): one sample of a random quantity. This runs the same search
(:class:`tailwise.knee.KneeSearch` with placement, as ``tailwise knee URL --slo SLO``
builds it) with each trial emulated on an exact queue instead of a live server, so a
hundred searches take minutes of CPU and give the distribution of the search's wall time,
its knee and its band.

Each trial is a seeded sample path of an M/M/c queue (``validation_queue.c``, the
validation grid's independent recursion, from an empty system), judged as a
``--duration auto`` trial is: at the looks of :func:`tailwise.loadgen.engine.watch.plan_looks`
(128, 256, ... window requests, each at its share of the run's error) by the watch's own
decision (:func:`tailwise.loadgen.engine.watch._decide`), until a look decides every SLO
or the cap (20 s for steering trials at 80%, 300 s for the band's firm trials at 95%);
then summarised by :func:`tailwise.metrics.summary.summarize` with the deciding look
honoured, and handed to the search through :func:`tailwise.knee.trial_outcome`, as a
measured trial's summary is. A trial's wall time is its requests over its rate plus
:data:`TRIAL_OVERHEAD_S` (a measured trial's start, drain and summary on two cores).

What it leaves out: the early stop of steering trials past the knee (a look there decides
the failure within a few hundred requests anyway), requests still in flight at a look
(every emulated request is answered), the client's own lag (a perfect generator), and
``--warmup auto``'s cut at each look (the queues start empty and near the knee fill within
seconds). Seeds differ per trial and per search; common random numbers across a search's
rates are not emulated.

    python benchmarks/knee_emulated.py --searches 100 --json benchmarks/results/knee_emulated.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import validation_grid as vg  # noqa: E402
from docs_block import machine_label, write_block  # noqa: E402

from tailwise.capacity import mmc_max_rate  # noqa: E402
from tailwise.knee import KneeSearch, Outcome, TrialRun, trial_outcome  # noqa: E402
from tailwise.loadgen.engine.watch import Looks, _decide, _Share, _target, plan_looks  # noqa: E402
from tailwise.metrics.slo import parse_slo  # noqa: E402
from tailwise.metrics.summary import RunInfo, summarize  # noqa: E402

SERVICE_S = 0.020
STEER = (0.80, 20.0)  # steering trials: confidence, cap in seconds (tailwise.loadgen.sweep)
FIRM = (0.95, 300.0)  # the band's trials
TRIAL_OVERHEAD_S = 1.5  # per trial: start, drain, summary and run directory (measured: ~1-2 s)
START, FLOOR, CEILING = 10.0, 0.5, 100_000.0  # tailwise knee's --start, --min-rate, --max-rate
TARGETS = {  # name: (servers, SLO, quantile, threshold s)
    "mm1": (1, "p99(latency)<=300ms", 0.99, 0.300),
    "mm2": (2, "p99(latency)<=300ms", 0.99, 0.300),
    "mm4": (4, "p95(latency)<=100ms", 0.95, 0.100),
}


@dataclass
class Emulated:
    """One emulated trial's cost: requests judged and wall seconds."""

    requests: int
    wall_s: float


def sequential_trial(
    servers: int, slo: str, rate: float, seed: int, confidence: float, cap_s: float
) -> tuple[TrialRun, Emulated]:
    """One ``--duration auto`` trial at ``rate`` on M/M/``servers``, emulated."""
    cap = max(int(rate * cap_s), 1)
    cell = vg.Cell("knee", servers, rate * SERVICE_S / servers, "exp")
    sched, done, _ = vg.sample_path(cell, cap, seed)
    looks: Looks = plan_looks(float(cap), confidence)
    spec = parse_slo(slo)
    needed = _target(spec)
    assert needed is not None
    share = _Share(spec.spec, spec.metric, int(spec.threshold), needed)
    err = np.zeros(cap, np.int16)
    n, sequential = cap, {"reached_cap": True, "decided": None, "settled": None}
    for k, level in zip(looks.sizes, looks.confidences, strict=False):
        now = int(done[:k].max())  # every request of the look answered (see the docstring)
        d = _decide(share, sched[:k], done[:k], done[:k], err[:k], now, level)
        if d != "inconclusive":
            n = k
            sequential = {
                "reached_cap": False,
                "decided": {spec.spec: d},
                "settled": f"decided after {k} requests",
            }
            break
    records = vg.sim_records(sched[:n], done[:n])
    info = RunInfo(
        source="sim",
        target="knee-emulated",
        mode="open",
        arrival={"process": "poisson", "rate_rps": rate},
        window_ns=(0, int(sched[n - 1]) + 1),
        slos=[spec],
        max_send_lag_ns=2**62,
        confidence=looks.confidence,
        sequential=sequential,
    )
    summary = summarize(records, info)
    wall = n / rate + TRIAL_OVERHEAD_S
    return TrialRun(summary), Emulated(n, wall)


def search(target: str, seed: int, futile: bool = False) -> dict[str, Any]:
    """One emulated default knee search on ``target``: its knee, band, trials and wall time."""
    servers, slo, q, threshold_s = TARGETS[target]
    costs: list[Emulated] = []
    counter = iter(range(1, 1000))

    def make(confidence: float, cap_s: float, firm: bool) -> Callable[[float], Outcome]:
        def trial(rate: float) -> Outcome:
            number = next(counter)
            run, cost = sequential_trial(
                servers, slo, rate, seed * 1000 + number, confidence, cap_s
            )
            costs.append(cost)
            out = trial_outcome(run, firm)
            return Outcome(out.passed, out.invalid_reason, out.detail, out.decided, firm)

        return trial

    knee = KneeSearch(make(*STEER, False), confirm=make(*FIRM, True), place=True)
    result = knee.run(START, FLOOR, CEILING)
    truth = mmc_max_rate(q, threshold_s, servers, SERVICE_S)
    lo, hi = result.band_rps or (None, None)
    return {
        "target": target,
        "seed": seed,
        "truth_rps": truth,
        "knee_rps": result.knee_rps,
        "band_rps": [lo, hi],
        "band_holds_truth": (lo is None or lo <= truth) and (hi is None or truth <= hi),
        "band_within_25pct": (
            lo is not None and hi is not None and lo >= 0.75 * truth and hi <= 1.25 * truth
        ),
        "trials": [
            [t.phase, round(t.rate_rps, 3), t.settled, c.requests]
            for t, c in zip(result.trials, costs, strict=True)
        ],
        "requests": sum(c.requests for c in costs),
        "wall_s": sum(c.wall_s for c in costs),
    }


def _one(task: tuple[str, int]) -> dict[str, Any]:
    return search(*task)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    walls = sorted(r["wall_s"] / 60 for r in rows)
    ratios = [r["knee_rps"] / r["truth_rps"] for r in rows if r["knee_rps"]]
    pct = lambda a, p: a[min(len(a) - 1, int(p * len(a)))]  # noqa: E731
    return {
        "searches": len(rows),
        "wall_min_p10_p50_p90": [round(pct(walls, p), 1) for p in (0.1, 0.5, 0.9)],
        "within_6_min": sum(w <= 6 for w in walls) / len(rows),
        "knee_within_10pct": sum(abs(x - 1) <= 0.10 for x in ratios) / len(rows),
        "knee_ratio_median": round(statistics.median(ratios), 3) if ratios else None,
        "band_holds_truth": sum(r["band_holds_truth"] for r in rows) / len(rows),
        "band_decided_within_25pct": sum(r["band_within_25pct"] for r in rows) / len(rows),
        "trials_median": statistics.median(len(r["trials"]) for r in rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--searches", type=int, default=40, help="emulated searches per target")
    ap.add_argument("--targets", default="mm1,mm2,mm4")
    ap.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--json", type=Path, help="write every search here")
    ap.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE",
        help="what if one of tailwise.knee's constants were VALUE (repeatable)",
    )  # fmt: skip
    args = ap.parse_args()
    import ast

    import tailwise.knee as kn

    for kv in args.set:  # a what-if: tailwise.knee's constants, e.g. BAND_AT=(0.75,1.15)
        name, value = kv.split("=", 1)
        if not hasattr(kn, name):
            raise SystemExit(f"--set: tailwise.knee has no {name}")
        setattr(kn, name, ast.literal_eval(value))
    tasks = [(t, s) for t in args.targets.split(",") for s in range(1, args.searches + 1)]
    started = time.monotonic()
    rows = [_one(t) for t in tasks]  # serial: --set changes this process's module
    out = {t: summarise([r for r in rows if r["target"] == t]) for t in args.targets.split(",")}
    wall_s = time.monotonic() - started
    text = table(out)
    print(text)
    print(f"{len(tasks)} searches in {wall_s:.0f} s", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"summary": out, "searches": rows}, indent=1) + "\n")
    if args.write_docs:
        write_docs(text, args, wall_s)


def table(out: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| target | SLO | closed form | wall min p10 / p50 / p90 | within 6 min | "
        "knee within 10% | band holds truth | both ends decided, within 25% | trials |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, v in out.items():
        servers, slo, q, t = TARGETS[name]
        truth = mmc_max_rate(q, t, servers, SERVICE_S)
        p10, p50, p90 = v["wall_min_p10_p50_p90"]
        lines.append(
            f"| M/M/{servers}, exp {SERVICE_S * 1e3:g} ms | `{slo}` | {truth:.2f}/s | "
            f"{p10} / {p50} / {p90} | {v['within_6_min']:.0%} | {v['knee_within_10pct']:.0%} | "
            f"{v['band_holds_truth']:.0%} | {v['band_decided_within_25pct']:.0%} | "
            f"{v['trials_median']:g} |"
        )
    return "\n".join(lines)


def write_docs(text: str, args: argparse.Namespace, wall_s: float) -> None:
    begin, end = "<!-- knee_emulated:begin -->", "<!-- knee_emulated:end -->"
    what_if = f" (what if: {', '.join(args.set)})" if args.set else ""
    title = f"The default knee over {args.searches} searches per target, emulated"
    block = f"""{begin}
### {title}: `benchmarks/knee_emulated.py` ({datetime.date.today()}){what_if}

Machine: {machine_label()}; {wall_s:.0f} s for all searches. The search of `tailwise knee URL
--slo SLO` (placement, sequential trials: steering at 80% capped at 20 s, the band's at
95% capped at 300 s), each trial a seeded sample path of the exact queue judged at
`--duration auto`'s looks by the watch's own decision and summarised by the product;
wall time = requests / rate + {TRIAL_OVERHEAD_S:g} s a trial. Targets (issue 39): knee
within 10% of the closed form, both ends decided and within 25% of it, in at most 6
minutes.

{text}
{end}"""
    write_block(begin, end, block)


if __name__ == "__main__":
    main()
