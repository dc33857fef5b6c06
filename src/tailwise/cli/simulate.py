"""Simulate a serving system from a scenario file."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tailwise.errors import BadInput
from tailwise.files import atomic_write_text, output_directory
from tailwise.limits import MAX_RUNS, within
from tailwise.metrics.verdict import exit_code


@contextlib.contextmanager
def _study_progress(quiet: bool) -> Iterator[Any]:
    """A progress bar on a terminal; in a pipe or a log, a line now and then (at most every
    10 s, as calibrate and plan capacity do); nothing with --quiet."""
    from tailwise.report import study as study_text

    if quiet or sys.stderr.isatty():
        with study_text.progress_bar(not quiet) as tick:
            yield tick
        return
    from tailwise.cli.progress import phases

    with phases("simulate", "simulating ...") as tell:

        def tick(done: int, total: int) -> None:
            tell(f"{done}/{total} simulations", "simulating")

        yield tick


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--out", help="Run directory (default runs/<UTC time>-sim-<name>/).")
@click.option("--force", is_flag=True, help="Let --out name a directory that holds an earlier run.")
@click.option(
    "--replications",
    type=int,
    metavar="N",
    help="Run N >= 2 times (arrival seeds seed..seed+N-1): each metric's mean and 95% CI.",
)
@click.option(
    "--vary",
    metavar="KEY=V1,V2,...",
    help="One run per value of a scenario field (e.g. batching.size=1,2,4,8); "
    "a table and a p99-vs-throughput chart.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print summary.json (or the study) to stdout."
)
@click.option("-q", "--quiet", is_flag=True, help="No terminal summary.")
@click.option(
    "--accept-poor-fit",
    is_flag=True,
    help="Run a calibrated model whose fit is POOR (refused otherwise); exit code 8.",
)
def simulate(
    scenario: Path,
    out: str | None,
    force: bool,
    replications: int | None,
    vary: str | None,
    as_json: bool,
    quiet: bool,
    accept_poor_fit: bool,
) -> None:
    """Simulate a serving system from a YAML/TOML scenario; same summary as a measured run.

    --replications and --vary (together: N runs per value) write replications.json or
    vary.json instead of one run's records; the exit code covers every run. A calibrated
    model whose fit is POOR is refused without --accept-poor-fit; a run from it, or beyond
    what its runs measured, exits 8 (docs/calibrate.md).
    """
    import datetime as dt
    import re

    from tailwise.report import study as study_text
    from tailwise.report.text import print_summary
    from tailwise.sim import study
    from tailwise.sim.run import simulate as run_scenario
    from tailwise.sim.run import write_run
    from tailwise.sim.scenario import load_scenario, system_spec

    if replications is not None and replications < 2:
        raise BadInput("--replications", replications, "at least 2 (leave it out for one run)")
    varied = study.parse_vary(vary) if vary is not None else None
    runs = (replications or 1) * (len(varied[1]) if varied is not None else 1)
    given = replications if varied is None else f"{runs} runs"
    within("--replications", runs, MAX_RUNS, "simulations in one study", given)
    sc = load_scenario(scenario)
    untrusted = _untrusted(sc, varied, accept_poor_fit, str(scenario))
    if out:
        directory = Path(out)
    else:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", sc.name).strip("-") or "scenario"
        directory = Path("runs") / f"{stamp}-sim-{slug}"
    if sc.llm is None:
        system_spec(sc)  # cross-checks and event budgets, before anything is written
    # Checked before the simulation, created after it (a --vary value may still be refused).
    directory = output_directory(directory, force=force, create=False)
    if replications is not None or varied is not None:
        from tailwise.errors import MissingExtra
        from tailwise.report.plot import vary_p99_vs_throughput

        with _study_progress(quiet) as tick:
            if varied is not None:
                doc = study.vary(sc, *varied, replications or 1, tick)
            else:
                doc = study.replications(sc, replications or 2, tick)
        saved = directory / ("vary.json" if varied else "replications.json")
        output_directory(directory, force=True)
        atomic_write_text(saved, json.dumps(doc, indent=2) + "\n")
        lines = [f"saved     {saved}"]
        if varied is not None:
            try:
                chart = vary_p99_vs_throughput(doc, directory / "vary_p99_vs_throughput.png")
                lines.append(f"chart     {chart}")
            except MissingExtra as exc:
                lines.append(f"no chart: {exc.expected}")
        if as_json:
            click.echo(json.dumps(doc, indent=2))
        if not quiet:
            study_text.print_study(doc, lines, stderr=as_json)
        sys.exit(_exit(study.exit_code(doc), untrusted))
    result = run_scenario(sc)
    write_run(directory, result, sc)
    from tailwise.cli.options import invoked_argv
    from tailwise.report.meta import collect

    # How the run was made, for its report (as tailwise run writes it)
    atomic_write_text(directory / "meta.json", json.dumps(collect(invoked_argv()), indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(result.summary.to_json(), indent=2))
    if not quiet:
        print_summary(result.summary, str(directory), stderr=as_json)
        sim = result.summary.section("sim")
        line = f"simulated {sim['requests']} requests in {sim['wall_s']:.2f}s ({sim['engine']})"
        click.echo(line, err=as_json)
        if "kv_allocation" in sim:
            pre = sim["preemptions"]
            click.echo(
                f"kv {sim['kv_allocation']}: at most {sim['peak_running_seqs']} sequences ran "
                f"at once; {pre['count']} preemptions of {pre['requests']} requests"
                + (
                    f"; {sim['prefix_hits']} prefix-cache hits"
                    if sim.get("prefix_hits") is not None
                    else ""
                ),
                err=as_json,
            )
        legs = sim.get("legs")
        if legs is not None and (legs["sent"] > sim["requests"] or legs["needed_per_request"] > 1):
            click.echo(_redundancy_line(legs), err=as_json)
    sys.exit(_exit(exit_code(result.summary), untrusted))


def _untrusted(
    sc: Any, varied: tuple[str, list[str]] | None, accept_poor_fit: bool, given: str
) -> list[str]:
    """Why a calibrated model's run would be extrapolated (refusing a POOR fit unless
    accepted): the fit, a rate per replica beyond the measured range, a workload outside
    the calibrated lengths; for --vary, over every value."""
    from tailwise.sim.study import with_value
    from tailwise.sim.trust import require, scenario_rate_rps

    trust = require(sc, accept_poor_fit, "SCENARIO", given)
    if trust is None:
        return []
    variants = [sc] if varied is None else [with_value(sc, varied[0], v) for v in varied[1]]
    found: dict[str, None] = {}
    for v in variants:
        found |= dict.fromkeys(trust.concerns(v, scenario_rate_rps(v)))
    return list(found)


def _exit(code: int, untrusted: list[str]) -> int:
    """The verdict's exit code, or 8 when the answer came from an untrusted model."""
    from tailwise.sim.trust import UNTRUSTED_EXIT

    for line in untrusted:
        click.echo(f"extrapolated  {line}", err=True)
    return UNTRUSTED_EXIT if untrusted else code


def _redundancy_line(legs: dict[str, Any]) -> str:
    """What hedging or fan-out cost: legs started, and server time against the work of
    the legs each request needed (1 when hedged, k of a k-of-n fan-out)."""
    need = legs["needed_per_request"]
    line = (
        f"redundancy (cancel: {legs['cancel']}): {legs['legs_per_request']:.3g} legs started "
        f"per request ({need} needed)"
    )
    if legs["server_time_x"] is None:
        return line + "; server time not split per leg (batches share it)"
    base = "unhedged" if need == 1 else f"the {need} legs needed"
    return line + f"; server time {legs['server_time_x']:.3g}x of {base}"
