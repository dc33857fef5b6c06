"""The fault-injecting proxy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


@click.command()
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
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    help="Client connections served at once; more wait to be accepted "
    "(default 4096, or half the open-file limit).",
)
def proxy(
    listen: str,
    upstream: str,
    log_path: str,
    lifetime: str | None,
    max_connections: int | None,
    **kw: Any,
) -> None:
    """Forward HOST:PORT through injected faults, logging what was done to each request."""
    from tailwise.proxy.faults import parse_address, parse_faults
    from tailwise.proxy.server import ProxyConfig, serve
    from tailwise.units import parse_duration_ns

    cfg = ProxyConfig(
        listen=parse_address(listen, "--listen"),
        upstream=parse_address(upstream, "--to"),
        faults=parse_faults(**kw),
        log_path=Path(log_path),
        max_connections=max_connections or 0,
    )
    lifetime_s = parse_duration_ns(lifetime, "--lifetime") / 1e9 if lifetime else None
    serve(cfg, lifetime_s)
