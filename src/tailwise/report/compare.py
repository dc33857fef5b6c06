"""Compare two runs (summary.json) or two sweeps (sweep.json): B against the baseline A.

The comparison is a pure function of the two runs' :class:`Summary` (read through
:func:`~tailwise.metrics.shape.read_summary`) or of the two sweep.json documents. A metric
*regresses* when B is worse than A by more than the threshold, relative to A:

* lower-is-better metrics (latency percentiles, in ms) regress when
  ``(B - A) / A > threshold``;
* higher-is-better metrics (goodput and the knee, in requests/s) regress when
  ``(A - B) / A > threshold``.

A change of exactly the threshold is not a regression. Only *gated* metrics
can regress: for runs, p99 latency and goodput (and p99 TTFT and p99 TPOT when
both runs have them); for sweeps, the knee and, at every offered rate both
sweeps ran, goodput and p99 latency (TTFT and TPOT for LLM sweeps). The other
metrics are shown for context. An invalid run (or a sweep with an invalid
step) cannot gate anything: the comparison is then itself invalid (exit 3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from tailwise.errors import BadInput, ExitCode
from tailwise.metrics.catalog import CATALOG
from tailwise.metrics.schema import Summary
from tailwise.metrics.shape import read_summary
from tailwise.report.workload import differences, run_workload, sweep_workload
from tailwise.units import parse_fraction

SWEEP_SCHEMA = "tailwise.sweep/1"
_DIR_FORM = "a run directory (with summary.json) or a sweep directory (with sweep.json)"
_EPS = 1e-9  # relative slack so a change of exactly the threshold never counts

# (section.key of the summary, label, unit, better, gated); then each catalog metric's rows
# (its ``compare``), an LLM metric's only when both runs have its distribution.
_RUN_METRICS = (
    ("rates.throughput_rps", "throughput", "rps", "higher", False),
    ("rates.goodput_rps", "goodput", "rps", "higher", True),
    ("rates.attainment", "attainment", "share", "higher", False),
    ("rates.error_rate", "error rate", "share", "lower", False),
)
# Per offered rate in a sweep (keys into a sweep.json step row); all gate.
_STEP_METRICS = (
    ("goodput_rps", "goodput", "rps", "higher"),
    *((f"{m.summary_key}.p99", f"{m.label} p99", "ms", "lower") for m in CATALOG if m.sweep_step),
)


@dataclass(frozen=True)
class Metric:
    """One compared value: ``a`` is the baseline, ``b`` the candidate, in ``unit``.

    Units: ``ms`` (milliseconds), ``rps`` (requests per second), ``share``
    (a fraction in [0, 1]). ``None`` means the side has no value (no successful
    request for a percentile; no passing rate for a knee).
    """

    key: str
    label: str
    unit: str
    better: str  # "lower" | "higher"
    a: float | None
    b: float | None
    gated: bool
    regressed: bool
    rate_rps: float | None = None

    @property
    def delta(self) -> float | None:
        """``b - a`` in the metric's unit."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def rel_delta(self) -> float | None:
        """``(b - a) / a``; ``None`` when either is missing or ``a`` is zero (and b is not)."""
        if self.a is None or self.b is None:
            return None
        if self.a == 0:
            return 0.0 if self.b == 0 else None
        return (self.b - self.a) / abs(self.a)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"metric": self.key, "label": self.label, "unit": self.unit}
        out |= {"a": self.a, "b": self.b, "delta": self.delta, "rel_delta": self.rel_delta}
        out |= {"better": self.better, "gated": self.gated, "regressed": self.regressed}
        if self.rate_rps is not None:
            out["rate_rps"] = self.rate_rps
        return out


def worse_by_more_than(a: float | None, b: float | None, better: str, threshold: float) -> bool:
    """Is B worse than the baseline A by more than ``threshold`` (a fraction of A)?

    A missing baseline cannot regress; a value A had and B lacks is a regression.
    """
    if a is None:
        return False
    if b is None:
        return True
    if better == "lower":
        return b - a > (threshold + _EPS) * abs(a) if a else b > 0
    return a - b > (threshold + _EPS) * abs(a)


