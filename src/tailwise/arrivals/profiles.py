"""Rate profiles: real time <-> operational time, and whether the rate is steady.

A profile maps the unit-rate event times of a process to real time through the
inverse of its cumulative rate ``Λ(t) = ∫ r`` (the time-change theorem). A
constant profile gives ``t = u / r``; a linear ramp inverts a quadratic; stages are
piecewise linear.

``steady`` is the one statement of "is this load steady?": a profile whose rate
never changes (:class:`Steady`) is; one that shapes its load on purpose (a ramp,
stages, a wave) is not. Everything that treats a steady load differently asks it,
through :attr:`tailwise.arrivals.Schedule.steady` or the registry's entry: the MSER
warm-up cut (a shaped load's early rows are not a transient to cut), ``--duration
auto`` and the SLO-loss watch (both judge one rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tailwise.errors import BadInput
from tailwise.units import DURATION_FORM, parse_duration_ns, parse_rate_rps

F64Array = npt.NDArray[np.float64]
NS = 1_000_000_000


class Profile(Protocol):
    """A rate over real time, as the map from operational time to real time."""

    @property
    def steady(self) -> bool:
        """One constant rate: any change in the load is the system's transient, not the plan's."""
        ...

    @property
    def end_s(self) -> float | None:
        """Where the shape ends when neither a duration nor a count bounds the run (the
        last of its stages); None where it runs until one of those ends it."""
        ...

    def to_time_s(self, u: F64Array) -> F64Array:
        """Real instants (s) of the operational times ``u`` (non-decreasing in, out)."""
        ...

    def total_events(self, horizon_s: float) -> float:
        """``Λ(horizon_s)``: the expected number of events before ``horizon_s``."""
        ...

    def describe(self) -> dict[str, object]:
        """Its part of summary.json's ``arrival`` object."""
        ...


@dataclass(frozen=True)
class Steady:
    """A constant rate in requests per second."""

    rate_rps: float
    steady = True
    end_s = None

    def to_time_s(self, u: F64Array) -> F64Array:
        return u / self.rate_rps

    def total_events(self, horizon_s: float) -> float:
        return self.rate_rps * horizon_s

    def describe(self) -> dict[str, object]:
        return {"rate_rps": self.rate_rps}


@dataclass(frozen=True)
class Ramp:
    """Rate rising (or falling) linearly from ``from_rps`` to ``to_rps`` over ``span_s``."""

    from_rps: float
    to_rps: float
    span_s: float  # the run's horizon: a ramp lasts as long as the run
    steady = False
    end_s = None

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

    def describe(self) -> dict[str, object]:
        return {
            "profile": "ramp",
            "from_rps": self.from_rps,
            "to_rps": self.to_rps,
            "span_s": self.span_s,
        }


@dataclass(frozen=True)
class Stages:
    """Piecewise-constant rates: ``[(rate_rps, duration_s), ...]``; the last rate holds after."""

    steps: tuple[tuple[float, float], ...]
    steady = False

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

    @property
    def end_s(self) -> float:
        return self.span_s

    def describe(self) -> dict[str, object]:
        stages = [{"rate_rps": r, "duration_s": d} for r, d in self.steps]
        return {"profile": "stages", "stages": stages}


# ---- parsing the written forms (after ``name:``, before any ``+process``) -----------


def parse_ramp(shape: str, horizon_ns: int | None) -> Ramp:
    """``ramp:<from>-<to>``: the ramp spans the whole run, warm-up included."""
    if horizon_ns is None:
        raise BadInput("--duration", None, f"a duration for a ramp ({DURATION_FORM})")
    lo, sep, hi = shape.partition("-")
    if not sep:
        raise BadInput("--arrival", shape, "ramp:<from>-<to> such as ramp:10/s-100/s")
    return Ramp(parse_rate_rps(lo, "--arrival"), parse_rate_rps(hi, "--arrival"), horizon_ns / NS)


def parse_stages(shape: str, horizon_ns: int | None) -> Stages:
    """``stages:<rate>@<duration>,...``."""
    steps: list[tuple[float, float]] = []
    for part in shape.split(","):
        rate, sep, dur = part.partition("@")
        if not sep:
            raise BadInput(
                "--arrival", part, "stages:<rate>@<duration>,... such as stages:50/s@10s,100/s@20s"
            )
        d_ns = parse_duration_ns(dur, "--arrival", allow_zero=False)
        steps.append((parse_rate_rps(rate, "--arrival"), d_ns / NS))
    return Stages(tuple(steps))
