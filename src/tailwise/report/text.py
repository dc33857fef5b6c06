"""The terminal summary (rich). A pure function of a run's :class:`Summary`."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from tailwise.metrics.catalog import CATALOG
from tailwise.metrics.percentiles import percentile_key
from tailwise.metrics.schema import Generator, LittlesLaw, Section, SloEntry, SteadyState, Summary
from tailwise.metrics.uncertainty import (
    CONFIDENCE,
    FIFO_NOTE,
    GRADED_NOTE,
    HEAVY_SERVICE_MARGIN,
    TAIL_NOTE,
    heavy_label,
)

DIST_ROWS = tuple((m.label, m.summary_key) for m in CATALOG if m.report_row)
_COLS = (
    ("p50", "p50"),
    ("p90", "p90"),
    ("p95", "p95"),
    ("p99", "p99"),
    ("p99.9", "p999"),
    ("max", "max"),
    ("mean", "mean"),
)
_VERDICT_STYLE = {
    "pass": "bold green",
    "fail": "bold red",
    "invalid": "bold yellow",
    "inconclusive": "bold magenta",
}


def _x100(share: float | None) -> float:
    """A share in percent (None only in a hand-edited file: it fails as it always did)."""
    return 100 * share  # type: ignore[operator]


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v / 1000:.2f}s"
    if v >= 10:
        return f"{v:.1f}ms"
    return f"{v:.2f}ms"


def target_text(s: Summary) -> str:
    """The run's target, or its targets joined by commas."""
    return s.target if isinstance(s.target, str) else ", ".join(s.target)


def _header(s: Summary) -> Text:
    arrival = s.arrival
    target = target_text(s)
    t = Text()
    if s.closed:
        t.append(
            "CLOSED-LOOP (comparison only: latency hides coordinated omission)\n", "bold magenta"
        )
        t.append(f"{target}  concurrency {s.concurrency}", "bold")
    else:
        rate = arrival.get("rate_rps")
        what = arrival.get("process", "?") + (f" {rate:g}/s" if rate else "")
        if arrival.get("profile"):
            what += f" {arrival['profile']}"
        t.append(f"{target}  open-loop {what}", "bold")
    w = s.window
    t.append(f"  window {w.start_s:.1f}-{w.end_s:.1f}s ({w.duration_s:.1f}s)")
    return t


def _accounting(s: Summary) -> Text:
    r = s.requests
    mark = ("✓", "green") if r.accounted else ("✗ MISMATCH", "bold red")
    t = Text(
        f"requests  {r.scheduled} = {r.ok} ok + {r.failed} failed + "
        f"{r.timed_out} timeout + {r.cancelled} cancelled + {r.not_sent} unsent "
    )
    t.append(mark[0], mark[1])
    if r.errors:
        t.append(
            "\n          errors: " + ", ".join(f"{k} {v}" for k, v in sorted(r.errors.items()))
        )
        _error_statuses(t, s.errors)
    if r.warmup is not None and r.warmup.scheduled:
        t.append(f"\n          (+{r.warmup.scheduled} warm-up requests, excluded)", "dim")
    return t


SAMPLE_COLUMNS = 64  # a sample body on the terminal: one line, this long at most
MAX_STATUS_LINES = 6


def error_message(body: str) -> str:
    """What a failed answer says: its JSON error message (OpenAI's ``error.message``,
    FastAPI's ``detail``, a bare ``message`` or ``error`` string), else the body."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    if isinstance(doc, dict):
        err = doc.get("error")
        for candidate in (
            err.get("message") if isinstance(err, dict) else err,
            doc.get("message"),
            doc.get("detail"),
        ):
            if isinstance(candidate, str) and candidate.strip():
                return candidate
    return body


def one_line(text: str, width: int = SAMPLE_COLUMNS) -> str:
    """A body as one printable line: whitespace folded, control characters dropped, cut."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _error_statuses(t: Text, errors: Sequence[Section]) -> None:
    """Per (status, kind) in the window: the count and the first answer's body, one line each."""
    shown = [e for e in errors if e["count"]][:MAX_STATUS_LINES]
    for e in shown:
        status = str(e["status"]) if e["status"] else "-"
        line = f"\n          {status:>3} {e['kind']:<14} {e['count']:>6}"
        t.append(line)
        if e["samples"]:
            t.append(f"  {one_line(error_message(e['samples'][0]))}", "dim")
    rest = sum(1 for e in errors if e["count"]) - len(shown)
    if rest > 0:
        t.append(f"\n          ... {rest} more (status, kind) pairs in summary.json", "dim")


