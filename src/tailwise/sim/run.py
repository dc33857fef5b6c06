"""Run a scenario: schedule -> model -> records -> the same summary.json as a measured run.

Requests use the load generator's arrival schedules (same strings, same seed,
same intended instants). Service draws come from a separate stream seeded
from the same seed, so changing the model never changes the arrivals.
A single replica without batching, hedging, fan-out, stragglers on replicas
or a queue bound takes the vectorised FCFS path (:mod:`tailwise.sim.fast`);
everything else runs on the event kernel. Both give one row per request.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.arrivals import Schedule, is_steady, parse_schedule
from tailwise.distributions import Distribution, parse_distribution
from tailwise.errors import BadInput
from tailwise.files import atomic_write_text, atomic_writer
from tailwise.knee import Outcome, TrialRun, make_trial, trial_window_s
from tailwise.metrics import derive
from tailwise.metrics.slo import SLO, or_default, parse_slo
from tailwise.metrics.steady import auto_start_ns
from tailwise.metrics.summary import RunInfo, Summary, summarize
from tailwise.records import INT_COLUMNS, Records, error_code, format_rows
from tailwise.sim.fast import (
    fcfs_servers,
    jsq_single_servers,
    power_of_d_single_servers,
    split_fcfs,
)
from tailwise.sim.fleet import DRAW_CHUNK, draw_work
from tailwise.sim.llm import LlmResult, simulate_llm
from tailwise.sim.llm_scenario import prefix_groups, token_counts
from tailwise.sim.scenario import Scenario, llm_system, system_spec
from tailwise.sim.system import System
from tailwise.sim.system_spec import (
    FAILED,
    OK,
    REJECTED,
    UNAVAILABLE,
    SimResult,
    SystemSpec,
    legs_summary,
)
from tailwise.units import parse_duration_ns, parse_fraction

SERVICE_SEED_OFFSET = 0x5EED  # service draws: their own stream, derived from the seed
DELAY_SEED_OFFSET = 0xDE1A  # delays outside the servers: another stream


@dataclass(frozen=True)
class SimRun:
    summary: Summary
    records: Records
    result: SimResult | None


def _arrivals(sc: Scenario) -> tuple[np.ndarray, tuple[int, int]]:
    a = sc.arrival
    warmup_ns = 0 if a.warmup == "auto" else parse_duration_ns(a.warmup, "scenario.arrival.warmup")
    horizon = None
    if a.window() is not None:
        horizon = warmup_ns + parse_duration_ns(a.duration or "", "scenario.arrival.duration")
    schedule = parse_schedule(
        a.process, a.rate, seed=a.seed, horizon_ns=horizon, max_count=a.requests
    )
    blocks = list(schedule.blocks())
    arrivals = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
    return arrivals.astype(np.int64), (
        warmup_ns,
        _window_end(schedule, arrivals, a.requests, warmup_ns),
    )


def _window_end(
    schedule: Schedule, arrivals: np.ndarray, requests: int | None, warmup_ns: int
) -> int:
    """Where the window ends, by the load generator's rule (docs/metrics.md, ``window``): at
    the duration, unless the count ran out first; then one mean gap after the last arrival
    (never past the duration), so that idle time after the count does not dilute the rates."""
    n, horizon = len(arrivals), schedule.horizon_ns
    if horizon is not None and not (requests is not None and n >= requests):
        return horizon
    if n == 0:
        return warmup_ns + 1
    last = int(arrivals[-1])
    gap = last // (n - 1) if n > 1 else 0
    if gap <= 0:
        rate = schedule.rate_rps
        gap = max(int(1e9 / rate), 1) if rate is not None and rate > 0 else 10**9
    return min(last + gap, horizon) if horizon is not None else last + gap


def fast_path_applies(spec: SystemSpec) -> bool:
    """Vectorised (or one tight loop) when no request's path depends on another's fate:
    FCFS replicas without batching, redundancy, bounds, failures or stages."""
    simple = (
        spec.batching is None
        and spec.fanout == 1
        and spec.hedge_after_ns is None
        and spec.queue_limit is None
        and not spec.slow_replicas
        and spec.failures is None
        and spec.autoscale is None
        and not spec.stages
    )
    if not simple or spec.replicas == 1:
        return simple
    if spec.routing in ("round_robin", "random"):
        return True
    return spec.routing in ("jsq", "least_outstanding", "power_of_d") and spec.servers == 1


def run_fast(spec: SystemSpec, arrivals: np.ndarray, rng: np.random.Generator) -> Any:
    n, reps = len(arrivals), spec.replicas
    # The same streams, in the same order, as the event engine draws them.
    work = np.asarray(draw_work(spec.tiers()[0], rng, n), dtype=np.int64)
    route_stream = rng.spawn(3 + 1)[0]
    if reps == 1:
        done, replica = fcfs_servers(arrivals, work, spec.servers), np.zeros(n, np.int64)
    elif spec.routing == "round_robin":
        replica = (np.arange(n, dtype=np.int64) + 1) % reps
        done = split_fcfs(arrivals, work, replica, reps, spec.servers)
    elif spec.routing == "random":
        replica = (route_stream.random(n) * reps).astype(np.int64)
        done = split_fcfs(arrivals, work, replica, reps, spec.servers)
    elif spec.routing == "power_of_d":  # the event engine's router draws 4096 at a time
        picks = min(spec.power_d, reps)
        blocks = -(-n * picks // DRAW_CHUNK)
        uniforms = np.concatenate([route_stream.random(DRAW_CHUNK) for _ in range(blocks)])
        done, replica = power_of_d_single_servers(arrivals, work, reps, spec.power_d, uniforms)
    else:
        done, replica = jsq_single_servers(arrivals, work, reps)
    return done, np.zeros(n, np.int64) + OK, replica


def _engine_name(spec: SystemSpec) -> str:
    state_dependent = spec.replicas > 1 and spec.routing not in ("round_robin", "random")
    if not state_dependent:
        return "vectorised"
    return "power-of-d loop" if spec.routing == "power_of_d" else "jsq loop"


def run_model(spec: SystemSpec, arrivals: np.ndarray, seed: int) -> tuple[SimResult | None, Any]:
    """(event result or None, (done_ns, status, replica)) for the requests."""
    rng = np.random.default_rng([seed, SERVICE_SEED_OFFSET])
    if fast_path_applies(spec):
        return None, run_fast(spec, arrivals, rng)
    result = System(spec, rng).run(arrivals)
    return result, (result.done_ns, result.status, result.replica)


def to_records(
    arrivals: np.ndarray, outcome: Any, window_ns: tuple[int, int], end_ns: int
) -> Records:
    done, status, replica = outcome
    n = len(arrivals)
    unfinished = done < 0  # e.g. a static batch that never filled before the run ended
    err = np.zeros(n, np.int16)
    # What a client would see: a full queue or no healthy replica is a 503 at once;
    # a replica that dies mid-request resets the connection (no status).
    err[status == REJECTED] = error_code("rejected")
    err[status == UNAVAILABLE] = error_code("unavailable")
    err[status == FAILED] = error_code("reset")
    err[unfinished] = error_code("cancelled")
    done = np.where(unfinished, max(end_ns, int(arrivals.max(initial=0))), done)
    refused = (status == REJECTED) | (status == UNAVAILABLE)
    return _records(
        arrivals,
        window_ns,
        first_byte_ns=np.where(err == 0, done, -1),
        done_ns=done,
        status=np.where(err == 0, 200, np.where(refused, 503, 0)).astype(np.int64),
        error=err,
        replica=replica.astype(np.int64),
    )


def _records(arrivals: np.ndarray, window_ns: tuple[int, int], **cols: Any) -> Records:
    """A simulated run's records: sent when scheduled (virtual time has no lag), no
    bytes; ``cols`` gives the answer columns."""
    n = len(arrivals)
    absent = np.full(n, -1, np.int64)
    base: dict[str, Any] = {
        "seq": np.arange(n, dtype=np.int64),
        "parent": absent.copy(),
        "worker": np.zeros(n, np.int64),
        "scheduled_ns": arrivals,
        "sent_ns": arrivals.copy(),
        "first_token_ns": absent.copy(),
        "bytes_out": np.zeros(n, np.int64),
        "bytes_in": np.zeros(n, np.int64),
        "input_tokens": absent.copy(),
        "output_tokens": absent.copy(),
        "in_window": (arrivals >= window_ns[0]) & (arrivals < window_ns[1]),
        "chunk_times": [None] * n,
        "capped": np.zeros(n, np.int8),
    }
    return Records(**(base | cols))


def llm_records(
    arrivals: np.ndarray,
    res: LlmResult,
    prompt: np.ndarray,
    output: np.ndarray,
    window_ns: tuple[int, int],
) -> Records:
    """The LLM model's answers as a streaming client records them."""
    n = len(arrivals)
    ok = res.http_status == 200
    err = np.zeros(n, np.int16)
    err[(res.http_status >= 400) & (res.http_status < 500)] = error_code("http_4xx")
    err[res.http_status >= 500] = error_code("http_5xx")
    times = res.token_times
    emitted = np.array([len(t) if t else 0 for t in times], np.int64) if times else None
    return _records(
        arrivals,
        window_ns,
        first_byte_ns=np.where(res.first_token_ns >= 0, res.first_token_ns, res.done_ns),
        first_token_ns=res.first_token_ns.copy(),
        done_ns=res.done_ns.copy(),
        status=res.http_status.astype(np.int64),
        error=err,
        input_tokens=prompt.astype(np.int64),
        output_tokens=np.where(ok, output, emitted if emitted is not None else -1),
        replica=res.replica.astype(np.int64),
        chunk_times=list(times) if times else [None] * n,
    )


