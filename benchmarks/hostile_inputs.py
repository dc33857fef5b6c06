"""Hostile input and broken outputs (issues 21 and 40): every case refused or contained, its cost.

Each row is a real ``python -m tailwise`` process given one of the red-team
pass's reproductions: absurd rates and sizes, YAML bombs, a read-only or
occupied ``--out``, corrupt summaries, hand-edited scenario values. The table
gives its exit code, whether a traceback was printed, its wall time and the
process's peak memory (``ru_maxrss`` from ``wait4``). URLs point at a port
nobody listens on, so any request sent would show up as a record on disk.

    python benchmarks/hostile_inputs.py [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from docs_block import machine_label, write_block  # benchmarks/ is on sys.path when run

URL = "http://127.0.0.1:9/"
BOMB = (
    "calibration:\n  a: &a ["
    + ",".join(['"lol"'] * 9)
    + "]\n"
    + "".join(
        f"  {b}: &{b} [{','.join([f'*{a}'] * 9)}]\n"
        for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    )
)
SCENARIOS = {
    "YAML alias bomb (billion laughs)": BOMB,
    "YAML nested 5,000 deep": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "scenario: 1e9 requests": "arrival: {rate: 1000/s, requests: 1000000000, duration: 1000000s}\n",
    "scenario: replicas 1e9": "replicas: 1000000000\n",
    "scenario: fanout.n 1e9": "fanout: {n: 1000000000}\n",
    "scenario: failures every 1ns": "failures: {mtbf: 1ns, mttr: 1ns}\n",
    "scenario: autoscale max 1e9": "autoscale: {min: 0, max: 1000000000, target: 1}\n",
    "scenario: stragglers x1e308": "stragglers: {fraction: 100%, factor: 1e308}\n",
    "scenario: lognormal sigma 1e308": "delay: lognormal:1ms,1e308\n",
}
RUN = ["run", URL, "--duration", "1s", "-q"]
CLI = {
    "--rate 1e-12/s": [*RUN, "--rate", "1e-12/s"],
    "--rate 1e-9/s": [*RUN, "--rate", "1e-9/s"],
    "--arrival gamma:1e-10": [*RUN, "--rate", "10/s", "--arrival", "gamma:1e-10"],
    "--rate 1e9/s": [*RUN, "--rate", "1e9/s"],
    "--workers 100000": [*RUN, "--rate", "100/s", "--workers", "100000"],
    "--concurrency 1e9": [*RUN, "--concurrency", "1e9"],
    "sweep --concurrency 1e9": ["sweep", URL, "--concurrency", "1e9", "--duration", "1s"],
    "--input-tokens 1000000": [
        *RUN,
        "--rate",
        "1/s",
        "--api",
        "openai-chat",
        "--model",
        "m",
        "--input-tokens",
        "1000000",
    ],
    "--seed -1": [*RUN, "--rate", "1/s", "--seed", "-1"],
    "--max-in-flight 1e9": [*RUN, "--rate", "1/s", "--max-in-flight", "1e9"],
    "plan replicas --per-replica 1e12": [
        "plan",
        "replicas",
        "--rate",
        "100/s",
        "--latency",
        "40ms",
        "--per-replica",
        "1e12",
    ],
    "plan queue --servers 1e9": [
        "plan",
        "queue",
        "--servers",
        "1e9",
        "--service",
        "5ms",
        "--utilization",
        "50%",
    ],
    "simulate --replications 1e9": ["simulate", "{ok}", "--replications", "1000000000"],
    # issue 40: files that overflow, nest, never end
    "trace offsets past int64 (1e11 s)": [*RUN, "--arrival", "trace:{far}"],
    "trace dates 0001-01-01..9999-12-31": [*RUN, "--arrival", "trace:{dates}"],
    "--trace-speed 0.001x on a 9.5-year trace": [
        *RUN,
        *("--arrival", "trace:{long}", "--trace-speed", "0.001x"),
    ],
    "simulate: trace offsets past int64": ["simulate", "{far_scenario}", "-q"],
    "--bodies: JSON nested 100,000 deep": [*RUN, "--rate", "1/s", "--bodies", "{deep}"],
    "--prompts: JSON nested 100,000 deep": [
        *RUN,
        *("--rate", "1/s", "--api", "openai-chat", "--model", "m", "--prompts", "{deep}"),
    ],
    "--bodies /dev/zero": [*RUN, "--rate", "1/s", "--bodies", "/dev/zero"],
    "--body @/dev/zero": [*RUN, "--rate", "1/s", "--body", "@/dev/zero"],
    "--prompts /dev/zero": [
        *RUN,
        *("--rate", "1/s", "--api", "openai-chat", "--model", "m", "--prompts", "/dev/zero"),
    ],
    "--arrival trace:/dev/zero": [*RUN, "--arrival", "trace:/dev/zero"],
    "--shared-prefix 1000000": [
        *RUN,
        *("--rate", "1/s", "--api", "openai-chat", "--model", "m", "--shared-prefix", "1000000"),
    ],
}


def _issue40_files(home: Path) -> dict[str, Path]:
    """The hostile files of issue 40's reproductions."""
    head = "timestamp,ContextTokens,GeneratedTokens\n"
    made = {
        "far": head + "0,10,5\n1e11,10,5\n",
        "dates": head + "0001-01-01 00:00:00,10,5\n9999-12-31 00:00:00,10,5\n",
        "long": head + "0,10,5\n300000000,10,5\n",
        "deep": "[" * 100_000 + "\n",
    }
    out = {}
    for name, text in made.items():
        out[name] = home / (name + (".jsonl" if name == "deep" else ".csv"))
        out[name].write_text(text)
    scenario = home / "far.yaml"
    scenario.write_text(f"arrival: {{process: 'trace:{out['far']}'}}\nservice: 5ms\n")
    out["far_scenario"] = scenario
    return out