def _rates(s: Summary) -> Text:
    r = s.rates
    t = Text(
        f"rates     offered {r.offered_rps:.1f}/s  throughput {r.throughput_rps:.1f}/s  "
        f"goodput {r.goodput_rps:.1f}/s\n          attainment {_x100(r.attainment):.2f}% "
        "(good / scheduled)"
    )
    if s.tokens:
        t.append(f"  output {s.tokens['output_tps']:.0f} tok/s")
    return t


WIDE = 100  # columns from which an interval shows 3 significant digits and "n too small"


def _span(pair: Sequence[float | None] | None, wide: bool, why: str = "") -> str:
    """An interval in ms, rounded outwards: ``5.66-6.21``, ``1.20-1.31s``; unsupported (null):
    ``n too small`` (``too few`` when narrow, 2 significant digits, to fit 80 columns), or
    ``heavy tail`` / ``heavy service`` (``heavy``) when ``why`` (its ``ci_note``) is a
    heavy tail's refusal: more data would not bring it."""
    if pair is None:
        heavy = heavy_label(why)
        if heavy:
            return heavy if wide else "heavy"
        return "n too small" if wide else "too few"
    lo, hi = (0.0 if x is None and i == 0 else x for i, x in enumerate(pair))
    if hi is None:
        return f"{_ms(lo)}-∞"
    unit, scale = ("s", 1000.0) if hi >= 1000 else ("", 1.0)
    lo, hi = float(lo or 0.0) / scale, hi / scale
    sig, most = (3, 2) if wide else (2, 1)  # significant digits, decimals at most
    digits = min(most, max(0, sig - 1 - math.floor(math.log10(hi)))) if hi > 0 else 0
    step = 10.0**digits
    down = math.floor(round(lo * step, 6)) / step
    up = math.ceil(round(hi * step, 6)) / step
    return f"{down:.{digits}f}-{up:.{digits}f}{unit}"


class _Distributions:
    """The distribution table, laid out for the width it is given (see :func:`_span`)."""

    def __init__(self, s: Summary) -> None:
        self.s = s

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield _distributions(self.s, wide=options.max_width >= WIDE)


def columns(s: Summary) -> tuple[tuple[str, str], ...]:
    """(heading, summary key) of the distribution columns: ``--percentiles`` when given
    (then max and mean), else p50 p90 p95 p99 p99.9 max mean."""
    chosen = s.percentiles
    if not chosen:
        return _COLS
    picked = tuple((f"p{q:g}", percentile_key(q)) for q in chosen)
    return (*picked, ("max", "max"), ("mean", "mean"))


def confidence(s: Summary) -> float:
    """The run's interval level (:data:`CONFIDENCE` when it computed none)."""
    return s.confidence if s.confidence is not None else CONFIDENCE


