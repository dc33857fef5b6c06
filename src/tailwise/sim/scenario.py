"""Scenario files (YAML or TOML) for ``tailwise simulate``, validated with pydantic.

Strings use the CLI's forms (``800/s``, ``60s``, ``exp:5ms``, ``2%``); every
error names the field, as ``scenario.batching.size: ...``. YAML is read with
``yaml.safe_load`` only.

```yaml
name: static batching (seed 000, 3.4.2)
arrival: {process: poisson, rate: 800/s, duration: 60s, warmup: 5s, seed: 7}
service: exp:5ms              # per request, when not batching
replicas: 1
servers: 1                    # per replica
routing: round_robin          # random | jsq | least_outstanding | power_of_d
batching: {mode: static, size: 16, base: 4ms, per_item: 0.9ms}
slo: ["latency<=200ms"]
```
"""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tailwise import arrivals
from tailwise.arrivals import check_planned, parse_schedule
from tailwise.distributions import Distribution, parse_distribution
from tailwise.errors import BadInput, excerpt
from tailwise.files import read_bounded_text, safe_yaml, yaml_line
from tailwise.limits import (
    MAX_FANOUT,
    MAX_PLANNED_REQUESTS,
    MAX_REPLICAS,
    MAX_SERVERS,
    MAX_SLOW_FACTOR,
    MAX_TIMED_EVENTS,
    within,
)
from tailwise.metrics.slo import parse_slo
from tailwise.sim.llm import LlmSpec
from tailwise.sim.llm_scenario import LlmModel, llm_spec
from tailwise.sim.system_spec import Autoscale, Batching, Failures, StageSpec, SystemSpec
from tailwise.units import parse_duration_ns, parse_fraction

_ARRIVAL_FIELDS = {
    "--arrival": "process",
    "--rate": "rate",
    "--duration": "duration",
    "schedule": "duration",
}


def _distribution(text: str) -> str:
    """Check a distribution form; a ValueError lets pydantic name the field's full path."""
    try:
        parse_distribution(text, "distribution")
    except BadInput as exc:
        raise ValueError(exc.expected) from None
    return text


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArrivalModel(_Strict):
    process: str = "poisson"  # the CLI's --arrival forms
    rate: str | None = None
    duration: str | None = "60s"
    requests: int | None = Field(default=None, ge=1)
    warmup: str = "auto"  # MSER-5's transient (tailwise.metrics.steady), or a duration
    seed: int = Field(default=0, ge=0, lt=2**64)

    def window(self) -> str | None:
        """The duration to use: a stages or trace schedule brings its own length, and a
        count (``requests``) without a duration given bounds the run alone (the 60 s
        default would cut it short); with both, whichever ends first ends the run."""
        kind = arrivals.find(self.process)
        own_length = (kind is not None and kind.own_span) or self.requests is not None
        if own_length and "duration" not in self.model_fields_set:
            return None
        return self.duration

    @model_validator(mode="after")
    def _schedule(self) -> ArrivalModel:
        """Build the schedule once, so a bad process or rate names its scenario field."""
        if self.warmup != "auto":
            parse_duration_ns(self.warmup, "scenario.arrival.warmup")
        horizon = None
        if self.window() is not None:
            horizon = parse_duration_ns(self.duration or "", "scenario.arrival.duration")
        try:
            schedule = parse_schedule(
                self.process, self.rate, seed=self.seed, horizon_ns=horizon, max_count=self.requests
            )
            check_planned(schedule)
        except BadInput as exc:  # the CLI's names (--rate, --arrival) -> the scenario's
            where = _ARRIVAL_FIELDS.get(exc.field)
            if where is None:
                raise
            raise BadInput(f"scenario.arrival.{where}", exc.given, exc.expected) from None
        return self


class BatchingModel(_Strict):
    mode: Literal["static", "dynamic"]
    size: int = Field(ge=1, le=MAX_PLANNED_REQUESTS)
    max_wait: str = "0ms"
    base: str = "0ms"
    per_item: str = "0ms"


