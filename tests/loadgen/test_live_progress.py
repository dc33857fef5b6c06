"""The live line of a sweep step updates while the step runs, in a real terminal (a pty)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def read_pty(argv: list[str], limit_s: float = 120.0) -> list[bytes]:
    """Run ``argv`` with a pty as its terminal; every chunk it wrote, in order."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")[-2000:]
    return chunks


def test_a_sweep_steps_live_line_updates_while_it_runs(
    loopback: Callable[..., str], tmp_path: Path
) -> None:
    base = loopback("--service", "2ms")
    argv = [sys.executable, "-m", "tailwise", "sweep", base + "/x", "--rates", "40"]
    chunks = read_pty([*argv, "--duration", "4s", "--out", str(tmp_path)])
    text = b"".join(chunks).decode(errors="replace")
    done = text.index("[1/1] 40/s  throughput")  # the step's own line, once it ended
    # Each refresh rewrites the line in place: a carriage return, the step's label,
    # the elapsed time of its 4 s window, the target rate against the achieved one.
    live = re.findall(r"\r  \[1/1\] 40/s\s+([0-9.]+)/4s  rate 40/s -> ", text[:done])
    elapsed = [float(x) for x in live]
    assert len(elapsed) >= 2, text[:done]
    assert elapsed == sorted(elapsed) and len(set(elapsed)) == len(elapsed)
    # The refreshes reached the terminal as separate writes, before the step ended.
    carrying = [i for i, c in enumerate(chunks) if b"\r  [1/1] 40/s" in c]
    assert len(carrying) >= 2
