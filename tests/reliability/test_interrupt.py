"""SIGTERM lands while the proxy holds requests in a stall: the run still closes its books.

tailwise runs in its own process through ``tailwise proxy --stall 500ms/1s``.
The signal is sent 100 ms into a stall (the proxy's log gives its clock origin),
with a 100 ms grace, so requests are certainly held when the books close: they
must be ``cancelled``, the records file and the summary must be complete and
readable, and the proxy must have seen exactly those requests abandoned.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailwise.proxy import read_truth
from tailwise.proxy.check import check_run
from tailwise.records import read_jsonl
from tests.reliability.helpers import Proxies, unique_bodies

pytestmark = pytest.mark.reliability
STALL_S, PERIOD_S = 0.5, 1.0


def wait_until_inside_a_stall(origin_monotonic_ns: int, after_s: float) -> None:
    """Sleep until proxy time is 100 ms into a stall, at least ``after_s`` from now."""
    now_s = (time.monotonic_ns() - origin_monotonic_ns) / 1e9
    period = int((now_s + after_s) / PERIOD_S) + 1
    time.sleep(period * PERIOD_S + 0.1 - now_s)


def wait_for_traffic(truth_path: Path, proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The proxy's start line, once it has passed requests: the run is then past its
    start-up, its signal handlers installed (a fixed delay was not enough on a busy
    machine: the SIGTERM landed while Python was still importing, and killed it)."""
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and proc.poll() is None:
        start, rows = read_truth(truth_path)
        if len(rows) >= 10:
            return start
        time.sleep(0.05)
    raise AssertionError(f"no traffic through the proxy in 30 s (exit {proc.poll()})")


def test_sigterm_inside_a_stall_leaves_complete_books(
    loopback: Callable[..., str], proxied: Proxies, tmp_path: Path
) -> None:
    url, truth_path = proxied(loopback("--service", "2ms"), "--stall", f"{STALL_S}s/{PERIOD_S}s")
    out = tmp_path / "run"
    args = [url + "/x", "--rate", "200/s", "--duration", "30s", "--grace", "100ms"]
    args += ["--bodies", unique_bodies(tmp_path, 3_000), "--out", str(out), "-q"]
    args.append("--no-preflight")  # the truth pairs each record with one proxied request
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailwise", "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    start = wait_for_traffic(truth_path, proc)
    wait_until_inside_a_stall(start["origin_monotonic_ns"], after_s=0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    proxied.stop()

    s = json.loads((out / "summary.json").read_text())
    records = read_jsonl(out / "records.jsonl")
    assert s["interrupted"] and s["verdict_reason"].startswith("interrupted: SIGTERM after")
    assert s["requests"]["accounted"]
    assert len(records) == s["requests"]["scheduled"] + s["requests"]["warmup"]["scheduled"]
    assert s["requests"]["cancelled"] > 0  # held by the stall when the grace ran out

    _, truth = read_truth(truth_path)
    check = check_run(records, truth)
    assert check.lost == 0 and check.causal
    assert check.outcomes["client_closed"] == {"cancelled": s["requests"]["cancelled"]}
