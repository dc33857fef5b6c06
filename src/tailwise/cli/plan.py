"""Capacity planning: the plan group, its closed-form models and plan capacity."""

from __future__ import annotations

from collections.abc import Mapping

import click

from tailwise.cli.options import emit_plan, json_flag
from tailwise.errors import BadInput


@click.group()
def plan() -> None:
    """Capacity planning from closed forms (docs/plan.md): each model prints a table, or --json."""


@plan.command("little", short_help="Little's law: any two of L, lambda, W give the third.")
@click.option("--concurrency", help="L: mean requests in flight, e.g. 32.")
@click.option("--rate", help="lambda: throughput, e.g. 800/s.")
@click.option("--latency", help="W: mean latency, e.g. 40ms.")
@json_flag
def plan_little(
    concurrency: str | None, rate: str | None, latency: str | None, as_json: bool
) -> None:
    """Little's law L = lambda W: give any two of --concurrency, --rate, --latency."""
    from tailwise import plan as p
    from tailwise.units import parse_duration_ns, parse_rate_rps

    emit_plan(
        p.little(
            concurrency=p.parse_positive(concurrency, "--concurrency") if concurrency else None,
            rate_rps=parse_rate_rps(rate, "--rate") if rate else None,
            latency_s=parse_duration_ns(latency, "--latency", allow_zero=False) / 1e9
            if latency
            else None,
        ),
        as_json,
    )


@plan.command("replicas", short_help="Replicas for a rate: Little's law, a ceiling, headroom, N+k.")
@click.option("--rate", required=True, help="Target (peak) rate, e.g. 12000/s.")
@click.option("--latency", required=True, help="Mean latency at that load, e.g. 40ms.")
@click.option("--per-replica", required=True, help="Requests one replica holds in flight, e.g. 32.")
@click.option(
    "--max-utilization",
    "--utilization",
    "utilization",
    default="80%",
    show_default=True,
    help="Ceiling: the share of a replica's capacity used at the planned rate.",
)
@click.option("--headroom", default="0%", show_default=True, help="Extra traffic to absorb.")
@click.option("--spares", default="0", show_default=True, help="Replicas that may fail (N+k).")
@json_flag
def plan_replicas(
    rate: str,
    latency: str,
    per_replica: str,
    utilization: str,
    headroom: str,
    spares: str,
    as_json: bool,
) -> None:
    """Replicas for a target rate by Little's law, with a utilization ceiling, headroom, N+k."""
    from tailwise import plan as p
    from tailwise.limits import MAX_IN_FLIGHT, within
    from tailwise.units import parse_count, parse_duration_ns, parse_fraction, parse_rate_rps

    # An Erlang C over the replica's slots follows: their number is bounded first.
    in_flight = p.parse_positive(per_replica, "--per-replica")
    within("--per-replica", in_flight, MAX_IN_FLIGHT, "requests in flight", given=per_replica)
    emit_plan(
        p.replicas(
            rate_rps=parse_rate_rps(rate, "--rate"),
            latency_s=parse_duration_ns(latency, "--latency", allow_zero=False) / 1e9,
            per_replica=in_flight,
            utilization=parse_fraction(utilization, "--max-utilization"),
            headroom=parse_fraction(headroom, "--headroom"),
            spares=parse_count(spares, "--spares", minimum=0),
        ),
        as_json,
    )


