"""The measured steps a model is fitted to: a sweep, a knee search, or run directories.

``load_steps`` accepts, for each path given:

* a sweep directory (``sweep.json``): its steps;
* a knee-search directory (``knee.json``): its trials;
* a run directory (``summary.json``): that run;
* any other directory: every run directory directly inside it.

Every step must be an open-loop run (a closed loop offers no rate to model);
steps the generator could not keep up with (``invalid``) or that were
interrupted are left out, and said so. Steps come back sorted by offered rate.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.errors import BadInput
from tailwise.loadgen.llm import apis
from tailwise.loadgen.observe.server_view import SERVER_FILE
from tailwise.metrics.derive import latency_ns, service_ttft_ns, tpot_ns
from tailwise.metrics.schema import Summary
from tailwise.metrics.shape import read_summary
from tailwise.records import Records, read_jsonl
from tailwise.units import parse_rate_rps

KINDS = ("http", "batching", "llm")
SERVER_FIELDS = ("cached_tokens", "prompt_n", "prompt_ms", "predicted_n", "predicted_per_token_ms")
SATURATED_GROWTH = 1.5  # latency median, last third of the window over the first third
SATURATED_SHORTFALL = 0.85  # throughput below this share of the offered rate


@dataclass(frozen=True)
class Step:
    """One measured run: its summary, records and what the client sent."""

    directory: Path
    summary: Summary  # its summary.json, read through shape.read_summary
    records: Records
    options: dict[str, Any]  # run.json options ({} for a simulated run)
    kind: str

    @property
    def rate_rps(self) -> float:
        """The intended offered rate (the schedule's), not the realised one."""
        arrival = self.summary.arrival
        if arrival.get("rate_rps"):
            return float(arrival["rate_rps"])
        if isinstance(arrival.get("rate"), str):  # a simulated run keeps the rate's text
            return parse_rate_rps(arrival["rate"], "arrival.rate")
        return _number(self.summary.rates.offered_rps, "rates.offered_rps")

    @property
    def throughput_rps(self) -> float:
        return _number(self.summary.rates.throughput_rps, "rates.throughput_rps")

    @property
    def window_s(self) -> float:
        return _number(self.summary.window.duration_s, "window.duration_s")

    @property
    def warmup_s(self) -> float:
        return _number(self.summary.window.start_s, "window.start_s")

    @property
    def process(self) -> str:
        return str(self.summary.arrival.get("process") or "poisson")

    def ok(self) -> np.ndarray:
        """Successful requests inside the measurement window."""
        mask: np.ndarray = (self.records.error == 0) & self.records.in_window
        return mask

    def latency_ms(self) -> np.ndarray:
        out: np.ndarray = latency_ns(self.records)[self.ok()] / 1e6
        return out

    def ttft_ms(self) -> np.ndarray:
        """TTFT from the actual send (client lag excluded), successful rows with a token."""
        v = service_ttft_ns(self.records)[self.ok()]
        out: np.ndarray = v[v >= 0] / 1e6
        return out

    def tpot_ms(self) -> np.ndarray:
        v = tpot_ns(self.records)[self.ok()]
        out: np.ndarray = v[v >= 0] / 1e6
        return out

    @functools.cached_property
    def server_rows(self) -> dict[int, dict[str, float]]:
        """What the server said of each request (``server.jsonl``: seq -> its numbers),
        {} when it said nothing. Rows out of shape are skipped, values kept only when
        they are finite and not negative."""
        path = self.directory / SERVER_FILE
        if not path.is_file():
            return {}
        out: dict[int, dict[str, float]] = {}
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if not isinstance(row, dict) or not isinstance(row.get("seq"), int):
                    continue
                out[row["seq"]] = {
                    k: float(v)
                    for k, v in row.items()
                    if k in SERVER_FIELDS
                    and isinstance(v, int | float)
                    and not isinstance(v, bool)
                    and 0 <= v < 1e12
                }
        return out

    def server_column(self, name: str) -> np.ndarray:
        """One ``server.jsonl`` number per record (NaN where the server did not say)."""
        rows = self.server_rows
        return np.array(
            [rows.get(int(q), {}).get(name, np.nan) for q in self.records.seq.tolist()],
            dtype=np.float64,
        )

    def prompt_tokens(self) -> np.ndarray:
        """Prompt tokens each successful request had prefilled: its prompt less what the
        server's prefix cache held, when the server said (llama.cpp's chat template
        head, for one), else the whole prompt."""
        r, ok = self.records, self.ok()
        cached = np.nan_to_num(self.server_column("cached_tokens"), nan=0.0)
        tokens = np.maximum(r.input_tokens.astype(np.float64) - cached, 1.0)
        out: np.ndarray = tokens[ok].astype(np.int64)
        return out

    @property
    def server_info(self) -> dict[str, Any]:
        """What the server said of its configuration before the run (llama.cpp's slots)."""
        return dict(self.summary.section("server_info"))

    def growth(self) -> float:
        """How much the latency (TTFT for an LLM) grew through the window: a backlog."""
        r, ok = self.records, self.ok()
        wait = (service_ttft_ns(r) if self.kind == "llm" else latency_ns(r))[ok]
        t = r.scheduled_ns[ok]
        keep = wait >= 0
        wait, t = wait[keep], t[keep]
        if len(t) < 30:
            return 1.0
        first, last = np.quantile(t, [1 / 3, 2 / 3])
        early = float(np.median(wait[t < first]))
        return float(np.median(wait[t >= last])) / early if early > 0 else 1.0

    @functools.cached_property  # a frozen dataclass still has a __dict__ to cache in
    def saturated(self) -> bool:
        """Past capacity: a backlog grew through the window, or much less got done
        than was offered."""
        offered = _number(self.summary.rates.offered_rps, "rates.offered_rps")
        short = offered > 0 and self.throughput_rps < SATURATED_SHORTFALL * offered
        return short or self.growth() >= SATURATED_GROWTH


def _number(value: float | None, key: str) -> float:
    """A number every summary has; a file without it is out of shape."""
    if value is None:
        raise BadInput("RUN_OR_SWEEP_DIR", f"summary.json {key}: missing", "a number")
    return float(value)


def _kind_of(summary: Summary, options: dict[str, Any], scenario: dict[str, Any]) -> str:
    if scenario:
        if scenario.get("llm"):
            return "llm"
        return "batching" if scenario.get("batching") else "http"
    kind = apis.find(options.get("api"))  # None: no --api, or one this version lacks
    if kind is not None:
        return kind.calibrate_as
    return "llm" if summary.distribution("ttft_ms") is not None else "http"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise BadInput("RUN_OR_SWEEP_DIR", str(path), f"a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise BadInput("RUN_OR_SWEEP_DIR", str(path), "a JSON object")
    return data


def _run_dirs(path: Path) -> list[Path]:
    """The run directories a path names (see the module docstring)."""
    if not path.is_dir():
        raise BadInput("RUN_OR_SWEEP_DIR", str(path), "a run, sweep or knee directory")
    for index, key in (("sweep.json", "steps"), ("knee.json", "trials")):
        if (path / index).is_file():
            rows = _read_json(path / index).get(key) or []
            if not isinstance(rows, list) or not all(
                isinstance(row, dict) and isinstance(row.get("directory", ""), str) for row in rows
            ):
                raise BadInput("RUN_OR_SWEEP_DIR", str(path / index), f"{key}: a list of objects")
            return [_located(path, row.get("directory", "")) for row in rows]
    if (path / "summary.json").is_file():
        return [path]
    found = sorted(p.parent for p in path.glob("*/summary.json"))
    if not found:
        raise BadInput("RUN_OR_SWEEP_DIR", str(path), "a directory holding runs (summary.json)")
    return found


def _located(parent: Path, directory: str) -> Path:
    """A step's directory as recorded, or under the sweep's own directory if it moved."""
    p = Path(directory)
    return p if (p / "summary.json").is_file() else parent / p.name


def load_step(directory: Path, kind: str | None = None) -> Step:
    where = f"{directory}/summary.json"
    summary = read_summary(directory / "summary.json", "RUN_OR_SWEEP_DIR", where=where)
    if summary.closed:
        raise BadInput("RUN_OR_SWEEP_DIR", str(directory), "open-loop runs (this one is closed)")
    run_json = directory / "run.json"
    options = _read_json(run_json).get("options", {}) if run_json.is_file() else {}
    if not isinstance(options, dict):
        raise BadInput("RUN_OR_SWEEP_DIR", str(run_json), "options: a JSON object")
    scen_json = directory / "scenario.json"
    scenario = _read_json(scen_json) if scen_json.is_file() else {}
    records = read_jsonl(directory / "records.jsonl")
    return Step(directory, summary, records, options, kind or _kind_of(summary, options, scenario))


def load_steps(paths: list[Path], kind: str | None = None) -> tuple[list[Step], list[str]]:
    """(usable steps by rate, notes on the ones left out)."""
    if kind is not None and kind not in KINDS:
        raise BadInput("--kind", kind, " | ".join(KINDS))
    steps: list[Step] = []
    notes: list[str] = []
    for path in paths:
        for d in _run_dirs(path):
            if not (d / "summary.json").is_file():
                notes.append(f"{d}: missing, left out")
                continue
            step = load_step(d, kind)
            s = step.summary
            if s.verdict == "invalid" or s.interrupted:
                notes.append(f"{d.name}: {s.verdict_reason or 'interrupted'}, left out")
                continue
            if not step.ok().any():
                notes.append(f"{d.name}: no successful request in the window, left out")
                continue
            steps.append(step)
    if not steps:
        raise BadInput("RUN_OR_SWEEP_DIR", " ".join(map(str, paths)), "at least one usable run")
    kinds = sorted({s.kind for s in steps})
    if len(kinds) > 1:
        raise BadInput("RUN_OR_SWEEP_DIR", ", ".join(kinds), "runs of one kind of endpoint")
    steps.sort(key=lambda s: s.rate_rps)
    return steps, notes
