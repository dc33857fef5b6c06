"""Service-level objectives: parsing the CLI's ``--slo`` strings and judging records.

Three kinds:

* **deadline** (per request): ``latency<=200ms`` or ``latency<=200ms@99.9%``.
  A request is *good* only if it succeeded and meets every deadline; goodput
  counts good requests. The SLO passes when the share of good requests among
  all scheduled in the window (its attainment) reaches the target (default 99%).
* **objective** (a statistic of the window): ``p99(latency)<=200ms``,
  ``p99.9(ttft)<=1s``, ``mean(service)<=20ms``, ``max(latency)<=2s``.
  Requests that failed, timed out or were never sent count as infinitely slow,
  so they can only push the statistic up: errors are misses.
* **rate**: ``error_rate<=1%``, ``attainment>=99%``, ``goodput>=90/s``,
  ``throughput>=100/s``.

k6's threshold syntax is accepted beside these (:func:`parse_k6`):
``p(99)<500ms``, ``p(95)<=1s``, ``avg<200``, ``med<100``, ``max<2s`` (objectives
on latency, or on another metric named first: ``ttft:p(99)<1s``; a bare number
is milliseconds, as in k6) and ``rate<0.01`` (the error rate). A strict ``<`` is
kept strict: the threshold becomes the next value below it (1 ns less for a
duration), so ``p(99)<500ms`` fails at exactly 500 ms, as in k6.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailwise.errors import BadInput
from tailwise.metrics.catalog import lookup, slo_names
from tailwise.metrics.percentiles import nearest_rank
from tailwise.records import I64, Records
from tailwise.units import parse_duration_ns, parse_fraction, parse_rate_rps

SLO_FORM = (
    "metric<=duration[@attainment%] (e.g. latency<=200ms), "
    "stat(metric)<=duration (e.g. p99(latency)<=200ms, mean(ttft)<=1s), "
    "or error_rate<=1%, attainment>=99%, goodput>=50/s, throughput>=50/s, "
    "or k6's p(99)<500ms, avg<200, rate<0.01; "
    f"metrics: {', '.join(slo_names())}"
)
_DEADLINE = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*<=\s*([^@]+?)\s*(?:@\s*(.+))?$")
_OBJECTIVE = re.compile(r"^\s*(p[0-9.]+|mean|max)\s*\(\s*([a-z][a-z0-9_]*)\s*\)\s*<=\s*(.+?)\s*$")
_RATE = re.compile(r"^\s*(error_rate|attainment|goodput|throughput)\s*(<=|>=)\s*(.+?)\s*$")
_K6 = re.compile(
    r"^\s*(?:([a-z][a-z0-9_]*)\s*:\s*)?(p\(\s*([0-9.]+)\s*\)|avg|med|max)\s*(<=|<)\s*([0-9.]+[a-z]*)\s*$"
)
_K6_RATE = re.compile(r"^\s*rate\s*(<=|<)\s*([0-9.]+%?)\s*$")
K6_FORM = "a k6 threshold such as p(99)<500ms, p(95)<=1s, avg<200 (ms), ttft:p(99)<1s or rate<0.01"
_RATE_KEYS = {
    "error_rate": "error_rate",
    "attainment": "attainment",
    "goodput": "goodput_rps",
    "throughput": "throughput_rps",
}
_RATE_DIRECTION = {"error_rate": "<=", "attainment": ">=", "goodput": ">=", "throughput": ">="}
# Per-request values of a metric: the measured ones by default, or a bound of them
# (tailwise.metrics.client judges every SLO on the server's lower and upper bound too).
Values = Callable[[str], I64]


@dataclass(frozen=True)
class SLO:
    spec: str
    kind: str  # "deadline" | "objective" | "rate"
    metric: str
    threshold: float  # ns for deadline/objective; fraction or rps for rate
    stat: str = ""  # objective: "p99", "mean", "max"; rate: the rate's name
    target: float = 0.99  # deadline: attainment needed to pass
    implicit: bool = False

    @property
    def needs_llm(self) -> bool:
        return self.kind != "rate" and lookup(self.metric).llm_only


# A run given no SLO is still judged, on a sanity check that the summary marks as the
# default ("implicit"): a measured run and a simulated one alike (see or_default).
DEFAULT_SLO = SLO("error_rate<=1%", "rate", "error_rate", 0.01, stat="error_rate", implicit=True)


def or_default(slos: list[SLO]) -> list[SLO]:
    """``slos``, or :data:`DEFAULT_SLO` alone when none was given."""
    return slos or [DEFAULT_SLO]


def parse_k6(spec: str) -> SLO | None:
    """A k6-style threshold as an SLO, or None when ``spec`` is not written in k6's syntax."""
    if m := _K6_RATE.match(spec):
        op, value = m.groups()
        share = parse_fraction(value, "--slo")
        if op == "<":
            if share <= 0.0:
                raise BadInput("--slo", spec, "rate<X with X above 0 (rate<0 can never hold)")
            share = math.nextafter(share, -math.inf)
        return SLO(spec, "rate", "error_rate", share, stat="error_rate")
    if not (m := _K6.match(spec)):
        return None
    metric, stat, q, op, value = m.groups()
    metric = metric or "latency"
    _check_metric(metric, spec)
    if q is not None:
        try:
            qv = float(q)
        except ValueError:
            raise BadInput("--slo", spec, K6_FORM) from None
        if not 0 < qv <= 100:
            raise BadInput("--slo", spec, "a percentile between p(0) and p(100), e.g. p(99)")
        stat = f"p{q}"
    else:
        stat = {"avg": "mean", "med": "p50"}.get(stat, stat)
    bare = re.fullmatch(r"[0-9.]+", value) is not None
    threshold = parse_duration_ns(value + "ms" if bare else value, "--slo")
    if op == "<":
        if threshold <= 0:
            raise BadInput("--slo", spec, "a threshold above 0 (a statistic < 0 can never hold)")
        threshold -= 1
    return SLO(spec, "objective", metric, threshold, stat=stat)


