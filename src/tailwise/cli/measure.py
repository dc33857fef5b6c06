"""Measure a live endpoint: run, sweep and knee (one thin function each)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from tailwise.metrics.schema import Summary

from tailwise.cli.options import invoked_argv, run_options
from tailwise.cli.run_extras import dashboard, dashboard_args, preflight, shown_target
from tailwise.errors import BadInput, ExitCode
from tailwise.files import OutputError, atomic_write_text, output_directory
from tailwise.metrics.uncertainty import CONFIDENCE
from tailwise.units import parse_confidence


@click.command()
@click.argument("urls", nargs=-1, required=True)
@run_options
def run(urls: tuple[str, ...], as_json: bool, quiet: bool, **kw: Any) -> None:
    """Measure URL(s) with an open-loop load generator (several URLs: round-robin)."""
    import dataclasses

    from tailwise.loadgen.conclude import write_summary
    from tailwise.loadgen.runner import RunOptions, execute, prepare, run_directory
    from tailwise.report.meta import collect
    from tailwise.report.text import print_summary

    kw["slo"] = list(kw["slo"])
    kw["header"] = list(kw["header"])
    kw["confidence"] = parse_confidence(kw.get("confidence", CONFIDENCE))
    checked = kw.pop("preflight")
    board = dashboard_args(kw)
    opts = RunOptions(urls=list(urls), **kw)
    prepared = prepare(opts)
    first = preflight(prepared, checked)
    directory = run_directory(opts, prepared.targets[0])
    with dashboard(board, f"run {prepared.targets[0].url}"):
        result = execute(prepared, directory)
    if first is not None:  # recorded apart: never a record, never in the window
        result = dataclasses.replace(result, summary=result.summary.with_sections(preflight=first))
        write_summary(directory, result.summary)
    meta = collect(invoked_argv())
    try:  # the report's provenance: a run whose disk filled up goes on without it
        atomic_write_text(directory / "meta.json", json.dumps(meta, indent=2) + "\n")
    except OutputError as exc:
        click.echo(f"tailwise: meta.json not written ({exc.reason})", err=True)
    if as_json:
        click.echo(json.dumps(result.summary.to_json(), indent=2))
    if not quiet:
        print_summary(result.summary, str(directory), stderr=as_json)
        for line in _llm_lines(result.summary):
            click.echo(line, err=as_json)
        if "workers" in result.summary.sections:
            from tailwise.loadgen.scale.driver import workers_line

            click.echo(workers_line(result.summary.section("workers")), err=as_json)
    sys.exit(result.exit_code)


def _llm_lines(s: Summary) -> list[str]:
    """Token rates, reasoning and the server's own metrics, under the run's summary."""
    from tailwise.loadgen.observe.server_view import server_lines
    from tailwise.metrics import reasoning, server

    summary = s.sections
    lines = server_lines(summary) + reasoning.text_lines(s.tokens, s.reasoning)
    if "sessions" in summary:
        from tailwise.loadgen.engine.sessions import text_lines

        lines += text_lines(summary["sessions"])
    if "server_metrics" in summary:
        lines += server.text_lines(summary["server_metrics"])
    if "gpu" in summary:
        from tailwise.metrics.gpu import text_lines as gpu_lines

        lines += gpu_lines(summary["gpu"])
    if "images" in summary:
        from tailwise.loadgen.prepare.images import text_lines as image_lines

        lines += image_lines(summary["images"])
    return lines


def _base_options(urls: tuple[str, ...], command: str, kw: dict[str, Any]) -> Any:
    """RunOptions shared by every step of a sweep or knee search (no --rate of their own)."""
    from tailwise.loadgen.runner import RunOptions

    if kw.pop("rate", None):
        raise BadInput("--rate", "given", f"no --rate with {command}: it chooses the rates")
    if command == "knee" and kw.get("stop_on_slo_loss"):
        raise BadInput("--stop-on-slo-loss", "with knee", "--early-stop (on by default)")

    kw["slo"] = list(kw["slo"])
    kw["header"] = list(kw["header"])
    kw["name"] = kw.get("name") or command
    kw.pop("preflight", None)
    kw["confidence"] = parse_confidence(kw.get("confidence", CONFIDENCE))
    return RunOptions(urls=list(urls), **kw)


def _search_dir(opts: Any, checked: bool) -> tuple[Any, bool, dict[str, Any] | None]:
    """The search's directory, whether no loss watch can judge its trials (so none stops
    early), and the preflight's outcome (one request per target, once for the search)."""
    import dataclasses

    from tailwise.loadgen.prepare.plan import watch_blind
    from tailwise.loadgen.runner import prepare, run_directory

    # Prepared once with a stand-in rate: checks every option before the first step.
    p = prepare(dataclasses.replace(opts, rate="1/s"))
    first = preflight(p, checked)
    return run_directory(opts, p.targets[0]), watch_blind(p), first


