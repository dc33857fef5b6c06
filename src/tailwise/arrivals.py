"""Arrival schedules: pure, seeded functions from parameters to intended send offsets.

A schedule never reads a clock. It yields blocks of non-decreasing ``int64``
offsets in nanoseconds from the run start; the engine (load generator or
simulator) owns the clock and adds the offsets to its own start instant.

Construction (the time-change theorem): a *process* draws event times ``u`` of a
unit-rate point process in "operational time" (constant spacing, Poisson, or
gamma gaps with mean 1), and a *profile* maps operational time to real time
through the inverse of its cumulative rate ``Λ(t) = ∫ r``. A constant profile
gives ``t = u / r``; a linear ramp inverts a quadratic; stages are piecewise
linear. So ``gamma:0.5`` composes with ``ramp:10/s-100/s`` and every mix keeps
the requested mean rate at every instant. Arrivals are never rescaled or
skipped to suit the target.

Determinism: the random stream is drawn in fixed blocks of :data:`BLOCK` from a
``numpy`` PCG64 generator seeded once, so the same seed gives the same offsets
however a consumer slices them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailwise.errors import BadInput
from tailwise.limits import MAX_PLANNED_REQUESTS, MIN_BURSTINESS, within
from tailwise.traces import Trace, read_trace
from tailwise.units import (
    DURATION_FORM,
    RATE_FORM,
    parse_duration_ns,
    parse_rate_rps,
)

BLOCK = 8_192
NS = 1_000_000_000
_FAR_S = 2.0**62 / NS  # about 146 years: beyond every horizon, inside int64 ns
I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]


# ---- processes: unit-rate event times in operational time ---------------------------


@dataclass(frozen=True)
class Constant:
    """Evenly spaced events (deterministic); the first at time zero."""

    name = "constant"

    def gaps(self, rng: np.random.Generator, n: int) -> F64Array:
        return np.ones(n)


@dataclass(frozen=True)
class Poisson:
    """Exponential gaps with mean 1 (a Poisson process)."""

    name = "poisson"

    def gaps(self, rng: np.random.Generator, n: int) -> F64Array:
        return rng.exponential(1.0, n)


@dataclass(frozen=True)
class Gamma:
    """Gamma gaps, shape = burstiness, mean 1; CV = 1/sqrt(burstiness).

    ``burstiness == 1`` is Poisson; below 1 is burstier, above 1 more regular
    (the ``--burstiness`` convention of vLLM's serving benchmark).
    """

    burstiness: float
    name = "gamma"

    def gaps(self, rng: np.random.Generator, n: int) -> F64Array:
        gaps: F64Array = rng.gamma(self.burstiness, 1.0 / self.burstiness, n)
        return gaps


Process = Constant | Poisson | Gamma


# ---- profiles: real time <-> operational time ---------------------------------------


@dataclass(frozen=True)
class Steady:
    """A constant rate in requests per second."""

    rate_rps: float

    def to_time_s(self, u: F64Array) -> F64Array:
        return u / self.rate_rps

    def total_events(self, horizon_s: float) -> float:
        return self.rate_rps * horizon_s


@dataclass(frozen=True)
class Ramp:
    """Rate rising (or falling) linearly from ``from_rps`` to ``to_rps`` over ``span_s``."""

    from_rps: float
    to_rps: float
    span_s: float

    def to_time_s(self, u: F64Array) -> F64Array:
        a, k = self.from_rps, (self.to_rps - self.from_rps) / self.span_s
        # Root of k/2 t^2 + a t - u = 0 in the cancellation-free form.
        disc = np.maximum(a * a + 2.0 * k * u, 0.0)
        t = 2.0 * u / (a + np.sqrt(disc))
        # Past the end of the ramp the rate holds at to_rps.
        end_u = self.total_events(self.span_s)
        past = u > end_u
        if np.any(past):
            t = np.where(past, self.span_s + (u - end_u) / self.to_rps, t)
        return t

    def total_events(self, horizon_s: float) -> float:
        s = min(horizon_s, self.span_s)
        k = (self.to_rps - self.from_rps) / self.span_s
        return self.from_rps * s + 0.5 * k * s * s + max(horizon_s - s, 0.0) * self.to_rps


@dataclass(frozen=True)
class Stages:
    """Piecewise-constant rates: ``[(rate_rps, duration_s), ...]``; the last rate holds after."""

    steps: tuple[tuple[float, float], ...]

    def _knots(self) -> tuple[F64Array, F64Array]:
        t = np.concatenate([[0.0], np.cumsum([d for _, d in self.steps])])
        u = np.concatenate([[0.0], np.cumsum([r * d for r, d in self.steps])])
        return t, u

    def to_time_s(self, u: F64Array) -> F64Array:
        t_k, u_k = self._knots()
        rates = np.array([r for r, _ in self.steps] + [self.steps[-1][0]])
        i = np.clip(np.searchsorted(u_k, u, side="right") - 1, 0, len(rates) - 1)
        t: F64Array = t_k[i] + (u - u_k[i]) / rates[i]
        return t

    def total_events(self, horizon_s: float) -> float:
        t_k, u_k = self._knots()
        if horizon_s >= t_k[-1]:
            return float(u_k[-1] + (horizon_s - t_k[-1]) * self.steps[-1][0])
        return float(np.interp(horizon_s, t_k, u_k))

    @property
    def span_s(self) -> float:
        return float(sum(d for _, d in self.steps))


Profile = Steady | Ramp | Stages


# ---- schedules ----------------------------------------------------------------------


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

    def blocks(self) -> Iterator[I64Array]:
        """Non-decreasing offsets in ns, in blocks of at most :data:`BLOCK`."""
        if self.trace_ns is not None:
            yield from self._trace_blocks()
            return
        assert self.profile is not None
        rng = np.random.Generator(np.random.PCG64(self.seed))
        emitted, u_base = 0, 0.0
        first_at_zero = isinstance(self.process, Constant)
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
        out["process"] = self.process.name
        if isinstance(self.process, Gamma):
            out["burstiness"] = self.process.burstiness
        p = self.profile
        if isinstance(p, Steady):
            out["rate_rps"] = p.rate_rps
        elif isinstance(p, Ramp):
            out.update(profile="ramp", from_rps=p.from_rps, to_rps=p.to_rps, span_s=p.span_s)
        elif isinstance(p, Stages):
            out.update(
                profile="stages", stages=[{"rate_rps": r, "duration_s": d} for r, d in p.steps]
            )
        return out


# ---- parsing the CLI form -----------------------------------------------------------

ARRIVAL_FORM = (
    "constant, poisson, gamma:<burstiness>, ramp:<from>-<to>, "
    "stages:<rate>@<duration>,... or trace:<file> (ramp and stages may end in +poisson "
    "or +gamma:<b>)"
)


def parse_process(text: str, field_name: str = "--arrival") -> Process:
    name, _, arg = text.strip().partition(":")
    if name == "constant" and not arg:
        return Constant()
    if name == "poisson" and not arg:
        return Poisson()
    if name == "gamma":
        try:
            b = float(arg)
        except ValueError:
            raise BadInput(
                field_name, text, "gamma:<burstiness> with burstiness > 0, e.g. gamma:0.5"
            ) from None
        if not (math.isfinite(b) and MIN_BURSTINESS <= b <= 1e6):
            # Below the floor nearly every gap is 0: bursts of hundreds at one instant.
            raise BadInput(
                field_name, text, "gamma:<burstiness> with burstiness from 0.01 to 1e6, e.g. 0.5"
            )
        return Gamma(b)
    raise BadInput(field_name, text, ARRIVAL_FORM)


def _parse_ramp(arg: str, span_s: float, field_name: str) -> Ramp:
    lo, sep, hi = arg.partition("-")
    if not sep:
        raise BadInput(field_name, arg, "ramp:<from>-<to> such as ramp:10/s-100/s")
    return Ramp(parse_rate_rps(lo, field_name), parse_rate_rps(hi, field_name), span_s)


def _parse_stages(arg: str, field_name: str) -> Stages:
    steps: list[tuple[float, float]] = []
    for part in arg.split(","):
        rate, sep, dur = part.partition("@")
        if not sep:
            raise BadInput(
                field_name, part, "stages:<rate>@<duration>,... such as stages:50/s@10s,100/s@20s"
            )
        d_ns = parse_duration_ns(dur, field_name, allow_zero=False)
        steps.append((parse_rate_rps(rate, field_name), d_ns / NS))
    return Stages(tuple(steps))


def read_trace_ns(path: str, field_name: str = "--arrival trace") -> tuple[int, ...]:
    """The offsets of a trace file in any form :mod:`tailwise.traces` reads."""
    return read_trace(path).offsets_ns


def parse_schedule(
    arrival: str,
    rate: str | None,
    *,
    seed: int,
    horizon_ns: int | None,
    max_count: int | None,
    trace: Trace | None = None,
    trace_speed: float = 1.0,
) -> Schedule:
    """Build a schedule from the CLI's ``--arrival`` and ``--rate`` strings.

    ``trace`` is the file of ``trace:FILE`` when the caller has read it already (for
    its lengths); ``trace_speed`` divides a trace's offsets (``--trace-speed 2x``).
    """
    kind, _, rest = arrival.strip().partition(":")

    def bounded(
        process: Process, profile: Profile | None, trace: tuple[int, ...] | None = None
    ) -> Schedule:
        return Schedule(process, profile, trace, seed, horizon_ns, max_count)

    if kind in ("trace", "ramp", "stages") and rate is not None:
        raise BadInput("--rate", rate, f"no --rate with --arrival {kind}: it carries its own rates")
    if kind == "trace":
        if not rest:
            raise BadInput("--arrival", arrival, "trace:<file>")
        replay = trace if trace is not None else read_trace(rest)
        return bounded(Constant(), None, replay.sped_up(trace_speed).offsets_ns)
    if kind in ("ramp", "stages"):
        shape, _, proc = rest.partition("+")
        process = parse_process(proc) if proc else Constant()
        if kind == "stages":
            stages = _parse_stages(shape, "--arrival")
            if horizon_ns is None and max_count is None:  # the stages bound the run themselves
                return Schedule(process, stages, None, seed, round(stages.span_s * NS), None)
            return bounded(process, stages)
        if horizon_ns is None:
            raise BadInput("--duration", None, f"a duration for a ramp ({DURATION_FORM})")
        return bounded(process, _parse_ramp(shape, horizon_ns / NS, "--arrival"))
    process = parse_process(arrival)
    if rate is None:
        raise BadInput("--rate", None, f"{RATE_FORM} for --arrival {arrival}")
    return bounded(process, Steady(parse_rate_rps(rate, "--rate")))


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


__all__: Sequence[str] = [
    "BLOCK",
    "Constant",
    "Gamma",
    "Poisson",
    "Ramp",
    "Schedule",
    "Stages",
    "Steady",
    "check_planned",
    "parse_schedule",
    "read_trace_ns",
]
