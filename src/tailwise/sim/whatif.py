"""``tailwise plan capacity``: replicas, knee and tail latency from a (calibrated) model.

Given a scenario (usually ``tailwise calibrate``'s model.yaml), a target rate
and SLOs, with what-if edits applied (replicas, router, batch size, hedging,
or any dotted field):

1. **Knee per replica**: a knee search on the simulator with one replica, as
   ``tailwise knee --sim`` does.
2. **Replicas**: from ceil(rate / knee per replica), step down while the SLOs
   still hold and up until they do. "Hold" is strict: every one of the
   replications (different arrival and service seeds) passes every SLO.
3. **Prediction at the target**: the replications' mean and 95% CI of the
   percentiles that matter (latency, or TTFT and TPOT for an LLM).
4. **Fleet knee**: a knee search with the chosen replica count: the headroom.

Both knee searches are one search with one pass rule: the same resolution,
every trial judged on the same number of requests (:data:`KNEE_REQUESTS`,
whatever the rate or the fleet size: a percentile SLO judged on 13 requests
is inconclusive where one judged on 70 passes, which once made a 2-replica
fleet's knee five times one replica's), and the fleet's search starts at n
times one replica's knee. A router that cannot beat independent replicas
(``random``: each replica sees a Poisson stream at rate / n) cannot give a
fleet more than n times one replica's knee; the fleet's sample is still more
informative (n independent replicas pooled), so where its search passes
above n times one replica's band (the lowest rate one replica failed at),
the plan reports the highest fleet rate tested, and passed, at or below that
bound, and says so in its warnings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tailwise.errors import BadInput
from tailwise.knee import KneeResult, KneeSearch, band
from tailwise.limits import MAX_REPLICAS, within
from tailwise.metrics.slo import parse_slo
from tailwise.plan.schema import Plan
from tailwise.sim.run import sim_trial
from tailwise.sim.scenario import Scenario, parse_scenario, system_spec
from tailwise.sim.study import replications, with_value
from tailwise.sim.trust import Trust, require

KNEE_REQUESTS = 2000  # requests in every knee trial, one replica or a fleet
KNEE_RESOLUTION = 0.02
Progress = Callable[[str], None]


@dataclass(frozen=True)
class WhatIf:
    """Edits to the model before it is asked anything."""

    replicas: int | None = None
    router: str | None = None
    batch_size: int | None = None
    hedge: str | None = None
    sets: tuple[str, ...] = field(default_factory=tuple)

    def edits(self) -> list[tuple[str, str, str]]:
        """(dotted key, value, the flag that asked) in the order they apply."""
        out = []
        if self.router is not None:
            out.append(("routing", self.router, "--router"))
        if self.batch_size is not None:
            out.append(("batching.size", str(self.batch_size), "--batch-size"))
        if self.hedge is not None:
            out.append(("hedge.after", self.hedge, "--hedge"))
        for item in self.sets:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise BadInput("--set", item, "KEY=VALUE with KEY a dotted scenario field")
            out.append((key.strip(), value.strip(), "--set"))
        return out


def apply(sc: Scenario, what: WhatIf) -> Scenario:
    for key, value, flag in what.edits():
        if key == "hedge.after" and sc.hedge is None:  # hedging where the model had none
            data = sc.model_dump(exclude_unset=True) | {"hedge": {"after": value}}
            try:
                sc = parse_scenario(data)
                system_spec(sc)
            except BadInput as exc:
                raise BadInput(flag, value, f"a valid hedge ({exc})") from None
        else:
            sc = with_value(sc, key, value, flag)
    return sc


def at(sc: Scenario, *, rate_rps: float | None = None, replicas: int | None = None) -> Scenario:
    """The scenario at another offered rate and/or replica count."""
    update: dict[str, Any] = {}
    if rate_rps is not None:
        update["arrival"] = sc.arrival.model_copy(
            update={"rate": f"{rate_rps:.6g}/s", "requests": None}
        )
    if replicas is not None:
        update["replicas"] = replicas
    return sc.model_copy(update=update)


def with_slos(sc: Scenario, slos: list[str]) -> Scenario:
    """The SLOs given on the command line, else the model's own."""
    for text in slos:
        parse_slo(text)  # a bad one names --slo, not scenario.slo.N
    if not slos and not sc.slo:
        raise BadInput("--slo", None, "at least one SLO (or an slo: list in the model)")
    return sc.model_copy(update={"slo": slos}) if slos else sc


def knee(
    sc: Scenario,
    start_rps: float,
    resolution: float = KNEE_RESOLUTION,
    min_requests: int = 0,
    requests: int | None = None,
) -> KneeResult:
    """``tailwise knee --sim``'s search: trials of the scenario's window (stretched to
    ``min_requests``), or of exactly ``requests`` requests; the final bracket run once
    more with fresh seeds."""
    trial = sim_trial(sc, min_requests=min_requests, requests=requests)
    search = KneeSearch(trial, resolution=resolution, repeats=1, max_trials=60)
    return search.run(start_rps, start_rps / 4096, start_rps * 4096)


