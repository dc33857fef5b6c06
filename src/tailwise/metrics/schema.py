"""summary.json as a typed object: :class:`Summary` and its parts, one schema version.

:func:`tailwise.metrics.summary.summarize` returns a :class:`Summary`; nothing
changes it afterwards (a section a later stage adds, such as the server's
metrics, makes a new one: :meth:`Summary.with_sections`). Its readers (the
verdict helpers, sweeps and knee searches, reports, calibration, the Python API)
read typed attributes: ``s.rates.goodput_rps``, ``s.slos[0].decided``,
``s.latency.p99``.

* :meth:`Summary.to_json` gives the dict that ``summary.json`` holds, key order
  included: ``json.dumps(s.to_json(), indent=2)`` is the file, byte for byte as
  before the type existed (``tests/metrics/test_golden_summary.py``);
* :meth:`Summary.from_json` reads one back. A file from an older run may lack
  keys: each missing value is ``None`` (or empty), as the readers' ``.get()``
  saw it before. ``strict=True`` (what ``summarize`` uses) refuses a key that a
  typed part does not know, so a key added to the summary without its type
  fails every test rather than vanishing.

The typed parts are the ones readers decide on: window, request counts, rates,
the catalog's distributions with their intervals, SLO entries with their
server bounds and ``within``, the generator's health, Little's law, steady
state, the sequential looks and the verdict. Sections whose shape belongs to
the module that makes them (``arrival``, ``errors``, ``tokens``,
``reasoning``, and the sections added by name: ``warmup``, ``workers``,
``sim``, ``server_metrics``, ``gpu``...) are immutable JSON values
(:data:`JsonValue`), in the order they were added.

Key order is canonical (the order ``summarize`` has always written): see
:meth:`Summary.to_json`. One difference from the files of earlier versions is
intended (docs/metrics.md): an SLO entry's ``ci_note`` now always comes before
its ``within``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

from typing_extensions import deprecated

from tailwise.metrics.catalog import CATALOG

SCHEMA = "tailwise.summary/1"

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"
# A section whose shape belongs to the module that makes it (sim, workers, gpu...): a
# JSON object, the summary's own deep copy, read-only by its type.
Section: TypeAlias = "Mapping[str, Any]"
Pair: TypeAlias = "tuple[float | None, float | None]"

CATEGORIES = ("ok", "failed", "timed_out", "cancelled", "not_sent")
LEGACY_LLM = ("ttft_ms", "itl_ms", "tpot_ms")  # LLM distributions with their own slot


class SummaryShapeError(ValueError):
    """A key that a typed part of the summary does not know (``from_json(strict=True)``)."""


# -- JSON helpers ------------------------------------------------------------------------


def thawed(value: object) -> JsonValue:
    """A deep copy of a JSON value as plain dicts and lists: a part hands out none of its own."""
    if isinstance(value, Mapping):
        return {str(k): thawed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thawed(v) for v in value]
    return value  # type: ignore[return-value]


def _section(value: object) -> Section:
    out = thawed(value)
    return out if isinstance(out, dict) else {}


def _opt_section(value: object) -> Section | None:
    return _section(value) if isinstance(value, Mapping) else None


def _obj(doc: object) -> Mapping[str, object]:
    return doc if isinstance(doc, Mapping) else {}


def _pair(value: object) -> Pair | None:
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    lo, hi = value
    return (_num(lo), _num(hi))


def _pair_json(pair: Pair | None) -> JsonValue:
    return None if pair is None else [pair[0], pair[1]]


def _num(value: object) -> float | None:
    """A JSON number as it was (an int stays an int: ``2`` is not written ``2.0``)."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _check(doc: Mapping[str, object], known: tuple[str, ...], where: str, strict: bool) -> None:
    if strict:
        unknown = [k for k in doc if k not in known]
        if unknown:
            raise SummaryShapeError(f"{where}: unknown key(s) {unknown}: add them to its type")