@plan.command(
    "queue", short_help="M/M/1, M/M/c, M/G/1, M/G/c, M/M/c/K: waits, tails, blocking, SLO loads."
)
@click.option("--servers", default="1", show_default=True, help="c: servers (M/M/c).")
@click.option("--service", help="Mean service time per request, e.g. 5ms.")
@click.option("--utilization", help="Load(s) as utilization: 50%,80%,90%.")
@click.option("--rate", help="Load(s) as arrival rates: 100/s,150/s (needs --service).")
@click.option("--cv", help="Service-time coefficient of variation: M/G/1, M/G/c (approx.).")
@click.option("--slo", help="Latency target to find the highest load for: p99<=50ms, mean<=20ms.")
@click.option(
    "--max-in-system", help="K: requests held (waiting + in service); more are turned away."
)
@json_flag
def plan_queue(
    servers: str,
    service: str | None,
    utilization: str | None,
    rate: str | None,
    cv: str | None,
    slo: str | None,
    max_in_system: str | None,
    as_json: bool,
) -> None:
    """M/M/1, M/M/c (Erlang C), M/G/1 (Pollaczek-Khinchine), M/G/c (Allen-Cunneen, an
    approximation) or M/M/c/K (exact, with blocking): waits, queues, percentiles."""
    from tailwise import plan as p
    from tailwise.limits import MAX_PLANNED_REQUESTS, MAX_SERVERS
    from tailwise.units import bounded_count, parse_duration_ns, parse_rate_rps

    emit_plan(
        p.queue(
            servers=bounded_count(servers, "--servers", MAX_SERVERS, "servers"),
            service_s=parse_duration_ns(service, "--service", allow_zero=False) / 1e9
            if service
            else None,
            utilizations=(p.parse_offered_loads if max_in_system else p.parse_utilizations)(
                utilization
            )
            if utilization
            else None,
            rates_rps=p.parse_list(rate, "--rate", parse_rate_rps) if rate else None,
            cv=p.parse_positive(cv, "--cv", "a number >= 0, e.g. 0.5", allow_zero=True)
            if cv
            else None,
            slo=p.parse_latency_slo(slo) if slo else None,
            max_in_system=bounded_count(
                max_in_system, "--max-in-system", MAX_PLANNED_REQUESTS, "requests held"
            )
            if max_in_system
            else None,
        ),
        as_json,
    )


@plan.command("amdahl", short_help="Amdahl's law over pipeline stages; a latency budget.")
@click.option("--stage", multiple=True, help="NAME=SHARE or NAME=TIME: model=70%, model=1400ms.")
@click.option("--speedup", multiple=True, help="NAME=FACTOR: model=2 (repeatable; inf allowed).")
@click.option("--budget", multiple=True, help="NAME=TIME: the stage's latency budget.")
@click.option("--total-budget", help="End-to-end latency budget, e.g. 3000ms.")
@json_flag
def plan_amdahl(
    stage: tuple[str, ...],
    speedup: tuple[str, ...],
    budget: tuple[str, ...],
    total_budget: str | None,
    as_json: bool,
) -> None:
    """Amdahl's law over pipeline stages, and a latency budget (budgets vs measured times)."""
    from tailwise import plan as p
    from tailwise.units import parse_duration_ns

    stages, times = p.parse_stages(stage)
    speedups = {n: p.parse_speedup(v) for n, v in p.parse_pairs(speedup, "--speedup")}
    budgets = {
        n: parse_duration_ns(v, "--budget") / 1e9 for n, v in p.parse_pairs(budget, "--budget")
    }
    total = parse_duration_ns(total_budget, "--total-budget") / 1e9 if total_budget else None
    emit_plan(
        p.amdahl(
            stages=stages, times=times, speedups=speedups, budgets=budgets, total_budget_s=total
        ),
        as_json,
    )


@plan.command("fanout", short_help="Fan-out: P(slow) = 1 - q^n; the tail each backend needs.")
@click.option("--fanout", "fanouts", required=True, help="n: calls per request, e.g. 10,40,100.")
@click.option("--backend-fast", help="q: P(one call is fast), e.g. 99% for its p99.")
@click.option("--target", help="Share of requests that must be fast end to end, e.g. 99%.")
@json_flag
def plan_fanout(fanouts: str, backend_fast: str | None, target: str | None, as_json: bool) -> None:
    """Fan-out: P(slow) = 1 - q^n, and the per-backend tail a target needs."""
    from tailwise import plan as p
    from tailwise.units import parse_count, parse_fraction

    emit_plan(
        p.fanout(
            fanouts=p.parse_list(fanouts, "--fanout", parse_count),
            backend_fast=parse_fraction(backend_fast, "--backend-fast") if backend_fast else None,
            target=parse_fraction(target, "--target") if target else None,
        ),
        as_json,
    )