class StragglerModel(_Strict):
    slow_replicas: list[int] = []
    slow_factor: float = Field(default=1.0, ge=1.0, le=MAX_SLOW_FACTOR)
    fraction: str = "0%"
    factor: float = Field(default=1.0, ge=1.0, le=MAX_SLOW_FACTOR)


# What a decided request does with its other legs (system_spec.CANCEL_MODES). The
# default is the common server: a queued leg is dropped, one in service runs to its end.
CancelMode = Literal["instant", "queued_only", "none"]


class FanoutModel(_Strict):
    n: int = Field(ge=1, le=MAX_FANOUT)
    k: int | None = Field(default=None, ge=1)
    cancel: CancelMode = "queued_only"


class HedgeModel(_Strict):
    after: str  # a delay (15ms) or a quantile of recent answers (p95)
    cancel: CancelMode = "queued_only"


class FailuresModel(_Strict):
    mtbf: str  # a distribution: exp:10m is the memoryless classic
    mttr: str
    in_flight: Literal["fail", "retry"] = "fail"
    max_retries: int = Field(default=2, ge=0, le=100)

    @field_validator("mtbf", "mttr")
    @classmethod
    def _law(cls, v: str) -> str:
        return _distribution(v)


class AutoscaleModel(_Strict):
    metric: Literal["concurrency", "queue", "p99"] = "concurrency"
    target: float | str  # legs per replica (concurrency, queue) or a duration (p99)
    min: int = Field(default=1, ge=0)
    max: int = Field(ge=1, le=MAX_REPLICAS)
    interval: str = "15s"  # the Kubernetes HPA's sync period
    cold_start: str = "30s"
    tolerance: str = "10%"
    stabilization: str = "60s"


class _StageFields(_Strict):
    """What one tier of replicas is: shared by a single-stage scenario and each stage."""

    service: str = "exp:5ms"
    replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)  # 0: scale from zero (autoscale.min 0)
    servers: int = Field(default=1, ge=1, le=MAX_SERVERS)
    queue_limit: int | None = Field(default=None, ge=0)
    routing: Literal["round_robin", "random", "jsq", "least_outstanding", "power_of_d"] = (
        "round_robin"
    )
    power_d: int = Field(default=2, ge=1, le=MAX_REPLICAS)
    batching: BatchingModel | None = None
    stragglers: StragglerModel | None = None
    failures: FailuresModel | None = None
    autoscale: AutoscaleModel | None = None

    @field_validator("service")
    @classmethod
    def _service(cls, v: str) -> str:
        return _distribution(v)


class StageModel(_StageFields):
    name: str = "stage"


_STAGE_FIELDS = frozenset(_StageFields.model_fields)


class Scenario(_StageFields):
    name: str = "scenario"
    arrival: ArrivalModel = ArrivalModel(rate="100/s")
    fanout: FanoutModel | None = None
    hedge: HedgeModel | None = None
    stages: list[StageModel] | None = Field(default=None, min_length=1)
    llm: LlmModel | None = None
    # Time outside the servers (network, HTTP framework, event-loop wake-ups): it adds
    # to every answer's latency but occupies no server. `tailwise calibrate` fits it.
    delay: str | None = None
    slo: list[str] = []
    attainment: str = "99%"
    # Where a calibrated model came from and how well it fits; never read by the model.
    calibration: dict[str, Any] | None = None

    @field_validator("delay")
    @classmethod
    def _delay(cls, v: str | None) -> str | None:
        return None if v is None else _distribution(v)

    @field_validator("slo")
    @classmethod
    def _slos(cls, v: list[str]) -> list[str]:
        for i, text in enumerate(v):
            try:
                parse_slo(text)
            except BadInput as exc:
                raise BadInput(f"scenario.slo.{i}", exc.given, exc.expected) from None
        return v