# -- parts -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Window:
    """The measurement window, seconds from the run's start."""

    start_s: float | None = None
    end_s: float | None = None
    duration_s: float | None = None

    def to_json(self) -> JsonObject:
        return {"start_s": self.start_s, "end_s": self.end_s, "duration_s": self.duration_s}

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> Window:
        d = _obj(doc)
        _check(d, ("start_s", "end_s", "duration_s"), "window", strict)
        return cls(_num(d.get("start_s")), _num(d.get("end_s")), _num(d.get("duration_s")))


_COUNT_KEYS = ("scheduled", "sent", *CATEGORIES, "errors", "accounted")


@dataclass(frozen=True, slots=True)
class Counts:
    """Requests by outcome: ``scheduled = ok + failed + timed_out + cancelled + not_sent``."""

    scheduled: int = 0
    sent: int = 0
    ok: int = 0
    failed: int = 0
    timed_out: int = 0
    cancelled: int = 0
    not_sent: int = 0
    errors: Mapping[str, int] = field(default_factory=dict)
    accounted: bool = False

    def _counts_json(self) -> JsonObject:
        return {
            "scheduled": self.scheduled,
            "sent": self.sent,
            "ok": self.ok,
            "failed": self.failed,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "not_sent": self.not_sent,
            "errors": dict(self.errors),
            "accounted": self.accounted,
        }

    def to_json(self) -> JsonObject:
        return self._counts_json()

    @staticmethod
    def _fields(d: Mapping[str, object]) -> dict[str, object]:
        errors = _obj(d.get("errors"))
        return {
            **{k: _int(d.get(k)) or 0 for k in ("scheduled", "sent", *CATEGORIES)},
            "errors": {str(k): n for k, n in errors.items() if _int(n) is not None},
            "accounted": bool(d.get("accounted", False)),
        }

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> Counts:
        d = _obj(doc)
        _check(d, _COUNT_KEYS, "requests.warmup", strict)
        return cls(**cls._fields(d))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Requests(Counts):
    """The window's requests, the warm-up's apart, and whether every row is accounted for."""

    warmup: Counts | None = None
    records_on_disk: int | None = None
    accounting_note: str | None = None  # only when the accounting does not hold

    def to_json(self) -> JsonObject:
        out = self._counts_json()
        out["warmup"] = self.warmup.to_json() if self.warmup is not None else None
        out["records_on_disk"] = self.records_on_disk
        if self.accounting_note is not None:
            out["accounting_note"] = self.accounting_note
        return out

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> Requests:
        d = _obj(doc)
        known = (*_COUNT_KEYS, "warmup", "records_on_disk", "accounting_note")
        _check(d, known, "requests", strict)
        warmup = d.get("warmup")
        return cls(
            **cls._fields(d),  # type: ignore[arg-type]
            warmup=Counts.from_json(warmup, strict) if isinstance(warmup, Mapping) else None,
            records_on_disk=_int(d.get("records_on_disk")),
            accounting_note=_str(d.get("accounting_note")),
        )


_RATE_KEYS = (
    "offered_rps",
    "throughput_rps",
    "goodput_rps",
    "attainment",
    "error_rate",
    "achieved_send_rps",
)


@dataclass(frozen=True, slots=True)
class Rates:
    """Rates over the window and shares of its requests; ``ci`` per rate with intervals."""

    offered_rps: float | None = None
    throughput_rps: float | None = None
    goodput_rps: float | None = None
    attainment: float | None = None
    error_rate: float | None = None
    achieved_send_rps: float | None = None
    ci: Mapping[str, Pair | None] | None = None

    def get(self, key: str) -> float | None:
        """A rate by its summary key (``"goodput_rps"``); None for an unknown key."""
        value = getattr(self, key, None) if key in _RATE_KEYS else None
        return value if isinstance(value, int | float) else None

    def to_json(self) -> JsonObject:
        out: JsonObject = {k: self.get(k) for k in _RATE_KEYS}
        if self.ci is not None:
            out["ci"] = {k: _pair_json(v) for k, v in self.ci.items()}
        return out

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> Rates:
        d = _obj(doc)
        _check(d, (*_RATE_KEYS, "ci"), "rates", strict)
        ci = d.get("ci")
        values = [_num(d.get(k)) for k in _RATE_KEYS]
        return cls(
            values[0], values[1], values[2], values[3], values[4], values[5],
            ci={str(k): _pair(v) for k, v in ci.items()} if isinstance(ci, Mapping) else None,
        )  # fmt: skip