def simulate(sc: Scenario, *, intervals: bool = True) -> SimRun:
    """One simulated run of ``sc``; ``intervals=False`` gives point estimates only (see
    :class:`~tailwise.metrics.summary.RunInfo`)."""
    if sc.llm is not None:
        return _simulate_llm(sc, intervals)
    spec = system_spec(sc)
    slos = _slos(sc)
    arrivals, window = _arrivals(sc)
    started = time.perf_counter()
    result, outcome = run_model(spec, arrivals, sc.arrival.seed)
    if sc.delay is not None:
        outcome = _delayed(outcome, parse_distribution(sc.delay, "scenario.delay"), sc.arrival.seed)
    wall_s = time.perf_counter() - started
    records = to_records(arrivals, outcome, window, window[1])
    window = _auto_warmup(sc, records, window)
    summary = summarize(records, _run_info(sc, window, slos, llm=False, intervals=intervals))
    sim = _sim_section(result, len(arrivals), wall_s, spec)
    return SimRun(summary.with_sections(sim=sim), records, result)


def _auto_warmup(sc: Scenario, records: Records, window: tuple[int, int]) -> tuple[int, int]:
    """``arrival.warmup: auto``: start the window past MSER-5's transient, as a measured
    run does (:func:`tailwise.metrics.steady.auto_start_ns`); sets ``in_window``."""
    if sc.arrival.warmup != "auto" or not is_steady(sc.arrival.process):
        return window  # a shape or a trace changes its load on purpose: no transient to cut
    ok = records.error == 0
    start, _ = auto_start_ns(records.scheduled_ns, derive.latency_ns(records), ok, window)
    records.in_window = (records.scheduled_ns >= start) & (records.scheduled_ns < window[1])
    return start, window[1]


