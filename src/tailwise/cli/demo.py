"""The built-in targets: demo (serve and sweep) and serve-demo (serve only)."""

from __future__ import annotations

import sys
from typing import Any

import click

from tailwise.cli.options import invoked_argv, serve_options
from tailwise.errors import BadInput


@click.command()
@click.option(
    "--window",
    default="auto",
    show_default=True,
    help="Measurement window per step: auto (until the SLO is decided, up to 15 s) or e.g. 10s.",
)
@click.option("--rates", help="Offered rates to sweep (default 30,60,80,100,120,150).")
def demo(window: str, rates: str | None) -> None:
    """Start the built-in LLM server and sweep it past its knee (no server of your own needed)."""
    from tailwise.demo import DEMO_RATES, run_demo
    from tailwise.loadgen.sweep import parse_rates

    chosen = parse_rates(rates) if rates else list(DEMO_RATES)
    if chosen is None:
        raise BadInput("--rates", rates, "a list of rates (auto is for tailwise sweep)")
    sys.exit(run_demo(window, tuple(chosen), invoked_argv()))


@click.command("serve-demo")
@click.option(
    "--kind", type=click.Choice(["llm", "embed", "http"]), default="llm", show_default=True
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int, help="0 picks a free port.")
@click.option("--lifetime", help="Exit after this long (default: until Ctrl-C).")
@serve_options
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