def _metric(
    spec: tuple[str, str, str, str, bool],
    a: float | None,
    b: float | None,
    threshold: float,
    rate_rps: float | None = None,
) -> Metric:
    key, label, unit, better, gated = spec
    regressed = gated and worse_by_more_than(a, b, better, threshold)
    return Metric(key, label, unit, better, a, b, gated, regressed, rate_rps)


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing B against A (``kind`` "run" or "sweep")."""

    kind: str
    a: str
    b: str
    threshold: float  # a fraction: 0.1 is 10%
    metrics: list[Metric]
    verdicts: dict[str, str] | None = None  # runs only: {"a": ..., "b": ...}
    invalid: list[str] = field(default_factory=list)  # why no gate can be drawn
    notes: list[str] = field(default_factory=list)  # informational
    warnings: list[str] = field(default_factory=list)  # workloads differ (--allow-different)

    @property
    def regressions(self) -> list[Metric]:
        return [m for m in self.metrics if m.regressed]

    @property
    def exit_code(self) -> int:
        """3 when either side is invalid, else 1 on any regression, else 0."""
        if self.invalid:
            return ExitCode.INVALID
        return ExitCode.FAIL if self.regressions else ExitCode.PASS

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "a": self.a,
            "b": self.b,
            "threshold": self.threshold,
            "regressions": [
                m.to_json() | {"message": regression_line(m, self.threshold)}
                for m in self.regressions
            ],
            "metrics": [m.to_json() for m in self.metrics],
            "verdicts": self.verdicts,
            "invalid": self.invalid,
            "notes": self.notes,
            "warnings": self.warnings,
            "exit_code": int(self.exit_code),
        }


def _run_value(s: Summary, key: str) -> float | None:
    """``"rates.goodput_rps"`` -> ``s.rates.goodput_rps``; ``"latency_ms.p99"`` -> the
    latency distribution's p99; None if the run has none."""
    section, _, stat = key.partition(".")
    if section == "rates":
        return s.rates.get(stat)
    d = s.distribution(section)
    return d.get(stat) if d is not None else None


def _get(doc: dict[str, Any] | None, key: str) -> Any:
    """``_get(d, "latency_ms.p99")`` -> ``d["latency_ms"]["p99"]``, or None if absent."""
    value: Any = doc
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


# ---- runs -----------------------------------------------------------------------------


def compare_runs(
    a: Summary, b: Summary, threshold: float, names: tuple[str, str] = ("A", "B")
) -> Comparison:
    """Compare two runs' summaries; ``threshold`` is a fraction (0.1 = 10%)."""
    specs = list(_RUN_METRICS)
    for m in CATALOG:
        key = m.summary_key
        if not m.llm_only or (a.distribution(key) is not None and b.distribution(key) is not None):
            specs += m.compare_rows()
    metrics = [_metric(s, _run_value(a, s[0]), _run_value(b, s[0]), threshold) for s in specs]
    invalid = [
        f"run {name} is invalid ({run.verdict_reason or ''}): "
        "an invalid run cannot gate a comparison (exit 3)"
        for name, run in zip(("A", "B"), (a, b), strict=True)
        if run.verdict == "invalid"
    ]
    notes = []
    if a.mode != b.mode:
        notes.append(
            f"A is {a.mode}-loop and B is {b.mode}-loop: "
            "closed-loop latencies hide coordinated omission"
        )
    verdicts = {"a": str(a.verdict), "b": str(b.verdict)}
    return Comparison("run", names[0], names[1], threshold, metrics, verdicts, invalid, notes)


# ---- sweeps ---------------------------------------------------------------------------


def _rate_key(rate: float) -> float:
    return round(float(rate), 6)


def _sweep_invalid(name: str, doc: dict[str, Any]) -> list[str]:
    """Why a sweep cannot gate: an invalid step, or a sweep that stopped or was interrupted."""
    bad = [s for s in doc.get("steps", []) if s.get("verdict") == "invalid"]
    note = str(doc.get("note") or "")
    if bad or note.startswith(("stopped", "interrupted")):
        why = note or f"step at {bad[0]['offered_rps']:g}/s: {bad[0].get('verdict_reason', '')}"
        return [
            f"sweep {name} is invalid ({why}): an invalid sweep cannot gate a comparison (exit 3)"
        ]
    return []