@click.command()
@click.argument("urls", nargs=-1, required=True)
@click.option(
    "--rates",
    help="10,20,40 (rates per second); auto (a short closed-loop probe of the maximum "
    "throughput, then open-loop rates from 20% to 125% of it); or double (from --start, "
    "doubling until a step fails, then 3 rates inside the last bracket).",
)
@click.option("--start", default="10/s", show_default=True, help="With --rates double: first rate.")
@run_options
def sweep(
    urls: tuple[str, ...], rates: str, start: str, as_json: bool, quiet: bool, **kw: Any
) -> None:
    """Run URL at each offered rate in turn (one run directory per step) and find the knee."""
    from tailwise.loadgen.sweep import Sweep, parse_rates, parse_users
    from tailwise.report.meta import collect
    from tailwise.report.render import sweep_report
    from tailwise.report.text import print_sweep
    from tailwise.units import parse_rate_rps

    levels = kw.pop("concurrency", None)
    if bool(rates) == bool(levels):
        raise BadInput("--rates", rates, "either --rates (open loop) or --concurrency 1,4,16")
    users = parse_users(levels) if levels else None
    chosen = parse_rates(rates) if rates else None
    first = parse_rate_rps(start, "--start")
    checked = kw.pop("preflight")
    port = dashboard_args(kw)
    opts = _base_options(urls, "sweep", kw)
    out_dir, _, first_answer = _search_dir(opts, checked)
    boards: list[Any] = []

    def on_step(i: int, n: int, rate: float, step: Any) -> None:
        if step is not None and boards:
            r = step.summary.rates
            boards[0].add_trial(
                {"name": f"step {i + 1}/{n}", "rate_rps": rate, "verdict": step.summary.verdict,
                 "throughput_rps": r.throughput_rps, "goodput_rps": r.goodput_rps}
            )  # fmt: skip
        if step is not None and not quiet:
            r = step.summary.rates
            what = f"{rate:g} users" if step.summary.closed else f"{rate:g}/s"
            click.echo(
                f"[{i + 1}/{n}] {what}  throughput {r.throughput_rps:.1f}/s  "
                f"goodput {r.goodput_rps:.1f}/s  {step.summary.verdict}",
                err=True,
            )

    runner = Sweep(opts, out_dir, on_step)
    runner.extra["meta"] = collect(invoked_argv())
    if first_answer is not None:
        runner.extra["preflight"] = first_answer
    with dashboard(port, f"sweep {out_dir}") as board:
        boards.extend([board] if board is not None else [])
        _sweep_steps(runner, users, rates, chosen, first, quiet)
    doc = runner.write()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    if not quiet:
        print_sweep(doc, stderr=as_json)
        click.echo(f"saved     {out_dir}/sweep.json", err=as_json)
    report = sweep_report(out_dir) if runner.steps else ""
    if report and not quiet:
        click.echo(f"report    {report}", err=as_json)
    stopped = runner.note.startswith(("stopped", "interrupted"))
    sys.exit(ExitCode.INVALID if stopped else ExitCode.PASS)


def _sweep_steps(
    runner: Any, users: Any, rates: str, chosen: Any, first: float, quiet: bool
) -> None:
    """Run the sweep's steps: users (closed loop), auto (a probe first), double or a list."""
    if users:
        runner.run_users(users)
    elif rates.strip() == "auto":
        from tailwise.loadgen.sweep_probe import run_probed

        def on_probe(found: dict[str, Any]) -> None:
            if not quiet:
                rates_text = ", ".join(f"{r:g}" for r in found.get("rates", [])) or "none"
                click.echo(
                    f"[probe] {found['users']} users, closed loop: at most "
                    f"{found['throughput_rps']:.1f}/s; open-loop rates {rates_text}",
                    err=True,
                )

        run_probed(runner, on_probe=on_probe)
    elif chosen is None:
        runner.run_auto(first)
    else:
        runner.run_rates(chosen)