@dataclass
class Check:
    replicas: int
    doc: dict[str, Any]  # the replications document

    @property
    def passed(self) -> bool:
        """Every replication passed as measured: the replications are the uncertainty here
        (their mean and Student-t interval), so one run need not decide on its own."""
        return all(r["passed_as_measured"] for r in self.doc["runs"])

    def row(self, kind: str) -> dict[str, Any]:
        m = self.doc["metrics"]
        runs = self.doc["runs"]
        ok = sum(1 for r in runs if r["passed_as_measured"])
        out: dict[str, Any] = {"replicas": self.replicas, "passed": f"{ok}/{len(runs)}"}
        names = ["ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms"] if kind == "llm" else []
        names = names or ["latency_p50_ms", "latency_p99_ms"]
        for name in [*names, "throughput_rps"]:
            st = m.get(name) or {}
            mean, half = st.get("mean"), st.get("half")
            label = name.removesuffix("_ms").replace("_", " ")
            out[label] = _pm(mean, half)
        return out


def _pm(mean: float | None, half: float | None) -> str | None:
    if mean is None:
        return None
    digits = 3 if abs(mean) < 100 else 1
    return f"{mean:.{digits}f}" + (f" ± {half:.{digits}f}" if half is not None else "")


def _check(sc: Scenario, n: int, reps: int, progress: Progress) -> Check:
    progress(f"simulating {n} replica{'s' if n != 1 else ''}, {reps} replications")
    return Check(n, replications(at(sc, replicas=n), reps))


def replicas_needed(
    sc: Scenario, first_guess: int, reps: int, progress: Progress
) -> tuple[int, list[Check]]:
    """The fewest replicas that pass every replication, searching from a first guess."""
    checks: dict[int, Check] = {}

    def ok(n: int) -> bool:
        if n not in checks:
            checks[n] = _check(sc, n, reps, progress)
        return checks[n].passed

    n = max(1, first_guess)
    if ok(n):
        while n > 1 and ok(n - 1):
            n -= 1
    else:
        while not ok(n):
            if n >= MAX_REPLICAS:
                raise BadInput("--rate", f"{sc.arrival.rate}", "a rate some fleet can hold")
            n = n + 1 if n < 8 else math.ceil(n * 1.25)
        while n > 1 and (n - 1) not in checks and ok(n - 1):
            n -= 1
    return n, [checks[k] for k in sorted(checks)]


def capacity(
    sc: Scenario,
    rate_rps: float,
    what: WhatIf,
    reps: int = 10,
    progress: Progress | None = None,
    accept_poor_fit: bool = False,
) -> Plan:
    """The plan; a calibrated model's answers beyond its fit or range are flagged
    (``outputs["extrapolated"]``, and per row), a POOR one refused unless accepted."""
    tell = progress or (lambda _: None)
    trust = require(sc, accept_poor_fit, "--model", sc.name)
    sc = apply(sc, what)
    kind = "llm" if sc.llm is not None else "http"
    start = _start_rate(sc, rate_rps)
    tell("searching the knee of one replica")
    one = knee(at(sc, replicas=1), start, requests=KNEE_REQUESTS)
    per_replica = one.knee_rps
    if per_replica is None and what.replicas is None and one.trials:
        # No rate held on one replica, down to the lowest tried: the model's own floor
        # (its service time alone) misses an SLO, and more replicas cannot lower it.
        lowest = min(t.rate_rps for t in one.trials)
        raise BadInput(
            "--slo",
            ", ".join(sc.slo),
            f"SLOs one replica can meet at some rate: the model fails them even at "
            f"{lowest:.3g}/s, the lowest rate tried, so no number of replicas can (its "
            "latency floor sits above an SLO)",
        )
    if what.replicas is not None:
        n, checks = what.replicas, [_check(at(sc, rate_rps=rate_rps), what.replicas, reps, tell)]
    else:
        guess = math.ceil(rate_rps / per_replica) if per_replica else 1
        what_n = f"replicas (the rate is {guess:,} knees of one replica)"
        within("--rate", guess, MAX_REPLICAS, what_n, given=f"{rate_rps:g}/s")
        n, checks = replicas_needed(at(sc, rate_rps=rate_rps), guess, reps, tell)
    tell(f"searching the knee of {n} replica{'s' if n != 1 else ''}")
    fleet_start = n * per_replica if per_replica else max(rate_rps, start)
    fleet = knee(at(sc, replicas=n), fleet_start, requests=KNEE_REQUESTS)
    fleet_knee, notes = _fleet_knee(sc, n, one, fleet)
    chosen = next(c for c in checks if c.replicas == n)
    outputs: dict[str, Any] = {
        "knee_per_replica_rps": per_replica,
        "knee_per_replica_band_rps": list(one.band_rps) if one.band_rps else None,
        "replicas": n,
        "holds_slo": chosen.passed,
        "fleet_knee_rps": fleet_knee,
        "fleet_knee_per_replica_rps": fleet_knee / n if fleet_knee else None,
        "headroom": f"{fleet_knee / rate_rps - 1:+.0%}" if fleet_knee else None,
        "at target": [c.row(kind) for c in checks],
    }
    inputs = {
        "model": sc.name,
        "rate_rps": rate_rps,
        "slo": list(sc.slo),
        "replications": reps,
        "window": sc.arrival.duration,
        "what-if": ", ".join(f"{k}={v}" for k, v, _ in what.edits()) or None,
    }
    title = f"replicas for {rate_rps:g}/s"
    if trust is not None:
        notes += _flag(trust, sc, rate_rps, outputs, checks)
    return Plan("capacity", title, inputs, outputs, _assumptions(sc), warnings=notes)


