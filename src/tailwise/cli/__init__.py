"""The command line: one thin function per command; all work happens in the library.

One module per command group (measure, simulate, plan, calibrate, reports, proxy,
demo), shared options in options.py, the group itself in app.py.

Exit codes (one list, :class:`tailwise.errors.ExitCode`; the full table is in
docs/run.md#exit-codes; tests/test_exit_codes.py checks this list against it):

- 0 pass
- 1 an SLO failed (compare: a regression)
- 2 bad input
- 3 invalid run
- 4 internal error
- 5 inconclusive
- 6 target unreachable
- 7 the target refused the preflight request
- 8 an answer from an untrusted model
- 9 this machine failed
- 130 aborted: Ctrl-C before a run began
"""

from __future__ import annotations

import os
import sys

import click

from tailwise.cli.app import cli
from tailwise.errors import ExitCode, PreflightFailed, TailwiseError

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> None:
    """Entry point: an error tailwise raises on purpose becomes one line on stderr and
    its own exit code (bad input 2, a full disk 9, ...); a closed
    pipe (``| head``) ends the output quietly and leaves the command's own exit code;
    every secret value given to this process is scrubbed from what it prints."""
    from tailwise import credentials
    from tailwise.cli.pipes import quiet_pipes

    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (
        credentials.ScrubbedStream(streams[0]),
        credentials.ScrubbedStream(streams[1]),
    )
    credentials.remember(os.environ.get("OPENAI_API_KEY"))
    try:
        with quiet_pipes():
            _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: list[str] | None) -> None:
    try:
        args = list(sys.argv[1:] if argv is None else argv)
        # The command line as typed, for the metadata a report shows (secrets removed there).
        cli.main(args=argv, prog_name="tailwise", standalone_mode=False, obj={"argv": args})
    except TailwiseError as exc:
        # One line, and the exit code the error carries: the one place that reads it.
        # (The preflight's message names itself: "preflight: ...".)
        label = "" if isinstance(exc, PreflightFailed) else "error: "
        click.echo(f"tailwise: {label}{exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("tailwise: aborted", err=True)
        sys.exit(ExitCode.ABORTED)
    except click.UsageError as exc:
        where = f"{exc.ctx.command_path}: " if exc.ctx else ""
        click.echo(f"tailwise: error: {where}{exc.format_message()} (see --help)", err=True)
        sys.exit(ExitCode.BAD_INPUT)
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
        sys.exit(ExitCode.INTERNAL)