def _distributions(s: Summary, wide: bool = True) -> Table:
    """Each distribution's row, and under it (dim) its interval per column, in ms."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("", style="bold")
    cols = columns(s)
    for label, _ in cols:
        table.add_column(label, justify="right")
    table.add_column("n", justify="right", style="dim")
    sim = s.source == "sim"
    level = f"{100 * confidence(s):g}% CI"
    for label, key in DIST_ROWS:
        d = s.distribution(key)
        if d is not None and not (sim and key in ("service_ms", "send_lag_ms")):  # latency / 0
            table.add_row(label, *[_ms(d.get(k)) for _, k in cols], str(d.count))
            ci = d.ci
            if ci and d.count:
                why = d.ci_note or {}
                cells = [_span(ci.get(k), wide, why.get(k, "")) if k in ci else "" for _, k in cols]
                table.add_row(Text(f" {level}", "dim"), *[Text(c, "dim") for c in cells], "")
    return table


def _checks(s: Summary) -> Text:
    ll, g = s.littles_law or LittlesLaw(), s.generator or Generator()
    t = Text(
        f"Little    L={ll.l_measured:.2f} in system vs λW={ll.lambda_w:.2f} "
        f"(gap {_x100(ll.rel_gap):.2f}%)"
    )
    if s.latency is not None and s.latency.count:  # no answer at all: nothing to be steady
        _steady_line(t, s.steady_state)
    if s.source != "sim":  # a simulation sends and reads on time
        t.append("\n" + _client_line(s))
        if g.cap_bound:
            t.append(
                f"; in-flight cap {g.max_in_flight} bound {g.cap_bound} times "
                f"({_x100(g.cap_bound_share):.1f}%), counted as latency",
                "yellow",
            )
    for slo in s.slos:
        decided = slo.decided if slo.decided is not None else "pass" if slo.passed else "fail"
        mark, style = _MARKS[decided]
        t.append("\n" + mark, style)
        line = f"{slo.spec:<28} {_slo_value(slo)}" + ("  (default)" if slo.implicit else "")
        t.append(line)
        _slo_interval(t, slo, confidence(s), len(line) + 2)
        bound = slo.server_bound
        if bound is not None and bound.client_could_flip:
            t.append(
                f"  server's share {_bound_text(slo, bound.lower)}: the client decides", "yellow"
            )
    return t


def _slo_value(slo: SloEntry) -> str:
    value = slo.value
    if slo.kind == "deadline":
        return f"attainment {_x100(slo.attainment):.2f}% (target {_x100(slo.target):g}%)"
    if slo.kind == "objective":
        return _ms(value) if value is not None else "unbounded (failures)"
    if slo.spec.lstrip().startswith(("error", "attain", "rate")):
        return f"{_x100(value):.2f}%"
    return f"{value:.1f}/s"


_MARKS = {"pass": ("✓ ", "green"), "fail": ("✗ ", "red"), "inconclusive": ("? ", "magenta")}


def _steady_line(t: Text, st: SteadyState | None) -> None:
    """Say so when the window did not reach steady state, or began with a transient."""
    if st is None or (st.steady and not st.truncate_at):
        return
    cut = st.truncate_at
    drop = f"\n          MSER-5 would drop the window's first {cut} requests" if cut else ""
    if st.steady:
        t.append(f"\nsteady    the window starts with a transient{drop}", "yellow")
    else:
        t.append(f"\nsteady    NOT reached: {st.reason}{drop}", "yellow")


def _slo_interval(t: Text, slo: SloEntry, confidence: float, used: int) -> None:
    """The SLO's interval, dim; when the sample cannot decide, that note, highlighted.
    It goes on a line of its own, under the value, when it would pass 80 columns."""
    if slo.decided is None:
        return
    level = f"{100 * confidence:g}% CI"
    ci = slo.ci
    if ci is None and "max(" in slo.spec:
        shown = "no interval for a max"
    elif ci is None:
        shown = f"{level}: n too small"
    else:
        shown = f"{level} {_slo_span(slo, ci)}"
    inconclusive = slo.decided == "inconclusive"
    within = slo.within
    why = slo.ci_note or ""
    heavy = heavy_label(why)
    if inconclusive and heavy:  # more data would not decide it: say why, not the share
        shown = f"{heavy}: its tail may rest on jobs rarer than this run holds"
    elif slo.decided == "pass" and why.startswith(GRADED_NOTE):
        shown += f", heavy service: passed {HEAVY_SERVICE_MARGIN:g}x under"
    elif slo.decided in ("pass", "fail") and why.startswith((TAIL_NOTE, FIFO_NOTE)):
        # The model's bound, not the quantile's interval, decided it: say which, and how far.
        shown += ", " + why.split(" (")[0].replace("decided by", f"{slo.decided}ed by")
    elif inconclusive and within is not None and within.ci:
        lo, hi = within.ci
        shown = (
            f"{_x100(within.share):.2f}% ≤ {within.threshold_ms:.4g}ms, {level} "
            f"{_x100(lo):.2f}-{_x100(hi):.2f}%, need {_x100(within.needed):.4g}%"
        )
    note = f"({shown}: cannot decide)" if inconclusive else shown
    gap = "  " if used + 2 + len(note) <= 80 else "\n" + " " * 31
    t.append(gap + note, "magenta" if inconclusive else "dim")


def _slo_span(slo: SloEntry, ci: Sequence[float | None]) -> str:
    if slo.kind == "objective":
        unit = "ms" if ci[1] is not None and ci[1] < 1000 else ""
        return _span(ci, True) + unit
    lo, hi = ci
    if slo.kind == "deadline" or slo.spec.lstrip().startswith(("error", "attain", "rate")):
        return f"{100 * (lo or 0):.2f}-{100 * (hi or 0):.2f}%"
    return f"{lo or 0:.1f}-{hi or 0:.1f}/s"


def _client_line(s: Summary) -> str:
    """The client's own error, and whether it could change any verdict."""
    g = s.generator or Generator()
    load = g.load
    parts = [f"send-lag p99 {g.send_lag_p99_ms:.2f}ms"]
    if g.recv_lag_measured:
        parts.append(f"receive-lag p99 {g.recv_lag_p99_ms:.2f}ms")
    if load.get("cpu_share") is not None:
        parts.append(f"CPU {100 * load['cpu_share']:.0f}% of a core")
    if load.get("load_avg_1m") is not None:
        parts.append(f"load {load['load_avg_1m']:.1f}/{load['cores']} cores")
    flips = [
        x.spec for x in s.slos if x.server_bound is not None and x.server_bound.client_could_flip
    ]
    verdict = f"could flip {', '.join(flips)}" if flips else "could not flip any verdict"
    if g.max_send_lag_ms is not None:
        verdict += f"; --max-send-lag {g.max_send_lag_ms:g}ms"
    return "client    " + ", ".join(parts) + f": {verdict}"