def _delayed(outcome: Any, delay: Distribution, seed: int) -> Any:
    """Each answer arrives ``delay`` after its server finished (no server is held)."""
    done, status, replica = outcome
    rng = np.random.default_rng([seed, DELAY_SEED_OFFSET])
    extra = delay.sample(rng, len(done))
    return np.where(done >= 0, done + extra, done), status, replica


def _delayed_llm(res: LlmResult, delay: Distribution, seed: int) -> LlmResult:
    """A stream's every chunk arrives ``delay`` after the engine emitted it."""
    rng = np.random.default_rng([seed, DELAY_SEED_OFFSET])
    extra = delay.sample(rng, len(res.done_ns))
    times = res.token_times
    if times is not None:
        times = [
            None if t is None else [x + int(d) for x in t]
            for t, d in zip(times, extra, strict=True)
        ]
    return dataclasses.replace(
        res,
        first_token_ns=np.where(res.first_token_ns >= 0, res.first_token_ns + extra, -1),
        done_ns=np.where(res.done_ns >= 0, res.done_ns + extra, res.done_ns),
        token_times=times,
    )


def _run_info(
    sc: Scenario, window: tuple[int, int], slos: list[SLO], llm: bool, intervals: bool = True
) -> RunInfo:
    return RunInfo(
        source="sim",
        target=f"sim:{sc.name}",
        mode="open",
        arrival={"process": sc.arrival.process, "rate": sc.arrival.rate},
        window_ns=window,
        slos=slos,
        max_send_lag_ns=2**62,  # virtual time: the "generator" is never late
        llm=llm,
        intervals=intervals,
    )


