"""``tailwise demo``: a loopback target with a known law, measured by ``tailwise run``.

The target is the built-in queueing lab (:mod:`tailwise.server.loopback`):
4 FCFS workers with exponential 5 ms service, i.e. an M/M/4 queue with
capacity 800 req/s, so the numbers can be checked against Erlang C.
"""

from __future__ import annotations

from tailwise.loadgen.runner import RunOptions, execute, prepare, run_directory
from tailwise.report.text import print_summary
from tailwise.server import spawn

DEMO_ARGS = ["--service", "exp:5ms", "--workers", "4", "--lifetime", "300s"]


def run_demo(rate: str, duration: str) -> int:
    proc, base = spawn("tailwise.server.loopback", *DEMO_ARGS)
    try:
        print(f"demo target: {base}  (M/M/4, 5 ms mean service, capacity 800 req/s)")
        opts = RunOptions(
            urls=[base + "/predict"],
            rate=rate,
            arrival="poisson",
            duration=duration,
            warmup="1s",
            name="demo",
            slo=["p99(latency)<=50ms", "latency<=25ms"],
        )
        prepared = prepare(opts)
        result = execute(prepared, run_directory(opts, prepared.targets[0]))
        print_summary(result.summary, str(result.directory))
        return result.exit_code
    finally:
        proc.terminate()
        proc.wait(timeout=10)
