"""Fit a simulator model to measured runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tailwise.errors import ExitCode


@click.command()
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
@click.option(
    "--slots",
    type=int,
    help="llm: the server's slot count (vLLM --max-num-seqs, llama.cpp -np), when known: "
    "not fitted (llama.cpp tells it itself).",
)
@click.option(
    "--prefill-chunk",
    type=int,
    help="llm: prompt tokens a step may carry beside the decodes (vLLM chunked prefill's "
    "token budget); 0: prompts get steps of their own (default; llama.cpp: 2048).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON.")
def calibrate(
    runs: tuple[str, ...],
    out: str,
    kind: str | None,
    service: str,
    max_batch: int | None,
    max_wait: str | None,
    slots: int | None,
    prefill_chunk: int | None,
    as_json: bool,
) -> None:
    """Fit a simulator model to measured runs (a sweep is best); exit 1 if the fit is poor."""
    from tailwise.calibrate import as_plan, write_model
    from tailwise.calibrate import calibrate as fit_runs
    from tailwise.cli.progress import phases
    from tailwise.report.plan import print_plan
    from tailwise.units import parse_duration_ns

    wait_ms = parse_duration_ns(max_wait, "--max-wait") / 1e6 if max_wait else None
    with phases("calibrate", f"reading {len(runs)} run{'s' if len(runs) != 1 else ''} ...") as tell:

        def progress(evaluations: int, error: float) -> None:
            tell(f"fitting: {evaluations} simulated fits, best error {error:.3f}", "fitting")

        cal = fit_runs(
            [Path(r) for r in runs],
            kind=kind,
            service=service,
            max_batch=max_batch,
            max_wait_ms=wait_ms,
            progress=progress,
            slots=slots,
            prefill_chunk=prefill_chunk,
        )
    written = write_model(cal, Path(out))
    if as_json:
        click.echo(json.dumps(cal.to_json(), indent=2))
    else:
        print_plan(as_plan(cal, written))
    sys.exit(ExitCode.FAIL if cal.goodness.poor else ExitCode.PASS)