def _step_metrics(
    rows_a: dict[float, dict[str, Any]], rows_b: dict[float, dict[str, Any]], threshold: float
) -> list[Metric]:
    out = []
    for rate in sorted(set(rows_a) & set(rows_b)):
        ra, rb = rows_a[rate], rows_b[rate]
        for key, label, unit, better in _STEP_METRICS:
            if key.split(".")[0] not in ra or key.split(".")[0] not in rb:
                continue  # TTFT/TPOT: LLM sweeps only
            spec = (f"{key}@{rate:g}", f"{label} @ {rate:g}/s", unit, better, True)
            out.append(_metric(spec, _get(ra, key), _get(rb, key), threshold, rate))
    return out


def compare_sweeps(
    a: dict[str, Any], b: dict[str, Any], threshold: float, names: tuple[str, str] = ("A", "B")
) -> Comparison:
    """Compare two sweep.json dicts: the knee (rps), then goodput and p99 per matching rate."""
    knee = _metric(
        ("knee_rps", "knee", "rps", "higher", True), a.get("knee_rps"), b.get("knee_rps"), threshold
    )
    rows_a = {_rate_key(s["offered_rps"]): s for s in a.get("steps", [])}
    rows_b = {_rate_key(s["offered_rps"]): s for s in b.get("steps", [])}
    notes = []
    for name, mine, other in (("A", rows_a, rows_b), ("B", rows_b, rows_a)):
        only = sorted(set(mine) - set(other))
        if only:
            rates = ", ".join(f"{r:g}/s" for r in only)
            notes.append(f"rates only in {name} (not compared): {rates}")
    if not set(rows_a) & set(rows_b):
        notes.append("the sweeps share no offered rate: only the knees are compared")
    metrics = [knee, *_step_metrics(rows_a, rows_b, threshold)]
    invalid = _sweep_invalid("A", a) + _sweep_invalid("B", b)
    return Comparison("sweep", names[0], names[1], threshold, metrics, None, invalid, notes)


# ---- loading --------------------------------------------------------------------------


def parse_threshold(text: str) -> float:
    """``"10%"`` or ``"0.1"`` -> 0.1 (a fraction of the baseline, between 0 and 1)."""
    return parse_fraction(text, "--threshold")


def load(path: str | Path, name: str) -> Summary | dict[str, Any]:
    """A run directory's summary, or a sweep directory's sweep.json; BadInput names ``name``."""
    directory = Path(path)
    if not directory.is_dir():
        raise BadInput(name, str(path), _DIR_FORM)
    if (directory / "sweep.json").is_file():
        return _read_json(directory / "sweep.json", name, SWEEP_SCHEMA)
    if (directory / "summary.json").is_file():
        return read_summary(directory / "summary.json", name)
    raise BadInput(name, str(path), _DIR_FORM + "; it has neither")


def _kind(doc: Summary | dict[str, Any]) -> str:
    return "run" if isinstance(doc, Summary) else "sweep"


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "JSON nested deeper than the interpreter reads"
    return str(exc)


def _read_json(file: Path, name: str, schema: str) -> dict[str, Any]:
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadInput(name, str(file), f"a readable JSON file ({_why(exc)})") from None
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        given = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise BadInput(f"{name} ({file.name})", given, f'schema "{schema}"')
    steps = doc.get("steps", [])
    if file.name == "sweep.json" and not (
        isinstance(steps, list)
        and all(
            isinstance(s, dict)
            and isinstance(s.get("offered_rps"), int | float)
            and not isinstance(s.get("offered_rps"), bool)
            for s in steps
        )
    ):
        raise BadInput(
            f"{name} ({file.name})", str(file), "steps: a list of objects with offered_rps"
        )
    return doc


def workload_differences(
    a: Path, doc_a: Summary | dict[str, Any], b: Path, doc_b: Summary | dict[str, Any]
) -> list[str]:
    """What differs between A's and B's workloads (see :mod:`tailwise.report.workload`)."""
    if isinstance(doc_a, Summary) and isinstance(doc_b, Summary):
        return differences(run_workload(doc_a, a), run_workload(doc_b, b))
    if isinstance(doc_a, dict) and isinstance(doc_b, dict):
        return differences(sweep_workload(doc_a, a), sweep_workload(doc_b, b))
    return []  # not of one kind: refused before


