"""A capacity plan: what a model was given, what it computed and what it assumed.

:meth:`Plan.to_json` is the ``tailwise.plan/1`` document::

    {"schema": "tailwise.plan/1", "tool_version": ..., "model": "replicas",
     "inputs": {...}, "outputs": {...}, "assumptions": [...], "warnings": [...]}

``warnings`` are lines about this plan's own numbers (a fleet sized at its
ceiling, a latency the implied queueing contradicts); printed, never fatal.

Names carry their unit (``_rps``, ``_ms``, ``_usd``); shares and
probabilities are fractions in [0, 1]; an unbounded value is ``null``.
Outputs are scalars, or lists of rows (one per level, stage or fleet size).
The terminal table is :mod:`tailwise.report.plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SCHEMA = "tailwise.plan/1"


@dataclass(frozen=True)
class Plan:
    model: str
    title: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    assumptions: tuple[str, ...]
    command: str = "plan"  # the heading's verb: plan, calibrate
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        from tailwise.version import __version__

        return {
            "schema": SCHEMA,
            "tool_version": __version__,
            "model": self.model,
            "inputs": _finite(self.inputs),
            "outputs": _finite(self.outputs),
            "assumptions": list(self.assumptions),
            "warnings": list(self.warnings),
        }


def _finite(v: Any) -> Any:
    """JSON has no infinity: unbounded values become null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v
