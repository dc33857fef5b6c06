"""Sample the GPUs during a run, beside the load: NVML here, or a DCGM exporter.

``--gpu-metrics nvml`` reads the GPUs of the machine tailwise runs on through
NVML (``nvidia-ml-py``, the ``gpu`` extra, imported only then);
``--gpu-metrics dcgm=http://HOST:9400/metrics`` scrapes a DCGM exporter's
Prometheus text (:func:`tailwise.metrics.gpu.read_dcgm`). Either way a daemon
thread samples every ``--gpu-metrics-interval`` (500 ms by default, 100 ms to
60 s): NVML calls block, and neither they nor a scrape ever run on the load
generator's loop. One sample before the run and one after it bracket the
window, so its energy is measured to both edges.

Bounded like the server-metrics scrape (:mod:`tailwise.loadgen.observe.server_metrics`,
whose HTTP fetch this reuses: timeout under the interval, 8 MiB at most, no
proxy), and at most :data:`MAX_GPU_SAMPLES` GPU readings kept (past it the
samples are counted, not kept). Every sample is a line of ``gpu_metrics.jsonl``,
appended as it happens; at the end each line gets ``t_s`` on the run's clock
and the summary its ``gpu`` section (:mod:`tailwise.metrics.energy`) with a
timeline beside the client's TTFT or latency.

A missing ``pynvml`` or a machine without an NVIDIA driver or GPU is bad input
(exit 2), found by :func:`check_nvml` before any request is sent.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tailwise import credentials
from tailwise.clock import now_ns
from tailwise.errors import BadInput, MissingExtra
from tailwise.loadgen.observe.server_metrics import (
    MAX_TIMEOUT_S,
    ScrapeError,
    every,
    fetch,
    rewrite_samples,
)
from tailwise.metrics import derive
from tailwise.metrics.energy import summarize_gpu
from tailwise.metrics.gpu import MAX_GPUS, gpu_entry, read_dcgm
from tailwise.metrics.slo import SLO
from tailwise.records import Records
from tailwise.units import parse_duration_ns

FILE = "gpu_metrics.jsonl"
FORM = "nvml, or dcgm=http://HOST:PORT/metrics (a DCGM exporter)"
MIN_INTERVAL_NS = 100_000_000
MAX_INTERVAL_NS = 60_000_000_000
MAX_GPU_SAMPLES = 200_000  # GPU readings kept in memory: 8 GPUs for 3.5 h at 0.5 s
TIMELINE_POINTS = 240


@dataclass(frozen=True)
class GpuPlan:
    source: str  # "nvml" | "dcgm"
    url: str  # the exporter's URL (dcgm)
    interval_ns: int
    insecure: bool = False


def plan_gpu(given: str | None, interval: str, insecure: bool = False) -> GpuPlan | None:
    """``--gpu-metrics`` parsed (None: off); NVML is checked here, before anything starts."""
    interval_ns = parse_duration_ns(interval, "--gpu-metrics-interval", allow_zero=False)
    if not MIN_INTERVAL_NS <= interval_ns <= MAX_INTERVAL_NS:
        raise BadInput("--gpu-metrics-interval", interval, "a duration from 100ms to 60s")
    if given is None or given.strip().lower() in ("", "off"):
        return None
    text = given.strip()
    if text.lower() == "nvml":
        check_nvml()
        return GpuPlan("nvml", "", interval_ns, insecure)
    if text.lower().startswith("dcgm="):
        url = text[5:].strip()
        parts = urllib.parse.urlsplit(url)
        if parts.scheme in ("http", "https") and parts.hostname and len(url) <= 2048:
            credentials.remember_url(url)  # its user, password, token: scrubbed from outputs
            return GpuPlan("dcgm", url, interval_ns, insecure)
    raise BadInput("--gpu-metrics", given, FORM)


# -- sources ---------------------------------------------------------------------------


class Source(Protocol):
    def read(self) -> tuple[list[dict[str, Any]], dict[str, int]]: ...

    def close(self) -> None: ...


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise MissingExtra("--gpu-metrics nvml", "gpu", "pynvml (nvidia-ml-py)") from None
    return pynvml


def check_nvml() -> int:
    """The GPU count NVML sees; bad input when the module, the driver or a GPU is missing."""
    nvml = _pynvml()
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        why = f"NVML could not start ({type(exc).__name__}: {exc})"
        raise BadInput("--gpu-metrics", "nvml", f"an NVIDIA GPU and driver here: {why}") from None
    try:
        count = int(nvml.nvmlDeviceGetCount())
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    if count < 1:
        raise BadInput("--gpu-metrics", "nvml", "an NVIDIA GPU here (NVML sees none)")
    return count


class NvmlSource:
    """Each GPU's use, memory, power, clocks and energy counter through NVML."""

    def __init__(self) -> None:
        self.nvml = _pynvml()
        self.nvml.nvmlInit()
        count = min(int(self.nvml.nvmlDeviceGetCount()), MAX_GPUS)
        self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.names = [self._text(self.nvml.nvmlDeviceGetName, h) for h in self.handles]
        self.uuids = [self._text(self.nvml.nvmlDeviceGetUUID, h) for h in self.handles]

    def _text(self, call: Any, handle: Any) -> str:
        try:
            v = call(handle)
        except Exception:
            return ""
        return v.decode(errors="replace") if isinstance(v, bytes) else str(v)

    def _value(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except Exception:  # NVMLError_NotSupported and its kin: the field is left out
            return None

    def read(self) -> tuple[list[dict[str, Any]], dict[str, int]]:
        n = self.nvml
        gpus, rejected = [], 0
        for i, h in enumerate(self.handles):
            raw: dict[str, Any] = {}
            util = self._value(n.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                raw["util_pct"] = getattr(util, "gpu", None)
            mem = self._value(n.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                raw["mem_used_mib"] = _scaled(getattr(mem, "used", None), 1 / 1048576)
                raw["mem_total_mib"] = _scaled(getattr(mem, "total", None), 1 / 1048576)
            raw["power_w"] = _scaled(self._value(n.nvmlDeviceGetPowerUsage, h), 1e-3)
            raw["energy_mj"] = self._value(n.nvmlDeviceGetTotalEnergyConsumption, h)
            raw["sm_clock_mhz"] = self._value(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM)
            raw["mem_clock_mhz"] = self._value(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM)
            present = {k: v for k, v in raw.items() if v is not None}
            entry, r = gpu_entry(str(i), present, self.uuids[i], self.names[i])
            gpus.append(entry)
            rejected += r
        return gpus, {"rejected": rejected}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()


def _scaled(v: Any, factor: float) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) * factor


class DcgmSource:
    def __init__(self, plan: GpuPlan) -> None:
        self.plan = plan
        self.timeout_s = min(MAX_TIMEOUT_S, plan.interval_ns / 1e9 * 0.8)

    def read(self) -> tuple[list[dict[str, Any]], dict[str, int]]:
        return read_dcgm(fetch(self.plan.url, self.timeout_s, self.plan.insecure))

    def close(self) -> None:
        pass


# -- the sampler thread ----------------------------------------------------------------


class GpuSampler:
    """The background samples of one run, written to ``directory / FILE``."""

    def __init__(self, plan: GpuPlan, directory: Path) -> None:
        self.plan = plan
        self.path = directory / FILE
        self.rows: list[dict[str, Any]] = []
        self.kept_readings = 0
        self.dropped = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._source: Source | None = None
        self._unix_minus_mono_ns = time.time_ns() - now_ns()

    def sample_once(self) -> dict[str, Any]:
        start = now_ns()
        row: dict[str, Any] = {}
        try:
            assert self._source is not None
            gpus, counts = self._source.read()
        except ScrapeError as exc:
            row["error"] = exc.kind
        except Exception as exc:  # an NVML call that failed as a whole (a GPU fell off)
            row["error"] = f"nvml: {type(exc).__name__}"[:80]
        else:
            if gpus:
                row["gpus"] = gpus
            else:
                row["error"] = "no_gpu_metrics"  # an answer, but no DCGM field of a GPU
            row.update({k: v for k, v in counts.items() if v})
        took = now_ns() - start
        row["t_mono_ns"] = start + took // 2  # the values were read inside the span
        row["took_ms"] = round(took / 1e6, 3)
        return row

    def start(self) -> None:
        """Open the source, sample once now, then every interval in a daemon thread."""
        try:
            self._source = NvmlSource() if self.plan.source == "nvml" else DcgmSource(self.plan)
        except BadInput:
            raise
        except Exception as exc:  # NVML started for check_nvml but not now
            why = f"NVML could not start ({type(exc).__name__}: {exc})"
            raise BadInput(
                "--gpu-metrics", "nvml", f"an NVIDIA GPU and driver here: {why}"
            ) from None
        self.path.write_text("")
        self._keep(self.sample_once())
        self._thread = threading.Thread(target=self._loop, name="tailwise-gpu", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        every(self._stop, self.plan.interval_ns, lambda: self._keep(self.sample_once()))

    def _keep(self, row: dict[str, Any]) -> None:
        size = len(row.get("gpus", ())) or 1
        if self.kept_readings + size > MAX_GPU_SAMPLES:
            self.dropped += 1
            return
        self.kept_readings += size
        self.rows.append(row)
        try:
            with self.path.open("a") as f:
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
        except OSError:
            pass  # the rows stay in memory; the file is rewritten at the end

    def stop(self) -> None:
        """Stop after one last sample (the window's end), and close the source."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=MAX_TIMEOUT_S + 1.0)
            if not self._thread.is_alive():
                self._keep(self.sample_once())
        if self._source is not None and (self._thread is None or not self._thread.is_alive()):
            self._source.close()

    def finish(
        self,
        t0_unix_s: float,
        window_ns: tuple[int, int],
        records: Records,
        slos: list[SLO],
        llm: bool,
        confidence: float,
    ) -> dict[str, Any]:
        """Run-relative times in the file, and the summary's ``gpu`` section."""
        t0_mono = round(t0_unix_s * 1e9) - self._unix_minus_mono_ns
        rows = [{"t_ns": r["t_mono_ns"] - t0_mono, **r} for r in self.rows]
        self._rewrite(rows)
        doc: dict[str, Any] = {
            "source": self.plan.source,
            "interval_s": self.plan.interval_ns / 1e9,
        }
        if self.plan.url:
            doc["url"] = credentials.masked_url(self.plan.url)  # as server metrics show theirs
        doc.update(summarize_gpu(rows, window_ns, records, slos, llm, confidence))
        if self.dropped:
            doc["samples_not_kept"] = self.dropped
        for k in ("malformed", "rejected", "gpus_dropped"):
            total = sum(r.get(k, 0) for r in rows)
            if total:
                doc[f"{k}_total"] = total
        doc["timeline"] = timeline(rows, records, llm)
        return doc

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        rewrite_samples(self.path, rows, ("t_ns", "t_mono_ns"))


def timeline(rows: list[dict[str, Any]], records: Records, llm: bool) -> dict[str, list[Any]]:
    """Columns over the samples (at most :data:`TIMELINE_POINTS`): mean utilization and
    total power over the GPUs, and the client's p50 TTFT (LLM) and latency of the
    requests completed since the previous point."""
    ok = sorted((r for r in rows if r.get("gpus")), key=lambda r: r["t_ns"])
    step = max(1, -(-len(ok) // TIMELINE_POINTS))
    picked = ok[step - 1 :: step] if ok else []
    cols: dict[str, list[Any]] = {"t_s": [round(r["t_ns"] / 1e9, 3) for r in picked]}
    for name, how in (("util_pct", "mean"), ("power_w", "sum"), ("mem_used_mib", "sum")):
        col: list[float | None] = []
        for r in picked:
            vals = [g[name] for g in r["gpus"] if name in g]
            total = sum(vals) / len(vals) if vals and how == "mean" else sum(vals)
            col.append(round(total, 3) if vals else None)
        if any(v is not None for v in col):
            cols[name] = col
    edges = [r["t_ns"] for r in picked]
    series = [("client_latency_p50_ms", derive.latency_ns(records))]
    if llm:
        series.append(("client_ttft_p50_ms", derive.ttft_ns(records)))
    done = records.done_ns
    for name, values in series:
        col = []
        for i, end in enumerate(edges):
            begin = edges[i - 1] if i else -(2**62)
            sel = values[(done > begin) & (done <= end) & (values >= 0)]
            col.append(round(float(np.median(sel)) / 1e6, 3) if len(sel) else None)
        cols[name] = col
    return cols