def parse_slo(text: str, default_target: float = 0.99) -> SLO:
    if not isinstance(text, str) or len(text) > 200:
        raise BadInput("--slo", str(text)[:40], SLO_FORM)
    spec = text.strip()
    if (k6 := parse_k6(spec)) is not None:
        return k6
    if m := _RATE.match(spec):
        name, op, value = m.groups()
        if op != _RATE_DIRECTION[name]:
            raise BadInput("--slo", text, f"{name}{_RATE_DIRECTION[name]}<value>")
        is_share = name in ("error_rate", "attainment")
        thr = parse_fraction(value, "--slo") if is_share else parse_rate_rps(value, "--slo")
        return SLO(spec, "rate", name, thr, stat=name)
    if m := _OBJECTIVE.match(spec):
        stat, metric, value = m.groups()
        _check_metric(metric, text)
        if stat.startswith("p"):
            try:
                q = float(stat[1:])
            except ValueError:
                raise BadInput("--slo", text, SLO_FORM) from None
            if not 0 < q <= 100:
                raise BadInput("--slo", text, "a percentile between p0 and p100, e.g. p99")
        return SLO(spec, "objective", metric, parse_duration_ns(value, "--slo"), stat=stat)
    if m := _DEADLINE.match(spec):
        metric, value, target = m.groups()
        _check_metric(metric, text)
        tgt = parse_fraction(target, "--slo") if target else default_target
        return SLO(spec, "deadline", metric, parse_duration_ns(value, "--slo"), target=tgt)
    raise BadInput("--slo", text, SLO_FORM)


def _check_metric(metric: str, text: str) -> None:
    if metric not in slo_names():
        raise BadInput("--slo", text, f"a known metric ({', '.join(slo_names())})")


def measured(r: Records) -> Values:
    """The metrics as the client measured them."""
    return lambda metric: lookup(metric).per_request_ns(r)


def good_mask(r: Records, slos: list[SLO], values: Values | None = None) -> np.ndarray:
    """Requests that succeeded and met every per-request deadline."""
    get = values or measured(r)
    good: np.ndarray = r.error == 0
    for s in slos:
        if s.kind == "deadline":
            v = get(s.metric)
            good &= (v >= 0) & (v <= s.threshold)
    return good


def _miss_as_inf(values: Values, metric: str, rows: np.ndarray) -> np.ndarray:
    v: np.ndarray = values(metric)[rows].astype(np.float64)
    v[v < 0] = math.inf
    return v


def evaluate(
    r: Records,
    slos: list[SLO],
    rates: dict[str, float],
    window: np.ndarray,
    values: Values | None = None,
) -> list[dict[str, Any]]:
    """One ``slos`` entry of summary.json per SLO: spec, kind, value or attainment, passed.

    ``values`` judges on other per-request values than the measured ones (``rates``
    must then be the rates those values give: goodput and attainment depend on them).
    """
    get = values or measured(r)
    n_window = int(window.sum())
    out: list[dict[str, Any]] = []
    for s in slos:
        entry: dict[str, Any] = {"spec": s.spec, "kind": s.kind}
        if s.implicit:
            entry["implicit"] = True
        if s.kind == "deadline":
            good = good_mask(r, [s], get) & window
            att = float(good.sum()) / n_window if n_window else 0.0
            entry.update(attainment=att, target=s.target, passed=n_window > 0 and att >= s.target)
        elif s.kind == "objective":
            value = _statistic(_miss_as_inf(get, s.metric, window), s.stat)
            finite = math.isfinite(value)
            entry.update(
                value=value / 1e6 if finite else None,
                unit="ms",
                passed=finite and value <= s.threshold,
            )
            if not finite:
                entry["note"] = "unbounded: failed or unsent requests reach this statistic"
        else:
            value = rates[_RATE_KEYS[s.stat]]
            ok = value <= s.threshold if s.stat == "error_rate" else value >= s.threshold
            entry.update(value=value, passed=n_window > 0 and ok)
        out.append(entry)
    return out


def _statistic(v: np.ndarray, stat: str) -> float:
    if len(v) == 0:
        return math.inf
    if stat == "mean":
        return float(v.mean())
    if stat == "max":
        return float(v.max())
    return nearest_rank(np.sort(v), float(stat[1:]))