def compare_dirs(
    a: str | Path, b: str | Path, threshold: float, *, allow_different: bool = False
) -> Comparison:
    """Load both directories (same kind, else BadInput) and compare B against A.

    Runs under different workloads are refused (BadInput naming the fields) unless
    ``allow_different``; then the comparison carries a warning naming them.
    """
    doc_a, doc_b = load(a, "A"), load(b, "B")
    kind_a, kind_b = _kind(doc_a), _kind(doc_b)
    if kind_a != kind_b:
        raise BadInput("B", f"a {kind_b} directory", f"the same kind as A (a {kind_a} directory)")
    names = (str(a), str(b))
    differ = workload_differences(Path(a), doc_a, Path(b), doc_b)
    if differ and not allow_different:
        raise BadInput(
            "B",
            "another workload",
            f"the workload of A, but {'; '.join(differ)} (or --allow-different to compare anyway)",
        )
    if isinstance(doc_a, Summary) and isinstance(doc_b, Summary):
        c = compare_runs(doc_a, doc_b, threshold, names)
    else:
        assert isinstance(doc_a, dict) and isinstance(doc_b, dict)
        c = compare_sweeps(doc_a, doc_b, threshold, names)
    if differ:
        c.warnings.append(
            "A and B ran DIFFERENT workloads (" + "; ".join(differ) + "): the deltas below "
            "mix the change under test with the change in load"
        )
    return c


# ---- rendering ------------------------------------------------------------------------


def _fmt(value: float | None, unit: str) -> str:
    """A value in its unit: ``12.3ms``, ``98.5/s``, ``99.50%``; ``-`` when absent."""
    if value is None:
        return "-"
    if unit == "ms":
        if abs(value) >= 1000:
            return f"{value / 1000:.2f}s"
        return f"{value:.1f}ms" if abs(value) >= 10 else f"{value:.2f}ms"
    if unit == "share":
        return f"{100 * value:.2f}%"
    return f"{value:.1f}/s"


def _fmt_delta(m: Metric) -> str:
    d = m.delta
    if d is None:
        return "-"
    if m.unit == "share":
        return f"{100 * d:+.2f}pp"  # percentage points
    sign = "+" if d >= 0 else "-"
    return sign + _fmt(abs(d), m.unit)


def _fmt_rel(rel: float | None) -> str:
    return "-" if rel is None else f"{100 * rel:+.1f}%"


def regression_line(m: Metric, threshold: float) -> str:
    """One line naming a regressed metric: ``latency p99: 5.2ms -> 8.3ms (+59.6%), ...``."""
    limit = f"{100 * threshold:g}%"
    if m.b is None:
        what = "none found" if m.key == "knee_rps" else "no value"
        return f"{m.label}: {_fmt(m.a, m.unit)} -> {what} in B"
    word = "rose" if m.better == "lower" else "fell"
    return (
        f"{m.label}: {_fmt(m.a, m.unit)} -> {_fmt(m.b, m.unit)} "
        f"({_fmt_rel(m.rel_delta)}), {word} by more than {limit}"
    )


def _table(c: Comparison) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("")
    for name in ("A", "B", "Δ", "Δ%"):
        table.add_column(name, justify="right")
    table.add_column("")
    for m in c.metrics:
        mark = Text("✗ regression", "bold red") if m.regressed else Text("")
        if m.gated and not m.regressed:
            mark = Text("✓", "green")
        cells = (_fmt(m.a, m.unit), _fmt(m.b, m.unit), _fmt_delta(m), _fmt_rel(m.rel_delta))
        table.add_row(m.label, *cells, mark)
    if c.verdicts:
        table.add_row("verdict", c.verdicts["a"], c.verdicts["b"], "", "", "")
    return table


def render(c: Comparison) -> Group:
    """The comparison as rich renderables: header, table, then one line per finding."""
    limit = f"{100 * c.threshold:g}%"
    parts: list[Any] = [Text(f"WARNING     {w}", "bold red") for w in c.warnings]
    parts += [Text(f"A  {c.a}\nB  {c.b}", "bold"), _table(c)]
    for m in c.regressions:
        parts.append(Text(f"REGRESSION  {regression_line(m, c.threshold)}", "bold red"))
    if not c.regressions:
        parts.append(Text(f"no regression beyond {limit} (gated: ✓ rows)", "green"))
    for note in c.invalid:
        parts.append(Text(f"INVALID     {note}", "bold yellow"))
    for note in c.notes:
        parts.append(Text(f"note        {note}", "yellow"))
    return Group(*parts)


def print_comparison(c: Comparison, *, stderr: bool = False) -> None:
    """Print :func:`render`; finding lines never wrap (one line each, for CI logs and grep)."""
    Console(stderr=stderr, highlight=False, soft_wrap=True).print(render(c))