def _slos(sc: Scenario) -> list[SLO]:
    attain = parse_fraction(sc.attainment, "scenario.attainment")
    return or_default([parse_slo(s, attain) for s in sc.slo])


def _simulate_llm(sc: Scenario, intervals: bool = True) -> SimRun:
    assert sc.llm is not None
    spec = llm_system(sc)
    slos = _slos(sc)
    arrivals, window = _arrivals(sc)
    rng = np.random.default_rng([sc.arrival.seed, SERVICE_SEED_OFFSET])
    prompt, output = token_counts(sc.llm, rng, len(arrivals))
    groups = prefix_groups(sc.llm, rng, len(arrivals))
    started = time.perf_counter()
    res = simulate_llm(spec, arrivals, prompt, output, rng, groups)
    if sc.delay is not None:
        res = _delayed_llm(res, parse_distribution(sc.delay, "scenario.delay"), sc.arrival.seed)
    wall_s = time.perf_counter() - started
    records = llm_records(arrivals, res, prompt, output, window)
    window = _auto_warmup(sc, records, window)
    summary = summarize(records, _run_info(sc, window, slos, llm=True, intervals=intervals))
    n = len(arrivals)
    preempted = res.preempted if res.preempted is not None else np.zeros(0, np.int64)
    sim = {
        "engine": "llm steps",
        "requests": n,
        "steps": res.steps,
        "kv_allocation": spec.engine.kv_allocation,
        "peak_running_seqs": res.peak_running,
        # paged KV: sequences preempted (recomputed later), and the requests that were
        "preemptions": {"count": res.preemptions, "requests": int((preempted > 0).sum())},
        "prefix_hits": res.prefix_hits if spec.engine.prefix_caching else None,
        "wall_s": round(wall_s, 4),
        "requests_per_s": round(n / wall_s) if wall_s > 0 else None,
    }
    return SimRun(summary.with_sections(sim=sim), records, None)


@dataclass(frozen=True)
class Replay:
    """Arrivals a run really had, to run a model on instead of a schedule's draw: when
    each request reached the server (ns from the run's start), which ones its window
    counted, the window, and for an LLM each request's prompt and answer lengths."""

    arrivals_ns: np.ndarray
    in_window: np.ndarray
    window_ns: tuple[int, int]
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.arrivals_ns)
        columns = (self.in_window, self.prompt_tokens, self.output_tokens)
        if any(c is not None and len(c) != n for c in columns):
            raise BadInput("replay", "columns of different lengths", "one value per request")
        if n and int(np.min(self.arrivals_ns)) < 0:
            raise BadInput("replay", "a negative arrival", "arrivals from the run's start")


