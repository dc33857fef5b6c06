"""How many concurrent LLM streams does one client process hold honestly? 100 to 2,000.

Target: tailwise's loopback stream lab (TTFT 80 ms, ITL 15 ms, 32 tokens) in its own
process, which logs the monotonic instant it wrote each content chunk (the truth, on
the client's clock). Where the machine has two cores or more, the lab and the client
are pinned to different cores (``os.sched_setaffinity``).

Client: ``tailwise run --api openai-chat`` open loop (Poisson) at the rate that keeps N
streams in flight on average (N / stream life, the life being TTFT + 31 x ITL), 1 s
warm-up + ``--seconds``. Reported per N:

* TTFT error p50/p99: the client's TTFT percentile (from the *intended* send: a late
  client is latency) minus the same percentile of the server's log (first chunk written
  minus request arrival), over the window's completed streams on both sides (the
  warm-up's streams, which open the connections, are left out of the server's log too:
  its first ones by arrival);
* ITL error p50/p99: the same for the gaps between content chunks;
* client CPU per chunk: the run's own CPU time (``client.cpu_s`` in summary.json: the
  sending and receiving, not the start-up or the report) over content chunks received,
  in microseconds; and the share of a core it used;
* the highest N held with TTFT p50 error <= 2 ms (and the run not invalid).

The floor, in the same run at each N: ``floor_client.c``, compiled here where Linux has a
C compiler (``--no-floor``: none), does per chunk only what any client that times each
token must (one epoll wake-up shared by the sockets ready together, one ``recv`` and its
TCP ACK, one clock read), with no parsing and no records. Its CPU per chunk is what this
host's kernel and loopback charge a client; tailwise's own cost is what it spends above.
``--before DIR`` runs another source tree beside the current one (``ba9a712/src``: the
client before issue 27).

Peers on the same server, in the same run, at ``--peers`` stream counts: GuideLLM
(``GUIDELLM`` naming its executable, or ``/tmp/guidellm-venv/bin/guidellm``) and AIPerf
(``AIPERF``, or ``/tmp/aiperf-venv/bin/aiperf``), each where installed (``pip install
guidellm`` / ``aiperf`` into those venvs; nothing else is downloaded: they get a local
word-level tokenizer written here), else "not installed".

Usage: ``python benchmarks/stream_scale.py [--streams 100,500,1000,2000] [--seconds 4]
[--repeat 3] [--python] [--no-reader] [--before DIR] [--peers 25,50,100,200]
[--write-docs]``. ``--python`` also runs
each N with ``TAILWISE_PURE_PYTHON=1`` (the fallback path); ``--client-path DIR`` runs
another source tree as the client (before/after). Loopback only; a shared machine makes
every number noisy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
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

TTFT_S, ITL_S, TOKENS = 0.080, 0.015, 32
LIFE_S = TTFT_S + (TOKENS - 1) * ITL_S
HELD_MS = 2.0  # TTFT p50 error that counts as "held"
TRIALS = itertools.count()  # each trial its own truth log and run directory


PIN = True  # --no-pin: leave both processes to the scheduler (a busy shared machine)


def cores() -> tuple[set[int] | None, set[int] | None]:
    """(server cores, client cores): different ones where there are two or more."""
    if not PIN:
        return None, None
    try:
        mine = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None, None
    if len(mine) < 2:
        return None, None
    return {mine[-1]}, set(mine[:-1])


def start_lab(truth: Path) -> tuple[subprocess.Popen[str], str]:
    server_cores, _ = cores()
    lab, url = spawn(
        "tailwise.server.stream_lab",
        "--ttft",
        f"{TTFT_S * 1000:g}ms",
        "--itl",
        f"{ITL_S * 1000:g}ms",
        "--truth",
        str(truth),
        "--lifetime",
        "600s",
    )
    if server_cores is not None:
        os.sched_setaffinity(lab.pid, server_cores)
    return lab, url


def _pct(a: np.ndarray, p: float) -> float:
    return float(np.percentile(a, p, method="inverted_cdf")) if len(a) else float("nan")


def _cpu(before: resource.struct_rusage, after: resource.struct_rusage) -> float:
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def steady_truth(path: Path, skip: int) -> tuple[list[int], list[int]]:
    """The truth log without its first ``skip`` streams by arrival (the warm-up's, the probe)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows.sort(key=lambda r: r["arrival_ns"])
    ttft: list[int] = []
    gaps: list[int] = []
    for row in rows[skip:]:
        sent = row["chunks_ns"]
        if sent:
            ttft.append(sent[0] - row["arrival_ns"])
            gaps.extend(np.diff(sent).tolist())
    return ttft, gaps


def _errors(c_ttft: np.ndarray, c_itl: np.ndarray, truth: Path, skip: int = 0) -> dict[str, float]:
    ttft_ns, gaps_ns = steady_truth(truth, skip) if skip else read_truth(truth)
    s_ttft, s_itl = np.array(ttft_ns) / 1e6, np.array(gaps_ns) / 1e6
    return {
        "ttft_truth_p50_ms": round(_pct(s_ttft, 50), 2),
        "ttft_p50_ms": round(_pct(c_ttft, 50), 2),
        "ttft_err_p50_ms": round(_pct(c_ttft, 50) - _pct(s_ttft, 50), 2),
        "ttft_err_p99_ms": round(_pct(c_ttft, 99) - _pct(s_ttft, 99), 2),
        "itl_err_p50_ms": round(_pct(c_itl, 50) - _pct(s_itl, 50), 2),
        "itl_err_p99_ms": round(_pct(c_itl, 99) - _pct(s_itl, 99), 2),
        "server_streams": len(ttft_ns),
    }


CLIENT_PATH: str | None = None  # --client-path: another tailwise source tree as the client


def tailwise_trial(
    streams: int,
    seconds: float,
    work: Path,
    pure: bool = False,
    workers: str | None = None,
    reader: bool = True,
    client_path: str | None = None,
) -> dict[str, Any]:
    tag = f"{streams}{'-py' if pure else ''}{'-w' if workers else ''}-{next(TRIALS)}"
    truth = work / f"truth-{tag}.jsonl"
    lab, url = start_lab(truth)
    out = work / f"run-{tag}"
    rate = streams / LIFE_S
    env = dict(os.environ)
    if pure:
        env["TAILWISE_PURE_PYTHON"] = "1"
    if not reader:  # the compiled path with the loop's own reads (see docs/llm.md)
        env["TAILWISE_STREAM_READER"] = "0"
    client_path = client_path or CLIENT_PATH
    if client_path:
        env["PYTHONPATH"] = os.pathsep.join([client_path, env.get("PYTHONPATH", "")])
    cmd = [
        sys.executable, "-m", "tailwise", "run", url, "--api", "openai-chat", "--model", "lab",
        "--max-tokens", str(TOKENS), "--rate", f"{rate:.1f}/s", "--arrival", "poisson",
        "--warmup", "1s", "--duration", f"{seconds:g}s", "-q", "--out", str(out), "--force",
    ]  # fmt: skip
    if workers:
        cmd += ["--workers", workers]
    _, client_cores = cores()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.Popen(cmd, env=env)
        if client_cores is not None and not workers:
            os.sched_setaffinity(proc.pid, client_cores)
        proc.wait(timeout=300)
        # The whole client: start-up, records writer, workers and report included.
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the lab is not reaped yet
    finally:
        lab.terminate()
        lab.wait(timeout=10)
    s = json.loads((out / "summary.json").read_text())
    rec = read_jsonl(out / "records.jsonl")
    # The window only, on both sides: the warm-up's streams open their connections.
    ok = (rec.error == 0) & rec.in_window
    skip = int((~rec.in_window).sum()) + 1  # + the readiness probe
    c_ttft = derive.ttft_ns(rec)[ok] / 1e6
    c_itl = derive.itl_gaps_ns(rec, ok) / 1e6
    chunks = sum(len(t) for t in rec.chunk_times if t)
    client = s.get("generator", {})
    cpu_s = float(client.get("cpu_s") or 0.0)
    window = float(s["window"]["duration_s"]) + 1.0
    row = {
        "tool": "tailwise"
        + (f" ({_tree_label(client_path)})" if client_path else "")
        + (" (pure Python)" if pure else "")
        + ("" if reader or pure else " (no stream reader)")
        + (f" --workers {workers}" if workers else ""),
        "streams": streams,
        "rate_rps": round(rate, 1),
        "requests": int(ok.sum()),
        "chunks": chunks,
        **_errors(c_ttft, c_itl, truth, skip),
        "cpu_us_per_chunk": round(1e6 * cpu_s / chunks, 2) if chunks else None,
        "total_cpu_us_per_chunk": round(1e6 * _cpu(before, after) / chunks, 2) if chunks else None,
        "cpu_share": round(cpu_s / window, 2),
        "verdict": s["verdict"],
    }
    row["held"] = bool(row["ttft_err_p50_ms"] <= HELD_MS and row["verdict"] != "invalid")
    return row


def on_client_cores(
    cmd: list[str], lab: subprocess.Popen[str], env: dict[str, str] | None, keep_out: bool
) -> tuple[int, str, str]:
    """Run ``cmd`` on the client's cores, then stop the lab: (exit code, stdout if kept,
    stderr)."""
    _, client_cores = cores()
    out = subprocess.PIPE if keep_out else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.PIPE)
        if client_cores is not None:
            os.sched_setaffinity(proc.pid, client_cores)
        stdout, err = proc.communicate(timeout=300)
    finally:
        lab.terminate()
        lab.wait(timeout=10)
    text = (stdout or b"").decode(errors="replace")
    return proc.returncode, text, err.decode(errors="replace")


