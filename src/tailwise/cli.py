"""The command line: one thin function per command; all work happens in the library.

Exit codes: 0 pass, 1 an SLO failed, 2 bad input, 3 invalid run, 4 internal error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from tailwise.version import __version__
from tailwise.errors import BadInput

F = TypeVar("F", bound=Callable[..., Any])


def _run_options(f: F) -> F:
    opts = [
        click.option("--rate", help="Offered rate, e.g. 500/s (open loop)."),
        click.option(
            "--arrival",
            default="poisson",
            show_default=True,
            help="constant | poisson | gamma:<burstiness> | ramp:<from>-<to> | "
            "stages:<rate>@<dur>,... | trace:<file>",
        ),
        click.option("--duration", help="Measurement window, e.g. 60s (default 10s)."),
        click.option("--requests", "requests", help="Stop after this many requests."),
        click.option(
            "--warmup",
            default="0s",
            show_default=True,
            help="Recorded and flagged but excluded from statistics.",
        ),
        click.option("--seed", default=0, show_default=True, type=int, help="Schedule seed."),
        click.option(
            "--slo",
            multiple=True,
            help='"latency<=200ms", "p99(latency)<=200ms", "error_rate<=1%" (repeatable).',
        ),
        click.option(
            "--attainment",
            default="99%",
            show_default=True,
            help="Share of requests a per-request SLO must reach.",
        ),
        click.option("--max-in-flight", help="Cap on outstanding requests (client queue beyond)."),
        click.option("--concurrency", help="CLOSED-LOOP mode with N users (for comparison)."),
        click.option("--think", default="0s", show_default=True, help="Closed-loop think time."),
        click.option("--timeout", default="30s", show_default=True, help="Total request timeout."),
        click.option("--connect-timeout", default="5s", show_default=True),
        click.option(
            "--grace",
            default="2s",
            show_default=True,
            help="On Ctrl-C/SIGTERM, how long in-flight requests may finish.",
        ),
        click.option(
            "--max-send-lag",
            default="5ms",
            show_default=True,
            help="Send-lag p99 above this marks the run invalid (generator saturated).",
        ),
        click.option("-X", "--method", help="HTTP method (default GET, or POST with a body)."),
        click.option(
            "-H", "--header", multiple=True, help="'Name: value' (repeatable; never saved)."
        ),
        click.option("--body", help="Request body: a literal, or @file."),
        click.option("--bodies", help="JSONL file: one body per line, used in turn."),
        click.option("--out", help="Run directory (default runs/<UTC time>-<target>/)."),
        click.option("--name", help="Name for the default run directory."),
        click.option("--insecure", is_flag=True, help="Skip TLS certificate verification."),
        click.option(
            "--progress/--no-progress",
            default=None,
            help="Live status line (default: when stderr is a terminal).",
        ),
        click.option(
            "--api",
            type=click.Choice(["openai-chat", "openai-completions", "openai-embeddings"]),
            help="OpenAI-compatible LLM endpoint: TTFT, ITL, TPOT, token rates.",
        ),
        click.option("--model", help="Model name the server serves (with --api)."),
        click.option(
            "--max-tokens",
            default="128",
            show_default=True,
            help="Output tokens to ask for: N, uniform:A-B, normal:M,SD or lognormal:MEDIAN,SIGMA.",
        ),
        click.option(
            "--input-tokens",
            default="128",
            show_default=True,
            help="Synthetic prompt length in words (~tokens); the same forms.",
        ),
        click.option("--prompts", help="JSONL dataset: prompt, messages or ShareGPT rows."),
        click.option(
            "--shared-prefix",
            default="0",
            show_default=True,
            help="Words every synthetic prompt starts with (prefix caching).",
        ),
        click.option(
            "--tokenizer",
            help="tokenizer.json to count tokens when the server "
            "reports no usage (pip install 'tailwise[tokenizers]').",
        ),
        click.option("--api-key", help="Bearer token (default $OPENAI_API_KEY); never saved."),
        click.option("--extra-body", help="JSON object merged into each request body."),
        click.option(
            "--stream/--no-stream",
            default=True,
            show_default=True,
            help="Stream chat/completions responses (with --api).",
        ),
        click.option(
            "--workers",
            help="Load-generator processes sharing one arrival plan: N, or auto (one per "
            "core; with --ray, one per CPU of the cluster). See docs/scale.md.",
        ),
        click.option(
            "--ray",
            help="Run the workers as actors on a Ray cluster: auto, local, HOST:6379 or "
            "ray://HOST:10001 (pip install 'tailwise[ray]').",
        ),
        click.option(
            "--stop-on-slo-loss",
            is_flag=True,
            help="Stop sending once an SLO can no longer pass (judged over all workers).",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print summary.json to stdout."),
        click.option("-q", "--quiet", is_flag=True, help="No terminal summary."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tailwise")
def cli() -> None:
    """tailwise: honest latency, throughput and goodput for AI serving systems."""


@cli.command()
@click.argument("urls", nargs=-1, required=True)
@_run_options
def run(urls: tuple[str, ...], as_json: bool, quiet: bool, **kw: Any) -> None:
    """Measure URL(s) with an open-loop load generator (several URLs: round-robin)."""
    from tailwise.loadgen.runner import RunOptions, execute, prepare, run_directory
    from tailwise.report.text import print_summary

    kw["slo"] = list(kw["slo"])
    kw["header"] = list(kw["header"])
    opts = RunOptions(urls=list(urls), **kw)
    prepared = prepare(opts)
    directory = run_directory(opts, prepared.targets[0])
    result = execute(prepared, directory)
    if as_json:
        click.echo(json.dumps(result.summary, indent=2))
    if not quiet:
        print_summary(result.summary, str(directory), stderr=as_json)
        if "workers" in result.summary:
            from tailwise.loadgen.scale import workers_line

            click.echo(workers_line(result.summary), err=as_json)
    sys.exit(result.exit_code)


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
    return RunOptions(urls=list(urls), **kw)


def _search_dir(opts: Any) -> Any:
    import dataclasses

    from tailwise.loadgen.runner import prepare, run_directory

    # Prepared once with a stand-in rate: checks every option before the first step.
    return run_directory(opts, prepare(dataclasses.replace(opts, rate="1/s")).targets[0])


@cli.command()
@click.argument("urls", nargs=-1, required=True)
@click.option("--rates", help="10,20,40 (rates per second), or auto.")
@click.option("--start", default="10/s", show_default=True, help="With --rates auto: first rate.")
@_run_options
def sweep(
    urls: tuple[str, ...], rates: str, start: str, as_json: bool, quiet: bool, **kw: Any
) -> None:
    """Run URL at each offered rate in turn (one run directory per step) and find the knee."""
    from tailwise.loadgen.sweep import Sweep, parse_rates, parse_users
    from tailwise.report.text import print_sweep
    from tailwise.units import parse_rate_rps

    levels = kw.pop("concurrency", None)
    if bool(rates) == bool(levels):
        raise BadInput("--rates", rates, "either --rates (open loop) or --concurrency 1,4,16")
    users = parse_users(levels) if levels else None
    chosen = parse_rates(rates) if rates else None
    first = parse_rate_rps(start, "--start")
    opts = _base_options(urls, "sweep", kw)
    out_dir = _search_dir(opts)

    def on_step(i: int, n: int, rate: float, step: Any) -> None:
        if step is not None and not quiet:
            r = step.summary["rates"]
            what = f"{rate:g} users" if step.summary["mode"] == "closed" else f"{rate:g}/s"
            click.echo(
                f"[{i + 1}/{n}] {what}  throughput {r['throughput_rps']:.1f}/s  "
                f"goodput {r['goodput_rps']:.1f}/s  {step.summary['verdict']}",
                err=True,
            )

    runner = Sweep(opts, out_dir, on_step)
    if users:
        runner.run_users(users)
    elif chosen is None:
        runner.run_auto(first)
    else:
        runner.run_rates(chosen)
    doc = runner.write()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    if not quiet:
        print_sweep(doc, stderr=as_json)
        click.echo(f"saved     {out_dir}/sweep.json", err=as_json)
    report = runner.write_report()
    if report and not quiet:
        click.echo(f"report    {report}", err=as_json)
    sys.exit(3 if runner.note.startswith(("stopped", "interrupted")) else 0)


@cli.command()
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
    "--repeats", default=1, show_default=True, type=int, help="Extra runs of the final bracket."
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
@_run_options
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
    from tailwise.loadgen.sweep import knee_trial
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
    if scenario:
        trial, out_dir, slo_specs = _sim_knee_setup(scenario, kw, least)
    else:
        opts = _base_options(urls, "knee", kw)
        out_dir = _search_dir(opts)
        trial = knee_trial(opts, out_dir, least, stop_early=early_stop)
        slo_specs = list(opts.slo)

    def on_trial(t: Any) -> None:
        if not quiet:
            mark = "pass" if t.passed else "fail"
            click.echo(f"  {t.phase:<8} {t.rate_rps:10.4g}/s  {mark}", err=True)

    search = KneeSearch(trial, resolution=res, repeats=repeats, on_trial=on_trial)
    code = 0
    try:
        result = search.run(first, lo, hi)
    except KneeAborted as exc:
        if exc.result is None:
            click.echo(f"tailwise: knee: {exc}", err=True)
            sys.exit(3)
        result, code = exc.result, 3
    doc = result.to_json(slo_specs)
    (out_dir / "knee.json").write_text(json.dumps(doc, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    if not quiet:
        _print_knee(doc, str(out_dir), stderr=as_json)
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
    if kw.get("duration"):
        arrival = sc.arrival.model_copy(update={"duration": kw["duration"]})
        sc = sc.model_copy(update={"arrival": arrival})
    out_dir = Path(kw.get("out") or f"runs/knee-sim-{Path(scenario).stem}")
    out_dir.mkdir(parents=True, exist_ok=True)
    return sim_trial(sc, out_dir, least), out_dir, list(sc.slo)


def _print_knee(doc: dict[str, Any], directory: str, *, stderr: bool) -> None:
    knee_rps, band = doc["knee_rps"], doc["band_rps"]
    if knee_rps is None:
        click.echo("knee      none found", err=stderr)
    else:
        where = f"  band {band[0]:.4g}-{band[1]:.4g}/s" if band else ""
        click.echo(f"knee      {knee_rps:.4g}/s{where}  ({len(doc['trials'])} trials)", err=stderr)
    if doc["note"]:
        click.echo(f"note      {doc['note']}", err=stderr)
    click.echo(f"saved     {directory}/knee.json", err=stderr)


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("-q", "--quiet", is_flag=True, help="Write the files; print nothing.")
def report(directory: Path, quiet: bool) -> None:
    """Re-render a run or sweep directory: terminal summary, PNG charts, report.html."""
    from tailwise.report.render import kind_of, render_directory
    from tailwise.report.text import print_summary, print_sweep

    kind = kind_of(directory)
    written = render_directory(directory)
    if not quiet:
        doc = json.loads(
            (directory / ("sweep.json" if kind == "sweep" else "summary.json")).read_text()
        )
        if kind == "sweep":
            print_sweep(doc)
        else:
            print_summary(doc, str(directory))
        for path in written:
            click.echo(f"wrote     {path}")


@cli.command()
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", help="Run directory (default runs/<UTC time>-sim-<name>/).")
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
def simulate(
    scenario: Path,
    out: str | None,
    replications: int | None,
    vary: str | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Simulate a serving system from a YAML/TOML scenario; same summary as a measured run.

    --replications and --vary (together: N runs per value) write replications.json or
    vary.json instead of one run's records; the exit code covers every run.
    """
    import datetime as dt
    import re

    from tailwise.report import study as study_text
    from tailwise.report.text import print_summary
    from tailwise.sim import study
    from tailwise.sim.run import simulate as run_scenario
    from tailwise.sim.run import write_run
    from tailwise.sim.scenario import load_scenario

    if replications is not None and replications < 2:
        raise BadInput("--replications", replications, "at least 2 (leave it out for one run)")
    varied = study.parse_vary(vary) if vary is not None else None
    sc = load_scenario(scenario)
    if out:
        directory = Path(out)
    else:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", sc.name).strip("-") or "scenario"
        directory = Path("runs") / f"{stamp}-sim-{slug}"
    if replications is not None or varied is not None:
        from tailwise.errors import MissingExtra
        from tailwise.report.plot import vary_p99_vs_throughput

        with study_text.progress_bar(sys.stderr.isatty() and not quiet) as tick:
            if varied is not None:
                doc = study.vary(sc, *varied, replications or 1, tick)
            else:
                doc = study.replications(sc, replications or 2, tick)
        saved = directory / ("vary.json" if varied else "replications.json")
        try:
            directory.mkdir(parents=True, exist_ok=True)
            saved.write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            raise BadInput(
                "--out", str(directory), f"a writable directory ({exc.strerror})"
            ) from None
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
        sys.exit(study.exit_code(doc))
    result = run_scenario(sc)
    write_run(directory, result, sc)
    if as_json:
        click.echo(json.dumps(result.summary, indent=2))
    if not quiet:
        print_summary(result.summary, str(directory), stderr=as_json)
        sim = result.summary["sim"]
        line = f"simulated {sim['requests']} requests in {sim['wall_s']:.2f}s ({sim['engine']})"
        if "legs" in sim:
            line += f"; extra load {sim['legs']['extra_load']:.1%} of requests"
        click.echo(line, err=as_json)
    sys.exit({"pass": 0, "fail": 1, "invalid": 3}[result.summary["verdict"]])


