"""GPU telemetry read during a run: one sample's per-GPU values, checked and bounded.

Two sources produce the same shape (see :mod:`tailwise.loadgen.observe.gpu_metrics`):
NVML on the machine tailwise runs on, and a DCGM exporter's Prometheus text
(:func:`read_dcgm`). A sample is a list of GPUs, each a dict of the keys in
:data:`BOUNDS` that the source had (a field the GPU does not support is left
out, never zero), plus ``key`` (the UUID, else the index), ``id`` (the index),
``name`` (the model) and ``host`` (DCGM's ``Hostname``).

Nothing from a source is trusted: every value must be finite and inside its
bounds in :data:`BOUNDS` (a DCGM "blank", 9223372036854775794, is not a
temperature), labels are cut to :data:`MAX_LABEL_CHARS`, at most
:data:`MAX_GPUS` GPUs are kept per sample, and what was dropped is counted.

Units: utilization in %, memory in MiB, power in W, clocks in MHz, the energy
counter in mJ (NVML's and DCGM's unit), as the sources report them.

Pure functions: nothing here reads a clock or a socket.
"""

from __future__ import annotations

import math
from typing import Any

from tailwise.errors import excerpt
from tailwise.instrument.promtext import parse_samples

MAX_GPUS = 64
MAX_LABEL_CHARS = 96
MAX_SAMPLES_PARSED = 20_000  # kept DCGM samples per scrape (7 fields x 64 GPUs is 448)

# common name -> (lowest, highest) accepted; outside (or NaN, inf): the value is rejected
BOUNDS: dict[str, tuple[float, float]] = {
    "util_pct": (0.0, 100.0),
    "mem_used_mib": (0.0, 4_194_304.0),  # 4 TiB
    "mem_total_mib": (0.0, 4_194_304.0),
    "power_w": (0.0, 5_000.0),  # a GB200 superchip draws 2.7 kW
    "sm_clock_mhz": (0.0, 10_000.0),
    "mem_clock_mhz": (0.0, 50_000.0),
    "energy_mj": (0.0, 1e17),  # 3e14 mJ is 1 kW for 10 years
}

# DCGM exporter field -> common name (FB_FREE and FB_RESERVED make the total with FB_USED)
DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_FB_USED": "mem_used_mib",
    "DCGM_FI_DEV_FB_FREE": "mem_free_mib",
    "DCGM_FI_DEV_FB_RESERVED": "mem_reserved_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_MEM_CLOCK": "mem_clock_mhz",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
}
_MEM_PARTS = ("mem_free_mib", "mem_reserved_mib")


def checked(name: str, value: object) -> float | None:
    """``value`` as a float if it is a finite number inside ``name``'s bounds, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    lo, hi = BOUNDS.get(name, (0.0, 1e17))
    return v if math.isfinite(v) and lo <= v <= hi else None


def label(value: object) -> str:
    """A label fit to keep: printable, at most :data:`MAX_LABEL_CHARS`."""
    return excerpt(str(value), MAX_LABEL_CHARS)


def gpu_entry(
    ident: str, values: dict[str, Any], uuid: str = "", name: str = "", host: str = ""
) -> tuple[dict[str, Any], int]:
    """One GPU's sample from raw values: the checked ones, and how many were rejected."""
    out: dict[str, Any] = {"key": label(uuid or f"{host}#{ident}"), "id": label(ident)}
    for k, v in (("uuid", uuid), ("name", name), ("host", host)):
        if v:
            out[k] = label(v)
    rejected = 0
    for k, v in values.items():
        if k not in BOUNDS:
            continue
        c = checked(k, v)
        if c is None:
            rejected += 1
        else:
            out[k] = c
    return out, rejected


