"""What run, sweep and knee do around their runs: the preflight, the live dashboard, and
the target as their outputs show it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tailwise.errors import BadInput
from tailwise.files import output_directory


def dashboard_args(kw: dict[str, Any]) -> int | None:
    """--dashboard's port (0: a free one), or None without --dashboard; both keys taken."""
    asked, port = kw.pop("dashboard", False), kw.pop("dashboard_port", 0)
    if asked and not 0 <= port <= 65535:
        raise BadInput("--dashboard-port", port, "a port from 0 (a free one) to 65535")
    return port if asked else None


@contextlib.contextmanager
def dashboard(port: int | None, title: str) -> Iterator[Any]:
    """The live page of ``--dashboard`` for the length of the block (None without it)."""
    if port is None:
        yield None
        return
    from tailwise.loadgen.execute import live
    from tailwise.report.dashboard import Dashboard

    try:
        board = Dashboard(title, port)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise BadInput("--dashboard-port", port, f"a free port on 127.0.0.1 ({why})") from None
    click.echo(f"dashboard {board.url}  (live until the command ends)", err=True)
    try:
        with live.listening(board.add):
            yield board
    finally:
        board.close()


def preflight(prepared: Any, checked: bool) -> dict[str, Any] | None:
    """One cheap request to each target before anything is planned (``--no-preflight``:
    none); a failure raises PreflightFailed, which exits with its own code."""
    if not checked:
        return None
    from tailwise.loadgen.prepare.preflight import check

    o = prepared.opts
    if o.out:  # an occupied or read-only --out is bad input (exit 2): found before sending
        output_directory(Path(o.out), force=o.force, create=False)
    return check(prepared)


def shown_target(opts: Any) -> str:
    """The URLs as a run's outputs show them: the API's path, no credentials, query values
    masked (a gateway's ?key=...)."""
    from tailwise.loadgen.llm.openai import api_url
    from tailwise.loadgen.transport.targets import parse_url

    urls = [api_url(u, opts.api) if opts.api else u for u in opts.urls]
    return ", ".join(parse_url(u).url for u in urls)
