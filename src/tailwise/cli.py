"""The command line: one thin function per command; all work happens in the library.

Exit codes: 0 pass, 1 an SLO failed, 2 bad input, 3 invalid run, 4 internal error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from tailwise import __version__
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
    sys.exit(result.exit_code)


@cli.command()
@click.option("--rate", default="300/s", show_default=True)
@click.option("--duration", default="8s", show_default=True)
def demo(rate: str, duration: str) -> None:
    """Start a built-in loopback target and measure it (no server of your own needed)."""
    from tailwise.demo import run_demo

    sys.exit(run_demo(rate, duration))


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
