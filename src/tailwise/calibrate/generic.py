"""Fitting a generic HTTP endpoint, and a batching one, from latency against load.

**Generic endpoint: c servers, a service law, a delay.** The model is c FCFS
servers (an M/G/c queue) plus a delay D outside them (network, framework,
event-loop wake-ups) that adds to every latency but holds no server.

* Capacity: no throughput ever exceeds it, so the highest measured throughput
  X_sat estimates c / E[S] when some step was saturated (Little's law on the
  busy servers: c = X_sat E[S]).
* At the lowest load almost nothing queues, so latency there is D + S: its
  mean gives E[S] + D, its spread gives S's shape.
* For each c with c / X_sat <= that mean, E[S] = c / X_sat and D is the rest.
  Service shapes are tried three ways: the low-load latencies shifted by D
  (empirical), and a gamma and a lognormal with the same mean and variance.
  The (c, shape) whose simulated steps match the measured ones best wins.

Without a saturated step capacity is unknown: D is taken as 0, every c is
tried against the latency curve, and the result says so.

**Batching endpoint (dynamic batches of up to B inputs, waiting at most w).**
A batch of b costs c0 + c1 b. A saturated endpoint runs full batches, so
X_sat = B / (c0 + c1 B); a lone request at low load waits w and then runs
alone, so its latency is w + c0 + c1 + D. For each c1 on a grid, c0 follows
from X_sat and D from the low-load mean; the simulated fit picks c1.
"""

from __future__ import annotations

import atexit
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailwise.calibrate.fit import calm_steps, score
from tailwise.calibrate.steps import Step
from tailwise.errors import BadInput

SHAPES = ("empirical", "gamma", "lognormal")
MAX_SERVERS = 256
FIT_REQUESTS = 8_000  # per step while searching; the final table uses more


@dataclass
class Fit:
    """A fitted model: scenario fields, the numbers behind them, and caveats."""

    kind: str
    model: dict[str, Any]
    params: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    samples_ms: np.ndarray | None = None  # empirical service law, written beside the model


def _candidates(c_max: int) -> list[int]:
    """Every c up to 16, then a geometric grid: the fit flattens as c grows."""
    small = list(range(1, min(c_max, 16) + 1))
    big = sorted({round(16 * 1.25**k) for k in range(1, 40)} & set(range(17, c_max + 1)))
    return small + big


def service_form(shape: str, mean_ms: float, scv: float) -> str:
    """A distribution string with this mean and squared coefficient of variation."""
    if scv <= 1e-6:
        return f"{mean_ms:.6g}ms"
    if shape == "gamma":
        return f"gamma:{mean_ms:.6g}ms,{1 / scv:.6g}"
    sigma = math.sqrt(math.log1p(scv))
    return f"lognormal:{mean_ms / math.exp(sigma * sigma / 2):.6g}ms,{sigma:.6g}"


def _shifted(latency_ms: np.ndarray, delay_ms: float, mean_ms: float) -> np.ndarray:
    """Low-load latencies less the delay, floored, rescaled to the service mean."""
    s = np.maximum(latency_ms - delay_ms, 0.01 * mean_ms)
    out: np.ndarray = s * (mean_ms / s.mean())
    return out