_QUANTILE_KEYS = ("p50", "p90", "p95", "p99", "p999")
_DIST_TAIL = ("max", "mean", "count", "ci", "ci_note")


@dataclass(frozen=True, slots=True)
class Distribution:
    """One metric's distribution in ms: percentiles, max, mean, count and their intervals.

    ``extra`` holds the ``--percentiles`` beyond the usual five (``p75``...), ``ci``
    ``{p50 ... mean: [lo, hi] | None}`` and ``ci_note`` why each missing one is missing
    (both None when the run computed no intervals)."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    max: float | None = None
    mean: float | None = None
    count: int = 0
    extra: Mapping[str, float | None] = field(default_factory=dict)
    ci: Mapping[str, Pair | None] | None = None
    ci_note: Mapping[str, str] | None = None

    def get(self, key: str) -> float | None:
        """A statistic by its key: ``p99``, ``max``, ``mean``, ``p75`` (an extra one)."""
        if key in _QUANTILE_KEYS or key in ("max", "mean"):
            value = getattr(self, key)
            return value if isinstance(value, int | float) else None
        if key == "count":
            return self.count
        return self.extra.get(key)

    def to_json(self) -> JsonObject:
        out: JsonObject = {k: getattr(self, k) for k in _QUANTILE_KEYS}
        out.update(self.extra)
        out.update(max=self.max, mean=self.mean, count=self.count)
        if self.ci is not None:
            out["ci"] = {k: _pair_json(v) for k, v in self.ci.items()}
        if self.ci_note is not None:
            out["ci_note"] = dict(self.ci_note)
        return out

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> Distribution:
        d = _obj(doc)
        extra = {
            k: _num(v)
            for k, v in d.items()
            if k not in _QUANTILE_KEYS and k not in _DIST_TAIL and k.startswith("p")
        }
        _check(d, (*_QUANTILE_KEYS, *_DIST_TAIL, *extra), "a distribution", strict)
        ci, note = d.get("ci"), d.get("ci_note")
        q = [_num(d.get(k)) for k in _QUANTILE_KEYS]
        return cls(
            q[0],
            q[1],
            q[2],
            q[3],
            q[4],
            max=_num(d.get("max")),
            mean=_num(d.get("mean")),
            count=_int(d.get("count")) or 0,
            extra=extra,
            ci={str(k): _pair(v) for k, v in ci.items()} if isinstance(ci, Mapping) else None,
            ci_note={str(k): str(v) for k, v in note.items()}
            if isinstance(note, Mapping)
            else None,
        )


@dataclass(frozen=True, slots=True)
class ServerBound:
    """An SLO judged on the server's lower and upper bound (the client's lag taken out)."""

    lower: float | None = None
    upper: float | None = None
    client_could_flip: bool = False

    def to_json(self) -> JsonObject:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "client_could_flip": self.client_could_flip,
        }

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> ServerBound:
        d = _obj(doc)
        _check(d, ("lower", "upper", "client_could_flip"), "slos[].server_bound", strict)
        return cls(_num(d.get("lower")), _num(d.get("upper")), bool(d.get("client_could_flip")))


_WITHIN_KEYS = (
    "share", "ci", "needed", "n", "threshold_ms", "level_ms", "model_level_ms", "model_rps",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Within:
    """The share of requests within an SLO's threshold, its interval and the share needed."""

    share: float | None = None
    ci: Pair | None = None
    needed: float | None = None
    n: int | None = None
    threshold_ms: float | None = None
    level_ms: float | None = None  # the metric's value at the share needed
    # The FIFO queue model's (tailwise.metrics.fifo), only where a run reads as one server
    # answering in order fed by Poisson sends: the steady state's level at this rate, and
    # the rate at which that level reaches the threshold. Absent from the file elsewhere.
    model_level_ms: float | None = None
    model_rps: float | None = None

    def get(self, key: str) -> JsonValue:
        """A value as summary.json holds it (``ci`` as a list)."""
        return self.to_json().get(key)

    def to_json(self) -> JsonObject:
        doc: JsonObject = {
            "share": self.share,
            "ci": _pair_json(self.ci),
            "needed": self.needed,
            "n": self.n,
            "threshold_ms": self.threshold_ms,
            "level_ms": self.level_ms,
        }
        if self.model_level_ms is not None or self.model_rps is not None:
            doc.update(model_level_ms=self.model_level_ms, model_rps=self.model_rps)
        return doc

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> Within:
        d = _obj(doc)
        _check(d, _WITHIN_KEYS, "slos[].within", strict)
        return cls(
            _num(d.get("share")),
            _pair(d.get("ci")),
            _num(d.get("needed")),
            _int(d.get("n")),
            _num(d.get("threshold_ms")),
            _num(d.get("level_ms")),
            _num(d.get("model_level_ms")),
            _num(d.get("model_rps")),
        )


