"""Work on saved runs: report, compare and export."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("-q", "--quiet", is_flag=True, help="Write the files; print nothing.")
def report(directory: Path, quiet: bool) -> None:
    """Re-render a run, sweep or knee directory: terminal summary, PNG charts, report.html."""
    from tailwise.metrics.shape import read_summary
    from tailwise.report.render import kind_of, render_directory
    from tailwise.report.text import print_summary, print_sweep

    kind = kind_of(directory)
    summary = read_summary(directory / "summary.json", "DIR") if kind == "run" else None
    written = render_directory(directory, summary)
    if not quiet:
        if summary is not None:
            print_summary(summary, str(directory))
        elif kind == "sweep":
            print_sweep(json.loads((directory / "sweep.json").read_text()))
        else:
            from tailwise.cli.measure import print_knee

            print_knee(
                json.loads((directory / "knee.json").read_text()), str(directory), stderr=False
            )
        for path in written:
            click.echo(f"wrote     {path}")


@click.command()
@click.argument("a")
@click.argument("b")
@click.option(
    "--threshold",
    default="10%",
    show_default=True,
    help="Relative worsening of B against A that counts as a regression.",
)
@click.option(
    "--allow-different",
    is_flag=True,
    help="Compare even when A and B ran different workloads (rate, arrival, API, lengths, "
    "duration, source); a warning says which.",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write an HTML report with A and B overlaid on the same charts.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON to stdout.")
def compare(
    a: str,
    b: str,
    threshold: str,
    allow_different: bool,
    report_path: Path | None,
    as_json: bool,
) -> None:
    """Compare run B with run A (or sweep B with sweep A); exit 1 if B regressed.

    A and B must have run the same workload, else exit 2 naming what differs.
    """
    from tailwise.metrics.shape import read_summary
    from tailwise.report.compare import compare_dirs, parse_threshold, print_comparison

    for field, where in (("A", a), ("B", b)):
        if Path(where).name == "summary.json" and Path(where).is_file():
            read_summary(Path(where), field)  # a file, not a directory: what is wrong with it
    result = compare_dirs(a, b, parse_threshold(threshold), allow_different=allow_different)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    print_comparison(result, stderr=as_json)
    if report_path is not None:
        from tailwise.report.render import render_compare

        written = render_compare(Path(a), Path(b), result.to_json(), report_path)
        click.echo(f"report      {written}", err=as_json)
    sys.exit(result.exit_code)


@click.command()
@click.argument("directory", metavar="DIR")
@click.option(
    "--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True
)
@click.option("-o", "--out", help="Output file (default DIR/records.csv or DIR/records.parquet).")
def export(directory: str, fmt: str, out: str | None) -> None:
    """Write a run's records, with derived latency columns, as CSV or Parquet."""
    from tailwise.report.export import export as export_records

    path, rows = export_records(directory, fmt, out)
    click.echo(f"wrote {rows} records to {path}", err=True)