@cli.command()
@click.option("--window", default="6s", show_default=True, help="Measurement window per step.")
@click.option("--rates", help="Offered rates to sweep (default 4,8,...,32,40).")
def demo(window: str, rates: str | None) -> None:
    """Start the built-in LLM server and sweep it past its knee (no server of your own needed)."""
    from tailwise.demo import DEMO_RATES, run_demo
    from tailwise.loadgen.sweep import parse_rates

    chosen = parse_rates(rates) if rates else list(DEMO_RATES)
    if chosen is None:
        raise BadInput("--rates", rates, "a list of rates (auto is for tailwise sweep)")
    sys.exit(run_demo(window, tuple(chosen)))


_SERVE_OPTIONS = [
    ("--model", "tailwise-demo", "llm/embed: the served model name."),
    ("--step-base", "4ms", "llm: fixed cost of an engine step (a)."),
    ("--per-prefill-token", "20us", "llm: cost per prompt token prefilled in a step (b)."),
    ("--per-seq", "300us", "llm: cost per decoding sequence in a step (c)."),
    ("--max-num-seqs", "32", "llm: batch slots."),
    ("--kv-cache-tokens", "131072", "llm: KV budget; admission waits when full."),
    ("--chunked-prefill", "0", "llm: prefill token budget per step (0: off)."),
    ("--max-waiting", "128", "llm: waiting queue bound; full -> 429."),
    ("--max-model-len", "4096", "llm: context limit; longer -> 400."),
    ("--request-timeout", "60s", "llm: server-side deadline per request."),
    ("--max-batch", "32", "embed: inputs per batch."),
    ("--max-wait", "5ms", "embed: longest wait for a batch to fill."),
    ("--batch-base", "4ms", "embed: fixed cost of a batch (c0)."),
    ("--per-item", "900us", "embed: cost per input in a batch (c1)."),
    ("--max-waiting-inputs", "4096", "embed: queue bound in inputs; full -> 429."),
    ("--dim", "16", "embed: embedding dimension."),
    ("--workers", "4", "http: FCFS workers (0: unlimited)."),
    ("--service", "exp:5ms", "http: service time, <duration> or exp:<duration>."),
]


