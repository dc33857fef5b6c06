"""How much delay does the client itself add to TTFT and ITL? At 1, 100 and 300 streams.

Target: tailwise's loopback stream lab (TTFT 50 ms, ITL 10 ms, 64 tokens), which
logs the monotonic instant it wrote each chunk (the same clock as the client's,
on one machine). Client: ``tailwise run --api openai-chat`` with N concurrent
streams (closed loop keeps exactly N in flight) for 1 s warm-up + 6 s. The
client-added error is the client's percentile (TTFT from its actual send; ITL
gaps as received) minus the same percentile of the server's log. CPU share:
the client process's user+system CPU time over the run's wall time.

Usage: ``python benchmarks/llm_client_overhead.py [--write-docs]``. Loopback only.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

from tailwise.metrics import derive
from tailwise.records import read_jsonl
from tailwise.server import spawn
from tailwise.server.stream_lab import read_truth

ROOT = Path(__file__).resolve().parent.parent
STREAMS = (1, 100, 300)
TOKENS = 64


def start_lab(truth: Path) -> tuple[subprocess.Popen[str], str]:
    return spawn(
        "tailwise.server.stream_lab",
        "--ttft",
        "50ms",
        "--itl",
        "10ms",
        "--truth",
        str(truth),
        "--lifetime",
        "300s",
    )


def trial(streams: int, work: Path) -> dict[str, Any]:
    truth = work / f"truth-{streams}.jsonl"
    lab, url = start_lab(truth)
    out = work / f"run-{streams}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tailwise",
                "run",
                url,
                "--api",
                "openai-chat",
                "--model",
                "lab",
                "--max-tokens",
                str(TOKENS),
                "--concurrency",
                str(streams),
                "--warmup",
                "1s",
                "--duration",
                "6s",
                "-q",
                "--out",
                str(out),
            ],
            check=False,
            timeout=120,
        )
    finally:
        wall = time.monotonic() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the client only: the lab still runs
        lab.terminate()
        lab.wait(timeout=10)
    s = json.loads((out / "summary.json").read_text())
    # The same population on both sides: every completed stream, warm-up included (the
    # server's log has them all; the summary's window would leave out the start-up burst).
    rec = read_jsonl(out / "records.jsonl")
    ok = rec.error == 0
    c_ttft = derive.service_ttft_ns(rec)[ok] / 1e6
    c_itl = derive.itl_gaps_ns(rec, ok) / 1e6
    ttft_ns, gaps_ns = read_truth(truth)
    s_ttft, s_itl = np.array(ttft_ns) / 1e6, np.array(gaps_ns) / 1e6
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def err(client: np.ndarray, server: np.ndarray, pct: float) -> float:
        q = {"method": "inverted_cdf"}
        return round(float(np.percentile(client, pct, **q) - np.percentile(server, pct, **q)), 2)

    return {
        "streams": streams,
        "requests": int(ok.sum()),
        "server_requests": len(ttft_ns),
        "ttft_p50_ms": round(float(np.median(c_ttft)), 2),
        "ttft_err_p50_ms": err(c_ttft, s_ttft, 50),
        "ttft_err_p99_ms": err(c_ttft, s_ttft, 99),
        "itl_err_p50_ms": err(c_itl, s_itl, 50),
        "itl_err_p99_ms": err(c_itl, s_itl, 99),
        "client_cpu_share": round(cpu / wall, 3),
        "verdict": s["verdict"],
    }


def write_docs(rows: list[dict[str, Any]], machine: str) -> None:
    begin, end = "<!-- llm_client_overhead:begin -->", "<!-- llm_client_overhead:end -->"
    table = "\n".join(
        f"| {r['streams']} | {r['requests']} | {r['ttft_p50_ms']} | {r['ttft_err_p50_ms']} | "
        f"{r['ttft_err_p99_ms']} | {r['itl_err_p50_ms']} | {r['itl_err_p99_ms']} | "
        f"{100 * r['client_cpu_share']:.0f}% |"
        for r in rows
    )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    block = f"""{begin}
## LLM client: `benchmarks/llm_client_overhead.py` ({when})

How much delay the client adds to TTFT and ITL. Server: tailwise's stream lab
(TTFT 50 ms, ITL 10 ms, {TOKENS} tokens), which logs the instant it wrote each chunk on the
client's own clock. Error = the client's percentile minus the same percentile of the
server's log, over every completed stream on both sides (TTFT from the actual send; errors
in ms). CPU: the client process's CPU time over wall time. Machine: {machine}.

| streams | requests | TTFT p50 | TTFT err p50 | TTFT err p99 | ITL err p50 | ITL err p99 | CPU |
|---:|---:|---:|---:|---:|---:|---:|---:|
{table}

Target: TTFT p50 error <= 3 ms at 100 streams.
{end}"""
    write_block(begin, end, block)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    machine = machine_label()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tailwise-llm-bench-") as tmp:
        for n in STREAMS:
            r = trial(n, Path(tmp))
            print(json.dumps(r), flush=True)
            rows.append(r)
    if a.write_docs:
        write_docs(rows, machine)


if __name__ == "__main__":
    main()
