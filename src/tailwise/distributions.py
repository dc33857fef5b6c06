"""Service-time distributions for the simulator, parsed from short strings.

Forms (every time takes a unit; samples are int64 nanoseconds):

* ``5ms`` or ``const:5ms``: always 5 ms;
* ``exp:5ms``: exponential with mean 5 ms;
* ``lognormal:5ms,0.5``: lognormal with *median* 5 ms and shape sigma 0.5;
* ``gamma:5ms,2``: gamma with mean 5 ms and shape k 2 (k = 1 is exponential);
* ``uniform:2ms-8ms``: uniform between the bounds;
* ``empirical:<run dir or records.jsonl>``: resampled with replacement from the
  service times (``done - sent``) of a run's successful requests;
  ``empirical:<file>.txt`` resamples service times in ms, one per line.

Each has a mean and a squared coefficient of variation (SCV = variance /
mean^2), which Pollaczek-Khinchine and Kingman need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tailwise.errors import BadInput
from tailwise.records import read_jsonl
from tailwise.units import parse_duration_ns

DIST_FORM = (
    "5ms, exp:5ms, lognormal:<median>,<sigma>, gamma:<mean>,<shape>, "
    "uniform:<lo>-<hi> or empirical:<run directory>"
)


@dataclass(frozen=True)
class Distribution:
    kind: str
    mean_ns: float
    a: float = 0.0  # lognormal sigma, gamma shape, uniform low bound (ns)
    b: float = 0.0  # uniform high bound (ns)
    samples_ns: np.ndarray | None = None  # empirical

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws as int64 ns (at least 0)."""
        if self.kind == "const":
            out = np.full(n, self.mean_ns)
        elif self.kind == "exp":
            out = rng.exponential(self.mean_ns, n)
        elif self.kind == "lognormal":
            median = self.mean_ns / math.exp(self.a**2 / 2)
            out = rng.lognormal(math.log(median), self.a, n)
        elif self.kind == "gamma":
            out = rng.gamma(self.a, self.mean_ns / self.a, n)
        elif self.kind == "uniform":
            out = rng.uniform(self.a, self.b, n)
        else:
            assert self.samples_ns is not None
            out = rng.choice(self.samples_ns, n, replace=True)
        result: np.ndarray = np.clip(np.rint(out), 0, _MAX_DRAW_NS).astype(np.int64)
        return result

    @property
    def scv(self) -> float:
        """Squared coefficient of variation: 0 constant, 1 exponential."""
        if self.kind == "const" or self.mean_ns == 0:  # every draw is the mean
            return 0.0
        if self.kind == "exp":
            return 1.0
        if self.kind == "lognormal":
            return math.exp(self.a**2) - 1.0
        if self.kind == "gamma":
            return 1.0 / self.a
        if self.kind == "uniform":
            return ((self.b - self.a) ** 2 / 12.0) / self.mean_ns**2
        assert self.samples_ns is not None
        return float(np.var(self.samples_ns) / np.mean(self.samples_ns) ** 2)


_SHAPES = {"lognormal": (1e-6, 5.0), "gamma": (1e-3, 1e6)}
_MAX_DRAW_NS = 2.0**62  # a draw is clipped below int64's end (146 years), never wrapped


def _positive_float(text: str, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise BadInput(field, text, "a positive number")
    return value


def parse_distribution(text: str, field: str = "service") -> Distribution:
    if not isinstance(text, str) or not text.strip():
        raise BadInput(field, text, DIST_FORM)
    kind, sep, rest = text.strip().partition(":")
    if not sep:
        kind, rest = "const", text.strip()

    def ns(t: str) -> float:
        return float(parse_duration_ns(t.strip(), field))

    if kind in ("const", "constant"):
        return Distribution("const", ns(rest))
    if kind == "exp":
        return Distribution("exp", ns(rest))
    if kind in ("lognormal", "gamma"):
        first, comma, second = rest.partition(",")
        if not comma:
            raise BadInput(field, text, DIST_FORM)
        shape = _positive_float(second, field)
        # Bounded so the mean and the draws stay finite: lognormal sigma 5 already puts
        # the mean 268,000x above the median; gamma shape 0.001 has a CV of 32.
        low, high = _SHAPES[kind]
        if not low <= shape <= high:
            raise BadInput(field, text, f"{kind} shape from {low:g} to {high:g}")
        if kind == "lognormal":  # given the median; keep the mean as the common currency
            return Distribution("lognormal", ns(first) * math.exp(shape**2 / 2), shape)
        return Distribution("gamma", ns(first), shape)
    if kind == "uniform":
        lo, dash, hi = rest.partition("-")
        if not dash or ns(hi) < ns(lo):
            raise BadInput(field, text, "uniform:<lo>-<hi> with lo <= hi")
        return Distribution("uniform", (ns(lo) + ns(hi)) / 2, ns(lo), ns(hi))
    if kind == "empirical":
        return _empirical(rest.strip(), field)
    raise BadInput(field, text, DIST_FORM)


def _empirical(where: str, field: str) -> Distribution:
    path = Path(where)
    if path.is_dir():
        path = path / "records.jsonl"
    if not path.is_file():
        raise BadInput(field, where, "a run directory, records.jsonl or .txt of ms to resample")
    if path.suffix == ".txt":
        return _empirical_text(path, field)
    r = read_jsonl(path)
    # ``done - sent`` of the ok rows, as metrics.derive.service_ns (L1) defines it
    timed = (r.error == 0) & (r.done_ns >= 0) & (r.sent_ns >= 0)
    service = r.done_ns[timed] - r.sent_ns[timed]
    service = service[service >= 0]
    if len(service) == 0:
        raise BadInput(field, where, "a run with at least one successful request")
    return Distribution("empirical", float(service.mean()), samples_ns=service)


def _empirical_text(path: Path, field: str) -> Distribution:
    """Service times in milliseconds, one per line (``tailwise calibrate`` writes these)."""
    try:
        ms = np.loadtxt(path, dtype=np.float64, ndmin=1, comments="#")
    except ValueError:
        ms = np.array([math.nan])
    if len(ms) == 0 or not np.all(np.isfinite(ms)) or np.any(ms < 0):
        raise BadInput(field, str(path), "a file of service times in ms >= 0, one per line")
    samples = np.rint(ms * 1e6).astype(np.int64)
    return Distribution("empirical", float(samples.mean()), samples_ns=samples)
