"""The typed summary (``tailwise.metrics.schema``) and the rule that keeps it typed.

* every summary ``summarize`` makes reads back from its JSON form to the same object
  and the same JSON, key order included, in every shape a run can take (open and
  closed loop, LLM, ``--percentiles``, sequential looks, no intervals, interrupted,
  sections added after the run);
* a summary is frozen, and hands out copies: nothing changes it after summarize;
* a key added to a typed part without its type fails (``strict``), and a file of an
  older run with keys missing still reads;
* **no ``dict[str, Any]`` on the summary path**: an AST scan of the modules between
  ``summarize()`` and its readers (:data:`SUMMARY_PATH`) finds no parameter, field or
  return of a summary annotated as a plain dict (mypy, with its ``deprecated`` error
  code on, refuses the summary's mapping view in the package itself; the scan checks
  that the configuration keeps it on). Its self-test runs it on a toy source.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailwise.metrics.schema import SCHEMA, Summary, SummaryShapeError
from tailwise.metrics.slo import parse_slo
from tailwise.metrics.summary import RunInfo, summarize
from tailwise.sim.run import simulate
from tailwise.sim.scenario import parse_scenario
from tests.synthetic import make_records

MS = 1_000_000
S = 1_000_000_000
ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "tailwise"

# The modules between summarize() and its readers, of a fresh summary or a saved one.
SUMMARY_PATH = (
    "metrics/summary.py",
    "metrics/schema.py",
    "metrics/verdict.py",
    "metrics/reasoning.py",
    "loadgen/conclude.py",
    "loadgen/runner.py",
    "loadgen/scale/driver.py",
    "loadgen/sweep.py",
    "loadgen/sweep_probe.py",
    "knee.py",
    "sim/run.py",
    "sim/study.py",
    "calibrate/__init__.py",
    "calibrate/advice.py",
    "calibrate/fit.py",
    "calibrate/steps.py",
    "cli/measure.py",
    "cli/simulate.py",
    "demo.py",
    "report/text.py",
    "report/compare.py",
    "report/html.py",
    "report/render.py",
    "report/run_charts.py",
    "report/charts.py",
    "report/sweep_page.py",
    "report/knee_page.py",
    "report/workload.py",
    "metrics/shape.py",
    "cli/reports.py",
    "cli/plan.py",
)
SUMMARY_NAMES = frozenset({"summary", "summaries"})
FUNCTIONS = frozenset({"summarize", "point_passed", "settled", "exit_code", "metrics_of"})


def _records(n: int = 400, rate: int = 100, lat_ms: float = 5.0) -> Any:
    sched = np.arange(n, dtype=np.int64) * (S // rate)
    lat = np.full(n, round(lat_ms * MS), dtype=np.int64)
    lat[::7] *= 3
    errors = ["reset" if i % 50 == 3 else "" for i in range(n)]
    return make_records(sched, lat, errors, (S, n * (S // rate)))


def _info(**kw: Any) -> RunInfo:
    base: dict[str, Any] = {
        "source": "loadgen",
        "target": "http://t/x",
        "mode": "open",
        "arrival": {"process": "poisson", "rate_rps": 100.0},
        "window_ns": (S, 4 * S),
        "slos": [parse_slo("p99(latency)<=50ms"), parse_slo("latency<=20ms@90%")],
    }
    return RunInfo(**{**base, **kw})


SEQUENTIAL = {
    "looks_planned": 4,
    "looks_taken": 2,
    "per_look_confidence": [0.99, 0.99],
    "overall_confidence": 0.95,
    "settled": "pass: every SLO decided",
    "decided": {"p99(latency)<=50ms": "pass"},
    "reached_cap": False,
}
SHAPES: dict[str, dict[str, Any]] = {
    "open": {},
    "closed": {"mode": "closed", "concurrency": 4, "arrival": {"process": "closed-loop"}},
    "percentiles": {"percentiles": (75.0, 99.0, 99.99)},
    "sequential": {"sequential": SEQUENTIAL},
    "points only": {"intervals": False},
    "interrupted": {"interrupted": True, "interrupt_note": "SIGINT"},
    "targets and extras": {
        "target": ["http://a/x", "http://b/x"],
        "extra": {"warmup": {"mode": "fixed", "start_s": 1.0}, "reconnects": 2},
        "rows_on_disk": 7,
    },
    "no slo": {"slos": []},
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_reads_back_to_the_same_object_and_bytes(shape: str) -> None:
    s = summarize(_records(), _info(**SHAPES[shape]))
    doc = s.to_json()
    again = Summary.from_json(json.loads(json.dumps(doc)), strict=True)
    assert again == s
    assert json.dumps(again.to_json(), indent=2) == json.dumps(doc, indent=2)
    assert doc["schema"] == SCHEMA and s.schema == SCHEMA


def test_the_fifo_models_keys_read_back() -> None:
    """One FIFO server fed by Poisson sends: ``within`` carries the queue model's level
    and rate (absent elsewhere), and reads back to the same bytes, strictly."""
    rng = np.random.default_rng(3)
    arrive = np.cumsum(rng.exponential(1 / 30, 2000))
    done = np.empty(2000)
    free_at = 0.0
    for i, (a, svc) in enumerate(zip(arrive, rng.exponential(0.02, 2000), strict=True)):
        free_at = done[i] = max(a, free_at) + svc
    sched = (arrive * S).astype(np.int64)
    lat = (done * S).astype(np.int64) - sched
    window = (0, int(sched[-1]) + 1)
    s = summarize(make_records(sched, lat, [""] * 2000, window), _info(window_ns=window))
    doc = s.to_json()
    assert {"model_level_ms", "model_rps"} <= set(doc["slos"][0]["within"])
    again = Summary.from_json(json.loads(json.dumps(doc)), strict=True)
    assert again == s and json.dumps(again.to_json()) == json.dumps(doc)
    plain = summarize(_records(), _info()).to_json()
    assert "model_rps" not in plain["slos"][0]["within"]


@pytest.mark.parametrize("llm", [False, True])
def test_simulated_runs_read_back_too(llm: bool) -> None:
    sc: dict[str, Any] = {"llm": {}} if llm else {"servers": 2, "service": "exp:5ms"}
    sc.update(
        arrival={"rate": "20/s", "duration": "3s", "warmup": "0.5s"}, slo=["p99(latency)<=2s"]
    )
    s = simulate(parse_scenario(sc)).summary
    doc = s.to_json()
    assert s.llm == llm and ("reasoning" in doc) == llm
    assert Summary.from_json(json.loads(json.dumps(doc)), strict=True).to_json() == doc
    assert list(Summary.from_json(doc).to_json()) == list(doc)  # key order too


def test_typed_reading() -> None:
    s = summarize(_records(), _info())
    doc = s.to_json()
    assert s.rates.goodput_rps == doc["rates"]["goodput_rps"]
    assert s.latency is not None and s.latency.p99 == doc["latency_ms"]["p99"]
    assert [e.spec for e in s.slos] == [e["spec"] for e in doc["slos"]]
    assert s.slos[0].within is not None and s.slos[0].server_bound is not None
    assert s.requests.scheduled == doc["requests"]["scheduled"]
    assert s.verdict == doc["verdict"] and s.decided == doc["decided"]
    assert s.window.duration_s == doc["window"]["duration_s"]


def test_a_summary_is_final() -> None:
    s = summarize(_records(), _info())
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.verdict = "pass"  # type: ignore[misc]
    doc = s.to_json()
    doc["rates"]["goodput_rps"] = -1.0
    doc["arrival"]["process"] = "edited"
    assert s.rates.goodput_rps != -1.0 and s.arrival["process"] == "poisson"
    later = s.with_sections(gpu={"energy_j": 1.0}, outputs_missing={"latency.hlog": "full"})
    assert "gpu" not in s.sections and list(later.to_json())[-2:] == ["gpu", "outputs_missing"]
    assert later.to_json()["gpu"] == {"energy_j": 1.0}


def test_an_unknown_key_of_a_typed_part_is_refused_only_when_strict() -> None:
    doc = summarize(_records(), _info()).to_json()
    doc["rates"]["new_rate_rps"] = 1.0
    with pytest.raises(SummaryShapeError, match="rates"):
        Summary.from_json(doc, strict=True)
    assert Summary.from_json(doc).rates.goodput_rps == doc["rates"]["goodput_rps"]


def test_a_file_of_an_older_run_with_keys_missing_still_reads() -> None:
    doc = summarize(_records(), _info()).to_json()
    for key in ("generator", "littles_law", "steady_state", "decided", "confidence"):
        del doc[key]
    del doc["rates"]["achieved_send_rps"]
    del doc["slos"][0]["server_bound"]
    old = Summary.from_json(doc)
    assert old.generator is None and old.rates.achieved_send_rps is None
    assert old.slos[0].server_bound is None and old.confidence is None
    assert old.verdict == doc["verdict"]
    assert Summary.from_json({}).requests.scheduled == 0  # nothing at all: empty, no error


def test_the_mapping_view_still_reads_the_json_form() -> None:
    """``result.summary["latency_ms"]["p99"]``, the Python API's first form (README)."""
    s = summarize(_records(), _info())
    assert s["latency_ms"]["p99"] == s.to_json()["latency_ms"]["p99"]  # type: ignore[index]
    assert "rates" in s and s.get("missing", 3) == 3


