"""The reliability suite at moderate length: every fault tried, requests sent, records lost.

Each row is a real run: tailwise (its Python API, Poisson arrivals) through
``tailwise proxy`` in front of the loopback target (2 ms answers), every
request with a body of its own length so each record pairs exactly with the
proxy's ground-truth line (``tailwise.proxy.check``). Two more rows leave the
proxy out: the target killed and restarted mid-run, and SIGTERM sent to a
``tailwise run`` process while the proxy holds requests in a stall.

"Records lost" counts what one side has and the other lacks: a scheduled
request missing from ``records.jsonl``, a sent request the proxy never saw
or a request the proxy saw that tailwise never sent. It must be zero everywhere.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

import tailwise
from tailwise.proxy import read_truth, spawn_proxy
from tailwise.proxy.check import check_run
from tailwise.records import read_jsonl
from tailwise.server import spawn

RATE_RPS = 200
FAULTS = {
    "added latency": ["--delay", "exp:5ms"],
    "periodic stall": ["--stall", "200ms/1s"],
    "stragglers": ["--slow", "5%x10"],
    "resets": ["--reset", "2%"],
    "dropped (black hole)": ["--drop", "2%"],
    "truncated responses": ["--truncate", "2%"],
    "bandwidth limit": ["--bandwidth", "20KB/s"],
    "faults on a schedule": ["--reset", "20%", "--schedule", "5s-10s"],
    "all at once": [
        *("--delay", "exp:2ms", "--stall", "100ms/1s", "--slow", "2%x5"),
        *("--reset", "1%", "--drop", "1%", "--truncate", "1%"),
    ],
}


def bodies(tmp: Path, n: int) -> str:
    path = tmp / "bodies.jsonl"
    path.write_text("".join(json.dumps("x" * i) + "\n" for i in range(n)))
    return str(path)


def through_proxy(
    name: str, flags: list[str], target: str, seconds: int, tmp: Path
) -> dict[str, Any]:
    work = tmp / name.replace(" ", "-")
    work.mkdir()
    truth = work / "truth.jsonl"
    proc, url = spawn_proxy(target.removeprefix("http://"), *flags, "--log", str(truth))
    try:
        res = tailwise.run(
            url + "/x",
            rate=f"{RATE_RPS}/s",
            duration=f"{seconds}s",
            bodies=bodies(work, RATE_RPS * seconds * 3 // 2),
            timeout="300ms",
            out=str(work / "run"),
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    _, rows = read_truth(truth)
    check = check_run(res.records, rows)
    s = res.summary["requests"]
    return {
        "fault": name,
        "flags": " ".join(flags),
        "scheduled": len(res.records),
        "sent": check.sent,
        "seen_by_proxy": check.seen_by_proxy,
        "injected": check.faults,
        "kinds": {k or "ok": n for k, n in _kinds(res.records.error_kinds).items()},
        "lost": check.lost + (len(res.records) - s["records_on_disk"]),
        "accounted": s["accounted"],
        "causal": check.causal and check.delay_honoured,
        "p99_ms": check.latency_p99_ms,
        "truth_p99_ms": check.truth_p99_ms,
    }


def _kinds(kinds: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in kinds:
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_loopback(port: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tailwise.server.loopback", "--port", str(port), "--service"]
    proc = subprocess.Popen([*cmd, "2ms", "--lifetime", "600s"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().startswith("listening on")
    return proc


def target_restart(seconds: int, tmp: Path) -> dict[str, Any]:
    """The target killed a third of the way in, back 2 s later (no proxy: a real death)."""
    port = free_port()
    procs = [start_loopback(port)]

    def bounce() -> None:
        time.sleep(seconds / 3)
        procs[0].kill()
        procs[0].wait()
        time.sleep(2.0)
        procs.append(start_loopback(port))

    mover = threading.Thread(target=bounce)
    mover.start()
    try:
        res = tailwise.run(
            f"http://127.0.0.1:{port}/x",
            rate=f"{RATE_RPS}/s",
            duration=f"{seconds}s",
            timeout="500ms",
            connect_timeout="200ms",
            out=str(tmp / "restart"),
        )
    finally:
        mover.join()
        for p in procs:
            p.kill()
            p.wait()
    s = res.summary["requests"]
    return {
        "fault": "target killed, restarted 2 s later",
        "flags": "(no proxy)",
        "scheduled": len(res.records),
        "sent": s["sent"],
        "seen_by_proxy": None,
        "injected": {},
        "kinds": {k or "ok": n for k, n in _kinds(res.records.error_kinds).items()},
        "lost": len(res.records) - s["records_on_disk"],
        "accounted": s["accounted"],
        "causal": True,
        "p99_ms": None,
        "truth_p99_ms": None,
    }


def sigterm_in_stall(seconds: int, target: str, tmp: Path) -> dict[str, Any]:
    """``tailwise run`` (a process) through 500ms/1s stalls, SIGTERM 100 ms into one."""
    work = tmp / "sigterm"
    work.mkdir()
    truth = work / "truth.jsonl"
    proxy, url = spawn_proxy(
        target.removeprefix("http://"), "--stall", "500ms/1s", "--log", str(truth)
    )
    # Sizes must not repeat before the signal (bodies are used in turn): enough for the
    # plan up to then, with a margin; their lengths add up quadratically.
    planned_s = seconds + 10
    argv = [url + "/x", "--rate", f"{RATE_RPS}/s", "--duration", f"{planned_s}s"]
    argv += ["--grace", "100ms", "--bodies", bodies(work, RATE_RPS * planned_s * 3 // 2)]
    argv += ["--out", str(work / "run"), "-q"]
    run = subprocess.Popen([sys.executable, "-m", "tailwise", "run", *argv])
    start, _ = read_truth(truth)
    now_s = (time.monotonic_ns() - start["origin_monotonic_ns"]) / 1e9
    time.sleep(int(now_s + seconds) + 1.1 - now_s)
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=60)
    proxy.terminate()
    proxy.wait(timeout=10)
    out = work / "run"
    s = json.loads((out / "summary.json").read_text())["requests"]
    records = read_jsonl(out / "records.jsonl")
    _, rows = read_truth(truth)
    check = check_run(records, rows)
    return {
        "fault": "SIGTERM inside a stall",
        "flags": "--stall 500ms/1s; --grace 100ms",
        "scheduled": len(records),
        "sent": check.sent,
        "seen_by_proxy": check.seen_by_proxy,
        "injected": check.faults,
        "kinds": {k or "ok": n for k, n in _kinds(records.error_kinds).items()},
        "lost": check.lost + (len(records) - s["records_on_disk"]),
        "accounted": s["accounted"],
        "causal": check.causal,
        "p99_ms": check.latency_p99_ms,
        "truth_p99_ms": check.truth_p99_ms,
    }


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v:.1f}"


HEADER = (
    "| fault | proxy flags | scheduled | sent | seen by proxy | injected | tailwise saw "
    "| p99 (ms) | truth p99 (ms) | records lost |\n|---|---|---:|---:|---:|---|---|---:|---:|---:|"
)


def write_docs(rows: list[dict[str, Any]], seconds: int, machine: str) -> None:
    begin, end = "<!-- reliability:begin -->", "<!-- reliability:end -->"
    lines = "\n".join(
        f"| {r['fault']} | `{r['flags']}` | {r['scheduled']:,} | {r['sent']:,} | "
        f"{'' if r['seen_by_proxy'] is None else format(r['seen_by_proxy'], ',')} | "
        f"{', '.join(f'{k} {n}' for k, n in r['injected'].items())} | "
        f"{', '.join(f'{k} {n}' for k, n in r['kinds'].items())} | "
        f"{_ms(r['p99_ms'])} | {_ms(r['truth_p99_ms'])} | **{r['lost']}** |"
        for r in rows
    )
    checked = all(r["accounted"] and r["causal"] for r in rows)
    verdict = (
        "Every row: accounted (scheduled = ok + failed + timed out + cancelled + not sent),\n"
        "every record on disk, client service time >= proxy residence time for every pair\n"
        "(one monotonic clock), no request forwarded before its drawn delay. "
        if checked
        else "**NOT every row was accounted for and causal: see the JSON lines printed.** "
    )
    total = sum(r["scheduled"] for r in rows)
    lost = sum(r["lost"] for r in rows)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    block = f"""{begin}
