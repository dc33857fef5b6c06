"""Hostile servers (issue 40): rows of the reliability table, each a real run against a
small asyncio server on loopback that misbehaves on purpose.

Run by ``benchmarks/reliability_table.py --hostile`` (its block in docs/benchmarks.md);
each row states the fact the hole broke and what this run measured of it. The same
reproductions, shorter, are tests in ``tests/reliability/test_attack_holes.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hostile_floods
import numpy as np

import tailwise
from tailwise.loadgen.conclude import RunResult
from tailwise.records import read_jsonl

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]


@contextmanager
def servers() -> Iterator[Callable[[Answer], str]]:
    """``start(answer)`` -> base URL; every server on one loop in a thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    held: list[asyncio.Server] = []

    def start(answer: Answer) -> str:
        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                await answer(r, w)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                w.close()

        async def serve() -> asyncio.Server:
            return await asyncio.start_server(handle, "127.0.0.1", 0)

        server = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
        held.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    try:
        yield start
    finally:
        for s in held:
            loop.call_soon_threadsafe(s.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def read_head(r: asyncio.StreamReader) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await r.readexactly(int(line.split(b":")[1]))
    return head


def sse(*texts: str, done: bool = True) -> bytes:
    events = [json.dumps({"choices": [{"delta": {"content": t}}]}) for t in texts]
    return "".join(f"data: {e}\n\n" for e in [*events, *(["[DONE]"] if done else [])]).encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
LLM: dict[str, Any] = {"api": "openai-chat", "model": "m", "server_metrics": "off"}


def kinds(errors: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in errors:
        out[k or "ok"] = out.get(k or "ok", 0) + 1
    return dict(sorted(out.items()))


def row(name: str, load: str, res: Any, fact: str, wall_s: float) -> dict[str, Any]:
    s = res.summary["requests"]
    return {
        "case": name,
        "load": load,
        "scheduled": len(res.records),
        "kinds": kinds(res.records.error_kinds),
        "accounted": bool(s["accounted"]),
        "fact": fact,
        "wall_s": wall_s,
    }


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def answered_twice(start: Callable[[Answer], str], out: Path, seconds: int) -> dict[str, Any]:
    twice = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi" * 2

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            await read_head(r)
            await asyncio.sleep(0.02)
            w.write(twice)

    url = start(serve) + "/x"
    res, wall = timed(
        lambda: tailwise.run(
            url, rate="200/s", duration=f"{seconds}s", out=str(out), progress=False
        )
    )
    r = read_jsonl(out / "records.jsonl")
    answered = r.status > 0
    wrong = int(((r.first_byte_ns < r.sent_ns) | (r.done_ns < r.first_byte_ns))[answered].sum())
    fact = (
        f"rows credited with another's answer (no first byte, done before sent): {wrong} "
        f"(was 4 of 800); stray answers dropped with their connection: "
        f"{res.summary.get('stray_answers', 0)}"
    )
    return row("answers each request twice (D2)", "200/s open", res, fact, wall)


def close_delimited(start: Callable[[Answer], str], out: Path, seconds: int) -> dict[str, Any]:
    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_head(r)
        w.write(SSE_HEAD + b"Connection: close\r\n\r\n")
        for t in ("one", "two", "three"):
            await asyncio.sleep(0.002)
            w.write(sse(t, done=False))

    url = start(serve) + "/v1"
    res, wall = timed(
        lambda: tailwise.run(
            url, rate="50/s", duration=f"{seconds}s", out=str(out), progress=False, **LLM
        )
    )
    r = res.records
    fact = (
        f"tokens kept: {int(r.output_tokens[r.output_tokens > 0].sum())} of "
        f"{3 * len(r)} sent; truncation shown: "
        f"{int((np.array(r.error_kinds) == 'truncated').sum())} rows (was: ok, tokens null)"
    )
    return row("stream ends at the close, no finish (D3)", "50/s open", res, fact, wall)


def keep_alive_close(start: Callable[[Answer], str], out: Path, seconds: int) -> dict[str, Any]:
    head = SSE_HEAD + b"Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_head(r)
        w.write(head)
        for t in ("a", "b"):
            await asyncio.sleep(0.002)
            w.write(chunk(sse(t, done=False)))
        w.write(chunk(sse(done=True)) + b"0\r\n\r\n")
        await w.drain()

    url = start(serve) + "/v1"
    res, wall = timed(
        lambda: tailwise.run(
            url, concurrency=8, duration=f"{seconds}s", out=str(out), progress=False, **LLM
        )
    )
    fact = (
        f"resets: {kinds(res.records.error_kinds).get('reset', 0)} (was 128 of 1,655); "
        f"reconnects: {res.summary['reconnects']}"
    )
    return row("keep-alive promised, closed after each stream", "8 users closed", res, fact, wall)


def deep_delta(start: Callable[[Answer], str], out: Path, seconds: int) -> dict[str, Any]:
    deep = b'data: {"choices":[{"delta":{"content":' + b"[" * 100_000 + b"}}]}\n\n"
    body = sse("ok", done=False) + deep + sse(done=True)
    answer = SSE_HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            await read_head(r)
            w.write(answer)
            await w.drain()

    url = start(serve) + "/v1"
    res, wall = timed(
        lambda: tailwise.run(
            url, rate="20/s", duration=f"{seconds}s", out=str(out), progress=False, **LLM
        )
    )
    statuses = sorted(set(res.records.status.tolist()))
    fact = f"kind malformed_chunk (was protocol), status kept: {statuses} (was 0)"
    return row("delta nested 100,000 deep (D5)", "20/s open", res, fact, wall)


def endless_line(start: Callable[[Answer], str], out: Path, seconds: int) -> dict[str, Any]:
    batch = chunk(b"x" * 100) * 640

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_head(r)
        w.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b"data: "))
        while True:
            w.write(batch)
            await w.drain()

    url = start(serve) + "/v1"
    res, wall = timed(
        lambda: tailwise.run(
            url,
            rate="2/s",
            requests=2 * seconds,
            timeout="60s",
            out=str(out),
            progress=False,
            **LLM,
        )
    )
    r = res.records
    service_s = float(np.median(r.done_ns - r.sent_ns)) / 1e9
    fact = (
        f"each failed too_large at 4 MiB after {service_s:.2f} s median (was: 148 s for one, "
        "the loop saturated)"
    )
    return row("SSE line that never ends, 100-byte chunks (D1)", "2/s open", res, fact, wall)


