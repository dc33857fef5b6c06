"""Workers on a Ray cluster: one actor per CPU, spread over the nodes by a placement group.

Each actor is a thin relay (:class:`Relay`) on its node: it starts the same
worker process that ``--workers`` starts (:func:`tailwise.loadgen.scale.worker.launch`),
so the engine never shares a process with Ray's own threads, and forwards its
messages. The driver talks to the actors in a few coarse calls: launch, start,
a poll every :data:`POLL_S` (the worker's snapshots and its new record lines,
zlib-compressed), stop, close. Never one call per request.

``ray`` is imported lazily (the ``tailwise[ray]`` extra); this module's import
costs nothing without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tailwise.errors import BadInput, MissingExtra
from tailwise.loadgen.scale.messages import LAST, Died, DriverMessage, WorkerMessage, worker_message
from tailwise.loadgen.scale.worker import WorkerSpec, launch

POLL_S = 0.5
LEAD_S = 2.0  # the start instant is set this far ahead: two RPC hops must deliver it
READY_TIMEOUT_S = 60.0
SETTLE_S = 0.5  # a dead worker's writer flushes within this; then the relay reports it


def _ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise MissingExtra("--ray", "ray", "ray") from None


class Relay:
    """The body of one Ray actor: owns one worker process on its node."""

    def __init__(self) -> None:
        self.proc: Any = None
        self.conn: Any = None
        self.inbox: deque[object] = deque()  # what the worker sent; the driver checks it
        self.lock = threading.Lock()
        self.tmp = ""
        self.path = Path()
        self.offset = 0  # bytes of the records file already shipped
        self.over = False  # the worker sent final or error
        self.eof_at = 0.0  # when its connection closed (0: still open)
        self.reported_death = False
        self.grew_at = time.monotonic()

    def launch(self, spec: WorkerSpec) -> None:
        self.tmp = tempfile.mkdtemp(prefix="tailwise-worker-")
        self.path = Path(self.tmp) / "records.jsonl"
        spec = dataclasses.replace(spec, records_path=str(self.path), scratch=True)
        self.proc, self.conn = launch(spec)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                msg = self.conn.recv()
                with self.lock:
                    self.inbox.append(msg)
                    self.over = self.over or isinstance(msg, LAST)
        except (EOFError, OSError):
            self.eof_at = time.monotonic()

    def send(self, msg: DriverMessage) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(msg)

    def poll(self) -> tuple[list[object], bytes]:
        """Messages since the last poll, and the records file's new complete lines."""
        with self.lock:
            msgs = list(self.inbox)
            self.inbox.clear()
            over = self.over
        lines = self._new_lines()
        if self.eof_at and not over and not self.reported_death and self._settled():
            self.reported_death = True
            msgs.append(Died(_exit_reason(self.proc)))
        return msgs, zlib.compress(lines, 1)

    def _new_lines(self) -> bytes:
        if not self.path.exists():
            return b""
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        if cut:
            self.grew_at = time.monotonic()
        return data[:cut]

    def _settled(self) -> bool:
        now = time.monotonic()
        return now - self.eof_at > SETTLE_S and now - self.grew_at > SETTLE_S

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)
            except Exception:
                self.proc.kill()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def abort(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self.close()


def _exit_reason(proc: Any) -> str:
    import signal

    code = proc.poll()
    if code is None:
        return "closed its connection"
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


ADDRESS_FORM = "auto, local, HOST:6379 or ray://HOST:10001"
CONNECT_TIMEOUT_S = 5.0
LOCAL_NODE_IP = "127.0.0.1"  # --ray local binds here, never on every interface
RAY_CLUSTERS_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray keeps to loopback


def _check_reachable(address: str) -> None:
    """Fail fast on an address nobody answers at: ``ray.init`` would retry for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise BadInput("--ray", address, ADDRESS_FORM)
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise BadInput("--ray", address, f"a Ray cluster that answers ({exc})") from None


@contextlib.contextmanager
def loopback_only(ray: Any) -> Iterator[None]:
    """While a local cluster starts: every Ray service (GCS, raylet, object manager,
    workers, the driver) binds 127.0.0.1, reachable from no other host.

    On Linux Ray rewrites a loopback ``_node_ip_address`` to the machine's routable
    address and its servers listen on every interface; it keeps loopback only where
    clusters are off (its macOS/Windows default). That switch is read from the
    environment by the processes ``ray.init`` starts, and from ``ray_constants`` by
    this driver; both are set for the start and restored after it. Checked with
    ``ss -ltnp`` on Ray 2.60: without it the GCS and raylet listened on ``*``.
    """
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    before_env = os.environ.get(RAY_CLUSTERS_ENV)
    before_flag = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[RAY_CLUSTERS_ENV] = "0"
    if constants is not None and before_flag is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if before_env is None:
            os.environ.pop(RAY_CLUSTERS_ENV, None)
        else:
            os.environ[RAY_CLUSTERS_ENV] = before_env
        if constants is not None and before_flag is not None:
            constants.ENABLE_RAY_CLUSTER = before_flag


def connect(ray: Any, address: str) -> bool:
    """Join (or start, for ``local``) a Ray cluster; True if this call started the session."""
    if ray.is_initialized():
        return False
    if address not in ("auto", "local"):
        _check_reachable(address)
    try:
        if address == "local":
            with loopback_only(ray):
                ray.init(include_dashboard=False, _node_ip_address=LOCAL_NODE_IP)
        else:
            ray.init(address=address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput("--ray", address, f"{ADDRESS_FORM} ({first})") from None
    return True


class RayPool:
    """The driver's side: a placement group of one-CPU bundles, one relay actor per bundle."""

    kind = "ray"
    lead_s = LEAD_S
    poll_s = POLL_S

    def __init__(self, address: str, requested: int | None, directory: Path) -> None:
        self.ray = ray = _ray()
        self.started = connect(ray, address)
        self.dir = directory / "workers"
        cpus = int(ray.cluster_resources().get("CPU", 0))
        n = requested or cpus
        if not 1 <= n <= cpus:
            self.close()
            raise BadInput("--workers", requested or "auto", f"1 to {cpus}: the cluster's CPUs")
        self.count = n
        run_id = uuid.uuid4().hex[:8]  # actor names: `ray list actors` shows whose they are
        self.names = [f"tailwise-{run_id}-w{k}" for k in range(n)]
        self.pg, self.actors = self._place(n)
        self.pending: dict[int, Any] = {}
        self.over: set[int] = set()
        self._next_poll = 0.0

    def _place(self, n: int) -> tuple[Any, list[Any]]:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pg = placement_group([{"CPU": 1}] * n, strategy="SPREAD")
        try:
            self.ray.get(pg.ready(), timeout=READY_TIMEOUT_S)
        except self.ray.exceptions.GetTimeoutError:
            raise BadInput("--workers", n, "a count the Ray cluster can place") from None
        actor = self.ray.remote(num_cpus=1)(Relay)
        actors = [
            actor.options(
                name=self.names[k],
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=k
                ),
            ).remote()
            for k in range(n)
        ]
        return pg, actors

    def records_path(self, index: int) -> Path:
        return self.dir / f"w{index}" / "records.jsonl"

    def describe(self, index: int) -> dict[str, Any]:
        return {"actor": self.names[index]}

    def launch(self, specs: list[WorkerSpec]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for k in range(self.count):
            self.records_path(k).parent.mkdir(exist_ok=True)
            self.records_path(k).touch()
        self.ray.get([a.launch.remote(s) for a, s in zip(self.actors, specs, strict=True)])

    def poll(self, timeout_s: float) -> list[tuple[int, WorkerMessage]]:
        time.sleep(max(0.0, self._next_poll - time.monotonic()))  # coarse: every POLL_S
        self._next_poll = time.monotonic() + self.poll_s
        for k, a in enumerate(self.actors):
            if k not in self.over and k not in self.pending:
                self.pending[k] = a.poll.remote()
        if not self.pending:
            return []
        refs = list(self.pending.values())
        done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=max(timeout_s, 1.0))
        out: list[tuple[int, WorkerMessage]] = []
        for k in [k for k, ref in self.pending.items() if ref in done]:
            out += self._collect(k, self.pending.pop(k))
        return out

    def _collect(self, k: int, ref: Any) -> list[tuple[int, WorkerMessage]]:
        try:
            got, data = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:  # the actor or its node is gone
            self.over.add(k)
            return [(k, Died(f"Ray actor lost ({type(exc).__name__})"))]
        if data:
            with open(self.records_path(k), "ab") as fh:
                fh.write(zlib.decompress(data))
        msgs = [worker_message(k, m) for m in got]
        if any(isinstance(m, LAST) for m in msgs):
            self.over.add(k)
        return [(k, m) for m in msgs]

    def send(self, index: int, msg: DriverMessage) -> None:
        self.actors[index].send.remote(msg)

    def kill(self, index: int) -> None:
        self.ray.kill(self.actors[index])

    def close(self, abort: bool = False) -> None:
        for a in getattr(self, "actors", []):
            with contextlib.suppress(Exception):
                self.ray.get((a.abort if abort else a.close).remote(), timeout=30)
            with contextlib.suppress(Exception):
                self.ray.kill(a)
        if getattr(self, "pg", None) is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(self.pg)
        if self.started:
            self.ray.shutdown()