def run_peer(
    cmd: list[str], lab: subprocess.Popen[str], env: dict[str, str] | None, result: Path
) -> list[str] | None:
    """Run a peer's command on the client's cores, then stop the lab; its last error line
    (or ["failed"]) if it failed or left no ``result``, else None."""
    code, _, err = on_client_cores(cmd, lab, env, keep_out=False)
    if code != 0 or not result.exists():
        return err.strip().splitlines()[-1:] or ["failed"]
    return None


FLOOR = "floor (C: epoll, one recv a chunk)"


def _tree_label(path: str) -> str:
    """A source tree by its commit where it is a git checkout ("at ba9a712"), else its path."""
    done = subprocess.run(
        ["git", "-C", path, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True
    )
    return f"at {done.stdout.strip()}" if done.returncode == 0 else path


def build_floor(work: Path) -> Path | None:
    """Compile ``floor_client.c`` (the least a client can do per chunk) where Linux has a C
    compiler; None (and no floor rows) elsewhere."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not sys.platform.startswith("linux"):
        return None
    exe = work / "floor_client"
    src = Path(__file__).with_name("floor_client.c")
    done = subprocess.run([cc, "-O2", "-o", str(exe), str(src), "-lm"], capture_output=True)
    return exe if done.returncode == 0 else None


def floor_trial(exe: Path, streams: int, seconds: float, work: Path) -> dict[str, Any]:
    """The floor client at the same Poisson rate on the same lab, timed like tailwise.

    Its TTFT is from the intended send to the first read after the response head; its ITL
    the gaps between content reads; its CPU the same span as tailwise's ``cpu_s`` (warm-up
    and window, until the last response ends)."""
    tag = f"f{streams}-{next(TRIALS)}"
    truth = work / f"truth-{tag}.jsonl"
    lab, url = start_lab(truth)
    out = work / f"floor-{tag}.txt"
    rate = streams / LIFE_S
    port = url.rsplit(":", 1)[1].split("/", 1)[0]
    seed = str(next(TRIALS))
    cmd = [str(exe), port, f"{rate:.1f}", "1", f"{seconds:g}", str(TOKENS), seed, str(out)]
    code, stdout, err = on_client_cores(cmd, lab, None, keep_out=True)
    if code != 0:
        raise RuntimeError(f"floor_client failed ({code}): {err.strip()}")
    res = json.loads(stdout)
    lines = [ln.split() for ln in out.read_text().splitlines()]
    c_ttft = np.array([float(v) for k, v in lines if k == "t"])
    c_itl = np.array([float(v) for k, v in lines if k == "g"])
    chunks = int(res["done"]) * TOKENS
    row: dict[str, Any] = {
        "tool": FLOOR,
        "streams": streams,
        "rate_rps": round(rate, 1),
        "requests": int(res["in_window"]),
        "chunks": chunks,
        **_errors(c_ttft, c_itl, truth, int(res["sent"]) - int(res["in_window"])),
        "cpu_us_per_chunk": round(1e6 * float(res["cpu_s"]) / chunks, 2) if chunks else None,
        "cpu_share": round(float(res["cpu_s"]) / (seconds + 1.0), 2),
        "reads_per_chunk": round(int(res["reads"]) / chunks, 3) if chunks else None,
        "verdict": "pass" if res["failed"] == 0 and res["bad"] == 0 else "failed",
    }
    row["held"] = bool(row["ttft_err_p50_ms"] <= HELD_MS and row["verdict"] == "pass")
    return row


def guidellm_exe() -> str | None:
    exe = os.environ.get("GUIDELLM") or "/tmp/guidellm-venv/bin/guidellm"
    return exe if Path(exe).exists() or shutil.which(exe) else None


def guidellm_trial(exe: str, streams: int, seconds: float, work: Path) -> dict[str, Any]:
    """GuideLLM at the same Poisson rate on the same lab; its TTFT/ITL vs the lab's truth."""
    tag = f"g{streams}-{next(TRIALS)}"
    truth = work / f"truth-{tag}.jsonl"
    lab, url = start_lab(truth)
    out = work / f"guidellm-{tag}.json"
    rate = streams / LIFE_S
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [
        exe, "run", "--backend", f"kind=openai_http,target={url},model=lab",
        "--profile", f"kind=poisson,rate={rate:.1f}",
        "--constraint", f"kind=max_duration,seconds={seconds + 1:g}",
        "--data", "kind=synthetic_text,prompt_tokens=16,output_tokens=32",
        "--tokenizer", f"kind=huggingface_auto,model={work / 'tokenizer'}",
        "--output", f"kind=json,path={out}", "--disable-console-interactive",
    ]  # fmt: skip
    t = time.monotonic()
    failed = run_peer(cmd, lab, env, out)
    row: dict[str, Any] = {"tool": "guidellm", "streams": streams, "rate_rps": round(rate, 1)}
    if failed:
        row["error"] = failed
        return row
    c_ttft, c_itl, own = _guidellm_times(json.loads(out.read_text()))
    row.update(requests=len(c_ttft), **_errors(c_ttft, c_itl, truth))
    # Its own TTFT (from its actual send): what GuideLLM itself reports.
    s_ttft = np.array(read_truth(truth)[0]) / 1e6
    row["own_ttft_err_p50_ms"] = round(_pct(own, 50) - _pct(s_ttft, 50), 2)
    row["own_ttft_err_p99_ms"] = round(_pct(own, 99) - _pct(s_ttft, 99), 2)
    row["wall_s"] = round(time.monotonic() - t, 1)
    row["held"] = bool(row["ttft_err_p50_ms"] <= HELD_MS)
    return row