def _bound_text(slo: SloEntry, value: float | None) -> str:
    if value is None:
        return "unbounded"
    if slo.kind == "deadline":
        return f"attainment {_x100(value):.2f}%"
    if slo.kind == "objective":
        return _ms(value)
    return f"{value:.4g}"


def render(s: Summary, directory: str | None = None) -> Group:
    verdict = Text(f"verdict   {str(s.verdict).upper()}", _VERDICT_STYLE[str(s.verdict)])
    verdict.append(f"  {s.verdict_reason}")
    if s.verdict in ("pass", "fail", "inconclusive") and s.confidence:
        verdict.append(f"; decided at {_level_text(verdict_confidence(s))} confidence", "dim")
    if s.verdict_hint:
        verdict.append(f"\nhint      {s.verdict_hint}", "dim")
    parts: list[Any] = [
        _header(s),
        _accounting(s),
        _rates(s),
        _Distributions(s),
        _checks(s),
        verdict,
    ]
    if directory:
        parts.append(Text(f"saved     {directory}", "dim"))
    writer = s.section("records_writer")
    if writer.get("note"):
        parts.append(Text(f"records   {writer['note']}", "yellow"))
    missing = s.section("outputs_missing")
    if missing:
        files = ", ".join(f"{k} ({v})" for k, v in missing.items())
        parts.append(Text(f"not saved {files}", "yellow"))
    return Group(*parts)


PIPED_WIDTH = 132  # a pipe or file has no width: rich's 80 cut the sweep table's verdicts