def _serve_options(f: F) -> F:
    for name, default, help_text in reversed(_SERVE_OPTIONS):
        f = click.option(name, default=default, show_default=True, help=help_text)(f)
    return f


@cli.command("serve-demo")
@click.option(
    "--kind", type=click.Choice(["llm", "embed", "http"]), default="llm", show_default=True
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int, help="0 picks a free port.")
@click.option("--lifetime", help="Exit after this long (default: until Ctrl-C).")
@_serve_options
@click.option("--straggler", help="http: e.g. 1%x10, one request in 100 is 10x slower.")
@click.option("--stall", help="http: S/P, e.g. 1s/10s: stall 1 s every 10 s.")
@click.option("--seed", default=0, show_default=True, type=int, help="http: service-time seed.")
def serve_demo(host: str, port: int, lifetime: str | None, **kw: Any) -> None:
    """Serve a built-in target (llm, embed or http) whose capacity is known in closed form."""
    from tailwise.server.apps import config_from_options, describe, serve
    from tailwise.units import parse_duration_ns

    cfg = config_from_options(kw)
    lifetime_s = parse_duration_ns(lifetime, "--lifetime") / 1e9 if lifetime else None
    click.echo(describe(cfg), err=True)
    serve(cfg, host, port, lifetime_s)


