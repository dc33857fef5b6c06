"""The load generator before and after a change: the same work, interleaved (issue 41).

Two source trees (``--before DIR``: a worktree of the commit before the change, its C
extensions built in place; ``--after``: this one) each drive the same two workloads,
alternately, ``--rounds`` times, so that whatever else the machine does meanwhile hits
both alike:

* **http**: ``tailwise run`` at a fixed open-loop rate (``--rate``, constant arrivals)
  against ``tailwise serve-demo --kind http`` (4 workers, 1 ms), 1 s warm-up + 8 s;
* **stream**: ``tailwise run --api openai-chat`` with 300 streams in flight (closed
  loop) against the stream lab (TTFT 50 ms, ITL 10 ms, 64 tokens), 1 s + 6 s.

The servers come from this tree for both sides (only the client differs). Measured per
run: the client's CPU time (user + system, from ``getrusage`` of its process) per
completed request, and its send-lag p99 (http) or receive-lag p99 (stream), as its
summary reports them. The median of each side's runs is reported with the ratio
after / before; a change that costs nothing gives ratios near 1 within the rounds'
spread (shown as min-max).

Usage::

    git worktree add --detach /tmp/before REV
    (cd /tmp/before && python setup.py build_ext --inplace)
    python benchmarks/before_after.py --before /tmp/before [--rounds 8] [--rate 2000]

Loopback only; every server stops by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

from tailwise.server import spawn, spawn_demo

ROOT = Path(__file__).resolve().parent.parent


def client(tree: Path, argv: list[str], out: Path) -> tuple[float, dict[str, Any]]:
    """(client CPU seconds, its summary) of one ``tailwise`` run from ``tree``'s sources."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "tailwise", *argv, "-q", "--out", str(out)],
        env=env, check=False, timeout=180, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads((out / "summary.json").read_text())


def http_run(tree: Path, url: str, rate: int, out: Path) -> dict[str, float]:
    argv = ["run", url + "/predict", "--rate", f"{rate}/s", "--arrival", "constant"]
    cpu, s = client(tree, [*argv, "--warmup", "1s", "--duration", "8s"], out)
    ok = s["requests"]["ok"]
    lag = s["generator"]["send_lag_p99_ms"]
    return {"cpu_us_per_request": 1e6 * cpu / max(ok, 1), "lag_p99_ms": lag, "requests": ok}


def stream_run(tree: Path, url: str, out: Path) -> dict[str, float]:
    argv = ["run", url, "--api", "openai-chat", "--model", "lab", "--max-tokens", "64"]
    argv += ["--concurrency", "300", "--warmup", "1s", "--duration", "6s"]
    cpu, s = client(tree, argv, out)
    ok = s["requests"]["ok"]
    recv = s["generator"].get("recv_lag_p99_ms")
    return {"cpu_us_per_request": 1e6 * cpu / max(ok, 1),
            "lag_p99_ms": float("nan") if recv is None else recv, "requests": ok}  # fmt: skip


def summarize_side(runs: list[dict[str, float]]) -> dict[str, Any]:
    cpu = [r["cpu_us_per_request"] for r in runs]
    lag = [r["lag_p99_ms"] for r in runs]
    return {"cpu_median": statistics.median(cpu), "cpu_range": (min(cpu), max(cpu)),
            "lag_median": statistics.median(lag), "runs": len(runs)}  # fmt: skip


def _cpu(side: dict[str, Any]) -> str:
    lo, hi = side["cpu_range"]
    return f"{side['cpu_median']:.1f} us ({lo:.1f}-{hi:.1f})"


def table(result: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| workload | client CPU per request, before | after | after / before "
        "| lag p99 before / after |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, sides in result.items():
        b, a = sides["before"], sides["after"]
        lines.append(
            f"| {name} | {_cpu(b)} | {_cpu(a)} "
            f"| {a['cpu_median'] / b['cpu_median']:.2f} "
            f"| {b['lag_median']:.2f} / {a['lag_median']:.2f} ms |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=ROOT)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--workloads", default="http,stream", help="comma-separated: http, stream")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        w: {side: [] for side in trees} for w in workloads
    }
    demo, demo_url = spawn_demo("http", "--workers", "4", "--service", "1ms", lifetime="1200s")
    lab, lab_url = spawn("tailwise.server.stream_lab", "--ttft", "50ms", "--itl", "10ms",
                         "--lifetime", "1200s")  # fmt: skip
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k in range(args.rounds):
                order = list(trees) if k % 2 == 0 else list(reversed(trees))
                for side in order:
                    out = Path(tmp) / f"{side}-{k}"
                    if "http" in runs:
                        got = http_run(trees[side], demo_url, args.rate, out / "h")
                        runs["http"][side].append(got)
                    if "stream" in runs:
                        runs["stream"][side].append(stream_run(trees[side], lab_url, out / "s"))
                    done = {w: runs[w][side][-1] for w in runs}
                    print(f"round {k + 1} {side}: {done}", file=sys.stderr, flush=True)
    finally:
        for p in (demo, lab):
            p.terminate()
            p.wait(timeout=10)
    result = {
        w: {side: summarize_side(rs) for side, rs in sides.items()} for w, sides in runs.items()
    }
    text = table(result)
    print(text)
    if args.write_docs:
        rev = {side: _rev(tree) for side, tree in trees.items()}
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        begin, end = "<!-- before_after:begin -->", "<!-- before_after:end -->"
        block = f"""{begin}
## The typed contract kept the load generator's cost: `benchmarks/before_after.py` ({when})

Issue 41 (typed summary and worker messages, registries, answer bookkeeping out of the
transport, loadgen in sub-packages): the client from before ({rev["before"]}) and after
({rev["after"]}), {args.rounds} interleaved rounds, {time.monotonic() - t0:.0f} s.
http: `tailwise run` at {args.rate}/s constant arrivals against `serve-demo --kind http`
(4 workers, 1 ms), 8 s; stream: 300 streams in flight against the stream lab (TTFT
50 ms, ITL 10 ms, 64 tokens), 6 s. Client CPU time per completed request, median of
the rounds (min-max); lag: the generator's send-lag p99 (http) and receive-lag p99
(stream). Machine: {machine_label()}, nothing else running.

{text}
{end}"""
        write_block(begin, end, block)


def _rev(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return done.stdout.strip() or str(tree)


if __name__ == "__main__":
    main()