@plan.command("availability", short_help="All-of-M and k-of-M availability; expected healthy.")
@click.option("--up", required=True, help="r: availability of one machine, e.g. 99.9%.")
@click.option("--machines", required=True, help="M: machines, e.g. 10,100,1000.")
@click.option("--need", help="k: machines that must be up (default: all of them).")
@json_flag
def plan_availability(up: str, machines: str, need: str | None, as_json: bool) -> None:
    """Availability of all-of-M (r^M) or k-of-M (binomial) fleets; expected healthy machines."""
    from tailwise import plan as p
    from tailwise.units import parse_count, parse_fraction

    emit_plan(
        p.availability(
            up=parse_fraction(up, "--up"),
            machines=p.parse_list(machines, "--machines", parse_count),
            need=parse_count(need, "--need", minimum=0) if need else None,
        ),
        as_json,
    )


@plan.command("cost", short_help="Cost per request and per token; a fleet's cost per hour.")
@click.option("--dollars-per-hour", required=True, help="D: price of one replica, e.g. 3.")
@click.option("--utilization", default="100%", show_default=True, help="u: share of time busy.")
@click.option("--peak-rate", help="X_max: requests/s one replica completes when always busy.")
@click.option("--per-replica", help="Or X_max = this concurrency / --latency (Little's law).")
@click.option("--latency", help="Mean latency, with --per-replica.")
@click.option("--peak-tokens", help="Tokens/s one replica produces when always busy.")
@click.option("--replicas", help="Fleet size, for the fleet's cost per hour.")
@click.option("--rate", help="Fleet load: its utilization (or, without --replicas, its size).")
@click.option(
    "--joules-per-token",
    help="Measured GPU energy per output token: J, or a run directory (--gpu-metrics).",
)
@click.option(
    "--joules-per-request",
    help="Measured GPU energy per request: J, or a run directory (--gpu-metrics).",
)
@click.option("--dollars-per-kwh", help="Electricity price, for the energy's cost.")
@json_flag
def plan_cost(
    dollars_per_hour: str,
    utilization: str,
    peak_rate: str | None,
    per_replica: str | None,
    latency: str | None,
    peak_tokens: str | None,
    replicas: str | None,
    rate: str | None,
    joules_per_token: str | None,
    joules_per_request: str | None,
    dollars_per_kwh: str | None,
    as_json: bool,
) -> None:
    """Cost per request, per token and per 1M of each; a fleet's cost per hour; with measured
    joules, kWh (and electricity cost) per million tokens or requests."""
    from tailwise import plan as p
    from tailwise.units import parse_count, parse_duration_ns, parse_fraction, parse_rate_rps

    if bool(per_replica) != bool(latency) or (peak_rate and per_replica):
        raise BadInput("--per-replica", per_replica, "--per-replica with --latency, or --peak-rate")
    peak = parse_rate_rps(peak_rate, "--peak-rate") if peak_rate else None
    if per_replica and latency:
        n = p.parse_positive(per_replica, "--per-replica")
        peak = n / (parse_duration_ns(latency, "--latency", allow_zero=False) / 1e9)
    emit_plan(
        p.cost(
            dollars_per_hour=p.parse_positive(dollars_per_hour, "--dollars-per-hour"),
            utilization=parse_fraction(utilization, "--utilization"),
            peak_rps=peak,
            peak_tps=parse_rate_rps(peak_tokens, "--peak-tokens") if peak_tokens else None,
            replicas=parse_count(replicas, "--replicas") if replicas else None,
            rate_rps=parse_rate_rps(rate, "--rate") if rate else None,
            joules_per_token=_joules(joules_per_token, "--joules-per-token", "per_output_token_j"),
            joules_per_request=_joules(joules_per_request, "--joules-per-request", "per_request_j"),
            dollars_per_kwh=p.parse_positive(dollars_per_kwh, "--dollars-per-kwh")
            if dollars_per_kwh
            else None,
        ),
        as_json,
    )


