"""Schedules: a process x a rate profile (or a replayed trace), bounded and seeded.

A schedule never reads a clock. It yields blocks of non-decreasing ``int64``
offsets in nanoseconds from the run start; the engine (load generator or
simulator) owns the clock and adds the offsets to its own start instant.

Construction (the time-change theorem): a *process* draws event times ``u`` of a
unit-rate point process in "operational time" (constant spacing, Poisson, or
gamma gaps with mean 1), and a *profile* maps operational time to real time
through the inverse of its cumulative rate ``Λ(t) = ∫ r``. So ``gamma:0.5``
composes with ``ramp:10/s-100/s`` and every mix keeps the requested mean rate at
every instant. Arrivals are never rescaled or skipped to suit the target.

Determinism: the random stream is drawn in fixed blocks of :data:`BLOCK` from a
``numpy`` PCG64 generator seeded once, so the same seed gives the same offsets
however a consumer slices them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailwise.arrivals.processes import Poisson, Process
from tailwise.arrivals.profiles import Profile
from tailwise.errors import BadInput
from tailwise.limits import MAX_PLANNED_REQUESTS, within

BLOCK = 8_192
NS = 1_000_000_000
_FAR_S = 2.0**62 / NS  # about 146 years: beyond every horizon, inside int64 ns
I64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Schedule:
    """Intended send offsets: ``process`` x ``profile``, or a replayed ``trace``.

    Bounded by ``horizon_ns`` (offsets strictly below it), ``max_count``, or both
    (whichever comes first). A rate profile needs at least one; a trace bounds itself.
    """

    process: Process = field(default_factory=Poisson)
    profile: Profile | None = None
    trace_ns: tuple[int, ...] | None = None
    seed: int = 0
    horizon_ns: int | None = None
    max_count: int | None = None

    def __post_init__(self) -> None:
        if self.trace_ns is None and self.horizon_ns is None and self.max_count is None:
            raise BadInput("schedule", "no bound", "a duration or a request count")
        if (self.profile is None) == (self.trace_ns is None):
            raise BadInput("schedule", "profile/trace", "exactly one of a rate profile or a trace")

    @property
    def steady(self) -> bool:
        """One constant rate (its profile says so): a replayed trace or a shaped profile is
        not. Only a steady load gets the MSER warm-up cut, ``--duration auto`` and the
        SLO-loss watch: a shape changes its load on purpose, so its early rows are no
        transient, and no one rate judges it."""
        return self.profile is not None and self.profile.steady

    @property
    def rate_rps(self) -> float | None:
        """The offered rate of a steady schedule; None for a shape or a trace."""
        if self.profile is None or not self.profile.steady:
            return None
        return self.profile.total_events(1.0)  # a constant rate: its events in one second

    def blocks(self) -> Iterator[I64Array]:
        """Non-decreasing offsets in ns, in blocks of at most :data:`BLOCK`."""
        if self.trace_ns is not None:
            yield from self._trace_blocks()
            return
        assert self.profile is not None
        rng = np.random.Generator(np.random.PCG64(self.seed))
        emitted, u_base = 0, 0.0
        first_at_zero = self.process.first_at_zero
        while True:
            gaps = self.process.gaps(rng, BLOCK)
            u = u_base + np.cumsum(gaps) - (1.0 if first_at_zero else 0.0)
            u_base = float(u[-1]) + (1.0 if first_at_zero else 0.0)
            # Clipped below int64's end: a far instant stays past the horizon, never wraps.
            t_s = np.minimum(self.profile.to_time_s(u), _FAR_S)
            t_ns = np.floor(t_s * NS).astype(np.int64)
            t_ns, done = self._clip(t_ns, emitted)
            if len(t_ns):
                yield t_ns
            emitted += len(t_ns)
            if done:
                return

    def _clip(self, t_ns: I64Array, emitted: int) -> tuple[I64Array, bool]:
        done = False
        if self.horizon_ns is not None and len(t_ns) and t_ns[-1] >= self.horizon_ns:
            t_ns, done = t_ns[: int(np.searchsorted(t_ns, self.horizon_ns))], True
        if self.max_count is not None and emitted + len(t_ns) >= self.max_count:
            t_ns, done = t_ns[: self.max_count - emitted], True
        return t_ns, done

    def _trace_blocks(self) -> Iterator[I64Array]:
        assert self.trace_ns is not None
        arr = np.asarray(self.trace_ns, dtype=np.int64)
        arr, _ = self._clip(arr, 0)
        for i in range(0, len(arr), BLOCK):
            yield arr[i : i + BLOCK]

    def share_blocks(self, index: int, count: int) -> Iterator[I64Array]:
        """Worker ``index`` of ``count``: the plan's offsets at positions ``index`` mod ``count``.

        The ``count`` shares together are exactly :meth:`blocks` (one global plan,
        not ``count`` independent ones), and a share's ``j``-th offset is the plan's
        offset number ``index + j * count``, so a worker's sequence numbers map back
        to the plan's without a table. Round-robin, not time slices, keeps every
        worker at ``1/count`` of the rate at each instant of a ramp or stages profile.
        Blocks hold :data:`BLOCK` offsets, all but the last, as in :meth:`blocks`.
        """
        if not 0 <= index < count:
            raise ValueError(f"share {index} of {count}")
        position = 0  # plan position of the next block's first offset
        held: list[I64Array] = []
        n_held = 0
        for block in self.blocks():
            part = block[(index - position) % count :: count]
            position += len(block)
            held.append(part)
            n_held += len(part)
            # Re-chunked to whole blocks of BLOCK, as blocks() yields them: the engine
            # relies on every block but the last being full (seq >> shift finds a block).
            if n_held >= BLOCK:
                joined = np.concatenate(held)
                cut = len(joined) - len(joined) % BLOCK
                yield from np.split(joined[:cut], cut // BLOCK)
                held, n_held = [joined[cut:]], len(joined) - cut
        if n_held:
            yield np.concatenate(held)

    def offsets_ns(self) -> I64Array:
        """All offsets at once (for tests, the simulator and slicing across workers)."""
        parts = list(self.blocks())
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def describe(self) -> dict[str, object]:
        """The ``arrival`` object of summary.json."""
        out: dict[str, object] = {"seed": self.seed}
        if self.trace_ns is not None:
            out["process"] = "trace"
            out["events"] = len(self.trace_ns)
            return out
        assert self.profile is not None
        return {**out, **self.process.describe(), **self.profile.describe()}


def check_planned(schedule: Schedule, field_name: str = "--rate", given: object = None) -> float:
    """The number of requests ``schedule`` plans, refused above MAX_PLANNED_REQUESTS.

    Sized from the bounds alone (``max_count``, or the rate profile over the
    horizon), before one offset is drawn: ``--rate 1e9/s --duration 60s`` costs nothing.
    """
    planned = math.inf
    if schedule.trace_ns is not None:
        planned = float(len(schedule.trace_ns))
    elif schedule.horizon_ns is not None:
        planned = expected_count(schedule, schedule.horizon_ns / NS)
    if schedule.max_count is not None:
        planned = min(planned, float(schedule.max_count))
    what = "requests planned (rate x duration)"
    within(field_name, planned, MAX_PLANNED_REQUESTS, what, given=given)
    return planned


def expected_count(schedule: Schedule, horizon_s: float) -> float:
    """Expected number of arrivals before ``horizon_s`` (used to size buffers)."""
    if schedule.trace_ns is not None:
        return float(len(schedule.trace_ns))
    assert schedule.profile is not None
    return schedule.profile.total_events(horizon_s)
