"""Arrival schedules: pure, seeded functions from parameters to intended send offsets.

The schedule itself (a process x a rate profile, or a replayed trace) is in
:mod:`~tailwise.arrivals.schedule`; the processes in
:mod:`~tailwise.arrivals.processes`; the rate profiles in
:mod:`~tailwise.arrivals.profiles`. This module is the registry of what
``--arrival`` (and a scenario's ``arrival.process``) may name, and the only place
that reads those names:

* :data:`PROCESSES`: ``constant``, ``poisson``, ``gamma:<burstiness>``, written bare
  (at ``--rate``: a steady load) or after a shape (``ramp:10/s-100/s+poisson``);
* :data:`BUILTIN`: every ``--arrival`` kind: one per process at ``--rate``, then the
  shapes (``ramp``, ``stages``) and ``trace`` replay. Each states whether its load is
  ``steady``, whether it takes ``--rate``, and whether it bounds a run by itself.

:func:`get` (the kind, or a one-line :class:`BadInput` listing the known forms),
:func:`find` (None for a name this version lacks), :func:`is_steady`,
:func:`parse_schedule`. :func:`register` adds a kind at run time (a plugin, a test).
"Is this load steady?" is asked of a built schedule (:attr:`Schedule.steady`) or,
for a form not built here, of :func:`is_steady`: never of a name or a prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tailwise.arrivals.processes import (
    Constant,
    Gamma,
    Poisson,
    Process,
    ProcessKind,
    no_argument,
    parse_gamma,
)
from tailwise.arrivals.profiles import (
    Profile,
    Ramp,
    Stages,
    Steady,
    parse_ramp,
    parse_stages,
)
from tailwise.arrivals.schedule import (
    BLOCK,
    NS,
    Schedule,
    check_planned,
    expected_count,
)
from tailwise.errors import BadInput
from tailwise.traces import Trace, read_trace
from tailwise.units import RATE_FORM, parse_rate_rps

__all__ = [
    "BLOCK",
    "ArrivalKind",
    "AtRate",
    "Constant",
    "Gamma",
    "Plan",
    "Poisson",
    "Process",
    "ProcessKind",
    "Profile",
    "Ramp",
    "Schedule",
    "Shaped",
    "Stages",
    "Steady",
    "arrival_form",
    "check_planned",
    "expected_count",
    "find",
    "get",
    "is_steady",
    "kinds",
    "parse_process",
    "parse_schedule",
    "read_trace_ns",
    "register",
    "unregister",
]


@dataclass(frozen=True)
class Plan:
    """What every kind builds a schedule from besides its own text: the seed, the run's
    bounds (either may be None), ``--rate``, and for ``trace:FILE`` the file when the
    caller has read it already (for its lengths) and ``--trace-speed``."""

    seed: int
    horizon_ns: int | None
    max_count: int | None
    rate: str | None = None
    trace: Trace | None = None
    trace_speed: float = 1.0

    def schedule(self, process: Process, profile: Profile) -> Schedule:
        """``process`` x ``profile`` within the bounds; a shape that ends by itself (its
        ``end_s``) bounds a run given neither a duration nor a count."""
        horizon_ns = self.horizon_ns
        if horizon_ns is None and self.max_count is None and profile.end_s is not None:
            horizon_ns = round(profile.end_s * NS)
        return Schedule(process, profile, None, self.seed, horizon_ns, self.max_count)


class ArrivalKind(Protocol):
    """One ``--arrival`` kind: the name before ``:`` and what a run asks of its load."""

    @property
    def name(self) -> str: ...

    @property
    def form(self) -> str:
        """How it is written, for help and errors: ``ramp:<from>-<to>``."""
        ...

    @property
    def steady(self) -> bool:
        """One constant rate: the MSER warm-up cut, ``--duration auto`` and the SLO-loss
        watch apply. Equal to the built schedule's :attr:`Schedule.steady`."""
        ...

    @property
    def takes_rate(self) -> bool:
        """``--rate`` is its rate (and required); else it carries its own and refuses one."""
        ...

    @property
    def own_span(self) -> bool:
        """Bounds a run by itself: without ``--duration`` or ``--requests`` it ends where
        its schedule does, instead of after the default 10 s."""
        ...

    def build(self, spec: str, plan: Plan) -> Schedule:
        """The schedule of ``spec`` (the whole text, ``name:...``) within ``plan``."""
        ...


@dataclass(frozen=True)
class AtRate:
    """A process at ``--rate``: a steady load (``poisson`` with ``--rate 100/s``)."""

    process: ProcessKind
    steady = True
    takes_rate = True
    own_span = False

    @property
    def name(self) -> str:
        return self.process.name

    @property
    def form(self) -> str:
        return self.process.form

    def build(self, spec: str, plan: Plan) -> Schedule:
        process = self.process.parse(spec.partition(":")[2], spec, "--arrival")
        if plan.rate is None:
            raise BadInput("--rate", None, f"{RATE_FORM} for --arrival {spec}")
        return plan.schedule(process, Steady(parse_rate_rps(plan.rate, "--rate")))


