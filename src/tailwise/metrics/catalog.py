"""The metric catalog: every per-request metric said once (issue 41).

A metric is one :class:`Metric` in :data:`CATALOG`: the name ``--slo`` knows it
by, how its per-request values are derived (a function of
:mod:`tailwise.metrics.derive`), its distribution's key in summary.json, its
label, whether only LLM runs have it, how the client's lag bounds the server's
value, and where it appears. Every table that lists metrics is read from here:

===========================  ===============================================================
reader                       what it takes
===========================  ===============================================================
``metrics.slo``              :func:`slo_names` (parsing), :func:`lookup` (values, LLM-only)
``metrics.summary``          :func:`distributions`, :func:`summary_sample` (one key each)
``metrics.intervals``        :func:`summary_sample` (each distribution's interval), values
``metrics.shape``            every ``summary_key`` (checked when a summary is read back)
``metrics.catalog``          :func:`metric_bounds` / :func:`bounds_view` (the ``bounds`` rule)
``report.text``/``html``     ``report_row``: a row of the distribution table
``report.compare``           ``compare`` (rows of ``tailwise compare``), ``sweep_step``
``loadgen.sweep``            ``sweep_step``: p50/p90/p99 in each step row of sweep.json
``report.charts``/plot       ``chart``: a panel or series, with its SLOs' threshold lines
``report.export``            ``export``: a derived column of the CSV/Parquet export
``loadgen.engine.watch``     ``watch_end``: the loss watch may stop a run on it
``loadgen.execute.results``  ``live``: its p99 on the live line when an SLO names it
===========================  ===============================================================

Adding a metric is one entry here plus its derivation in ``derive``
(docs/architecture.md, "Add a metric"). A name the catalog does not hold is an
error (:func:`lookup`), never a silent default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tailwise.errors import BadInput
from tailwise.metrics import client, derive
from tailwise.metrics.client import BoundRule, ClientLag
from tailwise.records import I64, Records

Derive = Callable[[Records], I64]
# The rows that have a value of the metric, given its per-request values.
Population = Callable[[Records, I64], np.ndarray]
# A distribution's sample pooled from rows (indices, in order) instead of one value per
# request: ITL's every inter-chunk gap.
Pooled = Callable[[Records, np.ndarray], I64]
Values = Callable[[str], I64]
PERCENTILE_LABELS = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p99.9"}


def answered(r: Records, values: I64) -> np.ndarray:
    """Successful requests that have a value (-1 marks none)."""
    rows: np.ndarray = (r.error == 0) & (values >= 0)
    return rows


def sent(r: Records, values: I64) -> np.ndarray:
    """Every request that was sent, whatever its outcome (send lag)."""
    rows: np.ndarray = r.sent_ns >= 0
    return rows


@dataclass(frozen=True)
class Metric:
    """One metric: its names, its values, and the tables it appears in."""

    name: str  # the name in --slo (and in the live line)
    label: str  # in tables, comparisons and charts: "TTFT"
    summary_key: str  # its distribution in summary.json, in ms: "ttft_ms"
    per_request_ns: Derive  # int64 ns per row, -1 where the row has none
    bounds: BoundRule  # the server's value bounded by the client's lag (metrics.client)
    population: Population = answered
    llm_only: bool = False  # only runs that parse token streams have it
    aliases: tuple[str, ...] = ()
    slo: bool = True  # --slo may name it
    pooled: Pooled | None = None  # the distribution pools this sample instead
    report_row: bool = True  # a row of the terminal and HTML distribution table
    compare: tuple[tuple[str, bool], ...] = ()  # (percentile key, gates) in `tailwise compare`
    sweep_step: bool = False  # p50/p90/p99 in sweep.json's step rows; p99 compared per rate
    chart: bool = False  # drawn in the charts, with its SLOs' threshold lines
    export: bool = False  # a derived column of `tailwise export`
    watch_end: str | None = None  # the block column that ends it (from scheduled): watchable
    live: bool = False  # the live line shows its p99 when an SLO names it

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def compare_rows(self) -> list[tuple[str, str, str, str, bool]]:
        """``(key, label, unit, better, gated)`` rows for ``tailwise compare``."""
        return [
            (f"{self.summary_key}.{q}", f"{self.label} {PERCENTILE_LABELS[q]}", "ms", "lower", g)
            for q, g in self.compare
        ]


CATALOG: tuple[Metric, ...] = (
    Metric(
        "latency", "latency", "latency_ms", derive.latency_ns, client.read_at("done_ns"),
        aliases=("e2e",), sweep_step=True, chart=True, export=True, watch_end="done_ns",
        compare=(("p50", False), ("p90", False), ("p99", True), ("p999", False)),
    ),
    Metric(
        "service", "service", "service_ms", derive.service_ns, client.read_at("done_ns"),
        export=True, live=True,
    ),
    Metric(
        "send_lag", "send lag", "send_lag_ms", derive.send_lag_ns, client.as_measured,
        population=sent, export=True,
    ),
    Metric(
        "ttft", "TTFT", "ttft_ms", derive.ttft_ns, client.read_at("first_token_ns"),
        llm_only=True, compare=(("p50", False), ("p99", True)), sweep_step=True, chart=True,
        export=True, watch_end="first_token_ns", live=True,
    ),
    Metric(  # TTFT from the actual send: a distribution only, no SLO names it
        "service_ttft", "service TTFT", "service_ttft_ms", derive.service_ttft_ns,
        client.read_at("first_token_ns"), llm_only=True, slo=False, report_row=False,
    ),
    Metric(
        "tpot", "TPOT", "tpot_ms", derive.tpot_ns, client.token_gap, llm_only=True,
        compare=(("p50", False), ("p99", True)), sweep_step=True, chart=True, live=True,
    ),
    Metric(  # per request the mean gap (deadlines); the distribution pools every gap
        "itl", "ITL", "itl_ms", derive.mean_itl_ns, client.chunk_gap, llm_only=True,
        pooled=derive.itl_gaps_ns, compare=(("p50", False), ("p99", False)),
    ),
    Metric(  # inference-perf's normalized TPOT: e2e over output tokens; docs/metrics.md
        "ntpot", "NTPOT", "ntpot_ms", derive.ntpot_ns,
        client.divided(client.read_at("done_ns"), derive.latency_ns, lambda r: r.output_tokens),
        llm_only=True, compare=(("p50", False), ("p99", False)), live=True,
    ),
)  # fmt: skip


def _by_name() -> dict[str, Metric]:
    return {name: m for m in CATALOG for name in m.names}


_BY_NAME = _by_name()


def slo_names() -> list[str]:
    """Every name ``--slo`` accepts (aliases too), sorted."""
    return sorted(name for m in CATALOG if m.slo for name in m.names)


def lookup(name: str, field: str = "metric") -> Metric:
    """The metric called ``name``; BadInput naming ``field`` when there is none."""
    metric = _BY_NAME.get(name)
    if metric is None:
        raise BadInput(field, name, f"a known metric ({', '.join(slo_names())})")
    return metric


def distributions(llm_only: bool) -> tuple[Metric, ...]:
    """The metrics of every summary (``llm_only`` False) or of LLM summaries only (True)."""
    return tuple(m for m in CATALOG if m.llm_only == llm_only)


def summary_sample(m: Metric, r: Records, values: I64, rows: np.ndarray) -> I64:
    """The values of ``m``'s distribution from ``rows`` (indices, in the order wanted)
    that have one: ``values`` is ``m.per_request_ns(r)``."""
    if m.pooled is not None:
        return m.pooled(r, rows)
    keep = m.population(r, values)[rows]
    sample: I64 = values[rows][keep]
    return sample


def metric_bounds(r: Records, name: str, lag: ClientLag | None) -> tuple[I64, I64]:
    """(lower, upper) bound of the server's value of metric ``name`` per request (-1: none)."""
    m = lookup(name)
    return m.bounds(r, m.per_request_ns(r), lag)


def bounds_view(r: Records, lag: ClientLag | None) -> tuple[Values, Values]:
    """Two views of every metric: the server's lower bound and its upper bound.

    Each is a function ``metric -> per-request values`` (computed once per metric),
    for :func:`tailwise.metrics.slo.evaluate` to judge the SLOs on.
    """
    cache: dict[str, tuple[I64, I64]] = {}

    def pair(name: str) -> tuple[I64, I64]:
        if name not in cache:
            cache[name] = metric_bounds(r, name, lag)
        return cache[name]

    return (lambda m: pair(m)[0]), (lambda m: pair(m)[1])