@cli.command()
@click.option(
    "--listen",
    default="127.0.0.1:8001",
    show_default=True,
    help="HOST:PORT to accept on (port 0 picks a free one).",
)
@click.option("--to", "upstream", required=True, help="HOST:PORT of the target.")
@click.option("--delay", help="Added latency per request: 5ms, exp:5ms, lognormal:5ms,0.5, ...")
@click.option("--stall", help="S/P: nothing passes for S at the start of every period P (1s/10s).")
@click.option("--slow", help="P%xK: a share of requests K times slower to first byte (1%x10).")
@click.option("--reset", help="Share of requests answered with a connection reset (1%).")
@click.option("--drop", help="Share of requests swallowed: never forwarded, never answered.")
@click.option("--truncate", help="Share of responses cut after their first body bytes.")
@click.option("--bandwidth", help="Per connection and direction: 1MB/s, 512KiB/s, 10Mbit/s.")
@click.option("--schedule", help="Faults on only in these windows of proxy time: 5s-15s,30s-40s.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the fault draws.")
@click.option(
    "--log",
    "log_path",
    default="proxy-truth.jsonl",
    show_default=True,
    help="Ground truth: one JSON line per request (no header values).",
)
@click.option("--lifetime", help="Exit after this long (default: until Ctrl-C).")
def proxy(listen: str, upstream: str, log_path: str, lifetime: str | None, **kw: Any) -> None:
    """Forward HOST:PORT through injected faults, logging what was done to each request."""
    from tailwise.proxy.faults import parse_address, parse_faults
    from tailwise.proxy.server import ProxyConfig, serve
    from tailwise.units import parse_duration_ns

    cfg = ProxyConfig(
        listen=parse_address(listen, "--listen"),
        upstream=parse_address(upstream, "--to"),
        faults=parse_faults(**kw),
        log_path=Path(log_path),
    )
    lifetime_s = parse_duration_ns(lifetime, "--lifetime") / 1e9 if lifetime else None
    serve(cfg, lifetime_s)