def _fill(arg: str, files: dict[str, Path]) -> str:
    for name, path in files.items():
        arg = arg.replace("{" + name + "}", str(path))
    return arg


def run_case(argv: list[str], cwd: Path) -> dict[str, object]:
    """One process; its exit code, stderr and peak RSS (wait4 reaps it with its rusage)."""
    env = dict(os.environ, COLUMNS="100")
    with tempfile.TemporaryFile("w+") as err_file:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tailwise", *argv],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            text=True,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall_s = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err_file.seek(0)
        err = err_file.read()
    return {
        "code": proc.returncode,
        "traceback": "Traceback" in err,
        "lines": err.count("\n"),
        "wall_s": wall_s,
        "peak_mib": usage.ru_maxrss / 1024,
        "message": err.strip().splitlines()[-1] if err.strip() else "",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        ok = home / "ok.yaml"
        ok.write_text("arrival: {rate: 50/s, duration: 1s}\nservice: exp:5ms\n")
        files = _issue40_files(home)
        files["ok"] = ok
        cases = {name: [_fill(a, files) for a in argv] for name, argv in CLI.items()}
        for i, (name, text) in enumerate(SCENARIOS.items()):
            path = home / f"s{i}.yaml"
            path.write_text(text)
            cases[name] = ["simulate", str(path), "-q"]
        earlier = home / "earlier"
        first = run_case(["simulate", str(ok), "--out", str(earlier), "-q"], home)
        assert first["code"] == 0, first
        cases["--out an earlier run, no --force"] = ["simulate", str(ok), "--out", str(earlier)]
        blocker = home / "file"
        blocker.write_text("x")
        cases["--out not writable"] = [
            *CLI["--rate 1e-9/s"][:-2],
            "--rate",
            "1/s",
            "--out",
            str(blocker / "run"),
        ]
        bad = home / "corrupt"
        bad.mkdir()
        doc = json.loads((earlier / "summary.json").read_text())
        doc["requests"]["scheduled"] = "<img src=x onerror=alert(1)>"
        (bad / "summary.json").write_text(json.dumps(doc))
        cases["report: hand-edited summary (HTML in a count)"] = ["report", str(bad), "-q"]
        (bad / "summary.json").write_text(json.dumps(doc)[:200])
        cases["compare: truncated summary"] = ["compare", str(earlier), str(bad)]
        deep_summary = home / "deep-summary"
        deep_summary.mkdir()
        (deep_summary / "summary.json").write_text("[" * 100_000)
        cases["report: summary.json nested 100,000 deep"] = ["report", str(deep_summary), "-q"]
        cases["compare: summary.json nested 100,000 deep"] = [
            *("compare", str(deep_summary), str(earlier)),
        ]
        zero = home / "zero-records"
        zero.mkdir()
        (zero / "summary.json").write_text((earlier / "summary.json").read_text())
        (zero / "records.jsonl").symlink_to("/dev/zero")
        cases["calibrate: records.jsonl -> /dev/zero"] = [
            *("calibrate", str(zero), "--out", str(home / "c.yaml")),
        ]
        for name, argv in cases.items():
            res = run_case(argv, home)
            res["name"] = name
            rows.append(res)
            print(f"{res['code']}  {res['wall_s']:.2f}s  {res['peak_mib']} MiB  {name}")
            print(f"     {res['message'][:150]}")
        # the one earlier run, and the /dev/zero link (not a file, never written)
        sent = sum(1 for p in home.rglob("records.jsonl") if p.is_file() and p.stat().st_size) - 1
    block = render(rows, sent)
    print(block)
    if args.write_docs:
        write_block("<!-- hostile:begin -->", "<!-- hostile:end -->", block)


def render(rows: list[dict[str, object]], dirs_with_records: int) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "<!-- hostile:begin -->",
        f"## Hostile input and broken outputs: `benchmarks/hostile_inputs.py` ({stamp})",
        "",
        "The red-team reproductions of issues 21 and 40, each a `python -m tailwise`",
        "process. Before: int64 overflows, endless plans, 22.6 GB before the kernel's OOM",
        "killer, a SIGSEGV, 92 processes and counting, tracebacks; `/dev/zero` read until",
        "MemoryError, RecursionError on deep JSON. Now every one is refused before work",
        "starts (exit 2, one line naming the option and the limit) at the cost of starting",
        "Python; a device that never ends is read to its bound (256 MiB), no further.",
        f"Machine: {machine_label()}.",
        "",
        "| case | exit | traceback | stderr lines | wall (s) | peak memory (MiB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        peak = f"{r['peak_mib']:.0f}"
        lines.append(
            f"| {r['name']} | {r['code']} | {'yes' if r['traceback'] else 0} | {r['lines']} "
            f"| {r['wall_s']:.2f} | {peak} |"
        )
    tracebacks = sum(1 for r in rows if r["traceback"])
    lines += [
        "",
        f"In all: **{len(rows)} cases, {tracebacks} tracebacks, {dirs_with_records} records "
        "written** (nothing was sent or simulated), peak memory at most "
        f"{max(float(str(r['peak_mib'])) for r in rows):.0f} MiB. Each row is a test in",
        "`tests/reliability/test_budgets.py`, `test_outputs.py`, `test_user_mistakes.py`",
        "and `test_hostile_files.py`;",
        "`test_fuzz_parsers.py` fuzzes the HTTP answer, SSE, YAML, scenario, SLO and",
        "saved-summary parsers (`pytest -m long` for the longer run).",
        "<!-- hostile:end -->",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