_SLO_KEYS = (
    "spec", "kind", "implicit", "attainment", "target", "value", "unit", "passed", "note",
    "server_bound", "ci", "decided", "ci_note", "within",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SloEntry:
    """One SLO as the run judged it.

    A ``deadline`` has ``attainment`` and ``target``, an ``objective`` ``value`` (ms,
    None when unbounded) and ``unit``, a ``rate`` ``value``; ``passed`` is the point
    judgement, ``decided`` what the interval ``ci`` supports (None when the run
    computed no intervals)."""

    spec: str = ""
    kind: str = ""
    implicit: bool = False  # the default SLO, not asked for
    attainment: float | None = None
    target: float | None = None
    value: float | None = None
    unit: str | None = None
    passed: bool = False
    note: str | None = None
    server_bound: ServerBound | None = None
    ci: Pair | None = None
    decided: str | None = None
    ci_note: str | None = None
    within: Within | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"spec": self.spec, "kind": self.kind}
        if self.implicit:
            out["implicit"] = True
        if self.kind == "deadline":
            out.update(attainment=self.attainment, target=self.target, passed=self.passed)
        elif self.kind == "objective":
            out.update(value=self.value, unit=self.unit, passed=self.passed)
            if self.note is not None:
                out["note"] = self.note
        else:
            out.update(value=self.value, passed=self.passed)
        if self.server_bound is not None:
            out["server_bound"] = self.server_bound.to_json()
        if self.decided is not None:
            out.update(ci=_pair_json(self.ci), decided=self.decided)
        if self.ci_note is not None:
            out["ci_note"] = self.ci_note
        if self.within is not None:
            out["within"] = self.within.to_json()
        return out

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> SloEntry:
        d = _obj(doc)
        _check(d, _SLO_KEYS, "slos[]", strict)
        bound, within = d.get("server_bound"), d.get("within")
        return cls(
            spec=str(d.get("spec", "")),
            kind=str(d.get("kind", "")),
            implicit=bool(d.get("implicit", False)),
            attainment=_num(d.get("attainment")),
            target=_num(d.get("target")),
            value=_num(d.get("value")),
            unit=_str(d.get("unit")),
            passed=bool(d.get("passed", False)),
            note=_str(d.get("note")),
            server_bound=ServerBound.from_json(bound, strict)
            if isinstance(bound, Mapping)
            else None,
            ci=_pair(d.get("ci")),
            decided=_str(d.get("decided")),
            ci_note=_str(d.get("ci_note")),
            within=Within.from_json(within, strict) if isinstance(within, Mapping) else None,
        )


