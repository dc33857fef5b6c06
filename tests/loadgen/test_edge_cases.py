"""Regression tests for edge cases found in review: each asserts the honest outcome."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tailwise
from tailwise.errors import BadInput
from tailwise.loadgen.execute import results
from tailwise.loadgen.runner import RunOptions, execute, prepare
from tailwise.loadgen.transport import FakeTransport
from tests.clirun import wait_until_sending

Loopback = Callable[..., str]
MS = 1_000_000


def steered(tmp_path: Path, *bodies: dict[str, object]) -> str:
    path = tmp_path / "bodies.jsonl"
    path.write_text("\n".join(json.dumps(b) for b in bodies) + "\n")
    return str(path)


def test_interim_1xx_is_not_the_answer(loopback: Loopback, tmp_path: Path) -> None:
    url = loopback("--service", "1ms") + "/x"
    bodies = steered(tmp_path, {"action": "early_hints", "delay_ms": 100})
    res = tailwise.run(url, rate="20/s", requests=10, bodies=bodies, out=str(tmp_path / "r"))
    r = res.records
    assert res.summary["requests"]["ok"] == 10
    assert set(r.status.tolist()) == {200}
    assert (r.done_ns - r.sent_ns).min() >= 95 * MS  # completed by the 200, not the 103


def test_close_delimited_body_is_ok_and_truncation_is_not(
    loopback: Loopback, tmp_path: Path
) -> None:
    url = loopback("--service", "1ms") + "/x"
    bodies = steered(tmp_path, {"action": "eof_body"}, {"action": "truncate"})
    res = tailwise.run(url, rate="50/s", requests=20, bodies=bodies, out=str(tmp_path / "r"))
    assert res.records.error_kinds == ["", "reset"] * 10
    assert res.records.bytes_in[0] > 0


@pytest.fixture
def unaccepting_port() -> Iterator[int]:
    """A listener that never accepts: once its tiny backlog fills, connects hang."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(0)
    yield s.getsockname()[1]
    s.close()


def test_requests_waiting_for_a_connection_time_out(unaccepting_port: int, tmp_path: Path) -> None:
    res = tailwise.run(
        f"http://127.0.0.1:{unaccepting_port}/x",
        rate="50/s",
        duration="1s",
        timeout="300ms",
        connect_timeout="5s",
        out=str(tmp_path / "r"),
    )
    s = res.summary
    assert s["requests"]["accounted"]
    assert set(s["requests"]["errors"]) == {"timeout"}  # none left to be "cancelled" at the end
    late = (res.records.done_ns - res.records.sent_ns) / 1e6
    assert late.max() < 300 + 200  # failed at its deadline (10 ms sweep), not at the run's end


def test_connect_timeout_is_a_connect_error(unaccepting_port: int, tmp_path: Path) -> None:
    res = tailwise.run(
        f"http://127.0.0.1:{unaccepting_port}/x",
        rate="50/s",
        duration="1s",
        timeout="3s",
        connect_timeout="200ms",
        out=str(tmp_path / "r"),
    )
    errors = res.summary["requests"]["errors"]
    assert set(errors) <= {"connect", "timeout", "cancelled"}
    assert errors.get("connect", 0) >= 0.8 * res.summary["requests"]["scheduled"]


def fake(tmp_path: Path, latency_ms: float, **kw: object) -> tailwise.loadgen.runner.RunResult:
    tmp_path.mkdir(parents=True, exist_ok=True)
    kw.setdefault("warmup", "0s")  # every planned request counted: no transient cut
    opts = RunOptions(urls=["http://127.0.0.1:9/x"], **kw)  # type: ignore[arg-type]
    law = lambda seq: (int(latency_ms * MS), 200, "")  # noqa: E731
    return execute(prepare(opts), tmp_path, transport=FakeTransport(law))


def interrupt_after(seconds: float) -> threading.Timer:
    t = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    t.start()
    return t


def test_interrupt_accounts_for_every_due_request(tmp_path: Path) -> None:
    """Offered far beyond what the pacer can send: interrupted, the whole due plan is counted."""
    interrupt_after(0.6)
    res = fake(tmp_path, 1.0, rate="200000/s", arrival="constant", duration="10s", grace="200ms")
    s = res.summary
    assert s["interrupted"] and s["verdict"] == "invalid"
    assert s["requests"]["accounted"]
    # every request due before the interrupt is in the books: the offered rate is the plan's
    assert s["rates"]["offered_rps"] == pytest.approx(200_000, rel=0.02)
    assert s["requests"]["errors"].get("not_sent:interrupted", 0) > 0
    stopped_s = float(s["verdict_reason"].split(" after ")[1].rstrip("s"))
    assert stopped_s == pytest.approx(s["window"]["end_s"], abs=0.15)