@cli.command()
@click.argument("a")
@click.argument("b")
@click.option(
    "--threshold",
    default="10%",
    show_default=True,
    help="Relative worsening of B against A that counts as a regression.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON to stdout.")
def compare(a: str, b: str, threshold: str, as_json: bool) -> None:
    """Compare run B with run A (or sweep B with sweep A); exit 1 if B regressed."""
    from tailwise.report.compare import compare_dirs, parse_threshold, print_comparison

    result = compare_dirs(a, b, parse_threshold(threshold))
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    print_comparison(result, stderr=as_json)
    sys.exit(result.exit_code)


@cli.command()
@click.argument("directory", metavar="DIR")
@click.option(
    "--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True
)
@click.option("--out", help="Output file (default DIR/records.csv or DIR/records.parquet).")
def export(directory: str, fmt: str, out: str | None) -> None:
    """Write a run's records, with derived latency columns, as CSV or Parquet."""
    from tailwise.report.export import export as export_records

    path, rows = export_records(directory, fmt, out)
    click.echo(f"wrote {rows} records to {path}", err=True)


@cli.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN_OR_SWEEP_DIR...")
@click.option("-o", "--out", default="model.yaml", show_default=True, help="Model file to write.")
@click.option(
    "--kind",
    type=click.Choice(["http", "batching", "llm"]),
    help="Endpoint model (default: from the runs' --api).",
)
@click.option(
    "--service",
    type=click.Choice(["auto", "empirical", "gamma", "lognormal"]),
    default="auto",
    show_default=True,
    help="http: service-time law (auto keeps the best fit).",
)
@click.option("--max-batch", type=int, help="batching: the endpoint's batch limit.")
@click.option("--max-wait", help="batching: its longest wait for a batch to fill, e.g. 5ms.")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON.")
def calibrate(
    runs: tuple[str, ...],
    out: str,
    kind: str | None,
    service: str,
    max_batch: int | None,
    max_wait: str | None,
    as_json: bool,
) -> None:
    """Fit a simulator model to measured runs (a sweep is best); exit 1 if the fit is poor."""
    from rich.console import Console

    from tailwise.calibrate import as_plan, write_model
    from tailwise.calibrate import calibrate as fit_runs
    from tailwise.report.plan import print_plan
    from tailwise.units import parse_duration_ns

    wait_ms = parse_duration_ns(max_wait, "--max-wait") / 1e6 if max_wait else None
    console = Console(stderr=True)
    with console.status("fitting ...") as status:

        def progress(evaluations: int, error: float) -> None:
            status.update(f"fitting: {evaluations} simulated fits, best error {error:.3f}")

        cal = fit_runs(
            [Path(r) for r in runs],
            kind=kind,
            service=service,
            max_batch=max_batch,
            max_wait_ms=wait_ms,
            progress=progress,
        )
    written = write_model(cal, Path(out))
    if as_json:
        click.echo(json.dumps(cal.to_json(), indent=2))
    else:
        print_plan(as_plan(cal, written))
    sys.exit(1 if cal.goodness.poor else 0)