# -- the rule: no dict[str, Any] on the summary path ---------------------------------------


def _is_plain_dict(node: ast.expr | None) -> bool:
    """``dict[str, Any]``, ``list[dict[str, Any]]``, ``dict[str, Any] | None`` (any spelling)."""
    if node is None:
        return False
    text = ast.unparse(node).replace(" ", "")
    return any(
        form in text for form in ("dict[str,Any]", "Dict[str,Any]", "Mapping[str,Any]")
    ) or text in ("dict", "Any")


def plain_summaries(source: str, where: str) -> list[str]:
    """Each parameter, field or return of a summary in ``source`` annotated as a plain dict."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            for a in args:
                if a.arg in SUMMARY_NAMES and _is_plain_dict(a.annotation):
                    found.append(f"{where}:{a.lineno} parameter {a.arg} of {node.name}")
            summarizes = node.name in FUNCTIONS or "summar" in node.name.lower()
            if summarizes and _is_plain_dict(node.returns):
                found.append(f"{where}:{node.lineno} return of {node.name}")
            first = args[0] if args else None  # "doc": a document of another kind
            if (
                node.name in FUNCTIONS
                and first
                and first.arg != "doc"
                and _is_plain_dict(first.annotation)
            ):
                found.append(f"{where}:{node.lineno} first parameter of {node.name}")
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id in SUMMARY_NAMES
            and _is_plain_dict(node.annotation)
        ):
            found.append(f"{where}:{node.lineno} {node.target.id}")
    return found


def test_no_plain_dict_on_the_summary_path() -> None:
    found = []
    for rel in SUMMARY_PATH:
        path = SRC / rel
        found += plain_summaries(path.read_text(encoding="utf-8"), rel)
    assert found == [], "a summary typed as a plain dict: use tailwise.metrics.schema.Summary"


def test_mypy_refuses_the_mapping_view_in_the_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["strict"] is True and "deprecated" in config["enable_error_code"]
    assert "src/tailwise" in config["files"]


def test_the_scan_finds_each_kind_of_plain_summary() -> None:
    toy = """
from typing import Any
from dataclasses import dataclass

def point_passed(s: dict[str, Any]) -> bool: ...
def show(summary: dict[str, Any] | None, other: dict[str, Any]) -> None: ...
def summarize_it() -> dict[str, Any]: ...
def fine(summary: "Summary", doc: dict[str, Any]) -> dict[str, Any]: ...

@dataclass
class Step:
    summary: dict[str, Any]
    directory: str
"""
    found = plain_summaries(toy, "toy.py")
    assert [f.split(" ", 1)[1] for f in found] == [
        "first parameter of point_passed",
        "parameter summary of show",
        "return of summarize_it",
        "summary",
    ]
