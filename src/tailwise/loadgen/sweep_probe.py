"""``sweep --rates auto``: find the range by itself, then sweep it open-loop.

1. **Probe**: a short CLOSED-LOOP run with many users (:data:`PROBE_USERS`)
   sends as fast as the target answers; its throughput estimates the most the
   target can complete (vLLM's ``--request-rate inf --max-concurrency N``,
   GuideLLM's ``throughput`` profile). Its latencies are not reported: a closed
   loop hides coordinated omission, and this run only measures capacity.
2. **Sweep**: open-loop steps at fixed fractions of that maximum
   (:data:`FRACTIONS`), from a fifth of it to a quarter past it, lowest first.

Unlike GuideLLM's ``sweep`` profile (synchronous, then throughput, then rates
spaced evenly between the two), the steps here go *past* the probed maximum:
an open-loop rate above capacity is where the queue grows and goodput
collapses, the part of the curve a knee needs on both sides. And no step is
synchronous: one user at a time measures latency without load, which the
lowest open-loop step already shows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from tailwise.errors import BadInput
from tailwise.loadgen.runner import execute, prepare, run_directory
from tailwise.loadgen.sweep import Sweep

PROBE_USERS = 64  # enough to fill the batch slots or workers of most single servers
PROBE_DURATION = "3s"
PROBE_WARMUP = "1s"
FRACTIONS = (0.2, 0.4, 0.6, 0.75, 0.9, 1.0, 1.1, 1.25)


def round_rate(rate: float) -> float:
    """Two significant figures: step directories and tables stay readable."""
    if rate <= 0:
        return rate
    digits = 1 - math.floor(math.log10(rate))
    return round(rate, max(digits, 0))


def auto_rates(max_rps: float, fractions: tuple[float, ...] = FRACTIONS) -> list[float]:
    """The open-loop rates of an auto sweep around a probed maximum, distinct, ascending."""
    if not math.isfinite(max_rps) or max_rps <= 0:
        raise BadInput("--rates auto", f"{max_rps:g}/s probed", "a target that completes requests")
    return sorted({round_rate(max_rps * f) for f in fractions if round_rate(max_rps * f) > 0})


def probe(sweep: Sweep, users: int = PROBE_USERS) -> dict[str, Any]:
    """Run the closed-loop probe into ``<sweep dir>/probe``; what it found, for sweep.json."""
    opts = dataclasses.replace(
        sweep.base,
        rate=None,
        concurrency=users,
        duration=PROBE_DURATION,
        warmup=PROBE_WARMUP,
        requests=None,
        stop_on_slo_loss=False,
        out=str(sweep.out_dir / "probe"),
        label=f"[probe] {users} users",
    )
    prepared = prepare(opts)
    result = execute(prepared, run_directory(opts, prepared.targets[0]))
    s = result.summary
    return {
        "users": users,
        "duration_s": s.window.duration_s,
        "throughput_rps": s.rates.throughput_rps,
        "error_rate": s.rates.error_rate,
        "directory": str(result.directory),
    }


def run_probed(
    sweep: Sweep,
    users: int = PROBE_USERS,
    on_probe: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Probe, then sweep the rates around what it found; the probe's record (also kept
    in ``sweep.extra["probe"]`` for sweep.json). ``on_probe`` sees it before the steps."""
    found = probe(sweep, users)
    sweep.extra["probe"] = found
    if found["throughput_rps"] <= 0:
        sweep.note = "the closed-loop probe completed no request: nothing to sweep"
    else:
        found["rates"] = auto_rates(found["throughput_rps"])
    if on_probe is not None:
        on_probe(found)
    if found.get("rates"):
        sweep.run_rates(found["rates"])
    return found