@cli.group()
def plan() -> None:
    """Capacity planning from closed forms (docs/plan.md): each model prints a table, or --json."""


def _json_flag(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")(f)


def _emit(result: Any, as_json: bool) -> None:
    from tailwise.report.plan import print_plan

    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        print_plan(result)
    sys.exit(0)


@plan.command("little", short_help="Little's law: any two of L, lambda, W give the third.")
@click.option("--concurrency", help="L: mean requests in flight, e.g. 32.")
@click.option("--rate", help="lambda: throughput, e.g. 800/s.")
@click.option("--latency", help="W: mean latency, e.g. 40ms.")
@_json_flag
def plan_little(
    concurrency: str | None, rate: str | None, latency: str | None, as_json: bool
) -> None:
    """Little's law L = lambda W: give any two of --concurrency, --rate, --latency."""
    from tailwise import plan as p
    from tailwise.units import parse_duration_ns, parse_rate_rps

    _emit(
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
    "--utilization", default="100%", show_default=True, help="Ceiling on per-replica use."
)
@click.option("--headroom", default="0%", show_default=True, help="Extra traffic to absorb.")
@click.option("--spares", default="0", show_default=True, help="Replicas that may fail (N+k).")
@_json_flag
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
    from tailwise.units import parse_count, parse_duration_ns, parse_fraction, parse_rate_rps

    _emit(
        p.replicas(
            rate_rps=parse_rate_rps(rate, "--rate"),
            latency_s=parse_duration_ns(latency, "--latency", allow_zero=False) / 1e9,
            per_replica=p.parse_positive(per_replica, "--per-replica"),
            utilization=parse_fraction(utilization, "--utilization"),
            headroom=parse_fraction(headroom, "--headroom"),
            spares=parse_count(spares, "--spares", minimum=0),
        ),
        as_json,
    )


@plan.command("queue", short_help="M/M/1, M/M/c, M/G/1: waits, tails, the load an SLO allows.")
@click.option("--servers", default="1", show_default=True, help="c: servers (M/M/c).")
@click.option("--service", help="Mean service time per request, e.g. 5ms.")
@click.option("--utilization", help="Load(s) as utilization: 50%,80%,90%.")
@click.option("--rate", help="Load(s) as arrival rates: 100/s,150/s (needs --service).")
@click.option("--cv", help="Service-time coefficient of variation: M/G/1 (--servers 1).")
@click.option("--slo", help="Latency target to find the highest load for: p99<=50ms, mean<=20ms.")
@_json_flag
def plan_queue(
    servers: str,
    service: str | None,
    utilization: str | None,
    rate: str | None,
    cv: str | None,
    slo: str | None,
    as_json: bool,
) -> None:
    """M/M/1, M/M/c (Erlang C) or M/G/1 (Pollaczek-Khinchine): waits, queues, percentiles."""
    from tailwise import plan as p
    from tailwise.units import parse_count, parse_duration_ns, parse_rate_rps

    _emit(
        p.queue(
            servers=parse_count(servers, "--servers"),
            service_s=parse_duration_ns(service, "--service", allow_zero=False) / 1e9
            if service
            else None,
            utilizations=p.parse_utilizations(utilization) if utilization else None,
            rates_rps=p.parse_list(rate, "--rate", parse_rate_rps) if rate else None,
            cv=p.parse_positive(cv, "--cv", "a number >= 0, e.g. 0.5", allow_zero=True)
            if cv
            else None,
            slo=p.parse_latency_slo(slo) if slo else None,
        ),
        as_json,
    )


@plan.command("amdahl", short_help="Amdahl's law over pipeline stages; a latency budget.")
@click.option("--stage", multiple=True, help="NAME=SHARE or NAME=TIME: model=70%, model=1400ms.")
@click.option("--speedup", multiple=True, help="NAME=FACTOR: model=2 (repeatable; inf allowed).")
@click.option("--budget", multiple=True, help="NAME=TIME: the stage's latency budget.")
@click.option("--total-budget", help="End-to-end latency budget, e.g. 3000ms.")
@_json_flag
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
    _emit(
        p.amdahl(
            stages=stages, times=times, speedups=speedups, budgets=budgets, total_budget_s=total
        ),
        as_json,
    )


@plan.command("fanout", short_help="Fan-out: P(slow) = 1 - q^n; the tail each backend needs.")
@click.option("--fanout", "fanouts", required=True, help="n: calls per request, e.g. 10,40,100.")
@click.option("--backend-fast", help="q: P(one call is fast), e.g. 99% for its p99.")
@click.option("--target", help="Share of requests that must be fast end to end, e.g. 99%.")
@_json_flag
def plan_fanout(fanouts: str, backend_fast: str | None, target: str | None, as_json: bool) -> None:
    """Fan-out: P(slow) = 1 - q^n, and the per-backend tail a target needs."""
    from tailwise import plan as p
    from tailwise.units import parse_count, parse_fraction

    _emit(
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
@_json_flag
def plan_availability(up: str, machines: str, need: str | None, as_json: bool) -> None:
    """Availability of all-of-M (r^M) or k-of-M (binomial) fleets; expected healthy machines."""
    from tailwise import plan as p
    from tailwise.units import parse_count, parse_fraction

    _emit(
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
@_json_flag
def plan_cost(
    dollars_per_hour: str,
    utilization: str,
    peak_rate: str | None,
    per_replica: str | None,
    latency: str | None,
    peak_tokens: str | None,
    replicas: str | None,
    rate: str | None,
    as_json: bool,
) -> None:
    """Cost per request, per token and per 1M of each; a fleet's cost per hour."""
    from tailwise import plan as p
    from tailwise.units import parse_count, parse_duration_ns, parse_fraction, parse_rate_rps

    if bool(per_replica) != bool(latency) or (peak_rate and per_replica):
        raise BadInput("--per-replica", per_replica, "--per-replica with --latency, or --peak-rate")
    peak = parse_rate_rps(peak_rate, "--peak-rate") if peak_rate else None
    if per_replica and latency:
        n = p.parse_positive(per_replica, "--per-replica")
        peak = n / (parse_duration_ns(latency, "--latency", allow_zero=False) / 1e9)
    _emit(
        p.cost(
            dollars_per_hour=p.parse_positive(dollars_per_hour, "--dollars-per-hour"),
            utilization=parse_fraction(utilization, "--utilization"),
            peak_rps=peak,
            peak_tps=parse_rate_rps(peak_tokens, "--peak-tokens") if peak_tokens else None,
            replicas=parse_count(replicas, "--replicas") if replicas else None,
            rate_rps=parse_rate_rps(rate, "--rate") if rate else None,
        ),
        as_json,
    )


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
@_json_flag
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
    as_json: bool,
) -> None:
    """Replicas needed for --rate under the SLOs, the knee per replica and of the fleet,
    and p50/p99 at the target with 95% CIs from simulated replications."""
    from rich.console import Console

    from tailwise.sim.scenario import load_scenario
    from tailwise.sim.whatif import WhatIf, capacity, with_slos
    from tailwise.units import parse_rate_rps

    rate_rps = parse_rate_rps(rate, "--rate")
    if replicas is not None and replicas < 1:
        raise BadInput("--replicas", replicas, "a count >= 1")
    if replications < 2:
        raise BadInput("--replications", replications, "at least 2 (a CI needs two runs)")
    sc = with_slos(load_scenario(model_path), list(slo))
    what = WhatIf(replicas, router, batch_size, hedge, sets)
    with Console(stderr=True).status("planning ...") as status:
        result = capacity(sc, rate_rps, what, replications, status.update)
    _emit(result, as_json)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes become one line on stderr and exit code 2."""
    try:
        cli.main(args=argv, prog_name="tailwise", standalone_mode=False)
    except BadInput as exc:
        click.echo(f"tailwise: error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("tailwise: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        where = f"{exc.ctx.command_path}: " if exc.ctx else ""
        click.echo(f"tailwise: error: {where}{exc.format_message()} (see --help)", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"tailwise: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except Exception:
        # A bug, not a user mistake: show everything, with a code no verdict uses.
        import traceback

        traceback.print_exc()
        click.echo(
            "tailwise: internal error (exit 4); please report it with the output above", err=True
        )
        sys.exit(4)
