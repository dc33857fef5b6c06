"""The messages of a scaled-out run: one frozen dataclass per kind, both directions.

A worker process (:mod:`tailwise.loadgen.scale.worker`) and the driver
(:mod:`tailwise.loadgen.scale.driver`) talk over a multiprocessing ``Connection``,
which pickles; across a Ray cluster the relay actor
(:mod:`tailwise.loadgen.scale.ray_workers`) forwards the same objects through Ray.
So every class here lives at module level and holds only plain, picklable
values (ints, strings, bytes, lists and dicts of them).

* worker -> driver (:data:`WorkerMessage`): :class:`Ready` once its connections
  are open; a :class:`Snapshot` every ``SNAPSHOT_S``; :class:`Final` once at the
  end; :class:`Failed` instead of :class:`Ready` if it could not start. The
  pool adds :class:`Died` when a worker is gone without its final message.
* driver -> worker (:data:`DriverMessage`): :class:`Start` with the common start
  instant; :class:`Stop` with its reason. End of file from the driver is an
  interruption (the worker books it as ``Stop("gone")``).

:func:`worker_message` checks what arrived off the wire: anything else (a
worker of another tailwise version, a stray object) stops the run with
:class:`WorkerProtocolError` naming the worker and the type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Never, NoReturn, TypeAlias

from tailwise.errors import WorkerProtocolError

# One histogram of a snapshot: (inside the window?, 1 s interval of completion time,
# the HdrHistogram encoded) for the latencies completed since the last snapshot.
EncodedHistogram: TypeAlias = tuple[bool, int, bytes]


@dataclass(frozen=True)
class Ready:
    """The worker is set up (connections open, records writer running) and waits to start."""

    host: str
    pid: int
    max_in_flight: int


@dataclass(frozen=True)
class Snapshot:
    """Coarse and mergeable: cumulative counts, and the histograms filled since the last one."""

    at_ns: int  # run-relative instant it was taken
    sent: int
    in_flight: int
    completed: int
    kinds: dict[str, int]  # completions by error kind ("" for ok), cumulative
    hists: list[EncodedHistogram]
    misses: list[int] | None  # certain SLO misses per limit; None without a loss watch


@dataclass(frozen=True)
class Final:
    """The last message of a worker that ran: how the run ended there."""

    interrupted: bool
    # A signal at this worker alone (kill -TERM PID): the driver books it as a lost
    # worker, as if it had died, and the others go on.
    signalled: bool
    note: str
    stopped_at_ns: int
    rows: int  # rows it measured
    rows_on_disk: int | None  # rows its writer wrote (None: unknown)
    tokens: dict[str, Any]  # how output tokens were counted (conclude.token_source); {} if none
    slack_ns: int  # how long before the common start the start message came
    snapshot: Snapshot | None  # the last one, taken at the end
    client: dict[str, Any]  # the client's side (conclude.client_part): a summary section


@dataclass(frozen=True)
class Failed:
    """Sent instead of :class:`Ready`: the worker could not start (``Type: message``)."""

    error: str


@dataclass(frozen=True)
class Died:
    """Made by the pool, never sent: the worker is gone without its final message."""

    why: str


WorkerMessage: TypeAlias = Ready | Snapshot | Final | Failed | Died

# Why the driver stops a worker: a signal at the driver ("interrupt"; "hard" for the
# second one, or past the deadline: cancel what is in flight), a lost SLO ("slo":
# stop sending, let what was sent finish); "gone" is the worker's own, the driver lost.
StopReason: TypeAlias = Literal["interrupt", "slo", "hard", "gone"]


@dataclass(frozen=True)
class Start:
    """The common start instant, on the driver's wall clock."""

    t0_unix_ns: int


@dataclass(frozen=True)
class Stop:
    reason: StopReason


DriverMessage: TypeAlias = Start | Stop

WORKER_MESSAGES = (Ready, Snapshot, Final, Failed, Died)
LAST = (Final, Failed, Died)  # after one of these a worker sends nothing more


def worker_message(index: int, got: object) -> WorkerMessage:
    """What worker ``index`` sent, checked: a :data:`WorkerMessage`, else the run stops."""
    if isinstance(got, WORKER_MESSAGES):
        return got
    raise _protocol_error(index, got)


def unknown(index: int, got: Never) -> NoReturn:
    """The last case of a ``match`` on a :data:`WorkerMessage`: mypy checks that every kind
    was handled before it (``got`` is narrowed to nothing), and a stray object fails here."""
    raise _protocol_error(index, got)


def _protocol_error(index: int, got: object) -> WorkerProtocolError:
    kind = type(got)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    return WorkerProtocolError(
        f"worker {index}",
        f"a message of type {name}",
        f"one of {', '.join(c.__name__ for c in WORKER_MESSAGES)}"
        " (tailwise.loadgen.scale.messages; the same tailwise version on every host)",
    )
