"""Calibrate, predict, measure: does a model fitted to one sweep predict another setup?

For the demo http target (4 FCFS workers, exp 5 ms) and the demo llm target
(continuous batching, 32 slots):

1. sweep one server, lowest rate first, past saturation;
2. ``tailwise calibrate`` the sweep into a model;
3. predict, on the simulator: the knee of that one server, the p50/p99 at a
   rate the sweep did not run (http), and the knee of **two servers behind
   round robin** (the load generator alternates between two URLs);
4. measure each of those on real servers with the same knee search (windows,
   minimum requests, resolution, repeats) and compare.

Target (issue 7): predicted knee within 15% of the measured knee.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

from tailwise.calibrate import calibrate, write_model
from tailwise.knee import KneeSearch
from tailwise.loadgen.runner import RunOptions, execute, prepare, run_directory
from tailwise.loadgen.sweep import Sweep, knee_trial
from tailwise.server import spawn_demo
from tailwise.sim.run import simulate
from tailwise.sim.scenario import load_scenario
from tailwise.sim.whatif import at, knee

TOLERANCE = 0.15
MIN_REQUESTS = {"http": 3000, "llm": 400}
WINDOW = {"http": "4s", "llm": "10s"}
LLM_ARGS = dict(
    api="openai-completions",
    model="tailwise-demo",
    max_tokens="64",
    input_tokens="uniform:32-512",
    timeout="10s",
)
SETUPS: dict[str, dict[str, Any]] = {
    "http": {
        "serve": ("http",),
        "path": "/predict",
        "slo": ["p99(latency)<=40ms"],
        "sweep": [100.0, 300.0, 500.0, 650.0, 750.0, 900.0],
        "sweep_window": "6s",
        "other_rate": 600.0,
        "options": {},
    },
    "llm": {
        "serve": ("llm",),
        "path": "/v1/completions",
        "slo": ["ttft<=300ms", "tpot<=25ms"],
        "sweep": [4.0, 8.0, 16.0, 24.0, 32.0, 40.0],
        "sweep_window": "10s",
        "other_rate": None,
        "options": LLM_ARGS,
    },
}


def _options(kind: str, urls: list[str], window: str) -> RunOptions:
    setup = SETUPS[kind]
    # Two cores hold the servers and the generator: a late send counts in latency
    # (it is measured from the intended instant) rather than voiding the trial.
    return RunOptions(
        urls=urls,
        duration=window,
        warmup="1s",
        slo=list(setup["slo"]),
        max_send_lag="25ms",
        **setup["options"],
    )


def _serve(kind: str, n: int) -> tuple[list[Any], list[str]]:
    procs, urls = [], []
    for _ in range(n):
        proc, base = spawn_demo(*SETUPS[kind]["serve"])
        procs.append(proc)
        urls.append(base + SETUPS[kind]["path"])
    return procs, urls


def _stop(procs: list[Any]) -> None:
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def measured_knee(kind: str, urls: list[str], start: float, out: Path) -> dict[str, Any]:
    trial = knee_trial(_options(kind, urls, WINDOW[kind]), out, MIN_REQUESTS[kind])
    started = time.monotonic()
    result = KneeSearch(trial, resolution=0.05, repeats=1).run(start, start / 64, start * 64)
    return {
        "knee_rps": result.knee_rps,
        "band": result.band_rps,
        "trials": len(result.trials),
        "wall_s": round(time.monotonic() - started, 1),
    }


def predicted_knee(model: Path, kind: str, replicas: int, start: float) -> dict[str, Any]:
    sc = load_scenario(model)
    arrival = sc.arrival.model_copy(update={"duration": WINDOW[kind], "warmup": "1s"})
    sc = at(sc.model_copy(update={"arrival": arrival, "routing": "round_robin"}), replicas=replicas)
    result = knee(sc, start, resolution=0.05, min_requests=MIN_REQUESTS[kind])
    return {"knee_rps": result.knee_rps, "band": result.band_rps, "trials": len(result.trials)}


def other_rate(model: Path, kind: str, url: str, rate: float, out: Path) -> dict[str, Any]:
    """p50/p99 at a rate the sweep never ran: one measured run against 20 simulated."""
    opts = dataclasses.replace(
        _options(kind, [url], "10s"), rate=f"{rate:g}/s", out=str(out / "other")
    )
    prepared = prepare(opts)
    s = execute(prepared, run_directory(opts, prepared.targets[0])).summary
    sc = load_scenario(model)
    runs = []
    for seed in range(1, 21):
        arrival = sc.arrival.model_copy(
            update={"rate": f"{rate:g}/s", "duration": "10s", "warmup": "1s", "seed": seed}
        )
        runs.append(simulate(sc.model_copy(update={"arrival": arrival})).summary["latency_ms"])
    return {
        "rate": rate,
        "measured": {q: s["latency_ms"][q] for q in ("p50", "p99")},
        "predicted": {q: float(np.median([r[q] for r in runs])) for q in ("p50", "p99")},
    }


def bench(kind: str, tmp: Path) -> dict[str, Any]:
    setup = SETUPS[kind]
    procs, urls = _serve(kind, 2)
    try:
        sweep = Sweep(_options(kind, urls[:1], setup["sweep_window"]), tmp / f"{kind}-sweep")
        sweep.run_rates(list(setup["sweep"]))
        sweep.write()
        cal = calibrate([tmp / f"{kind}-sweep"])
        model = tmp / f"{kind}-model.yaml"
        write_model(cal, model)
        start = cal.measured_knee_rps or setup["sweep"][0]
        rows = []
        for replicas in (1, 2):
            pred = predicted_knee(model, kind, replicas, start * replicas)
            where = tmp / f"{kind}-{replicas}"
            meas = measured_knee(kind, urls[:replicas], start * replicas, where)
            rows.append({"replicas": replicas, "predicted": pred, "measured": meas})
        other = None
        if setup["other_rate"]:
            other = other_rate(model, kind, urls[0], setup["other_rate"], tmp)
    finally:
        _stop(procs)
    return {
        "kind": kind,
        "slo": setup["slo"],
        "params": cal.fit.params,
        "fit_rms": round(cal.goodness.rms_log_error, 3),
        "fit_poor": cal.goodness.poor,
        "knees": rows,
        "other_rate": other,
    }


def _ratio(row: dict[str, Any]) -> float | None:
    p, m = row["predicted"]["knee_rps"], row["measured"]["knee_rps"]
    return p / m if p and m else None


def write_docs(results: list[dict[str, Any]], machine: str) -> None:
    begin, end = "<!-- calibrate_predict:begin -->", "<!-- calibrate_predict:end -->"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        begin,
        f"## Calibrate, predict, measure: `benchmarks/calibrate_predict.py` ({when})",
        "",
        f"Machine: {machine}. "
        "Sweep one demo server, `tailwise calibrate` the sweep, then predict on the simulator "
        "and measure on real servers with the same knee search (5% resolution, one repeat "
        "of the final bracket). Two replicas are two demo servers; the load generator sends "
        "to them in turn (round robin). Target: predicted knee within "
        f"{TOLERANCE:.0%} of the measured.",
        "",
        "| target | SLO | replicas | predicted knee | measured knee | predicted / measured | "
        "within 15% |",
        "|---|---|---:|---:|---:|---:|:---:|",
    ]
    for res in results:
        for row in res["knees"]:
            ratio = _ratio(row)
            ok = ratio is not None and abs(ratio - 1) <= TOLERANCE
            lines.append(
                f"| demo {res['kind']} | {' and '.join(res['slo'])} | {row['replicas']} | "
                f"{row['predicted']['knee_rps']:.1f}/s | {row['measured']['knee_rps']:.1f}/s | "
                f"{ratio:.2f} | {'yes' if ok else 'NO'} |"
            )
    lines += [
        "",
        "Fitted models (fit error: the RMS log ratio over the sweep's own steps). The "
        "truths, from the demo servers' command lines: http 4 workers, exp 5 ms service; "
        "llm step 4 ms + 0.02 ms per prefilled token + 0.3 ms per decoding sequence, "
        "32 slots.",
        "",
    ]
    for res in results:
        params = ", ".join(f"{k} {v}" for k, v in res["params"].items() if k != "closed_form_start")
        lines.append(f"- demo {res['kind']}: {params}; fit error {res['fit_rms']}")
    for res in results:
        o = res["other_rate"]
        if o:
            lines += [
                "",
                f"At {o['rate']:g}/s, a rate the {res['kind']} sweep did not run (one measured "
                "10 s run; the median of 20 simulated ones):",
                "",
                "| | p50 | p99 |",
                "|---|---:|---:|",
                f"| measured | {o['measured']['p50']:.2f} ms | {o['measured']['p99']:.2f} ms |",
                f"| predicted | {o['predicted']['p50']:.2f} ms | {o['predicted']['p99']:.2f} ms |",
            ]
    write_block(begin, end, "\n".join([*lines, end]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--only", choices=["http", "llm"])
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="tailwise-calibrate-") as tmp:
        for kind in ("http", "llm"):
            if args.only and kind != args.only:
                continue
            res = bench(kind, Path(tmp))
            results.append(res)
            print(json.dumps(res, indent=2, default=str), flush=True)
    for res in results:
        for row in res["knees"]:
            print(f"{res['kind']} x{row['replicas']}: predicted/measured = {_ratio(row)}")
    if args.write_docs:
        write_docs(results, machine_label())


if __name__ == "__main__":
    main()
