"""The client judges its own health against the verdict it could change (issue: busy machines).

Each test sets up what the verdict must be from the outside: a server whose
latency law is known, a port where nothing listens, a client whose event loop
the test itself blocks, and CPU burners beside the run.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tailwise.loadgen.execute.local import http_transport
from tailwise.loadgen.runner import RunOptions, execute, prepare
from tailwise.loadgen.transport import OnDone
from tests.clirun import run_cli


@pytest.fixture
def two_cpu_burners() -> Iterator[None]:
    """Two ``yes > /dev/null`` processes for the test's whole duration: a busy 2-core machine."""
    procs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(2)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_stalling_server_fails_beside_two_cpu_burners(
    loopback: Callable[..., str],
    two_cpu_burners: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 5 ms service, and nothing is served during the first 300 ms of every second: a
    # request arriving x s into a stall waits 0.3 - x s. About 30% of requests stall, so
    # the true p99 is ~300 ms, three times the SLO: the client's lag cannot hide that.
    base = loopback("--service", "5ms", "--stall", "300ms/1s")
    out = tmp_path / "stall"
    args = ["run", base + "/x", "--rate", "40/s", "--duration", "4s",
            "--slo", "p99(latency)<=100ms", "--out", str(out), "-q"]  # fmt: skip
    code, _, err = run_cli(args, capsys)
    s = json.loads((out / "summary.json").read_text())
    assert code == 1, (s["verdict"], s["verdict_reason"], err)
    assert s["verdict"] == "fail" and s["latency_ms"]["p99"] > 200
    bound = s["slos"][0]["server_bound"]
    assert not bound["client_could_flip"] and bound["lower"] > 100  # the server's share


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed on exit: nothing listens there now


def test_a_closed_port_is_unreachable_with_its_own_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "closed"
    url = f"http://127.0.0.1:{_closed_port()}/x"
    args = ["run", url, "--rate", "20/s", "--duration", "1s", "--out", str(out)]
    args.append("--no-preflight")  # the run's own verdict (the preflight's: test_preflight)
    code, shown, err = run_cli(args, capsys)
    s = json.loads((out / "summary.json").read_text())
    assert code == 6, err
    assert s["verdict"] == "invalid" and s["verdict_cause"] == "target_unreachable"
    assert s["verdict_reason"].startswith("target unreachable (connection refused)")
    assert "generator" not in s["verdict_reason"] and "target unreachable" in shown


class _StarvingTransport:
    """The real HTTP transport, plus a timer that blocks the client's loop for ``block_s``
    every ``period_s``: a client that other work keeps off its core."""

    def __init__(self, inner: object, block_s: float, period_s: float) -> None:
        self.inner = inner
        self.block_s, self.period_s = block_s, period_s
        self.blocks = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def start(self, on_done: OnDone) -> None:
        await self.inner.start(on_done)  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()

        def block() -> None:
            time.sleep(self.block_s)  # the loop can neither send nor read meanwhile
            self.blocks += 1
            loop.call_later(self.period_s, block)

        loop.call_later(self.period_s, block)


def test_a_starved_client_is_invalid_and_named(
    loopback: Callable[..., str], tmp_path: Path
) -> None:
    # The server answers every request in 5 ms (no queue: requests are served in
    # parallel). The client's loop is blocked 40 ms in every 190: requests due or
    # answered meanwhile look up to 45 ms slow, enough to miss a 30 ms p99 that the
    # server itself meets with room to spare.
    base = loopback("--service", "5ms", "--workers", "0")
    opts = RunOptions(
        urls=[base + "/x"],
        rate="100/s",
        duration="3s",
        slo=["p99(latency)<=30ms"],
        out=str(tmp_path / "starved"),
    )
    p = prepare(opts)
    starving = _StarvingTransport(http_transport(p), block_s=0.04, period_s=0.15)
    directory = tmp_path / "starved"
    directory.mkdir()
    s = execute(p, directory, starving).summary  # type: ignore[arg-type]
    assert starving.blocks >= 10
    assert s["latency_ms"]["p99"] > 30  # as measured, the SLO is missed
    assert s["verdict"] == "invalid" and s["verdict_cause"] == "client", s["verdict_reason"]
    assert s["verdict_reason"].startswith("client lag could flip p99(latency)<=30ms")
    assert s["slos"][0]["server_bound"]["lower"] <= 30
    assert s["generator"]["recv_lag_max_ms"] >= 30  # the probe saw the blocked loop
