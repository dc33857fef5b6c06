"""The top-level click group, with every command module's commands added to it."""

from __future__ import annotations

import click

from tailwise.cli.calibrate import calibrate
from tailwise.cli.demo import demo, serve_demo
from tailwise.cli.measure import knee, run, sweep
from tailwise.cli.plan import plan
from tailwise.cli.proxy import proxy
from tailwise.cli.reports import compare, export, report
from tailwise.cli.simulate import simulate
from tailwise.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tailwise")
def cli() -> None:
    """tailwise: honest latency, throughput and goodput for AI serving systems."""


for _command in (
    run,
    sweep,
    knee,
    report,
    simulate,
    demo,
    serve_demo,
    proxy,
    compare,
    export,
    calibrate,
    plan,
):
    cli.add_command(_command)
