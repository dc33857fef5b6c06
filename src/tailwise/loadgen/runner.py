"""One run, top to bottom: prepare, execute (here or across workers), conclude.

The stages, each a module a reader can follow downward:

1. :mod:`~tailwise.loadgen.prepare`: options -> :class:`Prepared` (every input
   validated before anything starts);
2. :mod:`~tailwise.loadgen.execute` runs the plan in this process, or
   :mod:`~tailwise.loadgen.scale` splits it across worker processes or Ray
   actors that each run the single-process engine;
3. :mod:`~tailwise.loadgen.conclude`: summary, verdict and output files.

This module only chooses between them; the CLI, sweeps, knee trials and the
Python API (:func:`run`) all come through :func:`execute`. Once started, a run
always ends with a complete directory: ``records.jsonl`` (appended during the
run), ``summary.json``, ``latency.hlog`` and ``run.json`` (the configuration,
with header values left out), even when interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tailwise.errors import BadInput
from tailwise.loadgen.conclude import RunResult, conclude
from tailwise.loadgen.execute import execute_local, no_interrupts
from tailwise.loadgen.prepare import Prepared, RunOptions, prepare, run_directory
from tailwise.loadgen.scale import execute_scaled
from tailwise.loadgen.transport import Transport

__all__ = ["Prepared", "RunOptions", "RunResult", "execute", "prepare", "run", "run_directory"]


def execute(p: Prepared, directory: Path, transport: Transport | None = None) -> RunResult:
    """Run a prepared plan into ``directory``: in this process, or scaled out when asked."""
    if p.scaled_out:
        if transport is not None:
            raise BadInput("transport", "given", "the HTTP transport with --workers or --ray")
        return execute_scaled(p, directory)
    executed = execute_local(p, directory, transport)
    with no_interrupts():  # Ctrl-C while outputs are written must not leave half a run
        return conclude(p, executed, directory)


def run(url: str | list[str], **options: Any) -> RunResult:
    """Python API: ``tailwise.run("http://...", rate="100/s", duration="10s", slo=[...])``."""
    urls = [url] if isinstance(url, str) else list(url)
    if isinstance(options.get("rate"), int | float):
        options["rate"] = f"{options['rate']}/s"
    o = RunOptions(urls=urls, **options)
    p = prepare(o)
    directory = run_directory(o, p.targets[0])
    return execute(p, directory)
