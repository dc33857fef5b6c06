"""tailwise's highest sustainable open-loop rate vs. wrk's closed-loop throughput, one run.

Target: nginx on loopback (Debian's nginx-light, one worker, a 3-byte static
answer). Reference: wrk (Debian) closed loop, 1 thread, 32 connections; the
median of its 5 s runs: three before the tailwise search, one after each rate
tried, three after.
tailwise: the CLI, one process, constant arrivals, 1 s warm-up + 8 s window.
A rate is *sustainable* when the window's achieved send rate is >= 99% of
offered, the send-lag p99 over every request is <= 1 ms, no request waited for
the in-flight cap, and every request succeeded, in at least 2 of 3 trials. The
search doubles the rate until it fails, then bisects to ``--resolution`` (2%). Each trial writes
its records.jsonl like any run; the file is deleted right after, so that no
trial pays for the kernel writing back an earlier trial's data.

Usage: ``python benchmarks/wrk_vs_tailwise.py [--quick] [--write-docs]``.
Everything runs on 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docs_block import splice  # benchmarks/ is on sys.path when run

ROOT = Path(__file__).resolve().parent.parent
# An 8 s window: a p99 over 3 s was flipped by single ~30 ms stalls of the VM's host.
WINDOW = "8s"
NGINX_CONF = """
worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  keepalive_requests 10000000;
  server {{
    listen 127.0.0.1:{port};
    location / {{ return 200 "ok\\n"; }}
  }}
}}
"""


def ensure_tools() -> None:
    missing = [
        pkg
        for tool, pkg in (("nginx", "nginx-light"), ("wrk", "wrk"))
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()
    ]
    if not missing:
        return
    print(f"installing {' '.join(missing)} (Debian packages) ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_nginx(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    (work / "nginx.conf").write_text(NGINX_CONF.format(work=work, port=port))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = subprocess.Popen([nginx, "-c", str(work / "nginx.conf"), "-p", str(work)])
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}/"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("nginx did not start")


def wrk_rps(url: str, seconds: int) -> float:
    out = subprocess.run(
        ["wrk", "-t1", "-c32", f"-d{seconds}s", url], capture_output=True, text=True, check=True
    ).stdout
    m = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    assert m, out
    return float(m.group(1))


def tailwise_trial(url: str, rate: int, out: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "tailwise",
        "run",
        url,
        "--rate",
        f"{rate}/s",
        "--arrival",
        "constant",
        "--warmup",
        "1s",
        "--duration",
        WINDOW,
        "--max-send-lag",
        "1ms",
        "--json",
        "-q",
        "--out",
        str(out),
    ]
    s = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout)
    # Each trial writes its own records (as any run does), but a trial's ~50 MB must not
    # be flushed to disk by the kernel during a *later* trial: delete it now (measured:
    # without this, trials after ~30 s of accumulated writes lose their p99).
    shutil.rmtree(out, ignore_errors=True)
    return judge(s)


def judge(s: dict[str, Any]) -> dict[str, Any]:
    """Whether a trial's summary shows the rate sustained, and what it saw.

    Every request's send lag counts here, including requests that waited for the
    in-flight cap: the product's generator check leaves those out (the cap waits
    on the target), but a generator that cannot read its answers fast enough also
    fills the cap, and a trial spent at the cap (measured at 67.5k/s: 10,000 in
    flight, latency p50 285 ms, uncapped send lag 0) is a closed loop, not a
    sustained open-loop rate. So the cap must never bind.
    """
    r, g = s["rates"], s["generator"]
    ok = (
        r["achieved_send_rps"] >= 0.99 * r["offered_rps"]
        and s["send_lag_ms"]["p99"] <= 1.0
        and g["cap_bound"] == 0
        and s["requests"]["ok"] == s["requests"]["scheduled"]
    )
    return {
        "ok": ok,
        "lag_p99_ms": s["send_lag_ms"]["p99"],
        "cap_bound": g["cap_bound"],
        "achieved_rps": r["achieved_send_rps"],
    }


def sustainable(url: str, rate: int, work: Path, trials: int) -> tuple[bool, list[str]]:
    lags: list[str] = []
    passed = 0
    for k in range(trials):
        t = tailwise_trial(url, rate, work / f"tw-{rate}-{k}")
        lag = f"{round(float(t['lag_p99_ms']), 3)}"
        lags.append(lag + (f" (cap bound {t['cap_bound']:,})" if t["cap_bound"] else ""))
        passed += bool(t["ok"])
        if passed * 2 > trials or (trials - k - 1 + passed) * 2 <= trials:
            break  # the majority is decided
    ok = passed * 2 > trials
    print(
        f"  tailwise {rate:>7}/s  send-lag p99 {lags} ms  -> {'sustained' if ok else 'not'}",
        flush=True,
    )
    return ok, lags


def search(
    url: str,
    work: Path,
    start: int,
    trials: int,
    between: Callable[[], float | None],
    resolution: float = 0.02,
) -> tuple[int, list[dict[str, object]]]:
    """The highest sustained rate, to ``resolution`` (a fraction of the rate); ``between``
    (a wrk run) follows every rate tried."""
    log: list[dict[str, object]] = []
    lo, hi, rate = 0, 0, start
    while True:  # bracket
        ok, lags = sustainable(url, rate, work, trials)
        log.append({"rate_rps": rate, "sustained": ok, "lag_p99_ms": lags})
        log[-1]["wrk_after_rps"] = between()
        if not ok:
            hi = rate
            break
        lo, rate = rate, rate * 2
    # Bisect: 5% steps left the ratio's last digit to the grid (90,000 sustained and
    # 93,750 not is 0.496-0.517 of a 181k wrk).
    while hi - lo > resolution * lo and lo > 0:
        mid = (lo + hi) // 2
        ok, lags = sustainable(url, mid, work, trials)
        log.append({"rate_rps": mid, "sustained": ok, "lag_p99_ms": lags})
        log[-1]["wrk_after_rps"] = between()
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo, log


def wrk_beside(log: list[dict[str, Any]], best: int, first: float) -> float | None:
    """Mean of the wrk runs just before and just after the trials of rate ``best``:
    the machine those trials saw (this VM's speed swings by ~25% within minutes)."""
    for i, step in enumerate(log):
        if step["rate_rps"] == best and step.get("wrk_after_rps"):
            before = log[i - 1].get("wrk_after_rps") if i else first
            return (float(before or step["wrk_after_rps"]) + float(step["wrk_after_rps"])) / 2
    return None


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, {platform.system()}"


def write_docs(result: dict[str, Any]) -> None:
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    begin, end = "<!-- wrk_vs_tailwise:begin -->", "<!-- wrk_vs_tailwise:end -->"
    trials = "\n".join(
        f"| {t['rate_rps']:,} | {'yes' if t['sustained'] else 'no'} | "
        f"{', '.join(str(x) for x in t['lag_p99_ms'])} |"
        for t in result["trials"]
    )
    beside = f"{result['ratio_beside']:.3f}" if result["ratio_beside"] else "-"
    block = f"""{begin}
### Open-loop rate vs. wrk (latest run: {result["date"]})

Machine: {result["machine"]}. Target: nginx-light, 1 worker, static 3-byte body, loopback.

| | req/s |
|---|---:|
| wrk closed loop, 1 thread, 32 conns (median of {result["wrk_runs"]}) | {result["wrk_rps"]:,.0f} |
| tailwise highest sustainable open-loop rate, 1 process | {result["tailwise_rps"]:,} |
| **ratio** | **{result["ratio"]:.3f}** (target >= 0.5, stretch 0.8) |
| ratio to the fastest wrk run ({max(result["wrk_all"]):,}) | {result["ratio_fastest"]:.3f} |
| ratio to the wrk runs just before and after the {result["tailwise_rps"]:,}/s trials \
| {beside} |

Sustainable: achieved >= 99% of offered, send-lag p99 <= 1 ms over every request (those that
waited for the in-flight cap included), the cap never bound, and no errors, in a majority of
{result["trials_per_rate"]} trials (1 s warm-up + {WINDOW} window each). wrk ran before the
search, after each rate tried, and after the search, in this order
({", ".join(f"{x:,}" for x in result["wrk_all"])} req/s). Each trial writes its
records like any run; the harness deletes them after each trial so that no trial pays for the
kernel flushing an earlier trial's files.

| offered rate (req/s) | sustained | send-lag p99 per trial (ms) |
|---:|:---:|---|
{trials}
{end}"""
    text = splice(text, begin, end, block)
    hist = "<!-- wrk_vs_tailwise:history -->"
    if hist not in text:
        text += (
            "\n#### History of this benchmark\n\n"
            "| date | wrk median | tailwise | ratio | all wrk runs |\n|---|---:|---:|---:|---|\n"
            + hist
            + "\n"
        )
    row = (
        f"| {result['date']} | {result['wrk_rps']:,.0f} | {result['tailwise_rps']:,} | "
        f"{result['ratio']:.3f} (to the fastest wrk run: {result['ratio_fastest']:.3f}) | "
        f"{', '.join(f'{x:,}' for x in result['wrk_all'])} |"
    )
    path.write_text(text.replace(hist, row + "\n" + hist))
    print(f"wrote {path.relative_to(ROOT)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 trial per rate, one wrk run")
    ap.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--start", type=int, default=15000, help="first rate to try (req/s)")
    ap.add_argument(
        "--resolution", type=float, default=0.02, help="bisect to this fraction of the rate"
    )
    a = ap.parse_args()
    if not 0.005 <= a.resolution <= 0.5:
        ap.error("--resolution: a fraction between 0.005 and 0.5")
    ensure_tools()
    trials, wrk_runs = (1, 1) if a.quick else (3, 3)
    with tempfile.TemporaryDirectory(prefix="tailwise-bench-") as tmp:
        work = Path(tmp)
        nginx, url = start_nginx(work)
        try:
            print(f"target {url} (nginx); machine: {machine()}", flush=True)
            # wrk before, between the rates tried, and after the search: this VM's
            # throughput drifts by ~25% within minutes (one run: 110k before the search,
            # 128-142k after it), and the reference should see the machine the trials saw.
            rps = [wrk_rps(url, 5) for _ in range(wrk_runs)]
            print(f"  wrk closed loop: {[round(x) for x in rps]} req/s", flush=True)

            def between() -> float | None:
                if a.quick:
                    return None
                rps.append(wrk_rps(url, 5))
                print(f"  wrk closed loop: {round(rps[-1])} req/s", flush=True)
                return rps[-1]

            best, log = search(url, work, a.start, trials, between, a.resolution)
            after = [wrk_rps(url, 5) for _ in range(wrk_runs)]
            print(f"  wrk closed loop, after: {[round(x) for x in after]} req/s", flush=True)
            rps += after
        finally:
            nginx.terminate()
            nginx.wait(timeout=10)
    wrk = statistics.median(rps)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "wrk_rps": wrk,
        "wrk_all": [round(x) for x in rps],
        "wrk_runs": len(rps),
        "tailwise_rps": best,
        "ratio": best / wrk,
        "ratio_fastest": best / max(rps),
        "ratio_beside": best / beside
        if (beside := wrk_beside(log, best, rps[wrk_runs - 1]))
        else None,
        "trials_per_rate": trials,
        "trials": log,
    }
    print(f"\nwrk {wrk:,.0f} req/s   tailwise {best:,} req/s   ratio {best / wrk:.3f}")
    print(f"ratio to the fastest wrk run {result['ratio_fastest']:.3f}", end="")
    print(f", to the wrk runs beside the best rate {result['ratio_beside'] or 0:.3f}")
    if a.write_docs:
        write_docs(result)


if __name__ == "__main__":
    main()