def read_dcgm(text: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The GPUs of one DCGM exporter scrape, and counts of what was dropped.

    Series are told apart by ``UUID`` (else ``Hostname`` and ``gpu``); the first
    value of a field per GPU wins (MIG instances repeat their GPU's fields).
    Memory total is ``FB_USED + FB_FREE (+ FB_RESERVED)`` when all are present.
    """
    samples, bad = parse_samples(
        text, keep=DCGM_FIELDS.__contains__, max_samples=MAX_SAMPLES_PARSED, prefixes=("DCGM_FI_",)
    )
    raw: dict[str, tuple[dict[str, str], dict[str, float]]] = {}
    dropped_gpus: set[str] = set()
    for field, labels, value in samples:
        ident = labels.get("gpu", "")
        key = labels.get("UUID") or labels.get("uuid") or f"{labels.get('Hostname', '')}#{ident}"
        key = key[:MAX_LABEL_CHARS]
        if key not in raw:
            if len(raw) >= MAX_GPUS:
                if len(dropped_gpus) < 1_000_000:
                    dropped_gpus.add(key)
                continue
            raw[key] = (labels, {})
        raw[key][1].setdefault(DCGM_FIELDS[field], value)
    gpus: list[dict[str, Any]] = []
    rejected = 0
    for labels, values in raw.values():
        mem = dict(values)
        parts = [mem.pop(p) for p in _MEM_PARTS if p in mem]
        used = values.get("mem_used_mib")
        if used is not None and "mem_free_mib" in values:
            mem["mem_total_mib"] = used + sum(parts)
        entry, r = gpu_entry(
            labels.get("gpu", "?"),
            mem,
            labels.get("UUID") or labels.get("uuid", ""),
            labels.get("modelName", ""),
            labels.get("Hostname", ""),
        )
        rejected += r
        gpus.append(entry)
    return gpus, {"malformed": bad, "rejected": rejected, "gpus_dropped": len(dropped_gpus)}


# -- the terminal -----------------------------------------------------------------


def text_lines(doc: dict[str, Any]) -> list[str]:
    """The terminal's lines for a run's ``gpu`` section: one per run, one more for energy."""
    if "note" in doc and "gpus" not in doc:
        return [f"gpu       {doc.get('source', '')}: {doc['note']}"]
    gpus = doc.get("gpus") or []
    if not gpus:
        failed = f"{doc.get('samples_failed', 0)} of {doc.get('samples', 0)} samples failed"
        return [f"gpu       {doc.get('source', '')}: no GPU values in the window ({failed})"]
    names = sorted({g.get("name") or "GPU" for g in gpus})
    head = f"gpu       {len(gpus)} x {', '.join(names)} ({doc.get('source')}), "
    head += f"{doc.get('samples_in_window', 0)} samples"
    parts = []
    util = [g["util_pct"]["mean"] for g in gpus if "util_pct" in g]
    if util:
        parts.append(f"util {sum(util) / len(util):.0f}% mean")
    power = doc.get("power_w")
    if power:
        parts.append(f"power {power['mean']:.0f} W mean / {power['max']:.0f} W max")
    mem = [g["mem_used_mib"]["max"] for g in gpus if "mem_used_mib" in g]
    if mem:
        parts.append(f"memory {sum(mem) / 1024:.1f} GiB max")
    lines = [head + ("  " + ", ".join(parts) if parts else "")]
    energy = doc.get("energy_j")
    if energy and energy.get("value") is not None:
        line = f"energy    {energy['value']:.4g} J in the window ({energy['method']})"
        for key, what in (
            ("per_output_token_j", "per output token"),
            ("per_request_j", "per request"),
            ("per_good_request_j", "per good request"),
        ):
            est = doc.get(key)
            if est and est.get("value") is not None:
                line += f", {_joules(est['value'])} {what}{_ci_text(est)}"
        lines.append(line)
    if doc.get("note"):
        lines.append(f"          note: {doc['note']}")
    return lines


def _joules(v: float) -> str:
    return f"{v * 1e3:.3g} mJ" if v < 1 else f"{v:.3g} J"


def _ci_text(est: dict[str, Any]) -> str:
    ci = est.get("ci")
    if ci is None:
        return " (no interval: " + str(est.get("reason") or "n too small") + ")"
    return f" [{_joules(ci[0])}, {_joules(ci[1])}]"
