"""The messages between a scaled-out run's driver and its workers (scale_messages).

Each kind survives pickling (a multiprocessing ``Connection`` and Ray both
pickle them) unchanged, and the driver stops with one clear line, never
silently, when a worker sends something that is not one of them.
"""

from __future__ import annotations

import pickle
from multiprocessing.connection import Pipe
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import numpy as np
import pytest

from tailwise.errors import ExitCode, WorkerProtocolError
from tailwise.loadgen.scale import messages as m
from tailwise.loadgen.scale.pool import LocalPool
from tailwise.loadgen.scale.ray_workers import RayPool
from tailwise.metrics.histogram import new_histogram, record_many
from tests.clirun import run_cli


def _snapshot() -> m.Snapshot:
    h = new_histogram()
    record_many(h, np.array([1_000_000, 2_000_000, 9_000_000]))
    return m.Snapshot(
        at_ns=1_500_000_000,
        sent=120,
        in_flight=3,
        completed=117,
        kinds={"": 110, "http_5xx": 7},
        hists=[(True, 1, h.encode()), (False, 0, b"")],
        misses=[0, 4],
    )


EXAMPLES: list[Any] = [
    m.Ready(host="node-7", pid=4242, max_in_flight=1024),
    _snapshot(),
    m.Snapshot(at_ns=0, sent=0, in_flight=0, completed=0, kinds={}, hists=[], misses=None),
    m.Final(
        interrupted=True,
        signalled=False,
        note="SIGINT at the driver",
        stopped_at_ns=2_000_000_000,
        rows=120,
        rows_on_disk=None,
        tokens={"output_tokens_from": "usage"},
        slack_ns=180_000_000,
        snapshot=_snapshot(),
        client={"loop_lag_ms": {"p99": 0.4}},
    ),
    m.Failed("OSError: [Errno 24] Too many open files"),
    m.Died("killed by SIGKILL"),
    m.Start(t0_unix_ns=1_700_000_000_123_456_789),
    *(m.Stop(reason) for reason in get_args(m.StopReason)),
]


@pytest.mark.parametrize("protocol", [pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL])
@pytest.mark.parametrize("message", EXAMPLES, ids=lambda x: type(x).__name__)
def test_every_message_round_trips_through_pickle(message: Any, protocol: int) -> None:
    back = pickle.loads(pickle.dumps(message, protocol=protocol))
    assert type(back) is type(message) and back == message


def test_the_examples_cover_every_kind_of_both_unions() -> None:
    kinds = {*get_args(m.WorkerMessage), *get_args(m.DriverMessage)}
    assert kinds == {type(x) for x in EXAMPLES}
    assert set(m.WORKER_MESSAGES) == set(get_args(m.WorkerMessage))


def test_messages_cross_a_connection_as_themselves() -> None:
    """The wire the worker and the Ray relay use: a socket-pair Connection."""
    a, b = Pipe(duplex=True)
    try:
        for message in EXAMPLES:
            a.send(message)
            assert b.recv() == message
    finally:
        a.close()
        b.close()


def test_messages_are_frozen() -> None:
    with pytest.raises(AttributeError):
        m.Stop("slo").reason = "hard"  # type: ignore[misc]


# ---- the driver rejects what is not a message ------------------------------------------


def test_worker_message_passes_messages_and_names_anything_else() -> None:
    assert m.worker_message(0, m.Died("x")) == m.Died("x")
    with pytest.raises(WorkerProtocolError) as caught:
        m.worker_message(3, ("snap", {"sent": 1}))
    text = str(caught.value)
    assert text.startswith("worker 3: got 'a message of type tuple', expected one of Ready,")
    assert "the same tailwise version on every host" in text
    assert caught.value.exit_code == ExitCode.HOST


def test_the_local_pool_rejects_an_unknown_message(tmp_path: Path) -> None:
    pool = LocalPool(tmp_path)
    parent, child = Pipe(duplex=True)
    pool.conns, pool.procs = [parent], [None]
    try:
        child.send(m.Ready("h", 1, 8))
        assert pool.poll(1.0) == [(0, m.Ready("h", 1, 8))]
        child.send(("final", {}))  # the old tuple form
        with pytest.raises(WorkerProtocolError, match="worker 0: got 'a message of type tuple'"):
            pool.poll(1.0)
    finally:
        parent.close()
        child.close()


def test_the_ray_pool_rejects_an_unknown_message(tmp_path: Path) -> None:
    """What a relay forwards is checked on the driver (fake Ray: get returns the value)."""
    pool = object.__new__(RayPool)
    pool.ray = SimpleNamespace(get=lambda ref: ref, exceptions=SimpleNamespace(RayError=OSError))
    pool.dir, pool.over = tmp_path / "workers", set()
    assert pool._collect(1, ([m.Died("gone")], b"")) == [(1, m.Died("gone"))]
    assert pool.over == {1}
    with pytest.raises(WorkerProtocolError, match="worker 2: got 'a message of type dict'"):
        pool._collect(2, ([{"kind": "snap"}], b""))


def test_the_driver_stops_on_an_unknown_message_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pool that hands the driver a stray object (here past the pool's own check):
    exit 9 (this machine's workers failed), one line naming the worker and the type."""
    from tailwise.loadgen.scale import pool as scale_pool

    monkeypatch.setattr(scale_pool.LocalPool, "launch", lambda self, specs: None)
    monkeypatch.setattr(
        scale_pool.LocalPool, "poll", lambda self, timeout_s: [(1, ("ready", {"pid": 1}))]
    )
    argv = ["run", "http://127.0.0.1:9/", "--rate", "10/s", "--requests", "10"]
    argv += ["--workers", "2", "--no-preflight", "--out", str(tmp_path / "run"), "-q"]
    code, _, err = run_cli(argv, capsys)
    assert code == ExitCode.HOST and err.count("\n") == 1, err
    assert "tailwise: error: worker 1: got 'a message of type tuple'" in err
