"""What the proxy injects, parsed from the strings users type, and each request's draw.

Faults compose; each is off unless given:

* ``delay`` - a distribution (:func:`tailwise.distributions.parse_distribution`
  forms: ``5ms``, ``exp:5ms``, ``lognormal:5ms,0.5`` ...): every request is held
  that long before it is forwarded;
* ``stall`` - ``S/P``: nothing passes, either way, during the first ``S`` of
  every period ``P`` of proxy time (the bytes wait for the stall to end);
* ``slow`` - ``P%xK``: a share ``P`` of requests is ``K`` times slower to its
  first response byte (the response is held ``(K-1)`` times the target's time
  to first byte, then streams at its own pace);
* ``reset`` / ``drop`` / ``truncate`` - shares of requests whose connection is
  reset (RST) instead of forwarded, swallowed (never forwarded, never answered:
  the client waits for its own timeout), or whose response is cut after its
  first body bytes;
* ``bandwidth`` - a rate such as ``1MB/s`` or ``10Mbit/s`` that each connection's
  bytes follow in each direction;
* ``schedule`` - windows of proxy time (``5s-15s,30s-40s``) outside which no
  fault applies.

Times are integer nanoseconds since the proxy started. A request's draws come
from one seeded generator in a fixed order (four uniforms and one delay per
request, drawn in blocks), so the same seed and the same order of requests give
the same faults, whichever of them the schedule switches off.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from tailwise.distributions import Distribution, parse_distribution
from tailwise.errors import BadInput
from tailwise.units import (
    parse_duration_ns,
    parse_fraction,
    parse_slow_share,
    parse_stall_ns,
)

SHARE_FORM = "a share such as 1% or 0.01"
BANDWIDTH_FORM = "a rate such as 1MB/s, 512KiB/s or 10Mbit/s"
SCHEDULE_FORM = "windows of proxy time such as 5s-15s or 5s-15s,30s-40s"
ADDRESS_FORM = "HOST:PORT or PORT, e.g. 127.0.0.1:8001"
_DRAW_BLOCK = 1024

# Bytes per second for each unit (decimal and binary prefixes, bytes and bits).
_BANDWIDTH_UNITS = {
    "b": 1.0,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "kib": 1024.0,
    "mib": 1024.0**2,
    "gib": 1024.0**3,
    "bit": 1 / 8,
    "kbit": 1e3 / 8,
    "mbit": 1e6 / 8,
    "gbit": 1e9 / 8,
}
_BANDWIDTH_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]+)\s*/\s*s\s*$")


@dataclass(frozen=True)
class Faults:
    delay: Distribution | None = None
    stall_ns: int = 0
    period_ns: int = 0
    slow_p: float = 0.0
    slow_factor: float = 1.0
    reset_p: float = 0.0
    drop_p: float = 0.0
    truncate_p: float = 0.0
    bandwidth_bps: float = 0.0  # bytes per second; 0: unlimited
    windows_ns: tuple[tuple[int, int], ...] = ()  # empty: always on
    seed: int = 0

    def active(self, t_ns: int) -> bool:
        """Whether faults apply at proxy time ``t_ns`` (the schedule)."""
        return not self.windows_ns or any(a <= t_ns < b for a, b in self.windows_ns)

    def stall_end(self, t_ns: int) -> int:
        """When a byte due at ``t_ns`` may pass: the end of the stall it falls in, or ``t_ns``."""
        if not self.stall_ns or not self.active(t_ns):
            return t_ns
        start = t_ns - t_ns % self.period_ns
        return start + self.stall_ns if t_ns < start + self.stall_ns else t_ns

    def describe(self) -> dict[str, object]:
        """The faults as JSON-able values (for the ground-truth log's first line)."""
        return {
            "delay": None if self.delay is None else _describe_dist(self.delay),
            "stall_s": self.stall_ns / 1e9,
            "period_s": self.period_ns / 1e9,
            "slow_p": self.slow_p,
            "slow_factor": self.slow_factor,
            "reset_p": self.reset_p,
            "drop_p": self.drop_p,
            "truncate_p": self.truncate_p,
            "bandwidth_bps": self.bandwidth_bps,
            "windows_s": [[a / 1e9, b / 1e9] for a, b in self.windows_ns],
            "seed": self.seed,
        }


def _describe_dist(d: Distribution) -> dict[str, object]:
    return {"kind": d.kind, "mean_ms": d.mean_ns / 1e6, "a": d.a, "b": d.b}


@dataclass(frozen=True)
class Decision:
    """One request's fate, drawn when its first byte arrives."""

    reset: bool = False
    drop: bool = False
    truncate: bool = False
    slow_factor: float = 1.0
    delay_ns: int = 0

    def names(self) -> list[str]:
        """The per-request faults drawn, in the ground-truth log's words."""
        out = [n for n, on in (("reset", self.reset), ("drop", self.drop)) if on]
        if self.truncate:
            out.append("truncate")
        if self.slow_factor != 1.0:
            out.append("slow")
        if self.delay_ns:
            out.append("delay")
        return out


PASS = Decision()


class Dice:
    """Per-request draws in a fixed order from one seeded generator (reproducible)."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self._rng = np.random.Generator(np.random.PCG64(faults.seed))
        self._u: list[list[float]] = []
        self._delay_ns: list[int] = []
        self._i = _DRAW_BLOCK

    def _refill(self) -> None:
        self._u = self._rng.random((_DRAW_BLOCK, 4)).tolist()
        delay = self.faults.delay
        drawn = delay.sample(self._rng, _DRAW_BLOCK) if delay is not None else None
        self._delay_ns = drawn.tolist() if drawn is not None else [0] * _DRAW_BLOCK
        self._i = 0

    def decide(self, t_ns: int) -> Decision:
        """The next request's draw; every fault off outside the schedule's windows."""
        if self._i == _DRAW_BLOCK:
            self._refill()
        u, delay_ns = self._u[self._i], self._delay_ns[self._i]
        self._i += 1
        f = self.faults
        if not f.active(t_ns):
            return PASS
        reset = u[0] < f.reset_p
        drop = not reset and u[1] < f.drop_p
        return Decision(
            reset=reset,
            drop=drop,
            truncate=not (reset or drop) and u[2] < f.truncate_p,
            slow_factor=f.slow_factor if u[3] < f.slow_p else 1.0,
            delay_ns=int(delay_ns),
        )


def parse_share(text: str | None, field: str) -> float:
    """``"1%"`` or ``"0.01"`` -> 0.01; None -> 0."""
    return 0.0 if text is None else parse_fraction(text, field)


def parse_slow(text: str | None, field: str = "--slow") -> tuple[float, float]:
    """``"1%x10"`` -> (0.01, 10.0); None -> (0, 1)."""
    return (0.0, 1.0) if text is None else parse_slow_share(text, field, max_factor=1e6)


def parse_stall(text: str | None, field: str = "--stall") -> tuple[int, int]:
    """``"1s/10s"`` -> (stall_ns, period_ns); None -> (0, 0)."""
    return (0, 0) if text is None else parse_stall_ns(text, field)


def parse_bandwidth_bps(text: str | None, field: str = "--bandwidth") -> float:
    """``"1MB/s"`` -> 1e6 bytes per second; None -> 0 (unlimited)."""
    if text is None:
        return 0.0
    m = _BANDWIDTH_RE.match(text) if isinstance(text, str) else None
    unit = _BANDWIDTH_UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None:
        raise BadInput(field, text, BANDWIDTH_FORM)
    value = float(m.group(1)) * unit
    if not math.isfinite(value) or not 1.0 <= value <= 1e12:
        raise BadInput(field, text, BANDWIDTH_FORM + ", from 1 B/s to 1 TB/s")
    return value


def parse_schedule(text: str | None, field: str = "--schedule") -> tuple[tuple[int, int], ...]:
    """``"5s-15s,30s-40s"`` -> ((5e9, 15e9), (30e9, 40e9)); None -> () (always on)."""
    if text is None:
        return ()
    if not isinstance(text, str) or not text.strip():
        raise BadInput(field, text, SCHEDULE_FORM)
    windows = []
    for part in text.split(","):
        start, sep, end = part.partition("-")
        if not sep:
            raise BadInput(field, text, SCHEDULE_FORM)
        a, b = parse_duration_ns(start, field), parse_duration_ns(end, field)
        if b <= a:
            raise BadInput(field, text, SCHEDULE_FORM + ", each ending after it starts")
        windows.append((a, b))
    return tuple(windows)


def parse_address(text: str, field: str) -> tuple[str, int]:
    """``"127.0.0.1:8001"`` or ``"8001"`` -> (host, port); the host defaults to 127.0.0.1."""
    host, sep, port = text.rpartition(":") if isinstance(text, str) else ("", "", "")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not isinstance(port, str) or not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535:
        raise BadInput(field, text, ADDRESS_FORM)
    if any(c.isspace() or c in "/?#@" for c in host):
        raise BadInput(field, text, ADDRESS_FORM)
    return host, int(port)


def parse_faults(
    *,
    delay: str | None = None,
    stall: str | None = None,
    slow: str | None = None,
    reset: str | None = None,
    drop: str | None = None,
    truncate: str | None = None,
    bandwidth: str | None = None,
    schedule: str | None = None,
    seed: int = 0,
) -> Faults:
    """Every fault option, checked before the proxy starts (BadInput names the flag)."""
    stall_ns, period_ns = parse_stall(stall)
    slow_p, slow_factor = parse_slow(slow)
    return Faults(
        delay=parse_distribution(delay, "--delay") if delay is not None else None,
        stall_ns=stall_ns,
        period_ns=period_ns,
        slow_p=slow_p,
        slow_factor=slow_factor,
        reset_p=parse_share(reset, "--reset"),
        drop_p=parse_share(drop, "--drop"),
        truncate_p=parse_share(truncate, "--truncate"),
        bandwidth_bps=parse_bandwidth_bps(bandwidth),
        windows_ns=parse_schedule(schedule),
        seed=seed,
    )