@click.command()
@click.argument("urls", nargs=-1)
@click.option(
    "--sim",
    "scenario",
    type=click.Path(dir_okay=False),
    help="Search a simulator scenario instead.",
)
@click.option("--start", default="10/s", show_default=True, help="First rate tried.")
@click.option("--min-rate", default="0.5/s", show_default=True, help="Lowest rate tried.")
@click.option("--max-rate", default="100000/s", show_default=True, help="Highest rate tried.")
@click.option(
    "--resolution", default="5%", show_default=True, help="Stop bisecting at this relative width."
)
@click.option(
    "--repeats", default=0, show_default=True, type=int, help="Extra runs of the final bracket."
)
@click.option(
    "--early-stop/--no-early-stop",
    default=True,
    show_default=True,
    help="Stop a trial once an SLO is certainly lost.",
)
@click.option(
    "--min-requests",
    default="0",
    show_default=True,
    help="Stretch each trial's window to hold at least this many requests.",
)
@run_options
def knee(
    urls: tuple[str, ...],
    scenario: str | None,
    start: str,
    min_rate: str,
    max_rate: str,
    resolution: str,
    repeats: int,
    min_requests: str,
    early_stop: bool,
    as_json: bool,
    quiet: bool,
    **kw: Any,
) -> None:
    """Find the highest offered rate at which every SLO holds (bracket, bisect, repeat)."""
    from tailwise.knee import KneeAborted, KneeSearch
    from tailwise.loadgen.sweep import (
        CONFIRM_MAX_DURATION,
        STEER_CONFIDENCE,
        STEER_MAX_DURATION,
        knee_trial,
    )
    from tailwise.report.meta import collect
    from tailwise.report.render import sweep_report
    from tailwise.units import parse_count, parse_fraction, parse_rate_rps

    if not kw["slo"] and not scenario:  # a scenario may bring its own slo: list
        raise BadInput("--slo", "nothing", "at least one SLO, e.g. --slo 'p99(latency)<=200ms'")
    if kw.get("concurrency"):
        raise BadInput("--concurrency", kw["concurrency"], "no closed loop in a knee search")
    res = parse_fraction(resolution, "--resolution")
    if not 0 < res < 1 or repeats < 0:
        raise BadInput("--resolution", resolution, "a width between 0% and 100%, e.g. 5%")
    lo, first, hi = (
        parse_rate_rps(v, f)
        for v, f in ((min_rate, "--min-rate"), (start, "--start"), (max_rate, "--max-rate"))
    )
    least = parse_count(min_requests, "--min-requests", minimum=0)
    if bool(urls) == bool(scenario):
        raise BadInput("URL", " ".join(urls) or None, "a URL to measure, or --sim SCENARIO")
    checked = kw.pop("preflight")
    port = dashboard_args(kw)
    first_answer = None
    boards: list[Any] = []
    if scenario:
        trial, out_dir, slo_specs = _sim_knee_setup(scenario, kw, least)
        confirm = None
    else:
        opts = _base_options(urls, "knee", kw)
        out_dir, blind, first_answer = _search_dir(opts, checked)
        sequential = opts.duration in (None, "auto")
        if early_stop and blind:
            early_stop = False
            if not quiet:
                click.echo(
                    "tailwise: knee: note: no early stop over several processes with "
                    "--warmup auto (no process sees which requests a cut can reach); give "
                    "a fixed --warmup to stop lost trials early",
                    err=True,
                )
        # Steering trials only choose the next rate and give the load law a point: a
        # short cap, as a trial near the knee cannot decide anyway (the firm trials that
        # make the band are placed where they can).
        level = float(opts.confidence)
        numbers = itertools.count(1)  # one numbering for steering and settling trials
        trial = knee_trial(
            opts, out_dir, least, early_stop, min(STEER_CONFIDENCE, level) if sequential
            else level, STEER_MAX_DURATION, counter=numbers,
        )  # fmt: skip
        # No early stop for a settling trial: a loss certain for its planned sample is not
        # yet *shown* at 95%, and the sequential looks stop it once it is.
        confirm = knee_trial(
            opts, out_dir, least, not sequential and early_stop, level, CONFIRM_MAX_DURATION,
            prefix="settle", counter=numbers,
        )  # fmt: skip
        slo_specs = list(opts.slo)

    def on_trial(t: Any) -> None:
        if boards:
            d = t.detail
            boards[0].add_trial(
                {"name": t.phase, "rate_rps": t.rate_rps, "verdict": t.settled
                 + ("" if t.firm else " (steering)"), "throughput_rps": d.get("throughput_rps"),
                 "goodput_rps": d.get("goodput_rps")}
            )  # fmt: skip
        if not quiet:
            mark = (
                t.settled
                if t.settled != "inconclusive"
                else ("inconclusive (point: " + ("pass" if t.passed else "fail") + ")")
            )
            if not t.firm and t.settled != "inconclusive":
                mark += " (steering, 80%)"
            n = t.detail.get("requests")
            size = f"  {n} requests in {t.detail.get('window_s', 0):.0f}s" if n else ""
            click.echo(f"  {t.phase:<8} {t.rate_rps:10.4g}/s  {mark}{size}", err=True)

    # --repeats asks for bisection's final bracket, run again: placement has none.
    search = KneeSearch(
        trial, resolution=res, repeats=repeats, on_trial=on_trial, confirm=confirm,
        place=repeats == 0,
    )  # fmt: skip
    code = ExitCode.PASS
    try:
        with dashboard(port, f"knee {out_dir}") as board:
            boards.extend([board] if board is not None else [])
            result = search.run(first, lo, hi)
    except KneeAborted as exc:
        if exc.result is None:
            click.echo(f"tailwise: knee: {exc}", err=True)
            sys.exit(exc.exit_code)
        result, code = exc.result, ExitCode(exc.exit_code)
    doc = result.to_json(slo_specs)
    doc["confidence"] = float(opts.confidence) if not scenario else CONFIDENCE
    if first_answer is not None:
        doc["preflight"] = first_answer
    doc["target"] = shown_target(opts) if urls else f"sim:{scenario}"
    doc["meta"] = collect(invoked_argv())
    atomic_write_text(out_dir / "knee.json", json.dumps(doc, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    if not quiet:
        print_knee(doc, str(out_dir), stderr=as_json)
    report = sweep_report(out_dir) if doc["trials"] else ""
    if report and not quiet:
        click.echo(f"report    {report}", err=as_json)
    sys.exit(code)


def _sim_knee_setup(scenario: str, kw: dict[str, Any], least: int) -> tuple[Any, Path, list[str]]:
    """The knee search's trial on a simulator scenario; --slo and --out apply to it."""
    from tailwise.sim.run import sim_trial
    from tailwise.sim.scenario import load_scenario

    sc = load_scenario(scenario)
    if kw["slo"]:  # --slo replaces the scenario's own objectives
        sc = sc.model_copy(update={"slo": list(kw["slo"]), "attainment": kw["attainment"]})
    elif not sc.slo:
        raise BadInput("--slo", "nothing", "at least one SLO (here or in the scenario's slo:)")
    if kw.get("duration") == "auto":
        raise BadInput("--duration", "auto", "a fixed duration for --sim (a simulation is exact)")
    if kw.get("duration"):
        arrival = sc.arrival.model_copy(update={"duration": kw["duration"]})
        sc = sc.model_copy(update={"arrival": arrival})
    out_dir = output_directory(
        Path(kw.get("out") or f"runs/knee-sim-{Path(scenario).stem}"), force=kw.get("force", False)
    )
    return sim_trial(sc, out_dir, least), out_dir, list(sc.slo)


def print_knee(doc: dict[str, Any], directory: str, *, stderr: bool) -> None:
    knee_rps, band = doc["knee_rps"], doc["band_rps"]
    if knee_rps is None:
        click.echo("knee      none found", err=stderr)
    else:
        how = {
            "levels": ", where the levels cross",
            "queue model": ", read by the FIFO queue model from the service times",
            "fit": ", fitted",
        }.get(doc.get("knee_method", ""), "")
        click.echo(f"knee      {knee_rps:.4g}/s  ({len(doc['trials'])} trials{how})", err=stderr)
    if band:
        held = f"{band[0]:.4g}/s" if band[0] is not None else "no rate tried"
        failed = f"{band[1]:.4g}/s" if band[1] is not None else "no rate tried"
        level = f"{100 * float(doc.get('confidence') or CONFIDENCE):.4g}%"
        click.echo(
            f"band      shown to hold at {held}, shown to fail at {failed} (decided at "
            f"{level} confidence)",
            err=stderr,
        )
    if doc.get("undecided_rps"):
        rates = ", ".join(f"{r:.4g}" for r in doc["undecided_rps"])
        steering = any(
            not t.get("firm", True) for t in doc["trials"] if t["rate_rps"] in doc["undecided_rps"]
        )
        why = "steering trials decide at 80% at most; " if steering else ""
        click.echo(
            f"between   {rates} /s: not decided at the band's confidence ({why}near the "
            "knee a sample cannot decide)",
            err=stderr,
        )
    if doc["note"]:
        click.echo(f"note      {doc['note']}", err=stderr)
    click.echo(f"saved     {directory}/knee.json", err=stderr)


# sweep and knee choose the rates themselves: --rate (shared with run) is refused there,
# so their --help does not list it.
for _command in (sweep, knee):
    for _param in _command.params:
        if _param.name == "rate" and isinstance(_param, click.Option):
            _param.hidden = True