_GENERATOR_HEAD = (
    "max_in_flight",
    "cap_bound",
    "cap_bound_share",
    "send_lag_p99_ms",
    "send_lag_p99_uncapped_ms",
    "recv_lag_measured",
    "recv_lag_p99_ms",
    "recv_lag_max_ms",
    "max_send_lag_ms",
    "over_max_send_lag",
)


@dataclass(frozen=True, slots=True)
class Generator:
    """The client's own error: send and receive lag, the in-flight cap, its CPU and load.

    ``load`` holds what the busiest process said of its CPU and machine
    (``cpu_s``, ``cpu_share``, ``load_avg_1m``, ``cores``...); ``saturated`` and
    ``reason``: the verdict blamed the client."""

    max_in_flight: int | None = None
    cap_bound: int = 0
    cap_bound_share: float | None = None
    send_lag_p99_ms: float | None = None
    send_lag_p99_uncapped_ms: float | None = None
    recv_lag_measured: bool = False
    recv_lag_p99_ms: float | None = None
    recv_lag_max_ms: float | None = None
    max_send_lag_ms: float | None = None
    over_max_send_lag: bool = False
    load: Section = field(default_factory=dict)
    saturated: bool = False
    reason: str = ""

    def to_json(self) -> JsonObject:
        out: JsonObject = {k: getattr(self, k) for k in _GENERATOR_HEAD}
        out.update(thawed(self.load) or {})  # type: ignore[arg-type]
        out.update(saturated=self.saturated, reason=self.reason)
        return out

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> Generator:
        d = _obj(doc)
        load = {k: v for k, v in d.items() if k not in (*_GENERATOR_HEAD, "saturated", "reason")}
        return cls(
            max_in_flight=_int(d.get("max_in_flight")),
            cap_bound=_int(d.get("cap_bound")) or 0,
            cap_bound_share=_num(d.get("cap_bound_share")),
            send_lag_p99_ms=_num(d.get("send_lag_p99_ms")),
            send_lag_p99_uncapped_ms=_num(d.get("send_lag_p99_uncapped_ms")),
            recv_lag_measured=bool(d.get("recv_lag_measured", False)),
            recv_lag_p99_ms=_num(d.get("recv_lag_p99_ms")),
            recv_lag_max_ms=_num(d.get("recv_lag_max_ms")),
            max_send_lag_ms=_num(d.get("max_send_lag_ms")),
            over_max_send_lag=bool(d.get("over_max_send_lag", False)),
            load=_section(load),
            saturated=bool(d.get("saturated", False)),
            reason=str(d.get("reason") or ""),
        )


_LITTLE_KEYS = ("l_measured", "lambda_w", "rel_gap", "lambda_rps", "w_ms")


@dataclass(frozen=True, slots=True)
class LittlesLaw:
    """L measured (time-averaged in flight) against lambda x W over the window."""

    l_measured: float | None = None
    lambda_w: float | None = None
    rel_gap: float | None = None
    lambda_rps: float | None = None
    w_ms: float | None = None

    def to_json(self) -> JsonObject:
        return {k: getattr(self, k) for k in _LITTLE_KEYS}

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> LittlesLaw:
        d = _obj(doc)
        _check(d, _LITTLE_KEYS, "littles_law", strict)
        return cls(*(_num(d.get(k)) for k in _LITTLE_KEYS))


@dataclass(frozen=True, slots=True)
class SteadyState:
    """MSER-5 on the window's ok latencies."""

    steady: bool = False
    truncate_at: int | None = None
    reason: str = ""

    def to_json(self) -> JsonObject:
        return {"steady": self.steady, "truncate_at": self.truncate_at, "reason": self.reason}

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> SteadyState:
        d = _obj(doc)
        _check(d, ("steady", "truncate_at", "reason"), "steady_state", strict)
        return cls(
            bool(d.get("steady", False)), _int(d.get("truncate_at")), str(d.get("reason") or "")
        )


