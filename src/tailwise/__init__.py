"""tailwise: honest latency, throughput and goodput for AI serving systems.

``tailwise.run(...)`` measures an endpoint with an open-loop load generator and
returns a :class:`tailwise.loadgen.runner.RunResult` with ``.summary`` (the
summary.json dict) and columnar ``.records``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tailwise.version import __version__

if TYPE_CHECKING:
    from tailwise.loadgen.runner import RunResult


def run(url: str | list[str], **options: Any) -> RunResult:
    """Run a load test; see :func:`tailwise.loadgen.runner.run` for the options."""
    from tailwise.loadgen.runner import run as _run

    return _run(url, **options)


__all__ = ["__version__", "run"]
