"""One run, top to bottom: prepare, execute (here or across workers), conclude.

The stages, each a module a reader can follow downward:

1. :mod:`~tailwise.loadgen.prepare.plan`: options -> :class:`Prepared` (every input
   validated before anything starts);
2. :mod:`~tailwise.loadgen.execute.local` runs the plan in this process, or
   :mod:`~tailwise.loadgen.scale.driver` splits it across worker processes or Ray
   actors that each run the single-process engine;
3. :mod:`~tailwise.loadgen.conclude`: summary, verdict and output files.

This module only chooses between them; the CLI, sweeps, knee trials and the
Python API (:func:`run`) all come through :func:`execute`. Once started, a run
always ends with a complete directory: ``records.jsonl`` (appended during the
run), ``summary.json``, ``latency.hlog`` and ``run.json`` (the configuration,
with header values left out), even when interrupted.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tailwise.errors import BadInput
from tailwise.loadgen.conclude import RunResult, conclude, write_summary
from tailwise.loadgen.execute.local import execute_local, no_interrupts
from tailwise.loadgen.observe.gpu_metrics import GpuSampler
from tailwise.loadgen.observe.server_metrics import Scraper
from tailwise.loadgen.observe.server_props import probe
from tailwise.loadgen.prepare.plan import Prepared, RunOptions, prepare, run_directory
from tailwise.loadgen.scale.driver import execute_scaled
from tailwise.loadgen.transport import Transport

__all__ = ["Prepared", "RunOptions", "RunResult", "execute", "prepare", "run", "run_directory"]


def execute(p: Prepared, directory: Path, transport: Transport | None = None) -> RunResult:
    """Run a prepared plan into ``directory``: in this process, or scaled out when asked."""
    if p.scaled_out and transport is not None:
        raise BadInput("transport", "given", "the HTTP transport with --workers or --ray")
    # llama.cpp says how many slots it has: a fact calibrate must not guess (one GET;
    # --server-metrics off asks the server for nothing but the run's requests).
    asks = p.ask_server and transport is None
    info = probe(p.targets[0].url) if asks else None
    scraper = Scraper(p.scrape, directory) if p.scrape is not None else None
    scraping = scraper.start() if scraper is not None else False
    sampler = GpuSampler(p.gpu, directory) if p.gpu is not None else None
    try:
        if sampler is not None:
            sampler.start()
        if p.scaled_out:
            result = execute_scaled(p, directory)
        else:
            executed = execute_local(p, directory, transport)
            with no_interrupts():  # Ctrl-C while outputs are written must not leave half a run
                result = conclude(p, executed, directory)
    finally:
        if scraper is not None:
            scraper.stop()
        if sampler is not None:
            sampler.stop()
    if scraper is not None or info is not None or sampler is not None:
        with no_interrupts():
            sections: dict[str, Any] = {}
            if info is not None:
                sections["server_info"] = info
            if scraper is not None:
                sections["server_metrics"] = _server_metrics(p, result, scraper, scraping)
            if sampler is not None:
                confidence = result.summary.confidence
                sections["gpu"] = sampler.finish(
                    result.t0_unix_s,
                    result.window_ns,
                    result.records,
                    p.slos,
                    p.streaming,
                    float(p.confidence if confidence is None else confidence),
                )
            result = dataclasses.replace(result, summary=result.summary.with_sections(**sections))
            write_summary(result.directory, result.summary)
    return result


def _server_metrics(p: Prepared, result: RunResult, scraper: Scraper, scraping: bool) -> Any:
    """The server's side of the run in ``summary.json`` (rewritten), beside the client's."""
    if scraping:
        return scraper.finish(result.t0_unix_s, result.window_ns, result.records, p.streaming)
    return {"url": scraper.plan.url, "note": scraper.note}


def run(url: str | list[str], **options: Any) -> RunResult:
    """Python API: ``tailwise.run("http://...", rate="100/s", duration="10s", slo=[...])``."""
    urls = [url] if isinstance(url, str) else list(url)
    if isinstance(options.get("rate"), int | float):
        options["rate"] = f"{options['rate']}/s"
    o = RunOptions(urls=urls, **options)
    p = prepare(o)
    directory = run_directory(o, p.targets[0])
    return execute(p, directory)