def fit_http(steps: list[Step], shapes: tuple[str, ...] = SHAPES) -> Fit:
    low = steps[0]
    lat_ms = low.latency_ms()
    mean_ms, var_ms2 = float(lat_ms.mean()), float(lat_ms.var())
    x_sat = max(s.throughput_rps for s in steps)
    saturated = any(s.saturated for s in steps)
    notes: list[str] = []
    if saturated:
        # c <= X_sat E[latency] keeps D >= 0; a quarter more allows for a low-load mean
        # that came out low by chance (D is then 0).
        c_max = max(1, min(MAX_SERVERS, int(1.25 * mean_ms / 1e3 * x_sat) + 1))
    else:
        c_max = MAX_SERVERS
        notes.append(
            "no step reached saturation: capacity is extrapolated from the latency curve; "
            "add a rate past the knee for a firmer fit"
        )
    calm = calm_steps(steps)
    best: tuple[float, dict[str, Any], dict[str, Any], np.ndarray | None] | None = None
    best_c = 0
    for c in _candidates(c_max):
        svc_ms = c / x_sat * 1e3 if saturated else mean_ms
        delay_ms = max(mean_ms - svc_ms, 0.0)
        samples = _shifted(lat_ms, delay_ms, svc_ms)
        c_err = math.inf
        for shape in shapes:
            scv = float(samples.var() / svc_ms**2) if shape == "empirical" else var_ms2 / svc_ms**2
            keep = samples if shape == "empirical" else None
            form = "empirical" if keep is not None else service_form(shape, svc_ms, scv)
            model = _http_model(c, form, delay_ms, keep)
            err = score(model, calm, FIT_REQUESTS)
            c_err = min(c_err, err)
            if best is None or err < best[0]:
                params = {
                    "servers": c,
                    "service_mean_ms": round(svc_ms, 4),
                    "service_scv": round(scv, 4),
                    "service_shape": shape,
                    "delay_ms": round(delay_ms, 4),
                    "capacity_rps": round(c / svc_ms * 1e3, 2),
                    "highest_throughput_rps": round(x_sat, 2),
                    "capacity_from": "a saturated step" if saturated else "extrapolation",
                }
                best, best_c = (err, model, params, keep), c
        if best is not None and c > best_c + 2 and c_err > 2 * best[0]:
            break  # past the best c the fit only worsens
    assert best is not None
    _, model, params, kept = best
    return Fit("http", model, params, notes, kept)


def _http_model(
    c: int, service: str, delay_ms: float, samples: np.ndarray | None
) -> dict[str, Any]:
    model: dict[str, Any] = {"servers": c, "service": service}
    if samples is not None:
        model["service"] = f"empirical:{_scratch(samples)}"
    if delay_ms > 0:
        model["delay"] = f"{delay_ms:.6g}ms"
    return model


_SCRATCH_DIR: list[str] = []


def _scratch(samples: np.ndarray) -> str:
    """A temporary file of ``samples`` (ms) for the simulator to resample; the
    directory goes when the process ends, and the chosen law is copied beside the model."""
    if not _SCRATCH_DIR:
        _SCRATCH_DIR.append(tempfile.mkdtemp(prefix="tailwise-calibrate-"))
        atexit.register(shutil.rmtree, _SCRATCH_DIR[0], True)
    fd, name = tempfile.mkstemp(suffix=".txt", dir=_SCRATCH_DIR[0])
    with open(fd, "w") as f:
        np.savetxt(f, samples, fmt="%.6f")
    return name


def fit_batching(steps: list[Step], max_batch: int | None, max_wait_ms: float | None) -> Fit:
    if max_batch is None or max_wait_ms is None:
        missing = "--max-batch" if max_batch is None else "--max-wait"
        raise BadInput(missing, None, "the endpoint's batch limit and fill wait (e.g. 32 and 5ms)")
    low = steps[0]
    mean_ms = float(low.latency_ms().mean())
    x_sat = max(s.throughput_rps for s in steps)
    notes: list[str] = ["one input per request assumed (a request's inputs share a batch)"]
    if not any(s.saturated for s in steps):
        notes.append("no step reached saturation: c0 + c1 B rests on the highest throughput seen")
    cycle_ms = max_batch / x_sat * 1e3  # c0 + c1 B at saturation
    calm = calm_steps(steps)
    best: tuple[float, dict[str, Any], dict[str, Any]] | None = None
    for k in range(0, 21):
        c1_ms = cycle_ms / max_batch * k / 20
        c0_ms = cycle_ms - c1_ms * max_batch
        delay_ms = mean_ms - (max_wait_ms + c0_ms + c1_ms)
        if delay_ms < 0 and best is not None:
            continue
        model: dict[str, Any] = {
            "batching": {
                "mode": "dynamic",
                "size": max_batch,
                "max_wait": f"{max_wait_ms:.6g}ms",
                "base": f"{c0_ms:.6g}ms",
                "per_item": f"{c1_ms:.6g}ms",
            }
        }
        if delay_ms > 0:
            model["delay"] = f"{delay_ms:.6g}ms"
        err = score(model, calm, FIT_REQUESTS)
        if best is None or err < best[0]:
            params = {
                "c0_ms": round(c0_ms, 4),
                "c1_ms": round(c1_ms, 4),
                "max_batch": max_batch,
                "max_wait_ms": max_wait_ms,
                "delay_ms": round(max(delay_ms, 0.0), 4),
                "capacity_rps": round(x_sat, 2),
            }
            best = (err, model, params)
    assert best is not None
    return Fit("batching", best[1], best[2], notes)