_SEQUENTIAL_KEYS = (
    "looks_planned",
    "looks_taken",
    "per_look_confidence",
    "overall_confidence",
    "settled",
    "decided",
    "reached_cap",
)


@dataclass(frozen=True, slots=True)
class Sequential:
    """How a ``--duration auto`` run looked at its sample and why it ended."""

    looks_planned: int | None = None
    looks_taken: int | None = None
    per_look_confidence: tuple[float, ...] = ()
    overall_confidence: float | None = None
    settled: str | None = None  # what settled it ("pass: ..."), None when nothing did
    decided: Mapping[str, str] | None = None  # per SLO spec, the deciding look's decision
    reached_cap: bool = False

    def to_json(self) -> JsonObject:
        return {
            "looks_planned": self.looks_planned,
            "looks_taken": self.looks_taken,
            "per_look_confidence": list(self.per_look_confidence),
            "overall_confidence": self.overall_confidence,
            "settled": self.settled,
            "decided": dict(self.decided) if self.decided is not None else None,
            "reached_cap": self.reached_cap,
        }

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> Sequential:
        d = _obj(doc)
        _check(d, _SEQUENTIAL_KEYS, "sequential", strict)
        per_look = d.get("per_look_confidence")
        decided = d.get("decided")
        return cls(
            looks_planned=_int(d.get("looks_planned")),
            looks_taken=_int(d.get("looks_taken")),
            per_look_confidence=tuple(
                x
                for x in (per_look if isinstance(per_look, list | tuple) else ())
                if _num(x) is not None
            ),
            overall_confidence=_num(d.get("overall_confidence")),
            settled=_str(d.get("settled")),
            decided={str(k): str(v) for k, v in decided.items()}
            if isinstance(decided, Mapping)
            else None,
            reached_cap=bool(d.get("reached_cap", False)),
        )


# -- the summary -------------------------------------------------------------------------


def _base_keys() -> tuple[str, ...]:
    return tuple(m.summary_key for m in CATALOG if not m.llm_only)


def _later_llm_keys() -> tuple[str, ...]:
    """LLM distributions added after the first three: written after ``generator``."""
    return tuple(m.summary_key for m in CATALOG if m.llm_only and m.summary_key not in LEGACY_LLM)


