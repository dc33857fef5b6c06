"""Arrival processes: unit-rate event times in operational time.

A process draws the gaps of a point process with mean 1 ("operational time"); a
rate profile (:mod:`tailwise.arrivals.profiles`) maps them to real time. Each
process here is one class and one :class:`ProcessKind` entry, listed in
:data:`PROCESSES` of :mod:`tailwise.arrivals`: the name ``--arrival`` uses bare
(``poisson``, at ``--rate``) and after a shape (``ramp:10/s-100/s+poisson``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tailwise.errors import BadInput
from tailwise.limits import MIN_BURSTINESS

F64Array = npt.NDArray[np.float64]


class Process(Protocol):
    """Gaps of a unit-rate point process (mean 1), drawn from a seeded generator."""

    @property
    def name(self) -> str:
        """summary.json's ``arrival.process``."""
        ...

    @property
    def first_at_zero(self) -> bool:
        """The first event at time zero rather than one gap after it."""
        ...

    def gaps(self, rng: np.random.Generator, n: int) -> F64Array: ...

    def describe(self) -> dict[str, object]:
        """Its part of summary.json's ``arrival`` object: the name and its parameters."""
        ...


@dataclass(frozen=True)
class Constant:
    """Evenly spaced events (deterministic); the first at time zero."""

    name = "constant"
    first_at_zero = True

    def gaps(self, rng: np.random.Generator, n: int) -> F64Array:
        return np.ones(n)

    def describe(self) -> dict[str, object]:
        return {"process": self.name}


@dataclass(frozen=True)
class Poisson:
    """Exponential gaps with mean 1 (a Poisson process)."""

    name = "poisson"
    first_at_zero = False

    def gaps(self, rng: np.random.Generator, n: int) -> F64Array:
        return rng.exponential(1.0, n)

    def describe(self) -> dict[str, object]:
        return {"process": self.name}


@dataclass(frozen=True)
class Gamma:
    """Gamma gaps, shape = burstiness, mean 1; CV = 1/sqrt(burstiness).

    ``burstiness == 1`` is Poisson; below 1 is burstier, above 1 more regular
    (the ``--burstiness`` convention of vLLM's serving benchmark).
    """

    burstiness: float
    name = "gamma"
    first_at_zero = False

    def gaps(self, rng: np.random.Generator, n: int) -> F64Array:
        gaps: F64Array = rng.gamma(self.burstiness, 1.0 / self.burstiness, n)
        return gaps

    def describe(self) -> dict[str, object]:
        return {"process": self.name, "burstiness": self.burstiness}


@dataclass(frozen=True)
class ProcessKind:
    """One process name: its written form and its parser.

    ``parse(arg, text, field_name)`` gets what follows ``name:`` (``""`` when
    nothing does), the whole text and the field to name in an error.
    """

    name: str
    form: str  # how it is written, for help and errors: "gamma:<burstiness>"
    parse: Callable[[str, str, str], Process]


def no_argument(process: Process, known: Callable[[], str]) -> Callable[[str, str, str], Process]:
    """The parser of a process without parameters: ``poisson``, never ``poisson:3``.

    ``known`` gives the known forms, listed when something follows the name."""

    def parse(arg: str, text: str, field_name: str) -> Process:
        if arg:
            raise BadInput(field_name, text, known())
        return process

    return parse


def parse_gamma(arg: str, text: str, field_name: str) -> Gamma:
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