@dataclass(frozen=True)
class Shaped:
    """A rate profile written ``name:<shape>`` or ``name:<shape>+<process>`` (constant
    spacing unless a process follows). ``parse(shape, horizon_ns)`` builds the profile;
    ``steady`` and ``own_span`` restate what the profile it returns says (its ``steady``;
    ``end_s`` not None), for a caller that holds the text and no schedule."""

    name: str
    form: str
    parse: Callable[[str, int | None], Profile]
    steady: bool = False
    own_span: bool = False
    takes_rate = False

    def build(self, spec: str, plan: Plan) -> Schedule:
        shape, _, proc = spec.partition(":")[2].partition("+")
        process = parse_process(proc) if proc else Constant()
        return plan.schedule(process, self.parse(shape, plan.horizon_ns))


@dataclass(frozen=True)
class Replay:
    """``trace:<file>``: the file's offsets, replayed exactly (``--trace-speed`` faster)."""

    name = "trace"
    form = "trace:<file>"
    steady = False
    takes_rate = False
    own_span = True

    def build(self, spec: str, plan: Plan) -> Schedule:
        path = spec.partition(":")[2]
        if not path:
            raise BadInput("--arrival", spec, "trace:<file>")
        replay = plan.trace if plan.trace is not None else read_trace(path)
        offsets = replay.sped_up(plan.trace_speed).offsets_ns
        return Schedule(Constant(), None, offsets, plan.seed, plan.horizon_ns, plan.max_count)


def arrival_form() -> str:
    """Every form ``--arrival`` takes, for an error: the registry's, in its order."""
    forms = [kind.form for kind in _KINDS.values()]
    shapes = [kind.name for kind in _KINDS.values() if isinstance(kind, Shaped)]
    then = " or ".join(f"+{p.form}" for p in _PROCESSES.values() if p.name != "constant")
    listed = f"{', '.join(forms[:-1])} or {forms[-1]}"
    return f"{listed} ({_and(shapes)} may end in {then})" if shapes else listed


def _and(names: list[str]) -> str:
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


PROCESSES: tuple[ProcessKind, ...] = (
    ProcessKind("constant", "constant", no_argument(Constant(), arrival_form)),
    ProcessKind("poisson", "poisson", no_argument(Poisson(), arrival_form)),
    ProcessKind("gamma", "gamma:<burstiness>", parse_gamma),
)
BUILTIN: tuple[ArrivalKind, ...] = (
    *(AtRate(p) for p in PROCESSES),
    Shaped("ramp", "ramp:<from>-<to>", parse_ramp),
    Shaped("stages", "stages:<rate>@<duration>,...", parse_stages, own_span=True),
    Replay(),
)
_PROCESSES: dict[str, ProcessKind] = {p.name: p for p in PROCESSES}
_KINDS: dict[str, ArrivalKind] = {kind.name: kind for kind in BUILTIN}


def register(kind: ArrivalKind) -> ArrivalKind:
    """Make ``kind`` known to ``--arrival``; a name already taken is a bug, raised."""
    if kind.name in _KINDS:
        raise ValueError(f"arrival kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Forget a kind :func:`register` added (a built-in one stays)."""
    if name not in {kind.name for kind in BUILTIN}:
        _KINDS.pop(name, None)


def kinds() -> list[ArrivalKind]:
    """The registered kinds, built-in first, in registration order."""
    return list(_KINDS.values())


def find(spec: str | None) -> ArrivalKind | None:
    """The kind ``spec`` names (the text before ``:``); None for an unknown name."""
    return _KINDS.get(spec.strip().partition(":")[0]) if spec else None


def get(spec: str, field_name: str = "--arrival") -> ArrivalKind:
    """The kind ``spec`` names; an unknown name is bad input listing the known forms."""
    kind = find(spec)
    if kind is None:
        raise BadInput(field_name, spec, arrival_form())
    return kind


def is_steady(spec: str | None) -> bool:
    """Whether the load ``spec`` writes has one constant rate (False for an unknown name)."""
    kind = find(spec)
    return kind is not None and kind.steady


def parse_process(text: str, field_name: str = "--arrival") -> Process:
    """A process written bare or after a shape's ``+``: ``poisson``, ``gamma:0.5``."""
    name, _, arg = text.strip().partition(":")
    kind = _PROCESSES.get(name)
    if kind is None:
        raise BadInput(field_name, text, arrival_form())
    return kind.parse(arg, text, field_name)


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
    kind = get(arrival)
    if rate is not None and not kind.takes_rate:
        raise BadInput(
            "--rate", rate, f"no --rate with --arrival {kind.name}: it carries its own rates"
        )
    plan = Plan(seed, horizon_ns, max_count, rate, trace, trace_speed)
    return kind.build(arrival.strip(), plan)