def system_spec(sc: Scenario) -> SystemSpec:
    """The simulator's model of a validated scenario (units parsed, cross-checks done)."""
    if sc.fanout and sc.hedge:
        raise BadInput("scenario.hedge", "with fanout", "either fanout or hedge, not both")
    if sc.fanout and sc.fanout.k is not None and sc.fanout.k > sc.fanout.n:
        raise BadInput("scenario.fanout.k", sc.fanout.k, f"at most n = {sc.fanout.n}")
    stages: tuple[StageSpec, ...] = ()
    if sc.stages:
        both = sorted(_STAGE_FIELDS & sc.model_fields_set)
        if both:
            raise BadInput(
                f"scenario.{both[0]}",
                getattr(sc, both[0]),
                "no top-level value beside stages (set it inside each stage)",
            )
        if sc.fanout or sc.hedge:
            where = "fanout" if sc.fanout else "hedge"
            raise BadInput(f"scenario.{where}", "with stages", "a single-stage scenario")
        stages = tuple(
            stage_spec(st, f"scenario.stages.{i}", st.name) for i, st in enumerate(sc.stages)
        )
    one = stage_spec(sc, "scenario", "server")
    horizon_ns = _horizon_ns(sc.arrival)
    for where, st in [
        ("scenario", one),
        *((f"scenario.stages.{i}", s) for i, s in enumerate(stages)),
    ]:
        _check_timed_events(st, where, horizon_ns)
    hedge = hedge_delay(sc.hedge.after, one.service) if sc.hedge else None
    redundancy = sc.fanout or sc.hedge
    return SystemSpec(
        service=one.service,
        replicas=one.replicas,
        servers=one.servers,
        queue_limit=one.queue_limit,
        routing=one.routing,
        power_d=one.power_d,
        batching=one.batching,
        slow_replicas=one.slow_replicas,
        slow_factor=one.slow_factor,
        straggler_p=one.straggler_p,
        straggler_factor=one.straggler_factor,
        fanout=sc.fanout.n if sc.fanout else 1,
        fanout_k=sc.fanout.k if sc.fanout else None,
        hedge_after_ns=hedge[0] if hedge else None,
        hedge_quantile=hedge[1] if hedge else None,
        cancel=redundancy.cancel if redundancy is not None else "instant",
        failures=one.failures,
        autoscale=one.autoscale,
        stages=stages,
    )


def _horizon_ns(arrival: ArrivalModel) -> int:
    """How long the arrivals last: the window, a stages profile's span, a trace's end."""
    window = arrival.window()
    if window is not None:
        return parse_duration_ns(window, "scenario.arrival.duration")
    schedule = parse_schedule(
        arrival.process,
        arrival.rate,
        seed=arrival.seed,
        horizon_ns=None,
        max_count=arrival.requests,
    )
    if schedule.trace_ns is not None:
        return schedule.trace_ns[-1]
    if schedule.horizon_ns is not None:
        return schedule.horizon_ns
    rate = schedule.rate_rps  # a count at a steady rate: its mean span
    if rate is not None and rate > 0 and arrival.requests:
        return round(arrival.requests / rate * 1e9)
    return 0


def _check_timed_events(st: StageSpec, where: str, horizon_ns: int) -> None:
    """Breakdowns and autoscaler ticks are sized before the run: ``mtbf: 1ns`` is refused."""
    top = max(st.replicas, st.autoscale.max_replicas if st.autoscale else 0)
    if st.failures is not None:
        cycle_ns = max(st.failures.mtbf.mean_ns + st.failures.mttr.mean_ns, 1.0)
        events = top * horizon_ns / cycle_ns
        given = f"mean {cycle_ns:.0f}ns per failure and repair"
        what = "expected failures over the run (replicas x duration / (mtbf + mttr))"
        within(f"{where}.failures.mtbf", events, MAX_TIMED_EVENTS, what, given)
    if st.autoscale is not None:
        ticks = horizon_ns / st.autoscale.interval_ns
        given = f"{st.autoscale.interval_ns}ns"
        what = "autoscaler ticks over the run (duration / interval)"
        within(f"{where}.autoscale.interval", ticks, MAX_TIMED_EVENTS, what, given)