def _flag(
    trust: Trust, sc: Scenario, rate_rps: float, outputs: dict[str, Any], checks: list[Check]
) -> tuple[str, ...]:
    """Mark what a calibrated model answers beyond its fit or its measured range: each
    row (``extrapolated``: fit, rate, workload), and the plan (``outputs["extrapolated"]``,
    whose presence makes the command exit 8) when the answer rests on any of it: the
    fit, the workload, the knee per replica, the chosen count's row or the fleet's knee."""
    workload = trust.workload_beyond(sc)
    for check, row in zip(checks, outputs["at target"], strict=True):
        tags = ["fit"] if trust.poor else []
        tags += ["rate"] if trust.rate_beyond(rate_rps / check.replicas) else []
        tags += ["workload"] if workload else []
        row["extrapolated"] = ", ".join(tags) or None
    n = outputs["replicas"]
    reasons = trust.concerns(sc, rate_rps / n)
    rate = bool(trust.rate_beyond(rate_rps / n))
    for label, value in (
        ("knee per replica", outputs["knee_per_replica_rps"]),
        ("fleet knee per replica", outputs["fleet_knee_per_replica_rps"]),
    ):
        beyond = trust.rate_beyond(value)
        if beyond:
            rate = True
            reasons.append(f"{label} {value:.4g}/s is {beyond}")
    found = (("fit", trust.poor), ("rate", rate), ("workload", bool(workload)))
    tags = [t for t, on in found if on]
    if tags:
        outputs["extrapolated"] = ", ".join(tags)
    advice = [f"to fit well: {a}" for a in trust.advice] if trust.poor else []
    return tuple(f"extrapolated: {r}" for r in reasons) + tuple(advice)


def _fleet_knee(
    sc: Scenario, n: int, one: KneeResult, fleet: KneeResult
) -> tuple[float | None, tuple[str, ...]]:
    """The fleet's knee, held to n x one replica's band where the router cannot beat it."""
    found = fleet.knee_rps
    one_band = band(one.trials)[1]  # on point estimates: the lowest rate that failed
    if one_band is None or found is None or sc.routing != "random":
        return found, ()
    bound = n * one_band[1]
    if found <= bound:
        return found, ()
    # Every tested rate up to `found` passed, so the highest one under the bound did too.
    held = max((t.rate_rps for t in fleet.trials if t.rate_rps <= bound), default=None)
    if held is None:
        return found, (f"fleet knee {found:.4g}/s is above {n} x one replica's band",)
    return held, (
        f"the fleet's search passed up to {found:.4g}/s, above {n} x one replica's band "
        f"({bound:.4g}/s), which random routing cannot beat (a fleet pools n independent "
        f"replicas' samples: its verdicts are surer, not its capacity higher); reported: "
        f"{held:.4g}/s, the highest fleet rate tested and passed within that bound",
    )


def _start_rate(sc: Scenario, rate_rps: float) -> float:
    cal = sc.calibration or {}
    knee_rps = cal.get("measured_knee_rps")
    return float(knee_rps) if isinstance(knee_rps, int | float) and knee_rps > 0 else rate_rps


def _assumptions(sc: Scenario) -> tuple[str, ...]:
    out = [
        "a replica count holds when every replication passes every SLO",
        f"both knees: one search (resolution {KNEE_RESOLUTION:.0%}), every trial "
        f"{KNEE_REQUESTS} requests, one run per rate (the final bracket once more)",
        "percentiles are means over replications with a Student-t 95% CI",
    ]
    fit = (sc.calibration or {}).get("fit") or {}
    if fit:
        quality = "POOR" if fit.get("poor") else "good"
        out.append(f"calibrated model, fit {quality} (RMS log error {fit.get('rms_log_error')})")
    return tuple(out)
