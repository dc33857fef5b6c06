"""The metric catalog drives every table that lists metrics: each knows each metric.

Before the catalog, a metric was listed in nine tables and one missed was a silent
gap (a metric without client-lag bounds was judged as if the client had no error).
Each test below takes every catalog metric and asserts that one table knows it,
so a new entry is checked everywhere without a line added here.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from rich.console import Console

from tailwise.errors import BadInput
from tailwise.loadgen.engine.watch import WATCH_COLUMNS, WATCHED_METRICS, LossWatch
from tailwise.loadgen.execute.results import LIVE_METRICS, Progress
from tailwise.loadgen.sweep import Step, step_row
from tailwise.metrics import catalog, client, shape
from tailwise.metrics.catalog import CATALOG, lookup, metric_bounds, slo_names
from tailwise.metrics.client import ClientLag, LagSeries
from tailwise.metrics.percentiles import nearest_rank
from tailwise.metrics.schema import Summary
from tailwise.metrics.slo import parse_slo
from tailwise.records import RecordBlock, Records
from tailwise.report import compare, export, text
from tailwise.report.charts import draw_slos
from tailwise.sim.run import SimRun, simulate
from tailwise.sim.scenario import load_scenario
from tests.clirun import run_cli

GOLDEN = Path(__file__).parent.parent / "fixtures" / "golden"
SLO_METRICS = [m for m in CATALOG if m.slo]
SLO_NAMES = [(m, name) for m in SLO_METRICS for name in m.names]


@pytest.fixture(scope="module")
def llm_run() -> SimRun:
    """A seeded LLM simulation: every metric has values (tests/fixtures/golden/llm.yaml)."""
    return simulate(load_scenario(GOLDEN / "llm.yaml"))


@pytest.fixture(scope="module")
def http_run() -> SimRun:
    return simulate(load_scenario(GOLDEN / "http.yaml"))


def test_names_are_unique_and_every_entry_is_reachable_by_each_of_its_names() -> None:
    names = [name for m in CATALOG for name in m.names]
    assert len(names) == len(set(names))
    assert len({m.summary_key for m in CATALOG}) == len(CATALOG)
    for m in CATALOG:
        assert m.summary_key.endswith("_ms")  # ns inside, ms in summary.json
        for name in m.names:
            assert lookup(name) is m


def test_an_unknown_metric_is_an_error_naming_the_field() -> None:
    with pytest.raises(BadInput) as raised:
        lookup("latencyy", "--slo")
    assert str(raised.value).startswith("--slo: got 'latencyy', expected a known metric (")
    assert "\n" not in str(raised.value)
    with pytest.raises(BadInput, match=r"^--slo: got 'p99\(nope\)<=20ms'"):
        parse_slo("p99(nope)<=20ms")


def test_the_cli_rejects_an_unknown_metric_in_one_line_with_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = "http://127.0.0.1:9/v1/chat/completions"
    args = ["run", url, "--rate", "1/s", "--duration", "1s", "--out", str(tmp_path / "r")]
    code, _, err = run_cli([*args, "--slo", "p99(nope)<=20ms"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tailwise: error: --slo: got 'p99(nope)<=20ms'")
    assert "expected a known metric (" in lines[0] and not (tmp_path / "r").exists()


@pytest.mark.parametrize(("metric", "name"), SLO_NAMES, ids=[n for _, n in SLO_NAMES])
def test_slo_parsing_knows_every_name_in_every_form(metric: catalog.Metric, name: str) -> None:
    for spec, kind in (
        (f"{name}<=20ms", "deadline"),
        (f"p99({name})<=20ms", "objective"),
        (f"mean({name})<=20ms", "objective"),
        (f"{name}:p(99)<20ms", "objective"),
    ):
        slo = parse_slo(spec)
        assert (slo.kind, slo.metric, slo.needs_llm) == (kind, name, metric.llm_only), spec
    assert name in slo_names()


def test_a_distribution_only_metric_is_not_an_slo_name() -> None:
    for m in CATALOG:
        if not m.slo:
            with pytest.raises(BadInput):
                parse_slo(f"p99({m.name})<=20ms")


def test_summaries_hold_every_distribution_with_its_interval(
    llm_run: SimRun, http_run: SimRun
) -> None:
    for m in CATALOG:
        dist = llm_run.summary[m.summary_key]
        assert dist["count"] > 0 and "ci" in dist, m.name
        if m.llm_only:
            assert http_run.summary.get(m.summary_key) is None, m.name
        else:
            assert http_run.summary[m.summary_key]["count"] > 0, m.name
    assert set(shape.DISTRIBUTIONS) == {m.summary_key for m in CATALOG}


def test_the_report_table_has_a_row_per_metric(llm_run: SimRun) -> None:
    rows = dict(text.DIST_ROWS)  # the HTML report reads the same rows
    out = io.StringIO()
    measured = replace(llm_run.summary, source="loadgen")  # a simulation hides service, lag
    Console(file=out, width=160).print(text.render(measured))
    shown = [line.split("  ")[0].strip() for line in out.getvalue().splitlines()]
    for m in CATALOG:
        assert (rows.get(m.label) == m.summary_key) == m.report_row, m.name
        assert (m.label in shown) == m.report_row, m.name


def test_compare_shows_every_metrics_rows(llm_run: SimRun) -> None:
    summary = Summary.from_json(json.loads(json.dumps(llm_run.summary.to_json())))
    shown = {row.key for row in compare.compare_runs(summary, summary, 0.1).metrics}
    for m in CATALOG:
        assert {key for key, *_ in m.compare_rows()} <= shown, m.name


def test_sweep_rows_and_their_comparison_carry_every_step_metric(llm_run: SimRun) -> None:
    row = step_row(Step(20.0, Path("step"), llm_run.summary))
    doc = {"knee_rps": None, "steps": [row]}
    shown = {m.key for m in compare.compare_sweeps(doc, doc, 0.1).metrics}
    for m in CATALOG:
        assert (m.summary_key in row) == m.sweep_step, m.name
        if m.sweep_step:
            assert f"{m.summary_key}.p99@20" in shown, m.name


class _Axes:
    def axhline(self, *args: Any, **kw: Any) -> None:
        pass

    axvline = axhline


@pytest.mark.parametrize(("metric", "name"), SLO_NAMES, ids=[n for _, n in SLO_NAMES])
def test_charts_draw_the_slo_line_of_every_charted_metric(
    metric: catalog.Metric, name: str
) -> None:
    drawn = draw_slos(_Axes(), [parse_slo(f"p99({name})<=20ms")], metric.label)
    assert len(drawn) == (1 if metric.chart else 0)


def test_the_export_has_a_column_per_exported_metric(llm_run: SimRun) -> None:
    cols = export.columns(llm_run.records)
    for m in CATALOG:
        assert (m.summary_key in cols) == m.export, m.name


def test_the_loss_watch_judges_every_watched_metric_and_only_those() -> None:
    for m, name in SLO_NAMES:
        assert (name in WATCHED_METRICS) == (m.watch_end is not None)
        assert m.watch_end is None or m.watch_end in WATCH_COLUMNS
        watch = LossWatch([parse_slo(f"p99({name})<=20ms")], (0, 10**9), 100.0)
        assert len(watch.limits) == (1 if m.watch_end else 0), name


def _block(r: Records) -> RecordBlock:
    block = RecordBlock(0, len(r))
    for name in ("scheduled_ns", "sent_ns", "first_token_ns", "done_ns", "output_tokens"):
        block.view(name)[:] = getattr(r, name)
    block.view("reasoning_tokens")[:] = r.reasoning_tokens
    np.frombuffer(block.error, dtype=np.int16)[:] = r.error
    block.chunk_times = {i: t for i, t in enumerate(r.chunk_times) if t}
    return block


def test_the_live_line_shows_every_live_metric_as_the_summary_derives_it(llm_run: SimRun) -> None:
    r = llm_run.records
    names = tuple(name for m, name in SLO_NAMES if m.live)
    assert set(names) == set(LIVE_METRICS)
    engine = SimpleNamespace(t0=0, sent=0, in_flight=0)
    progress = Progress(cast(Any, engine), 10.0, io.StringIO(), slo_metrics=names, echo=False)
    progress.observe([_block(r)], list(range(len(r))))
    snap = progress.snapshot()
    for name in names:
        m = lookup(name)
        v = m.per_request_ns(r)
        want = nearest_rank(np.sort(v[m.population(r, v)]), 99.0) / 1e6
        assert snap[f"{name}_p99_ms"] == pytest.approx(want), name


def test_every_metric_has_client_lag_bounds_around_its_measured_value(llm_run: SimRun) -> None:
    """The failure the catalog removes: a metric judged as if the client had no error.
    Only the client's own number (send lag) may be judged as measured."""
    r = llm_run.records
    lag_ns = np.full(int(r.done_ns.max()) // 5_000_000 + 1, 2_000_000, dtype=np.int64)
    lag = ClientLag([LagSeries(5_000_000, 1_000_000, lag_ns)])
    for m in SLO_METRICS:
        measured = m.per_request_ns(r)
        lo, hi = metric_bounds(r, m.name, lag)
        has = measured >= 0
        assert ((lo >= 0) == has).all() and ((hi >= 0) == has).all(), m.name
        assert (lo[has] <= measured[has]).all() and (measured[has] <= hi[has]).all(), m.name
        if m.bounds is client.as_measured:
            assert m.population is catalog.sent, m.name  # the client's own number only
        else:
            assert (lo[has] < measured[has]).any(), m.name