# What an llm: scenario may set beside the llm section (the engine replaces the rest).
_LLM_COMPANIONS = frozenset(
    {"name", "arrival", "slo", "attainment", "replicas", "routing", "llm", "delay", "calibration"}
)


def llm_system(sc: Scenario) -> LlmSpec:
    """The LLM engines of an ``llm:`` scenario; other serving fields do not apply."""
    assert sc.llm is not None
    clash = sorted(sc.model_fields_set - _LLM_COMPANIONS)
    if clash:
        value = getattr(sc, clash[0])
        raise BadInput(
            f"scenario.{clash[0]}",
            value if isinstance(value, str | int | float) else "a section",
            "nothing beside llm but replicas and routing (the engine's step law is the service)",
        )
    # For engines, "the shortest queue" is the fewest outstanding sequences.
    routing = "least_outstanding" if sc.routing == "jsq" else sc.routing
    return llm_spec(sc.llm, sc.replicas, routing)


_QUANTILE_RE = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")


def hedge_delay(after: str, service: Distribution) -> tuple[int, float | None]:
    """(first delay ns, quantile or None): ``15ms`` is fixed; ``p95`` starts at the
    service law's 95th percentile and then follows the last answers."""
    m = _QUANTILE_RE.match(after.strip())
    if m is None:
        return parse_duration_ns(after, "scenario.hedge.after"), None
    q = float(m.group(1)) / 100
    if not 0 < q < 1:
        raise BadInput("scenario.hedge.after", after, "a delay such as 15ms, or p50..p99.9")
    draws = service.sample(np.random.default_rng(0), 100_000)  # a fixed estimate, no run rng
    return int(np.quantile(draws, q)), q


def stage_spec(st: _StageFields, where: str, name: str) -> StageSpec:
    """One tier's model; ``where`` prefixes the field names in errors."""
    strag = st.stragglers or StragglerModel()
    auto = autoscale_spec(st.autoscale, f"{where}.autoscale") if st.autoscale else None
    if st.replicas == 0 and (auto is None or auto.min_replicas > 0):
        raise BadInput(f"{where}.replicas", 0, "at least 1 (0 needs autoscale.min 0)")
    top = max(st.replicas, auto.max_replicas if auto else 0)
    bad = [r for r in strag.slow_replicas if not 0 <= r < top]
    if bad:
        raise BadInput(f"{where}.stragglers.slow_replicas", bad, f"indices in 0..{top - 1}")
    batching = None
    if st.batching:
        b = st.batching
        batching = Batching(
            b.mode,
            b.size,
            parse_duration_ns(b.max_wait, f"{where}.batching.max_wait"),
            parse_duration_ns(b.base, f"{where}.batching.base"),
            parse_duration_ns(b.per_item, f"{where}.batching.per_item"),
        )
    failures = None
    if st.failures:
        f = st.failures
        failures = Failures(
            parse_distribution(f.mtbf, f"{where}.failures.mtbf"),
            parse_distribution(f.mttr, f"{where}.failures.mttr"),
            f.in_flight == "retry",
            f.max_retries,
        )
        if failures.mtbf.mean_ns <= 0:
            raise BadInput(f"{where}.failures.mtbf", f.mtbf, "a positive mean time")
    return StageSpec(
        service=parse_distribution(st.service, f"{where}.service"),
        name=name,
        replicas=st.replicas,
        servers=st.servers,
        queue_limit=st.queue_limit,
        routing=st.routing,
        power_d=st.power_d,
        batching=batching,
        slow_replicas=tuple(strag.slow_replicas),
        slow_factor=strag.slow_factor,
        straggler_p=parse_fraction(strag.fraction, f"{where}.stragglers.fraction"),
        straggler_factor=strag.factor,
        failures=failures,
        autoscale=auto,
    )