## Reliability: `benchmarks/reliability_table.py` ({when})

tailwise under injected faults: {RATE_RPS}/s Poisson for {seconds} s a row, through
`tailwise proxy` in front of the loopback target (2 ms answers), `--timeout 300ms`.
Each record is paired with the proxy's ground-truth line (every request has a body
of its own length), so "injected" is what the proxy did and "tailwise saw" is how
tailwise accounted for it. p99 is tailwise's latency over ok requests; "truth p99"
is the proxy's residence time plus each request's send lag plus the median
loopback hop. Machine: {machine}.

{HEADER}
{lines}

{verdict}In all:
**{total:,} requests, {lost} records lost.** Mapping: a reset or a truncated
response is `reset` (a truncated one has bytes in), a dropped request is
`timeout`; under SIGTERM the requests held by the stall are `cancelled`, and
the proxy logs them as `client_closed`. The short version of every row runs in
`make test` (`tests/reliability/`), with the other failure cases: a server that
never answers, streams that never end, a 256 MiB body, a 5 MiB stream event.
{end}"""
    write_block(begin, end, block)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seconds", type=int, default=20, help="length of each row's run")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument(
        "--hostile", action="store_true", help="only the hostile-server rows (issue 40)"
    )
    a = ap.parse_args()
    if a.hostile:
        hostile(a.seconds, a.write_docs)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="tailwise-reliability-") as tmp_name:
        tmp = Path(tmp_name)
        target_proc, target = spawn(
            "tailwise.server.loopback", "--service", "2ms", "--lifetime", "3600s"
        )
        try:
            for name, flags in FAULTS.items():
                rows.append(through_proxy(name, flags, target, a.seconds, tmp))
                print(json.dumps(rows[-1]), flush=True)
            rows.append(sigterm_in_stall(a.seconds, target, tmp))
            print(json.dumps(rows[-1]), flush=True)
        finally:
            target_proc.terminate()
            target_proc.wait(timeout=10)
        rows.append(target_restart(a.seconds, tmp))
        print(json.dumps(rows[-1]), flush=True)
    if a.write_docs:
        write_docs(rows, a.seconds, machine_label())


def hostile(seconds: int, docs: bool) -> None:
    """The hostile-server rows (benchmarks/hostile_servers.py), their own block."""
    import hostile_servers

    with tempfile.TemporaryDirectory(prefix="tailwise-hostile-") as tmp_name:
        target_proc, target = spawn(
            "tailwise.server.loopback", "--service", "1ms", "--lifetime", "3600s"
        )
        try:
            rows = hostile_servers.run_all(seconds, Path(tmp_name), target)
        finally:
            target_proc.terminate()
            target_proc.wait(timeout=10)
    block = hostile_servers.render(rows, seconds, machine_label())
    print(block)
    if docs:
        write_block("<!-- hostile-servers:begin -->", "<!-- hostile-servers:end -->", block)


if __name__ == "__main__":
    main()
