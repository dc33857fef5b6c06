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

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tailwise.arrivals import parse_schedule
from tailwise.distributions import parse_distribution
from tailwise.errors import BadInput
from tailwise.metrics.slo import parse_slo
from tailwise.sim.system import Batching, SystemSpec
from tailwise.units import parse_duration_ns, parse_fraction

_ARRIVAL_FIELDS = {
    "--arrival": "process",
    "--rate": "rate",
    "--duration": "duration",
    "schedule": "duration",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArrivalModel(_Strict):
    process: str = "poisson"  # the CLI's --arrival forms
    rate: str | None = None
    duration: str | None = "60s"
    requests: int | None = Field(default=None, ge=1)
    warmup: str = "0s"
    seed: int = 0

    @model_validator(mode="after")
    def _schedule(self) -> ArrivalModel:
        """Build the schedule once, so a bad process or rate names its scenario field."""
        parse_duration_ns(self.warmup, "scenario.arrival.warmup")
        horizon = None
        if self.duration is not None:
            horizon = parse_duration_ns(self.duration, "scenario.arrival.duration")
        try:
            parse_schedule(
                self.process, self.rate, seed=self.seed, horizon_ns=horizon, max_count=self.requests
            )
        except BadInput as exc:  # the CLI's names (--rate, --arrival) -> the scenario's
            where = _ARRIVAL_FIELDS.get(exc.field)
            if where is None:
                raise
            raise BadInput(f"scenario.arrival.{where}", exc.given, exc.expected) from None
        return self


class BatchingModel(_Strict):
    mode: Literal["static", "dynamic"]
    size: int = Field(ge=1)
    max_wait: str = "0ms"
    base: str = "0ms"
    per_item: str = "0ms"


class StragglerModel(_Strict):
    slow_replicas: list[int] = []
    slow_factor: float = Field(default=1.0, ge=1.0)
    fraction: str = "0%"
    factor: float = Field(default=1.0, ge=1.0)


class FanoutModel(_Strict):
    n: int = Field(ge=1)
    k: int | None = Field(default=None, ge=1)


class HedgeModel(_Strict):
    after: str


class Scenario(_Strict):
    name: str = "scenario"
    arrival: ArrivalModel = ArrivalModel(rate="100/s")
    service: str = "exp:5ms"
    replicas: int = Field(default=1, ge=1)
    servers: int = Field(default=1, ge=1)
    queue_limit: int | None = Field(default=None, ge=0)
    routing: Literal["round_robin", "random", "jsq", "least_outstanding", "power_of_d"] = (
        "round_robin"
    )
    power_d: int = Field(default=2, ge=1)
    batching: BatchingModel | None = None
    stragglers: StragglerModel | None = None
    fanout: FanoutModel | None = None
    hedge: HedgeModel | None = None
    slo: list[str] = []
    attainment: str = "99%"

    @field_validator("service")
    @classmethod
    def _service(cls, v: str) -> str:
        parse_distribution(v, "scenario.service")
        return v

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
    st = sc.stragglers or StragglerModel()
    bad = [r for r in st.slow_replicas if not 0 <= r < sc.replicas]
    if bad:
        raise BadInput("scenario.stragglers.slow_replicas", bad, f"indices in 0..{sc.replicas - 1}")
    if sc.fanout and sc.hedge:
        raise BadInput("scenario.hedge", "with fanout", "either fanout or hedge, not both")
    if sc.fanout and sc.fanout.k is not None and sc.fanout.k > sc.fanout.n:
        raise BadInput("scenario.fanout.k", sc.fanout.k, f"at most n = {sc.fanout.n}")
    batching = None
    if sc.batching:
        b = sc.batching
        batching = Batching(
            b.mode,
            b.size,
            parse_duration_ns(b.max_wait, "scenario.batching.max_wait"),
            parse_duration_ns(b.base, "scenario.batching.base"),
            parse_duration_ns(b.per_item, "scenario.batching.per_item"),
        )
    return SystemSpec(
        service=parse_distribution(sc.service, "scenario.service"),
        replicas=sc.replicas,
        servers=sc.servers,
        queue_limit=sc.queue_limit,
        routing=sc.routing,
        power_d=sc.power_d,
        batching=batching,
        slow_replicas=tuple(st.slow_replicas),
        slow_factor=st.slow_factor,
        straggler_p=parse_fraction(st.fraction, "scenario.stragglers.fraction"),
        straggler_factor=st.factor,
        fanout=sc.fanout.n if sc.fanout else 1,
        fanout_k=sc.fanout.k if sc.fanout else None,
        hedge_after_ns=parse_duration_ns(sc.hedge.after, "scenario.hedge.after")
        if sc.hedge
        else None,
    )


def parse_scenario(data: Any) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in ("scenario", *err["loc"]))
        raise BadInput(where, err.get("input"), err["msg"].lower()) from None


def load_scenario(path: str | Path) -> Scenario:
    """Read a .yaml/.yml or .toml file; BadInput names the file or the field when wrong."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise BadInput("SCENARIO", str(p), f"a readable file ({exc.strerror})") from None
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError, tomllib.TOMLDecodeError: the file's own syntax
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput("SCENARIO", str(p), f"valid YAML or TOML ({first})") from None
    if not isinstance(data, dict):
        raise BadInput("SCENARIO", str(p), "a mapping of scenario fields")
    return parse_scenario(data)