def console(*, stderr: bool = False, fit: Any = None) -> Console:
    """A console for tailwise's tables: the terminal's width, or a wide line in a pipe
    (``| head``, a log file), where a wrapped table row reads as two. Given ``fit`` (a
    renderable), a pipe is widened to its widest table: a cell is never cut there."""
    out = Console(stderr=stderr, highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = PIPED_WIDTH
        if fit is not None:
            wide = out.options.update_width(10_000)
            widths = [out.measure(t, options=wide).maximum for t in _tables(fit)]
            out.width = max([out.width, *widths])
    return out


def _tables(renderable: Any) -> list[Table]:
    """The tables in a renderable (a Group's, at any depth); paragraphs still wrap."""
    if isinstance(renderable, Table):
        return [renderable]
    if isinstance(renderable, Group):
        return [t for r in renderable.renderables for t in _tables(r)]
    return []


def verdict_confidence(s: Summary) -> float:
    """The level a run's verdict was decided at: the whole run's in a sequential run (its
    looks share it), else the summary's."""
    overall = s.sequential.overall_confidence if s.sequential is not None else None
    return float(overall or s.confidence or CONFIDENCE)


def _level_text(level: float) -> str:
    return f"{100 * level:.4g}%"


def print_summary(s: Summary, directory: str | None = None, *, stderr: bool = False) -> None:
    """A run's summary in the terminal: a fresh one, or one read back from disk
    (:func:`tailwise.metrics.shape.read_summary`)."""
    shown = render(s, directory)
    console(stderr=stderr, fit=shown).print(shown)


def render_sweep(doc: dict[str, Any]) -> Group:
    """sweep.json as a table: offered vs throughput and goodput, tails, the knee marked.

    ``rate`` is the rate asked for; ``offered`` is what the schedule really
    offered in the window (Poisson counts vary), the base of throughput.
    """
    steps = doc["steps"]
    llm = any("ttft_ms" in row for row in steps)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("rate", "offered", "thruput", "goodput", "attain"):
        table.add_column(name, justify="right")
    cols = (
        (("ttft_ms", "p50"), ("ttft_ms", "p99"), ("tpot_ms", "p99"))
        if llm
        else (
            ("latency_ms", "p50"),
            ("latency_ms", "p99"),
        )
    )
    for dist, q in cols:
        label = dist.removesuffix("_ms").upper() if llm else "lat."
        table.add_column(f"{label} {q}", justify="right")
    table.add_column("verdict")
    knee = doc.get("knee_rps")
    for row in steps:
        first = (
            f"{row['concurrency']} users" if row.get("concurrency") else f"{row['offered_rps']:g}/s"
        )
        cells = [
            first,
            f"{row['measured_offered_rps']:.1f}",
            f"{row['throughput_rps']:.1f}",
            f"{row['goodput_rps']:.1f}",
            f"{row['attainment']:.0%}",
        ]
        cells += [_ms((row.get(dist) or {}).get(q)) for dist, q in cols]
        verdict = Text(row["verdict"], _VERDICT_STYLE[row["verdict"]])
        if knee is not None and row.get("offered_rps") == knee:
            verdict.append(" ◀", "bold cyan")
        table.add_row(*cells, verdict)
    parts: list[Any] = [table]
    if doc.get("mode") == "closed":
        parts.append(Text("CLOSED LOOP: offered load follows the server's speed", "bold magenta"))
    elif knee is not None:
        line = f"knee ◀    {knee:g}/s: the highest rate at which every SLO held as measured"
        parts.append(Text(line, "bold"))
    else:
        parts.append(Text(_no_knee(steps), "bold yellow"))
    if doc.get("mode") != "closed" and "band_rps" in doc:
        parts.append(_band_text(doc.get("band_rps"), float(doc.get("confidence") or CONFIDENCE)))
    if doc.get("slos"):
        parts.append(Text("SLOs      " + "  ".join(doc["slos"])))
    if doc.get("note"):
        parts.append(Text(f"note      {doc['note']}", "yellow"))
    return Group(*parts)


def _no_knee(steps: list[dict[str, Any]]) -> str:
    """No knee: said as the lowest step's verdict says it (a step that missed only on its
    point estimates was not shown to fail)."""
    lowest = min(steps, key=lambda row: row.get("offered_rps") or 0.0, default=None)
    if lowest is None:
        return "knee      none: no step ran"
    if lowest["verdict"] == "fail":
        return "knee      none: the lowest rate already failed"
    return (
        f"knee      none: the lowest rate missed an SLO as measured (its verdict: "
        f"{lowest['verdict']})"
    )


def _band_text(band: list[float | None] | None, confidence: float = CONFIDENCE) -> Text:
    """What the steps *showed* at their confidence, beside the point estimates' knee."""
    held, failed = band or (None, None)
    shown = f"shown to hold up to {held:g}/s" if held is not None else "no rate shown to hold"
    shown += f", shown to fail from {failed:g}/s" if failed is not None else ""
    level = f"{100 * confidence:.4g}%"
    text = Text(f"band      {shown} ({level})", "bold" if held is not None else "magenta")
    if held is None:
        text.append(
            "\n          the steps were too short to show their SLOs hold: --duration auto "
            "runs each step until it is decided",
            "dim",
        )
    return text


def print_sweep(doc: dict[str, Any], *, stderr: bool = False) -> None:
    shown = render_sweep(doc)
    console(stderr=stderr, fit=shown).print(shown)