_TOP_KEYS = (
    "schema", "tool_version", "source", "target", "mode", "arrival", "window", "requests",
    "errors", "rates", "tokens", "littles_law", "slos", "verdict", "verdict_reason",
    "verdict_cause", "verdict_hint", "interrupted", "stopped_early", "generator", "reasoning",
    "percentiles", "concurrency", "note", "confidence", "decided", "steady_state", "sequential",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Summary:
    """A run's summary: what summary.json holds, typed (see the module docstring).

    ``distributions`` maps each catalog metric's summary key (``latency_ms``,
    ``ttft_ms``...) to its distribution; a non-LLM run holds the first three LLM keys
    as None. ``sections`` holds the sections added by name after the typed ones, in
    their order (``warmup``, ``workers``, ``sim``, ``server_metrics``, ``gpu``...).

    ``summary["rates"]`` still reads the JSON form (the Python API's first form,
    ``result.summary["latency_ms"]["p99"]``); code reads the typed attributes."""

    source: str = ""
    target: str | tuple[str, ...] = ""
    mode: str = ""
    arrival: Section = field(default_factory=dict)
    window: Window = field(default_factory=Window)
    requests: Requests = field(default_factory=Requests)
    errors: tuple[Section, ...] = ()
    rates: Rates = field(default_factory=Rates)
    distributions: Mapping[str, Distribution | None] = field(default_factory=dict)
    tokens: Section | None = None
    littles_law: LittlesLaw | None = None
    slos: tuple[SloEntry, ...] = ()
    verdict: str | None = None
    verdict_reason: str | None = None
    verdict_cause: str | None = None
    verdict_hint: str | None = None
    interrupted: bool = False
    stopped_early: str | None = None
    generator: Generator | None = None
    llm: bool = False  # the run parsed token streams: ``reasoning`` and the LLM distributions
    reasoning: Section | None = None
    percentiles: tuple[float, ...] | None = None  # --percentiles, when given
    concurrency: int | None = None  # closed loop: its users
    note: str | None = None  # closed loop: what its latencies hide
    confidence: float | None = None  # None: the run computed no intervals
    decided: str | None = None
    steady_state: SteadyState | None = None
    sequential: Sequential | None = None
    sections: Section = field(default_factory=dict)
    schema: str = SCHEMA
    tool_version: str = ""

    # -- typed reading ---------------------------------------------------------------

    def distribution(self, key: str) -> Distribution | None:
        """A catalog metric's distribution by its summary key (``"ttft_ms"``), if any."""
        return self.distributions.get(key)

    @property
    def latency(self) -> Distribution | None:
        return self.distributions.get("latency_ms")

    @property
    def closed(self) -> bool:
        return self.mode == "closed"

    def section(self, name: str) -> Section:
        """A section added by name (``"workers"``, ``"sim"``, ``"gpu"``), {} if absent."""
        value = self.sections.get(name)
        return value if isinstance(value, Mapping) else {}

    def with_sections(self, **sections: object) -> Summary:
        """A new summary with these sections set (a known key in place, a new one last):
        what a stage that ends after the summary (the server's metrics, the GPU's
        energy, a preflight) adds, without changing this one."""
        merged = dict(self.sections)
        merged.update({k: thawed(v) for k, v in sections.items()})
        return replace(self, sections=merged)

    def with_tokens(self, **entries: object) -> Summary:
        """A new summary whose ``tokens`` section has these entries too (appended)."""
        if self.tokens is None:
            return self
        tokens = {**self.tokens, **{k: thawed(v) for k, v in entries.items()}}
        return replace(self, tokens=tokens)

    # -- JSON ------------------------------------------------------------------------

    def to_json(self) -> JsonObject:
        """summary.json's dict, keys in the order ``summarize`` has always written them."""
        out: JsonObject = {
            "schema": self.schema,
            "tool_version": self.tool_version,
            "source": self.source,
            "target": list(self.target) if isinstance(self.target, tuple) else self.target,
            "mode": self.mode,
            "arrival": thawed(self.arrival),
            "window": self.window.to_json(),
            "requests": self.requests.to_json(),
            "errors": [thawed(e) for e in self.errors],
            "rates": self.rates.to_json(),
        }
        for key in _base_keys():
            if key in self.distributions:
                out[key] = self._dist_json(key)
        for key in LEGACY_LLM:
            out[key] = self._dist_json(key)
        out.update(
            tokens=thawed(self.tokens),
            littles_law=self.littles_law.to_json() if self.littles_law is not None else None,
            slos=[e.to_json() for e in self.slos],
            verdict=self.verdict,
            verdict_reason=self.verdict_reason,
            verdict_cause=self.verdict_cause,
            verdict_hint=self.verdict_hint,
            interrupted=self.interrupted,
            stopped_early=self.stopped_early,
            generator=self.generator.to_json() if self.generator is not None else None,
        )
        for key in _later_llm_keys():
            if key in self.distributions:
                out[key] = self._dist_json(key)
        if self.llm:
            out["reasoning"] = thawed(self.reasoning)
        if self.percentiles is not None:
            out["percentiles"] = list(self.percentiles)
        if self.mode == "closed":
            out.update(concurrency=self.concurrency, note=self.note)
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.decided is not None:
            out["decided"] = self.decided
        if self.steady_state is not None:
            out["steady_state"] = self.steady_state.to_json()
        if self.sequential is not None:
            out["sequential"] = self.sequential.to_json()
        for key, value in self.sections.items():
            out[key] = thawed(value)
        return out

    def _dist_json(self, key: str) -> JsonValue:
        d = self.distributions.get(key)
        return d.to_json() if d is not None else None

    @classmethod
    def from_json(cls, doc: object, strict: bool = False) -> Summary:
        """A summary from its JSON form: a fresh one (``strict``: every key of a typed part
        known) or a file of an older run (a missing key reads as None or empty)."""
        d = _obj(doc)
        dist_keys = {m.summary_key for m in CATALOG}
        target = d.get("target")
        window, requests, rates = d.get("window"), d.get("requests"), d.get("rates")
        little, generator = d.get("littles_law"), d.get("generator")
        steady, sequential = d.get("steady_state"), d.get("sequential")
        slos, errors, percentiles = d.get("slos"), d.get("errors"), d.get("percentiles")
        return cls(
            schema=str(d.get("schema", SCHEMA)),
            tool_version=str(d.get("tool_version") or ""),
            source=str(d.get("source") or ""),
            target=tuple(str(t) for t in target)
            if isinstance(target, list | tuple)
            else str(target or ""),
            mode=str(d.get("mode") or ""),
            arrival=_section(d.get("arrival")),
            window=Window.from_json(window, strict),
            requests=Requests.from_json(requests, strict),
            errors=tuple(_section(e) for e in errors if isinstance(e, Mapping))
            if isinstance(errors, list | tuple)
            else (),
            rates=Rates.from_json(rates, strict),
            distributions=dict(
                {
                    k: Distribution.from_json(v, strict) if isinstance(v, Mapping) else None
                    for k, v in d.items()
                    if k in dist_keys
                }
            ),
            tokens=_opt_section(d.get("tokens")),
            littles_law=LittlesLaw.from_json(little, strict)
            if isinstance(little, Mapping)
            else None,
            slos=tuple(SloEntry.from_json(e, strict) for e in slos if isinstance(e, Mapping))
            if isinstance(slos, list | tuple)
            else (),
            verdict=_str(d.get("verdict")),
            verdict_reason=_str(d.get("verdict_reason")),
            verdict_cause=_str(d.get("verdict_cause")),
            verdict_hint=_str(d.get("verdict_hint")),
            interrupted=bool(d.get("interrupted", False)),
            stopped_early=_str(d.get("stopped_early")),
            generator=Generator.from_json(generator, strict)
            if isinstance(generator, Mapping)
            else None,
            llm="reasoning" in d or d.get("ttft_ms") is not None,
            reasoning=_opt_section(d.get("reasoning")),
            percentiles=tuple(p for p in percentiles if _num(p) is not None)
            if isinstance(percentiles, list | tuple)
            else None,
            concurrency=_int(d.get("concurrency")),
            note=_str(d.get("note")),
            confidence=_num(d.get("confidence")),
            decided=_str(d.get("decided")),
            steady_state=SteadyState.from_json(steady, strict)
            if isinstance(steady, Mapping)
            else None,
            sequential=Sequential.from_json(sequential, strict)
            if isinstance(sequential, Mapping)
            else None,
            sections=_section(
                {k: v for k, v in d.items() if k not in _TOP_KEYS and k not in dist_keys}
            ),
        )

    # -- the JSON form, read as a mapping (the Python API's first form) ---------------
    # Kept for scripts written against ``result.summary["latency_ms"]["p99"]``; code of
    # this package reads the typed attributes (mypy reports any use here: deprecated).

    @deprecated("read the typed attributes (summary.latency.p99), or to_json()", category=None)
    def __getitem__(self, key: str) -> JsonValue:
        return self.to_json()[key]

    @deprecated("read the typed attributes, or to_json()", category=None)
    def get(self, key: str, default: JsonValue = None) -> JsonValue:
        return self.to_json().get(key, default)

    @deprecated("read the typed attributes, or to_json()", category=None)
    def __contains__(self, key: object) -> bool:
        return key in self.to_json()

    @deprecated("read the typed attributes, or to_json()", category=None)
    def keys(self) -> Iterator[str]:
        return iter(self.to_json())