def _guidellm_times(doc: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-request TTFT (ms, from the *intended* start, as tailwise's) and per-request mean ITL.

    GuideLLM's own ``time_to_first_token_ms`` starts at its actual send; its timings keep
    the instant the request was due (``targeted_start``), so the late start is counted
    here as in tailwise's TTFT. It keeps no per-gap times: ITL is each request's mean.
    """
    ttft: list[float] = []
    itl: list[float] = []
    own: list[float] = []
    for bench in doc.get("benchmarks", []):
        reqs = bench.get("requests", {})
        for r in reqs.get("successful", []) if isinstance(reqs, dict) else []:
            t = (r.get("info") or {}).get("timings") or {}
            if t.get("first_token_iteration") and t.get("targeted_start"):
                ttft.append(1000.0 * (t["first_token_iteration"] - t["targeted_start"]))
            if r.get("inter_token_latency_ms") is not None:
                itl.append(float(r["inter_token_latency_ms"]))
            if r.get("time_to_first_token_ms") is not None:
                own.append(float(r["time_to_first_token_ms"]))
    return np.array(ttft), np.array(itl), np.array(own)


def aiperf_exe() -> str | None:
    exe = os.environ.get("AIPERF") or "/tmp/aiperf-venv/bin/aiperf"
    return exe if Path(exe).exists() or shutil.which(exe) else None


def aiperf_trial(exe: str, streams: int, seconds: float, work: Path) -> dict[str, Any]:
    """AIPerf at the same Poisson rate on the same lab; its TTFT/ITL vs the lab's truth.

    Run with the tokenizer directory as a path and *without* HF_HUB_OFFLINE: AIPerf 0.13's
    offline mode looks a local path up as a Hub repository name and fails.
    """
    tag = f"a{streams}-{next(TRIALS)}"
    truth = work / f"truth-{tag}.jsonl"
    lab, url = start_lab(truth)
    out = work / f"aiperf-{tag}"
    rate = streams / LIFE_S
    cmd = [
        exe, "profile", "--model", "lab", "--url", url, "--endpoint-type", "chat",
        "--streaming", "--tokenizer", str(work / "tokenizer"), "--request-rate", f"{rate:.1f}",
        "--arrival-pattern", "poisson", "--benchmark-duration", f"{seconds + 1:g}",
        "--isl", "16", "--osl", str(TOKENS), "--artifact-dir", str(out), "--ui-type", "none",
    ]  # fmt: skip
    export = out / "profile_export.jsonl"
    failed = run_peer(cmd, lab, None, export)
    row: dict[str, Any] = {"tool": "aiperf", "streams": streams, "rate_rps": round(rate, 1)}
    if failed:
        row["error"] = failed
        return row
    ttft, itl, own = _aiperf_times(export)
    row.update(requests=len(ttft), **_errors(ttft, itl, truth))
    s_ttft = np.array(read_truth(truth)[0]) / 1e6
    row["own_ttft_err_p50_ms"] = round(_pct(own, 50) - _pct(s_ttft, 50), 2)
    row["own_ttft_err_p99_ms"] = round(_pct(own, 99) - _pct(s_ttft, 99), 2)
    row["held"] = bool(row["ttft_err_p50_ms"] <= HELD_MS)
    return row


def _aiperf_times(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TTFT (ms) from the credit's issue (its intended send), every chunk gap, its own TTFT."""
    ttft: list[float] = []
    itl: list[float] = []
    own: list[float] = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        meta, m = r.get("metadata", {}), r.get("metrics", {})
        first = (m.get("time_to_first_token") or {}).get("value")
        if first is None or meta.get("benchmark_phase") != "profiling":
            continue
        late_ms = (meta["request_start_ns"] - meta["credit_issued_ns"]) / 1e6
        ttft.append(late_ms + float(first))
        own.append(float(first))
        itl.extend(float(x) for x in (m.get("inter_chunk_latency") or {}).get("value") or [])
    return np.array(ttft), np.array(itl), np.array(own)


def write_docs(rows: list[dict[str, Any]], machine: str, peers_note: str) -> None:
    begin, end = "<!-- stream_scale:begin -->", "<!-- stream_scale:end -->"

    def cell(r: dict[str, Any], k: str) -> str:
        v = r.get(k)
        return "" if v is None else str(v)

    keys = (
        "streams", "requests", "ttft_truth_p50_ms", "ttft_err_p50_ms", "ttft_err_p99_ms",
        "itl_err_p50_ms", "itl_err_p99_ms", "cpu_us_per_chunk", "total_cpu_us_per_chunk",
        "cpu_share",
    )  # fmt: skip
    table = "\n".join(
        "| "
        + " | ".join([r["tool"], *(cell(r, k) for k in keys)])
        + f" | {cell(r, 'verdict') or cell(r, 'error')} |"
        for r in rows
    )
    # Held: in a majority of the trials of that tool and stream count.
    votes: dict[tuple[str, int], list[bool]] = {}
    for r in rows:
        votes.setdefault((r["tool"], r["streams"]), []).append(bool(r.get("held")))
    held: dict[str, int] = {}
    for (tool, n), v in votes.items():
        if 2 * sum(v) > len(v):
            held[tool] = max(held.get(tool, 0), n)
    held_line = ", ".join(f"{k}: {v}" for k, v in held.items()) or "none"
    above_line = _above_floor(rows)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = (
        "| tool | streams | requests | truth TTFT p50 | TTFT err p50 | TTFT err p99 | "
        "ITL err p50 | ITL err p99 | CPU µs/chunk | all CPU µs/chunk | CPU share | verdict |"
    )
    block = f"""{begin}
## Streams held by one process: `benchmarks/stream_scale.py` ({when})

Server: the stream lab (TTFT {TTFT_S * 1000:g} ms, ITL {ITL_S * 1000:g} ms, {TOKENS} tokens) in its
own process{", pinned to another core than the client" if cores()[0] else " (not pinned)"};
Poisson arrivals at N / stream life, 1 s warm-up.
Errors (ms) = the client's percentile minus the server's truth log's (TTFT from the
intended send), over the window's streams (warm-up left out on both sides). CPU/chunk =
the run's client CPU time (sending and receiving, in the client process) over content chunks
received (µs); "all CPU" = the whole client command's CPU time (start-up, records writer
process, report) over the same chunks. CPU share: the run's CPU time over its length.
Machine: {machine}.

{header}
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
{table}

Highest stream count held (TTFT p50 error <= {HELD_MS:g} ms, run not invalid, in a majority
of its trials): {held_line}.

The floor (`benchmarks/floor_client.c`, same lab, same run, alternating with the others)
does per chunk only what any client that times each token must: one epoll wake-up shared
by the sockets ready together, one `recv` and its TCP ACK (on loopback the ACK's arrival
at the lab also runs in the client's context), one clock read; no parsing, no records.
Its CPU per chunk is this host's price of a chunk; what a client spends above it is its
own. Median CPU per chunk above the floor's median, µs ("behind": TTFT p50 error over
{HELD_MS:g} ms in most trials; a client behind reads several chunks at a time, which looks
cheaper per chunk): {above_line}.

{peers_note}
{end}"""
    write_block(begin, end, block)


def _above_floor(rows: list[dict[str, Any]]) -> str:
    """Each tool's median CPU per chunk minus the floor's, per stream count, saying where a
    client fell behind (it then reads several chunks at once, which looks cheaper)."""
    cpu: dict[tuple[str, int], list[float]] = {}
    held: dict[tuple[str, int], list[bool]] = {}
    for r in rows:
        if r.get("cpu_us_per_chunk") is not None:
            cpu.setdefault((r["tool"], r["streams"]), []).append(r["cpu_us_per_chunk"])
            held.setdefault((r["tool"], r["streams"]), []).append(bool(r.get("held")))

    def behind(key: tuple[str, int]) -> str:
        v = held[key]
        return "" if 2 * sum(v) > len(v) else " (behind)"

    parts = []
    for n in sorted({n for _, n in cpu}):
        base = cpu.get((FLOOR, n))
        if not base:
            continue
        floor_us = float(np.median(base))
        others = [
            f"{tool} {float(np.median(v)) - floor_us:+.2f}{behind((tool, m))}"
            for (tool, m), v in cpu.items()
            if m == n and tool != FLOOR
        ]
        parts.append(
            f"at {n} streams, floor {floor_us:.2f}{behind((FLOOR, n))}: " + ", ".join(others)
        )
    return "; ".join(parts) or "no floor in this run"


def _own_errors(rows: list[dict[str, Any]], tool: str) -> str:
    return "; ".join(
        f"{r['streams']} streams {r.get('own_ttft_err_p50_ms')}/{r.get('own_ttft_err_p99_ms')}"
        for r in rows
        if r["tool"] == tool
    )


def run_peers(peers: str, seconds: float, work: Path, emit: Any, rows: list[dict[str, Any]]) -> str:
    """GuideLLM and AIPerf where installed, on the same lab; the docs' note on them."""
    if not peers:
        return ""
    counts = [int(x) for x in peers.split(",")]
    _tokenizer(work / "tokenizer")
    notes = []
    exe = guidellm_exe()
    if exe is None:
        notes.append("GuideLLM: not installed (set GUIDELLM or install into /tmp/guidellm-venv).")
    else:
        for n in counts:
            emit(guidellm_trial(exe, n, seconds, work))
        version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        notes.append(
            f"{version.strip() or 'GuideLLM'} ran on the same lab in the same run (offline: a "
            "local word-level tokenizer as its processor). Its TTFT is taken from its "
            "`targeted_start` (the intended send, as tailwise's); its ITL is each request's "
            "mean (it keeps no per-gap times); its CPU is not shown (its start-up dominates). "
            "Its own TTFT (from its actual send) errors p50/p99 (ms): "
            f"{_own_errors(rows, 'guidellm')}."
        )
    aip = aiperf_exe()
    if aip is None:
        notes.append("AIPerf: not installed (set AIPERF or install into /tmp/aiperf-venv).")
    else:
        for n in counts:
            emit(aiperf_trial(aip, n, seconds, work))
        notes.append(
            "AIPerf (the tokenizer directory given as a path, without HF_HUB_OFFLINE: its "
            "offline mode takes a path for a Hub name) ran on the same lab: TTFT from the "
            "credit's issue (its intended send) plus its own TTFT; ITL from its per-gap times. "
            f"Its own TTFT errors p50/p99 (ms): {_own_errors(rows, 'aiperf')}."
        )
    return "\n\n".join(notes)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--streams", default="100,500,1000,2000")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--python", action="store_true", help="also the pure-Python path")
    ap.add_argument(
        "--no-reader", action="store_true", help="also compiled without the stream reader"
    )
    ap.add_argument("--workers", default=None, help="also with --workers (e.g. auto)")
    ap.add_argument(
        "--peers", default="100,200,500", help='stream counts for GuideLLM and AIPerf ("": none)'
    )
    ap.add_argument(
        "--client-path", help="run this tailwise source tree as the client (before/after)"
    )
    ap.add_argument(
        "--before",
        help="also run this tailwise source tree beside the current one (e.g. a worktree of "
        "ba9a712/src, the client before issue 27)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="trials per stream count")
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and client")
    ap.add_argument(
        "--no-floor", action="store_true", help="skip the floor client (floor_client.c)"
    )
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    global CLIENT_PATH, PIN
    CLIENT_PATH, PIN = a.client_path, not a.no_pin
    # What else the machine was doing shows in its load before the run (this run's own
    # processes come later): on a busy machine every number here is noisier.
    machine = f"{machine_label()}, 1-minute load average {os.getloadavg()[0]:.2f} before the run"
    rows: list[dict[str, Any]] = []

    def emit(r: dict[str, Any]) -> None:
        print(json.dumps(r), flush=True)
        rows.append(r)

    with tempfile.TemporaryDirectory(prefix="tailwise-stream-scale-") as tmp:
        work = Path(tmp)
        floor = None if a.no_floor else build_floor(work)
        for n in (int(x) for x in a.streams.split(",")):
            for _ in range(a.repeat):
                emit(tailwise_trial(n, a.seconds, work))
                if floor is not None:
                    emit(floor_trial(floor, n, a.seconds, work))
                if a.before:
                    emit(tailwise_trial(n, a.seconds, work, client_path=a.before))
                if a.no_reader:
                    emit(tailwise_trial(n, a.seconds, work, reader=False))
                if a.python:
                    emit(tailwise_trial(n, a.seconds, work, pure=True))
                if a.workers:
                    emit(tailwise_trial(n, a.seconds, work, workers=a.workers))
        note = run_peers(a.peers, a.seconds, work, emit, rows)
    if a.write_docs:
        write_docs(rows, machine, note)


def _tokenizer(where: Path) -> None:
    """A tiny word-level tokenizer saved as a local processor (nothing is downloaded)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{f"tok{i}": i + 1 for i in range(4096)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    where.mkdir(parents=True, exist_ok=True)
    tok.save(str(where / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
    (where / "tokenizer_config.json").write_text(json.dumps(config))


if __name__ == "__main__":
    main()