def trickle(start: Callable[[Answer], str], out: Path, seconds: int) -> dict[str, Any]:
    body = sse("a", "b")
    ok = SSE_HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            head = await read_head(r)
            if head.split(b" ")[1] in (b"/props", b"/metrics"):
                w.write(b"HTTP/1.1 200 OK\r\n")
                while True:
                    w.write(b"X")
                    await w.drain()
                    await asyncio.sleep(0.5)
            w.write(ok)
            await w.drain()

    url = start(serve) + "/v1"
    res, wall = timed(
        lambda: tailwise.run(
            url,
            api="openai-chat",
            model="m",
            rate="20/s",
            duration=f"{seconds}s",
            out=str(out),
            progress=False,
        )
    )
    fact = f"run took {wall:.1f} s for {seconds} s of load (was: 42 s before the first request)"
    return row("/props and /metrics trickle a byte at a time (D11)", "20/s open", res, fact, wall)


def echoed_key(start: Callable[[Answer], str], out: Path, seconds: int) -> dict[str, Any]:
    key = "sk-bench-planted-4417"

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            head = await read_head(r)
            body = b'{"error":{"message":"Incorrect API key provided: %s; you sent %s"}}' % (
                key.encode(),
                head.replace(b"\r\n", b" ").replace(b'"', b"'"),
            )
            w.write(
                b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await w.drain()

    url = start(serve) + "/v1"
    argv = [sys.executable, "-m", "tailwise", "run", url, "--api", "openai-chat", "--model", "m"]
    argv += ["--rate", "20/s", "--duration", f"{seconds}s", "--api-key", key, "-H", f"X-Key: {key}"]
    argv += ["--out", str(out), "--json", "--no-preflight"]  # the preflight would stop at a 401
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    subprocess.run([sys.executable, "-m", "tailwise", "report", str(out), "-q"], check=False)
    wall = time.perf_counter() - t
    leaks = sum(f.read_bytes().count(key.encode()) for f in out.rglob("*") if f.is_file())
    leaks += (p.stdout + p.stderr).count(key)
    res = RunResult(
        json.loads((out / "summary.json").read_text()), read_jsonl(out / "records.jsonl"), out
    )
    fact = f"the key in files and terminal: {leaks} times (was: summary, client, report, terminal)"
    return row("echoes the API key and headers in its 401 (S1)", "20/s open", res, fact, wall)


def disk_full(target: str, out: Path, seconds: int) -> dict[str, Any] | None:
    """A 1.5 MiB tmpfs in a private mount namespace (skipped where ``unshare -rm`` is not)."""
    if shutil.which("unshare") is None:
        return None
    disk, copy, temp = out / "disk", out / "copy", out / "temp"
    for d in (disk, temp):
        d.mkdir(parents=True)
    n = 2000 * seconds
    run = f"{sys.executable} -m tailwise run {target}/x --rate 2000/s --requests {n}"
    run += f" --out {disk}/run --no-progress > {out}/stdout 2> {out}/stderr"
    script = f"mount -t tmpfs -o size=1536k tmpfs {disk} && {{ {run}; echo $? > {out}/rc; }}"
    script += f"; cp -r {disk}/run {copy}"
    t = time.perf_counter()
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], env={**os.environ, "TMPDIR": str(temp)},
        timeout=300, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - t
    if done.returncode != 0 or not (copy / "summary.json").is_file():
        return None
    s = json.loads((copy / "summary.json").read_text())
    lines = (copy / "records.jsonl").read_text().splitlines()
    whole = sum(1 for line in lines if line.endswith("}"))
    rescued = list(temp.glob("tailwise-rescue-*/records.jsonl"))
    rescued_rows = len(rescued[0].read_text().splitlines()) if rescued else 0
    rc = (out / "rc").read_text().strip()
    res = RunResult(s, read_jsonl(rescued[0]), copy)
    fact = (
        f"exit {rc}, summary.json written, {whole} of {len(lines)} lines on the disk whole, "
        f"{rescued_rows} of {n} rows in the rescue copy (was: exit 4, no summary, last line cut)"
    )
    return row("disk full mid-run (1.5 MiB tmpfs) (D14)", "2000/s open", res, fact, wall)