def autoscale_spec(a: AutoscaleModel, where: str) -> Autoscale:
    if a.min > a.max:
        raise BadInput(f"{where}.min", a.min, f"at most max = {a.max}")
    if a.metric == "p99":
        target = float(parse_duration_ns(str(a.target), f"{where}.target", allow_zero=False))
    else:
        try:
            target = float(a.target)
        except ValueError:
            target = -1.0
        if not target > 0:
            raise BadInput(f"{where}.target", a.target, f"a positive number of {a.metric} legs")
    return Autoscale(
        a.metric,
        target,
        a.min,
        a.max,
        parse_duration_ns(a.interval, f"{where}.interval", allow_zero=False),
        parse_duration_ns(a.cold_start, f"{where}.cold_start"),
        parse_fraction(a.tolerance, f"{where}.tolerance"),
        parse_duration_ns(a.stabilization, f"{where}.stabilization"),
    )


def _field_names(model: Any, seen: set[Any] | None = None) -> set[str]:
    """Every field name of a pydantic model and the models inside it (for did-you-mean)."""
    seen = set() if seen is None else seen
    if model in seen:
        return set()
    seen.add(model)
    names: set[str] = set()
    for name, info in model.model_fields.items():
        names.add(name)
        stack = [info.annotation]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                names |= _field_names(t, seen)
            stack.extend(getattr(t, "__args__", ()))
    return names


def _unknown_field(key: str) -> str:
    """'unknown field' with the nearest real field names, when one is close."""
    close = difflib.get_close_matches(key, sorted(_field_names(Scenario)), n=2, cutoff=0.7)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"a known field (no such field{hint})"


class ScenarioError(BadInput):
    """A scenario field out of shape, with where it is (``loc``) for the file's line."""

    def __init__(self, field: str, given: object, expected: str, loc: tuple[object, ...]):
        super().__init__(field, given, expected)
        self.loc = loc


def parse_scenario(data: Any) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in ("scenario", *loc))
        msg = err["msg"].removeprefix("Value error, ")
        expected = msg[:1].lower() + msg[1:]
        if err["type"] == "extra_forbidden" and loc:
            expected = _unknown_field(str(loc[-1]))
        raise ScenarioError(where, err.get("input"), expected, loc) from None


def load_scenario(path: str | Path) -> Scenario:
    """Read a .yaml/.yml or .toml file; BadInput names the file or the field when wrong."""
    p = Path(path)
    text = read_bounded_text(p, "SCENARIO")
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else safe_yaml(text, "SCENARIO", str(p))
    except BadInput:
        raise
    except Exception as exc:  # yaml.YAMLError, tomllib.TOMLDecodeError: the file's own syntax
        first = excerpt(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
        mark = getattr(exc, "problem_mark", None)  # YAML says where (TOML's text does)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise BadInput("SCENARIO", str(p), f"valid YAML or TOML ({first}{at})") from None
    if not isinstance(data, dict):
        raise BadInput("SCENARIO", str(p), "a mapping of scenario fields")
    try:
        return parse_scenario(_files_beside(data, p.parent))
    except ScenarioError as exc:
        line = yaml_line(text, exc.loc) if p.suffix != ".toml" else None
        if line is None:
            raise
        raise BadInput(f"{exc.field} ({p.name} line {line})", exc.given, exc.expected) from None


def _files_beside(data: dict[str, Any], home: Path) -> dict[str, Any]:
    """``empirical:<relative path>`` means beside the scenario file when a file is there
    (a calibrated model travels with its sample file); else as given, from the cwd."""

    def fix(text: Any) -> Any:
        if not isinstance(text, str) or not text.startswith("empirical:"):
            return text
        rel = Path(text.removeprefix("empirical:").strip())
        there = home / rel
        return f"empirical:{there}" if not rel.is_absolute() and there.exists() else text

    out = dict(data)
    for key in ("service", "delay"):
        if key in out:
            out[key] = fix(out[key])
    if isinstance(out.get("stages"), list):
        out["stages"] = [
            {**st, "service": fix(st.get("service"))}
            if isinstance(st, dict) and "service" in st
            else st
            for st in out["stages"]
        ]
    return out