def replay(sc: Scenario, arrivals: Replay, *, intervals: bool = False) -> SimRun:
    """One run of ``sc``'s system on arrivals a run really had (``sc.arrival`` gives
    only the seed of the service draws): the same requests at the same instants, so
    what differs from that run is the model, not the draw of the arrivals.

    An LLM scenario needs the lengths (its ``prompt_tokens`` and ``output_tokens``
    forms are not drawn)."""
    order = np.argsort(arrivals.arrivals_ns, kind="stable")
    at = np.asarray(arrivals.arrivals_ns, dtype=np.int64)[order]
    slos = _slos(sc)
    seed = sc.arrival.seed
    if sc.llm is not None:
        if arrivals.prompt_tokens is None or arrivals.output_tokens is None:
            raise BadInput("replay", "an LLM scenario without lengths", "prompt and output tokens")
        spec = llm_system(sc)
        prompt = np.asarray(arrivals.prompt_tokens, dtype=np.int64)[order]
        output = np.asarray(arrivals.output_tokens, dtype=np.int64)[order]
        rng = np.random.default_rng([seed, SERVICE_SEED_OFFSET])
        res = simulate_llm(spec, at, prompt, output, rng, prefix_groups(sc.llm, rng, len(at)))
        if sc.delay is not None:
            res = _delayed_llm(res, parse_distribution(sc.delay, "scenario.delay"), seed)
        records = llm_records(at, res, prompt, output, arrivals.window_ns)
    else:
        _, outcome = run_model(system_spec(sc), at, seed)
        if sc.delay is not None:
            outcome = _delayed(outcome, parse_distribution(sc.delay, "scenario.delay"), seed)
        records = to_records(at, outcome, arrivals.window_ns, arrivals.window_ns[1])
    records.in_window = np.asarray(arrivals.in_window, dtype=bool)[order]
    info = _run_info(sc, arrivals.window_ns, slos, llm=sc.llm is not None, intervals=intervals)
    return SimRun(summarize(records, info), records, None)


def _sim_section(
    result: SimResult | None, n: int, wall_s: float, spec: SystemSpec
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "engine": _engine_name(spec) if result is None else "events",
        "requests": n,
        "wall_s": round(wall_s, 4),
        "requests_per_s": round(n / wall_s) if wall_s > 0 else None,
    }
    if result is not None:
        out["events"] = result.events
        out["legs"] = legs_summary(result, n, spec)
        out["stages"] = result.stages
        if spec.hedge_quantile is not None and result.hedge_delay_ns is not None:
            out["hedge_delay_ms"] = round(result.hedge_delay_ns / 1e6, 4)
    return out


def write_run(directory: Path, run: SimRun, sc: Scenario) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(
            "--out", str(directory), f"a directory that can be created ({exc.strerror})"
        ) from None
    # Records first, summary last, each under a temporary name renamed into place: a
    # summary.json on disk means a complete run beside it, never a truncated one.
    r = run.records
    cols = {name: getattr(r, name) for name in INT_COLUMNS}
    with atomic_writer(directory / "records.jsonl") as f:
        step = 4096
        for i in range(0, len(r), step):
            part = {k: v[i : i + step] for k, v in cols.items()}
            f.write(
                format_rows(
                    part,
                    r.error[i : i + step].tolist(),
                    r.chunk_times[i : i + step],
                    r.in_window[i : i + step].tolist(),
                )
            )
    atomic_write_text(directory / "scenario.json", json.dumps(sc.model_dump(), indent=2) + "\n")
    atomic_write_text(
        directory / "summary.json", json.dumps(run.summary.to_json(), indent=2) + "\n"
    )


def sim_trial(
    sc: Scenario,
    out_dir: Path | None = None,
    min_requests: int = 0,
    requests: int | None = None,
) -> Callable[[float], Outcome]:
    """A knee-search trial on the simulator: the scenario at another offered rate.

    The window stretches to hold ``min_requests`` requests, as for a measured
    trial; with ``requests`` it is exactly ``requests / rate`` long whatever the
    scenario's own window (so trials at different rates, or of fleets of
    different sizes, are judged on samples of one size). Each trial is written
    to ``out_dir/trial-NN-R`` when given. :func:`tailwise.knee.make_trial` numbers,
    seeds and judges the trials, as it does the load generator's.
    """
    base_s = parse_duration_ns(sc.arrival.duration or "60s", "scenario.arrival.duration") / 1e9

    def run_at(rate_rps: float, n: int, repeat: int) -> TrialRun:
        if requests is None:
            window_s = trial_window_s(base_s, min_requests, rate_rps)
        else:
            window_s = requests / rate_rps
        arrival = sc.arrival.model_copy(
            update={
                "rate": f"{rate_rps:.6g}/s",
                "duration": f"{window_s:.6g}s",
                "requests": None,
                "seed": sc.arrival.seed + repeat,
            }
        )
        run = simulate(sc.model_copy(update={"arrival": arrival}))
        if out_dir is None:
            return TrialRun(run.summary)
        where = out_dir / f"trial-{n:02d}-{rate_rps:.4g}rps"
        write_run(where, run, sc)
        return TrialRun(run.summary, where)

    return make_trial(run_at)
