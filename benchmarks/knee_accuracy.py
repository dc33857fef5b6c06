"""Knee search accuracy: measured knee vs the Erlang C closed form, on the demo http target.

Each target is ``tailwise serve-demo --kind http`` with c FCFS workers and
exponential service (an M/M/c queue under tailwise's Poisson arrivals), so the
highest rate meeting a p99 latency SLO is known exactly
(``tailwise.capacity.mmc_max_rate``). The benchmark runs ``tailwise knee``'s
search (windows of at least 4 s and MIN_REQUESTS requests, 1 s warm-up, 5%
resolution, one repeat of the final bracket) and reports measured / closed
form, the band, and the trials it took.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

from tailwise.capacity import mmc_max_rate
from tailwise.knee import KneeSearch
from tailwise.loadgen.runner import RunOptions
from tailwise.loadgen.sweep import knee_trial
from tailwise.server import spawn_demo

ROOT = Path(__file__).resolve().parent.parent
MIN_REQUESTS = 3000  # a p99 judged on >= 30 samples beyond it
# (workers, mean service s, SLO spec, quantile, SLO s, first rate tried)
TARGETS = [
    (1, 0.002, "p99(latency)<=50ms", 0.99, 0.050, 100.0),
    (4, 0.005, "p99(latency)<=50ms", 0.99, 0.050, 200.0),
    (8, 0.020, "latency<=150ms", 0.99, 0.150, 100.0),
]


def measure(
    workers: int, service_s: float, slo: str, q: float, slo_s: float, start: float, tmp: Path
) -> dict[str, Any]:
    truth = mmc_max_rate(q, slo_s, workers, service_s)
    proc, base = spawn_demo(
        "http", "--workers", str(workers), "--service", f"exp:{service_s * 1e3:g}ms"
    )
    try:
        opts = RunOptions(urls=[base + "/predict"], duration="4s", warmup="1s", slo=[slo])
        started = time.monotonic()
        search = KneeSearch(
            knee_trial(opts, tmp / f"c{workers}", MIN_REQUESTS), resolution=0.05, repeats=1
        )
        result = search.run(start, 1.0, 100_000.0)
        wall = time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    knee = result.knee_rps or 0.0
    return {
        "target": f"M/M/{workers}, exp {service_s * 1e3:g} ms",
        "capacity_rps": round(workers / service_s, 1),
        "slo": slo,
        "closed_form_rps": round(truth, 1),
        "knee_rps": round(knee, 1),
        "band_rps": [round(x, 1) for x in result.band_rps] if result.band_rps else None,
        "ratio": round(knee / truth, 3),
        "trials": len(result.trials),
        "wall_s": round(wall, 1),
    }


def write_docs(rows: list[dict[str, Any]], machine: str) -> None:
    begin, end = "<!-- knee_accuracy:begin -->", "<!-- knee_accuracy:end -->"
    table = "\n".join(
        f"| {r['target']} | {r['capacity_rps']:g}/s | `{r['slo']}` | {r['closed_form_rps']:g}/s | "
        f"{r['knee_rps']:g}/s | {r['band_rps'][0]:g}-{r['band_rps'][1]:g}/s | {r['ratio']:.3f} | "
        f"{r['trials']} | {r['wall_s']:.0f} s |"
        if r["band_rps"]
        else f"| {r['target']} | | `{r['slo']}` | {r['closed_form_rps']:g}/s | none | | | "
        f"{r['trials']} | {r['wall_s']:.0f} s |"
        for r in rows
    )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    block = f"""{begin}
## Knee search: `benchmarks/knee_accuracy.py` ({when})

The knee found by `tailwise knee` against the demo http target, beside the
closed form for the same M/M/c queue (Erlang C; `tailwise.capacity.mmc_max_rate`).
Each trial is a real open-loop run: 1 s warm-up, a window of at least 4 s
holding at least {MIN_REQUESTS} requests (`tailwise knee --min-requests`), then
a drain; 5% resolution, the final bracket run once more. Machine: {machine}.

| target | capacity | SLO | closed form | knee | band | knee / closed form | trials | wall |
|---|---:|---|---:|---:|---:|---:|---:|---:|
{table}

Target: within 10% of the closed form. The knee reported is the highest rate
shown to hold, so it sits at or just below the truth by up to the resolution;
the server's own overhead (~0.5 ms per request through uvicorn) also counts
against the SLO, as it would for a real service.

Why `--min-requests`: an earlier run of this benchmark used fixed 4 s windows
and measured M/M/1 with 10 ms service at `p99(latency)<=200ms` 17% *above* the
closed form (90/s vs 77.0/s). At 90/s a 4 s window holds 360 requests, so its
p99 is the 4th slowest one, and the queue (relaxation time about 4 s at
utilisation 0.9) has not reached its steady tail: a short trial passes a rate
that fails in steady state. Each trial must hold enough requests for its
percentile, and be long against the queue's relaxation time.
{end}"""
    write_block(begin, end, block)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    machine = machine_label()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tailwise-knee-bench-") as tmp:
        for target in TARGETS:
            r = measure(*target, Path(tmp))
            print(json.dumps(r), flush=True)
            rows.append(r)
    if a.write_docs:
        write_docs(rows, machine)


if __name__ == "__main__":
    main()