def run_all(seconds: int, tmp: Path, loopback: str) -> list[dict[str, Any]]:
    rows = []
    with servers() as start:
        for case in (
            answered_twice,
            close_delimited,
            keep_alive_close,
            deep_delta,
            endless_line,
            trickle,
            echoed_key,
        ):
            rows.append(case(start, tmp / case.__name__, seconds))
            print(json.dumps(rows[-1]), flush=True)
        for beside in (hostile_floods.nth_answer_resets, hostile_floods.proxy_flood):
            rows.append(beside(start, tmp / beside.__name__, seconds, row))
            print(json.dumps(rows[-1]), flush=True)
    rows.append(hostile_floods.demo_flood(tmp / "demo_flood", seconds, row))
    print(json.dumps(rows[-1]), flush=True)
    full = disk_full(loopback, tmp / "disk_full", seconds)
    if full is not None:
        rows.append(full)
        print(json.dumps(full), flush=True)
    return rows


def render(rows: list[dict[str, Any]], seconds: int, machine: str) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "<!-- hostile-servers:begin -->",
        f"## Hostile servers (issue 40): `benchmarks/reliability_table.py --hostile` ({when})",
        "",
        f"Each row a real run of about {seconds} s against a small asyncio server on loopback",
        "that misbehaves on purpose (the disk-full row: the loopback target, `--out` on a",
        '1.5 MiB tmpfs). "the fact" is what the hole broke, as this run measured it.',
        f"Machine: {machine}.",
        "",
        "| case | load | scheduled | tailwise saw | accounted | the fact | wall (s) |",
        "|---|---|---:|---|---|---|---:|",
    ]
    for r in rows:
        saw = ", ".join(f"{k} {n}" for k, n in r["kinds"].items())
        lines.append(
            f"| {r['case']} | {r['load']} | {r['scheduled']:,} | {saw} | "
            f"{'yes' if r['accounted'] else 'no'} | {r['fact']} | {r['wall_s']:.1f} |"
        )
    lines += [
        "",
        "Accounted: scheduled = ok + failed + timed out + cancelled + not sent, and every",
        "row on disk (the disk-full row is `no` by design: the disk holds fewer rows, the",
        "summary says so, exit 3, and the rescue copy holds them all). The short version of",
        "each row is a test in `tests/reliability/test_attack_holes.py`, `test_floods.py`",
        "and `test_secrets.py`.",
        "<!-- hostile-servers:end -->",
    ]
    return "\n".join(lines)