def _joules(given: str | None, field: str, key: str) -> float | None:
    """A number of joules, or a run directory's ``gpu.<key>.value`` (its summary.json)."""
    from pathlib import Path

    from tailwise import plan as p
    from tailwise.metrics.shape import read_summary

    if given is None:
        return None
    path = Path(given)
    if not path.is_dir():
        return p.parse_positive(given, field)
    try:  # only its gpu section is read: the rest of the summary need not be whole
        estimate = read_summary(path / "summary.json", field, checked=False).section("gpu").get(key)
    except BadInput:
        estimate = None
    value = estimate.get("value") if isinstance(estimate, Mapping) else None
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        want = f"joules, or a run directory whose summary.json has gpu.{key} (--gpu-metrics)"
        raise BadInput(field, given, want)
    return float(value)


@plan.command("capacity", short_help="Replicas, knee and p50/p99 from a (calibrated) model.")
@click.option("--model", "model_path", required=True, help="Scenario file, e.g. model.yaml.")
@click.option("--rate", required=True, help="Target offered rate, e.g. 1500/s.")
@click.option("--slo", multiple=True, help="SLOs to hold (default: the model's slo: list).")
@click.option("--replicas", type=int, help="What-if: this many replicas (skip the search).")
@click.option(
    "--router",
    type=click.Choice(["round_robin", "random", "jsq", "least_outstanding", "power_of_d"]),
    help="What-if: the load balancer.",
)
@click.option("--batch-size", type=int, help="What-if: batching.size (a batching model).")
@click.option("--hedge", help="What-if: hedge after a delay (15ms) or a quantile (p95).")
@click.option("--set", "sets", multiple=True, help="What-if: any dotted field, KEY=VALUE.")
@click.option(
    "--replications", default=10, show_default=True, type=int, help="Runs per replica count."
)
@click.option(
    "--accept-poor-fit",
    is_flag=True,
    help="Answer from a model whose calibration is POOR (refused otherwise); every answer "
    "is marked extrapolated and the exit code is 8.",
)
@json_flag
def plan_capacity(
    model_path: str,
    rate: str,
    slo: tuple[str, ...],
    replicas: int | None,
    router: str | None,
    batch_size: int | None,
    hedge: str | None,
    sets: tuple[str, ...],
    replications: int,
    accept_poor_fit: bool,
    as_json: bool,
) -> None:
    """Replicas needed for --rate under the SLOs, the knee per replica and of the fleet,
    and p50/p99 at the target with 95% CIs from simulated replications.

    Exit 8 when the answer comes from a calibrated model that does not fit (accepted with
    --accept-poor-fit) or lies beyond what was measured (a rate per replica above the
    highest throughput, prompt or answer lengths the runs never sent)."""

    from tailwise.limits import MAX_PLANNED_REQUESTS, MAX_REPLICAS, MAX_RUNS, within
    from tailwise.sim.scenario import load_scenario
    from tailwise.sim.whatif import WhatIf, capacity, with_slos
    from tailwise.units import parse_duration_ns, parse_rate_rps

    rate_rps = parse_rate_rps(rate, "--rate")
    if replicas is not None and replicas < 1:
        raise BadInput("--replicas", replicas, "a count >= 1")
    if replicas is not None:
        within("--replicas", replicas, MAX_REPLICAS, "replicas")
    if replications < 2:
        raise BadInput("--replications", replications, "at least 2 (a CI needs two runs)")
    within("--replications", replications, MAX_RUNS, "simulations per replica count")
    from tailwise.sim.trust import UNTRUSTED_EXIT, require

    sc = with_slos(load_scenario(model_path), list(slo))
    require(sc, accept_poor_fit, "--model", model_path)  # before any simulation
    window = sc.arrival.window()
    if window is not None:  # each check at the target simulates the model's whole window
        planned = rate_rps * parse_duration_ns(window, "scenario.arrival.duration") / 1e9
        what_planned = "requests planned (rate x the model's arrival.duration)"
        within("--rate", planned, MAX_PLANNED_REQUESTS, what_planned, given=rate)
    what = WhatIf(replicas, router, batch_size, hedge, sets)
    from tailwise.cli.progress import phases

    with phases("plan capacity", "planning ...") as tell:
        result = capacity(sc, rate_rps, what, replications, tell, accept_poor_fit)
    emit_plan(result, as_json, UNTRUSTED_EXIT if "extrapolated" in result.outputs else 0)
