"""Cost per unit of work, ``D / (3600 x u x X_max)``, and what a fleet costs.

A replica billed D $/h that completes X_max requests (or tokens) per second
when always busy, and is busy a share u of the time, costs D / (3600 u X_max)
per unit; a fleet costs its replica count times D.

Measured energy (``--joules-per-token``, ``--joules-per-request``: a number, or a
run directory whose ``summary.json`` has a ``gpu`` section from ``--gpu-metrics``)
adds kWh per million units (``J x 1e6 / 3.6e6``) and, with ``--dollars-per-kwh``,
their electricity cost. The joules are the GPUs' own (what NVML or DCGM report),
not the host's or the cooling's: a floor for the energy a unit of work costs.
"""

from __future__ import annotations

from typing import Any

from tailwise import capacity as cap
from tailwise.errors import BadInput
from tailwise.plan.schema import Plan

HOURS_PER_MONTH = 730.0
COST_TITLE = "cost per unit of work = D / (3600 x u x X_max)"
COST_ASSUMPTIONS = (
    "a replica is billed D $/h whether busy or idle",
    "X_max is what one replica completes per second when always busy; it does "
    "useful work a share u of the time",
    "with --rate and no --replicas: replicas = ceil(rate / (u x X_max))",
)
JOULES_PER_KWH = 3.6e6
ENERGY_ASSUMPTION = (
    "measured joules are the GPUs' own (NVML or DCGM), at the load they were measured at; "
    "not the host's, the network's or the cooling's"
)


def cost(
    *,
    dollars_per_hour: float,
    utilization: float = 1.0,
    peak_rps: float | None = None,
    peak_tps: float | None = None,
    replicas: int | None = None,
    rate_rps: float | None = None,
    joules_per_token: float | None = None,
    joules_per_request: float | None = None,
    dollars_per_kwh: float | None = None,
) -> Plan:
    """Cost per unit of work, ``D / (3600 u X_max)``, and a fleet's cost per hour."""
    if utilization <= 0:
        raise BadInput("--utilization", f"{utilization:.0%}", "a utilization above 0%")
    energy = _energy(joules_per_token, joules_per_request, dollars_per_kwh)
    if peak_rps is None and peak_tps is None and energy:
        inputs = {"joules_per_token": joules_per_token, "joules_per_request": joules_per_request}
        inputs["dollars_per_kwh"] = dollars_per_kwh
        inputs = {k: v for k, v in inputs.items() if v is not None}
        return Plan("cost", COST_TITLE, inputs, energy, (ENERGY_ASSUMPTION,))
    if peak_rps is None and peak_tps is None:
        raise BadInput(
            "--peak-rate",
            "nothing",
            "--peak-rate (or --per-replica with --latency), or --peak-tokens",
        )
    if rate_rps is not None and peak_rps is None:
        raise BadInput(
            "--rate", f"{rate_rps:g}/s", "--peak-rate too (or --per-replica with --latency)"
        )
    inputs = {
        "dollars_per_hour": dollars_per_hour,
        "utilization": utilization,
        "peak_rps": peak_rps,
        "peak_tps": peak_tps,
        "replicas": replicas,
        "rate_rps": rate_rps,
        "joules_per_token": joules_per_token,
        "joules_per_request": joules_per_request,
        "dollars_per_kwh": dollars_per_kwh,
    }
    out: dict[str, Any] = dict(energy)
    if peak_rps is not None:
        each = cap.cost_per_unit(dollars_per_hour, utilization, peak_rps)
        out |= {
            "served_rps_per_replica": utilization * peak_rps,
            "cost_per_request_usd": each,
            "cost_per_million_requests_usd": each * 1e6,
        }
    if peak_tps is not None:
        each = cap.cost_per_unit(dollars_per_hour, utilization, peak_tps)
        out |= {"cost_per_token_usd": each, "cost_per_million_tokens_usd": each * 1e6}
    if rate_rps is not None and replicas is None:
        assert peak_rps is not None
        replicas = cap.replicas_needed(rate_rps, 1.0, peak_rps, utilization)
        out["replicas"] = replicas
    if replicas is not None:
        out |= _fleet_cost(dollars_per_hour, replicas, peak_rps, rate_rps)
    inputs = {k: v for k, v in inputs.items() if v is not None}
    assumptions = COST_ASSUMPTIONS + ((ENERGY_ASSUMPTION,) if energy else ())
    return Plan("cost", COST_TITLE, inputs, out, assumptions)


def _energy(
    per_token: float | None, per_request: float | None, dollars_per_kwh: float | None
) -> dict[str, Any]:
    """kWh per million tokens and requests, and their electricity cost with a price."""
    out: dict[str, Any] = {}
    for name, joules in (("tokens", per_token), ("requests", per_request)):
        if joules is None:
            continue
        kwh = joules * 1e6 / JOULES_PER_KWH
        out[f"kwh_per_million_{name}"] = kwh
        if dollars_per_kwh is not None:
            out[f"energy_cost_per_million_{name}_usd"] = kwh * dollars_per_kwh
    if dollars_per_kwh is not None and not out:
        raise BadInput("--dollars-per-kwh", dollars_per_kwh, "--joules-per-token or -request too")
    return out


def _fleet_cost(
    dollars_per_hour: float, replicas: int, peak_rps: float | None, rate_rps: float | None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "fleet_cost_per_hour_usd": replicas * dollars_per_hour,
        "fleet_cost_per_month_usd": replicas * dollars_per_hour * HOURS_PER_MONTH,
    }
    if peak_rps is not None:
        out["fleet_peak_rps"] = replicas * peak_rps
    if rate_rps is not None:
        assert peak_rps is not None
        if rate_rps > replicas * peak_rps:
            raise BadInput(
                "--rate", f"{rate_rps:g}/s", f"at most the fleet's peak {replicas * peak_rps:g}/s"
            )
        out["fleet_utilization_at_rate"] = rate_rps / (replicas * peak_rps)
        out["cost_per_million_requests_at_rate_usd"] = (
            replicas * dollars_per_hour / (3600 * rate_rps) * 1e6
        )
    return out