def test_closed_loop_never_starts_before_time_zero(tmp_path: Path) -> None:
    for k in range(5):
        res = fake(tmp_path / str(k), 2.0, concurrency=8, duration="200ms")
        assert res.records.scheduled_ns.min() >= 0
        assert res.summary["requests"]["warmup"]["scheduled"] == 0


def test_closed_loop_think_time_does_not_outlive_the_run(tmp_path: Path) -> None:
    t = time.monotonic()
    res = fake(tmp_path, 5.0, concurrency=4, duration="500ms", think="3s")
    assert time.monotonic() - t < 2.5  # not 0.5 s + 3 s of idle thinking
    assert res.summary["requests"]["scheduled"] == 4


def test_count_bound_run_is_not_diluted_by_the_duration(tmp_path: Path) -> None:
    res = fake(tmp_path, 1.0, rate="100/s", arrival="constant", requests=100, duration="4s")
    assert res.summary["rates"]["offered_rps"] == pytest.approx(100.0, rel=0.02)
    assert res.summary["window"]["duration_s"] == pytest.approx(1.0, rel=0.02)


def test_goodput_and_throughput_slos(tmp_path: Path) -> None:
    res = fake(
        tmp_path,
        1.0,
        rate="100/s",
        arrival="constant",
        duration="1s",
        slo=["goodput>=90/s", "throughput>=500/s"],
    )
    assert [e["passed"] for e in res.summary["slos"]] == [True, False]
    assert res.summary["slos"][0]["value"] == pytest.approx(100.0, rel=0.05)


def test_stages_bound_the_run_themselves(tmp_path: Path) -> None:
    res = fake(tmp_path, 1.0, arrival="stages:100/s@500ms,200/s@500ms")
    assert res.summary["window"]["duration_s"] == pytest.approx(1.0)
    assert res.summary["requests"]["scheduled"] == 150


def test_rate_with_a_self_rated_arrival_is_refused() -> None:
    with pytest.raises(BadInput, match="--rate"):
        prepare(RunOptions(urls=["http://127.0.0.1:9/"], rate="5/s", arrival="ramp:1/s-9/s"))


def test_a_literal_body_is_not_saved(tmp_path: Path) -> None:
    fake(tmp_path, 1.0, rate="50/s", requests=5, body='{"api_key":"sk-secret-123"}')
    saved = (tmp_path / "run.json").read_text()
    assert "sk-secret-123" not in saved and "bytes, not saved" in saved


def test_ctrl_c_while_sending_waits_one_grace(loopback: Loopback, tmp_path: Path) -> None:
    url = loopback("--service", "1ms") + "/x"
    bodies = steered(tmp_path, {"action": "hang"})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tailwise",
            "run",
            url,
            "--rate",
            "50/s",
            "--duration",
            "30s",
            "--bodies",
            bodies,
            "--grace",
            "3s",
            "--no-preflight",  # its one request would hang until --timeout
            "-q",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    wait_until_sending(tmp_path / "r")
    time.sleep(1.0)  # 50 requests hang, in flight
    t = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 3
    assert time.monotonic() - t < 5.0  # one grace of 3 s (plus writing), not two (6 s)
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["requests"]["accounted"] and s["requests"]["errors"].keys() == {"cancelled"}
    assert np.isclose(
        s["requests"]["records_on_disk"],
        s["requests"]["scheduled"] + s["requests"]["warmup"]["scheduled"],
    )


def test_a_writer_that_dies_before_it_is_ready_neither_hangs_nor_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine waits for the writer's ready line before its clock starts; a writer
    that exits first (EOF, no line) lets the run go on, and the loss is reported."""
    real = subprocess.Popen

    def dying(args: list[str], **kw: object) -> subprocess.Popen[bytes]:
        return real([sys.executable, "-c", "raise SystemExit(1)"], **kw)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(results.subprocess, "Popen", dying)
    sink = results.RecordSink(tmp_path / "records.jsonl", (0, 10**9))
    started = time.monotonic()

    async def open_and_close() -> None:
        await sink.open()
        await sink.close()

    asyncio.run(open_and_close())
    assert time.monotonic() - started < results.READY_TIMEOUT_S / 2  # EOF, not the timeout
    assert sink.wait() is None  # no rows line: the runner reports the records as lost


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_descriptor_table_is_grown_before_the_clock_and_nothing_stays_open() -> None:
    # A fresh process, whose table starts small: after the reservation the kernel's
    # table holds the run's connections (no growth, and no RCU wait, mid-run), the
    # descriptors open are the same as before (one already open at the ask's last
    # slot is left alone), and a limit below the ask caps it.
    code = """
