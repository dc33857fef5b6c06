"""Highest sustainable open-loop rate with 1 and with 2 local worker processes (``--workers``).

Target: nginx on loopback (Debian's nginx-light, one worker, a 3-byte static
answer), as in ``wrk_vs_tailwise.py``. Each trial is the CLI, constant
arrivals, 1 s warm-up + a 5 s window; ``--workers 2`` splits one plan between
two processes that start on a common instant. A rate is *sustained* when the
window's achieved send rate is >= 99% of offered, the generator's send-lag p99
is <= 1 ms and every request succeeded, in a majority of up to 3 trials. The
search doubles from ``--start`` until a rate fails (or halves until one holds),
then bisects to 10%.

On a 2-core machine the two workers, their records writers, the driver and
nginx all share the same two cores: this measures the split's overhead and
what a second process buys when the cores are already contended, not what two
client machines would give.

Usage: ``python benchmarks/scale_local.py [--quick] [--write-docs]``. Loopback only;
stops by itself (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run
from wrk_vs_tailwise import ensure_tools, start_nginx

WINDOW = "5s"
MAX_LAG_MS = 1.0
BUDGET_S = 150.0  # per worker count: the search stops refining past this
MIN_RATE = 1_000


def trial(url: str, rate: int, workers: int, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tailwise", "run", url, "--rate", f"{rate}/s"]
    cmd += ["--arrival", "constant", "--warmup", "1s", "--duration", WINDOW]
    cmd += ["--max-send-lag", f"{MAX_LAG_MS}ms", "--json", "-q", "--out", str(out)]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    s = json.loads(done.stdout)
    # Delete the trial's records now: the kernel must not flush them during a later trial.
    shutil.rmtree(out, ignore_errors=True)
    r, g = s["rates"], s["generator"]
    ok = (
        r["achieved_send_rps"] >= 0.99 * r["offered_rps"]
        and g["send_lag_p99_uncapped_ms"] <= MAX_LAG_MS
        and s["requests"]["ok"] == s["requests"]["scheduled"]
    )
    return {"ok": ok, "lag_p99_ms": round(float(g["send_lag_p99_uncapped_ms"]), 3)}


def sustained(url: str, rate: int, workers: int, work: Path) -> tuple[bool, list[float]]:
    lags, passed, trials = [], 0, 3
    for k in range(trials):
        t = trial(url, rate, workers, work / f"w{workers}-{rate}-{k}")
        lags.append(t["lag_p99_ms"])
        passed += bool(t["ok"])
        if passed * 2 > trials or (trials - k - 1 + passed) * 2 <= trials:
            break  # the majority is decided
    ok = passed * 2 > trials
    print(f"  {workers} proc  {rate:>7}/s  send-lag p99 {lags} ms  -> {'yes' if ok else 'no'}")
    return ok, lags


def search(url: str, workers: int, start: int, work: Path) -> tuple[int, list[dict[str, Any]]]:
    began = time.monotonic()
    log: list[dict[str, Any]] = []

    def step(rate: int) -> bool:
        ok, lags = sustained(url, rate, workers, work)
        log.append({"workers": workers, "rate_rps": rate, "sustained": ok, "lag_p99_ms": lags})
        return ok

    lo, hi = 0, start
    if step(start):  # bracket upwards ...
        lo, hi = start, start * 2
        while step(hi):
            lo, hi = hi, hi * 2
    else:  # ... or downwards, to MIN_RATE at most
        while hi > MIN_RATE and not step(hi // 2):
            hi //= 2
        lo = hi // 2 if hi > MIN_RATE else 0
    while lo and hi - lo > 0.1 * lo and time.monotonic() - began < BUDGET_S:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if step(mid) else (lo, mid)
    return lo, log


def write_docs(result: dict[str, Any]) -> None:
    begin, end = "<!-- scale_local:begin -->", "<!-- scale_local:end -->"
    rows = "\n".join(
        f"| {t['workers']} | {t['rate_rps']:,} | {'yes' if t['sustained'] else 'no'} | "
        f"{', '.join(str(x) for x in t['lag_p99_ms'])} |"
        for t in result["trials"]
    )
    one, two = result["best"]["1"], result["best"]["2"]
    block = f"""{begin}
## Scale-out on one machine: `benchmarks/scale_local.py` ({result["date"]})

The highest open-loop rate tailwise sustains with one process and with
`--workers 2` (one plan split between two processes started on a common
instant), against nginx-light (1 worker, static 3-byte body) on loopback.
Sustained: achieved >= 99% of offered, send-lag p99 <= {MAX_LAG_MS:g} ms and no
errors, in a majority of up to 3 trials of 1 s warm-up + {WINDOW} each; the search
doubles (or halves) from {result["start"]:,}/s, then bisects to 10%. Machine: {result["machine"]}.

| workers | highest sustained rate (req/s) |
|---:|---:|
| 1 | {one:,} |
| 2 | {two:,} ({two / one:.2f}x) |

**Read with care:** this machine has 2 cores, and nginx, the workers, their
records writers and the driver all share them. A pacer sleeps on a kernel
timer only when its next send is at least 150 us away (`tailwise.clock.SPIN_NS`);
closer than that it polls the clock, so a worker offering more than ~6,700
req/s keeps a core busy. One worker and nginx fit on two cores; two polling
workers and nginx need three, and each pacer then waits for scheduler slices,
which a 1 ms send-lag bound notices (the 2-worker limit, {two:,} req/s, lies
just below 2 x 6,667 = 13,333, where both workers start polling). So here a
second worker costs rate; it pays where each worker has a core of its own.
The machine is shared with other work: the 1-minute load average was
{result["load"]} at the start of each search (1 process, 2 processes) and at
the end. Not measured here: client machines with a free core per worker.

| workers | offered rate (req/s) | sustained | send-lag p99 per trial (ms) |
|---:|---:|:---:|---|
{rows}
{end}"""
    write_block(begin, end, block)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--start", type=int, default=20_000, help="first rate tried (req/s)")
    a = ap.parse_args()
    ensure_tools()
    best: dict[str, int] = {}
    load: list[float] = []
    trials: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tailwise-scale-") as tmp:
        work = Path(tmp)
        nginx, url = start_nginx(work)
        try:
            print(f"target {url} (nginx); machine: {machine_label()}", flush=True)
            for workers in (1, 2):
                load.append(round(os.getloadavg()[0], 2))
                rate, log = search(url, workers, a.start, work)
                best[str(workers)] = rate
                trials += log
        finally:
            nginx.terminate()
            nginx.wait(timeout=10)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_label(),
        "best": best,
        "start": a.start,
        "load": ", ".join(str(x) for x in [*load, round(os.getloadavg()[0], 2)]),
        "trials": trials,
    }
    print(f"\n1 process {best['1']:,} req/s   2 processes {best['2']:,} req/s")
    if a.write_docs:
        write_docs(result)


if __name__ == "__main__":
    main()
