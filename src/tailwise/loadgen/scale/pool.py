"""Where a scaled-out run's workers live: the :class:`Pool` the driver talks to.

:class:`LocalPool` runs them as processes on this machine (``--workers N``);
:class:`tailwise.loadgen.scale.ray_workers.RayPool` as Ray actors across a cluster.
Either way the driver sees the same messages (:mod:`tailwise.loadgen.scale.messages`),
checked as they arrive, plus :class:`~tailwise.loadgen.scale.messages.Died` when a
worker is gone without its final message.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Any, Protocol

from tailwise.loadgen.scale.messages import LAST, Died, DriverMessage, WorkerMessage, worker_message
from tailwise.loadgen.scale.worker import WorkerSpec, launch


class Pool(Protocol):
    """Where the workers run: processes here (:class:`LocalPool`) or Ray actors."""

    kind: str
    lead_s: float  # how far ahead the common start is set: the start message's delivery
    poll_s: float

    def launch(self, specs: list[WorkerSpec]) -> None: ...
    def poll(self, timeout_s: float) -> list[tuple[int, WorkerMessage]]: ...
    def send(self, index: int, msg: DriverMessage) -> None: ...
    def kill(self, index: int) -> None: ...
    def records_path(self, index: int) -> Path: ...
    def describe(self, index: int) -> dict[str, Any]: ...
    def close(self, abort: bool = False) -> None: ...


class LocalPool:
    """Worker processes on this machine, one socket pair each."""

    kind = "processes"
    lead_s = 0.2
    poll_s = 0.1

    def __init__(self, directory: Path) -> None:
        self.dir = directory / "workers"
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.over: set[int] = set()  # workers that sent final or were reported dead

    def records_path(self, index: int) -> Path:
        return self.dir / f"w{index}" / "records.jsonl"

    def describe(self, index: int) -> dict[str, Any]:
        return {}

    def launch(self, specs: list[WorkerSpec]) -> None:
        for spec in specs:
            proc, conn = launch(spec)
            self.procs.append(proc)
            self.conns.append(conn)

    def poll(self, timeout_s: float) -> list[tuple[int, WorkerMessage]]:
        from multiprocessing.connection import wait

        live = {id(c): k for k, c in enumerate(self.conns) if k not in self.over}
        out: list[tuple[int, WorkerMessage]] = []
        for ready in wait([self.conns[k] for k in live.values()], timeout_s):
            k = live[id(ready)]
            conn = self.conns[k]
            try:
                while conn.poll():
                    msg = worker_message(k, conn.recv())
                    out.append((k, msg))
                    if isinstance(msg, LAST):
                        self.over.add(k)
            except (EOFError, OSError):
                if k not in self.over:
                    self.over.add(k)
                    out.append((k, Died(_exit_reason(self.procs[k]))))
        return out

    def send(self, index: int, msg: DriverMessage) -> None:
        with contextlib.suppress(OSError):
            self.conns[index].send(msg)

    def kill(self, index: int) -> None:
        with contextlib.suppress(OSError):
            self.procs[index].kill()

    def close(self, abort: bool = False) -> None:
        """Wait for the workers to exit (they do after their final message), or kill them."""
        for proc in self.procs:
            if abort:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except Exception:
                proc.kill()
                proc.wait()
        for conn in self.conns:
            conn.close()


def _exit_reason(proc: Any) -> str:
    try:
        code = proc.wait(timeout=2)
    except Exception:
        return "stopped answering"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