import os, resource
from tailwise.loadgen.execute.local import reserve_fd_table
def size():
    for line in open('/proc/self/status'):
        if line.startswith('FDSize:'):
            return int(line.split()[1])
before = size()
mine = os.open(os.devnull, os.O_RDONLY)
os.dup2(mine, 129)
fds = sorted(os.listdir('/proc/self/fd'))
got = reserve_fd_table(3000)
small = reserve_fd_table(130)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
capped = reserve_fd_table(5000)
os.fstat(129)
print(before, size(), got, capped, small, fds == sorted(os.listdir('/proc/self/fd')))
"""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 3000:
        pytest.skip("open-file limit below 3000")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    before, after, got, capped, small = (int(x) for x in out[:5])
    assert before < 3000 <= after and got == 3000
    assert capped == 200 and small == 130 and out[5] == "True"


def test_a_single_request_has_the_plans_gap_as_its_window(tmp_path: Path) -> None:
    """One request at 1/s: a 1 s window and 1/s offered, not 1 ns and 1e9/s (red-team case)."""
    s = fake(tmp_path, 1.0, rate="1/s", arrival="constant", requests=1).summary
    assert s["window"]["duration_s"] == pytest.approx(1.0)
    assert s["rates"]["offered_rps"] == pytest.approx(1.0)
    assert s["verdict"] == "pass", s["verdict_reason"]


def test_a_signal_after_sending_ends_still_leaves_every_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between the last send and the summary (the writer finishing) is ignored."""
    from tailwise.loadgen.execute.results import RecordSink

    real_wait = RecordSink.wait

    def wait_after_a_signal(self: RecordSink) -> int | None:
        os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C just now
        return real_wait(self)

    monkeypatch.setattr(RecordSink, "wait", wait_after_a_signal)
    res = fake(tmp_path, 1.0, rate="100/s", requests=20)
    assert res.summary["verdict"] == "pass" and res.summary["requests"]["ok"] == 20
    assert {p.name for p in tmp_path.iterdir()} >= {"summary.json", "latency.hlog"}


class _SignalAtStart(FakeTransport):
    async def start(self, on_done: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while connections are being opened
        await asyncio.sleep(0.05)
        await super().start(on_done)


def test_a_signal_before_the_clock_starts_books_nothing_as_due(tmp_path: Path) -> None:
    opts = RunOptions(urls=["http://127.0.0.1:9/x"], rate="100/s", duration="2s")
    law = lambda seq: (MS, 200, "")  # noqa: E731
    s = execute(prepare(opts), tmp_path, transport=_SignalAtStart(law)).summary
    assert s["interrupted"] and s["verdict_reason"] == "interrupted: SIGINT at start-up"
    assert s["requests"]["scheduled"] == 0 and s["requests"]["accounted"]
    assert s["requests"]["warmup"]["scheduled"] == 0  # no row invented as "due"


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="no POSIX scheduling policies")
def test_the_writer_yields_while_the_run_sends_and_is_woken_to_finish(tmp_path: Path) -> None:
    """The writer runs SCHED_IDLE (it must never delay the pacer); once the run has
    sent and drained, close() gives it a normal policy back where permitted: beside four
    CPU-bound processes an idle writer got no CPU and every run waited its WAIT_S."""
    sink = results.RecordSink(tmp_path / "records.jsonl", (0, 10**9))

    async def policies() -> tuple[int, bool, int, int]:
        await sink.open()
        pid = sink.proc.pid
        sending = os.sched_getscheduler(pid)
        woken = sink.wake_writer()
        after, nice = os.sched_getscheduler(pid), os.getpriority(os.PRIO_PROCESS, pid)
        await sink.close()
        return sending, woken, after, nice

    sending, woken, after, nice = asyncio.run(policies())
    assert sink.wait() == 0  # it finished the (empty) file and said so
    assert sending == os.SCHED_IDLE
    if not woken:
        pytest.skip("this process may not raise a SCHED_IDLE child's policy")
    assert after == os.SCHED_OTHER and nice == 19  # normal policy, still last in line
