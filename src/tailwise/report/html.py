"""One self-contained HTML file per run, sweep or comparison: no CDN, no external file.

Charts are PNGs (:mod:`tailwise.report.charts`) embedded as data URIs, each in a
``<figure>`` whose caption states what it shows and lists the SLO thresholds it
draws as ``<li class="slo-line">`` (the image's alt text says the same). Every
string that comes from a run (target URL, SLO specs, error kinds and bodies,
verdict reasons, the command line) passes through :func:`esc`; nothing is
inserted raw. A tiny inline script records how many charts decoded
(``data-charts-rendered`` on ``<body>``) so a headless browser test can check
that the page really renders.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Mapping
from typing import Any

from tailwise.metrics.schema import Section, SloEntry, Summary
from tailwise.report.charts import Chart
from tailwise.report.text import DIST_ROWS, error_message, target_text

_QS = ("p50", "p90", "p95", "p99", "p999", "max", "mean", "count")
_Q_LABEL = {"p999": "p99.9"}
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:62rem;color:#222;padding:0 1rem}
h1{font-size:1.35rem}h2{font-size:1.12rem;margin-top:2rem;border-bottom:1px solid #ddd}
h3{font-size:1rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{padding:.2rem .7rem;text-align:right}
th{border-bottom:1px solid #999}td:first-child,th:first-child{text-align:left}
table.meta th{text-align:left;border:none;color:#555;font-weight:normal}
table.meta td{text-align:left}
.pass{color:#1a7f37;font-weight:bold}.fail{color:#cf222e;font-weight:bold}
.invalid,.inconclusive{color:#9a6700;font-weight:bold}
tr.untrusted td{background:#fff8e1}
figure{margin:1.2rem 0}img{max-width:100%;display:block}
figcaption{color:#444;font-size:.92rem}
.note{color:#555}code{background:#f3f3f3;padding:0 .2rem;word-break:break-all}
pre{background:#f6f6f6;padding:.4rem;white-space:pre-wrap;word-break:break-all;max-width:40rem}
.warning{color:#cf222e;font-weight:bold;border:2px solid #cf222e;padding:.5rem}
"""
_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.querySelectorAll('img.chart'));
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  document.body.setAttribute('data-charts-rendered', String(ok.length));
  document.body.setAttribute('data-charts-total', String(imgs.length));
});
"""
META_ROWS = (
    ("command", "command line"),
    ("tool_version", "tailwise version"),
    ("date_utc", "date"),
    ("host", "host"),
    ("cpus", "CPU count"),
    ("target", "target"),
    ("slos", "SLOs"),
)


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def ms(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v / 1000:.2f} s" if v >= 1000 else f"{v:.2f} ms"


def page(title: str, body: Iterable[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>{_STYLE}</style>"
        f"<script>{_SCRIPT}</script></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def figure(chart: Chart, chart_id: str) -> str:
    """A chart as a figure: the PNG (alt text), its title and the SLO lines it draws."""
    data = base64.b64encode(chart.path.read_bytes()).decode("ascii")
    lines = "".join(
        f"<li class='slo-line' data-slo='{esc(line)}'>SLO line: {esc(line)}</li>"
        for line in chart.slo_lines
    )
    listed = f"<ul class='slo-lines'>{lines}</ul>" if lines else ""
    return (
        f"<figure class='chart' id='{esc(chart_id)}'>"
        f"<img class='chart' alt='{esc(chart.alt)}' src='data:image/png;base64,{data}'>"
        f"<figcaption>{esc(chart.title)}{listed}</figcaption></figure>"
    )


def meta_table(meta: dict[str, Any]) -> str:
    rows = []
    for key, label in META_ROWS:
        value = meta.get(key)
        if value is None or value == "" or value == []:
            value = "not recorded"
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        shown = f"<code>{esc(value)}</code>" if key in ("command", "target") else esc(value)
        rows.append(f"<tr data-meta='{esc(key)}'><th>{esc(label)}</th><td>{shown}</td></tr>")
    return f"<table class='meta' id='meta'>{''.join(rows)}</table>"


def verdict_line(verdict: str, reason: str) -> str:
    cls = verdict if verdict in ("pass", "fail", "invalid", "inconclusive") else "note"
    return f"<p>verdict <span class='{cls}'>{esc(verdict.upper())}</span> {esc(reason)}</p>"


def dist_table(s: Summary) -> str:
    head = "".join(f"<th>{esc(_Q_LABEL.get(q, q))}</th>" for q in _QS)
    rows = []
    for label, key in DIST_ROWS:
        d = s.distribution(key)
        if d is None:
            continue
        cells = "".join(
            f"<td>{esc(d.count)}</td>" if q == "count" else f"<td>{ms(d.get(q))}</td>" for q in _QS
        )
        rows.append(f"<tr><td>{esc(label)}</td>{cells}</tr>")
    return f"<table class='dist'><tr><th></th>{head}</tr>{''.join(rows)}</table>"


def _slo_shown(slo: SloEntry) -> str:
    value = slo.attainment if slo.kind == "deadline" else slo.value
    if value is None:
        return esc(value)
    if slo.kind == "deadline":
        return f"{value:.2%}"
    if slo.kind == "objective":
        return ms(value)
    if slo.spec.lstrip().startswith(("error", "attain", "rate")):
        return f"{value:.2%}"
    return f"{value:.1f}/s"


def _slo_bound(slo: SloEntry, x: float | None) -> str:
    """One end of an SLO's interval in the entry's unit (an open end: unbounded)."""
    if x is None:
        return "∞" if slo.kind == "objective" else "-"
    if slo.kind == "objective":
        return ms(x)
    if slo.kind == "deadline" or slo.spec.lstrip().startswith(("error", "attain", "rate")):
        return f"{x:.2%}"
    return f"{x:.1f}/s"


def slo_table(s: Summary) -> str:
    """Each SLO with the verdict its sample supports (not its point estimate's: a green
    "pass" under an INCONCLUSIVE run would contradict the verdict line), its interval and,
    where it has one, why the interval is missing or how the verdict was reached."""
    rows = []
    for slo in s.slos:
        mark = slo.decided or ("pass" if slo.passed else "fail")
        ci = slo.ci
        shown = "-" if ci is None else f"{_slo_bound(slo, ci[0])} - {_slo_bound(slo, ci[1])}"
        rows.append(
            f"<tr data-slo='{esc(slo.spec)}'><td><code>{esc(slo.spec)}</code></td>"
            f"<td>{esc(slo.kind)}</td><td>{_slo_shown(slo)}</td><td>{shown}</td>"
            f"<td class='{esc(mark)}'>{esc(mark)}</td>"
            f"<td class='note' style='text-align:left'>{esc(slo.ci_note or '')}</td></tr>"
        )
    return (
        "<table class='slos'><tr><th>SLO</th><th>kind</th><th>value</th><th>interval</th>"
        "<th>decided</th><th style='text-align:left'>why</th></tr>" + "".join(rows) + "</table>"
    )


def errors_table(s: Summary) -> str:
    """Failures by (HTTP status, error kind) with the first answer's body, escaped."""
    entries = s.errors
    if not entries:
        errors = dict(s.requests.errors)
        return f"<p>errors: {esc(errors or 'none')}</p>"
    rows = []
    for e in entries:
        samples = e.get("samples") or []
        body = str(samples[0]) if samples else ""
        said = error_message(body) if body else ""
        sample = f"<b>{esc(said)}</b><pre class='error-body'>{esc(body)}</pre>" if body else "-"
        rows.append(
            f"<tr class='error-row'><td>{esc(e.get('status') or '-')}</td>"
            f"<td>{esc(e.get('kind'))}</td><td>{esc(e.get('count'))}</td>"
            f"<td>{esc(e.get('warmup'))}</td><td style='text-align:left'>{sample}</td></tr>"
        )
    return (
        "<table class='errors' id='errors'><tr><th>status</th><th>kind</th><th>count</th>"
        "<th>in warm-up</th><th style='text-align:left'>first answer</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def run_sections(s: Summary) -> list[str]:
    """The body of one run: verdict, accounting, errors, rates, distributions, SLOs."""
    req, rates = s.requests, s.rates
    gpu = s.sections.get("gpu")  # the section --gpu-metrics adds, when it did
    return [
        verdict_line(str(s.verdict), str(s.verdict_reason)),
        "<h3>Accounting</h3>",
        f"<p>{req.scheduled} scheduled = {req.ok} ok + {req.failed} failed + "
        f"{req.timed_out} timed out + {req.cancelled} cancelled + {req.not_sent} "
        "not sent</p>",
        "<h3>Errors by status</h3>",
        errors_table(s),
        "<h3>Rates</h3>",
        f"<p>offered {rates.offered_rps:.1f}/s, throughput {rates.throughput_rps:.1f}/s, "
        f"goodput {rates.goodput_rps:.1f}/s, attainment {rates.attainment:.2%}</p>",
        "<h3>Distributions</h3>",
        dist_table(s),
        "<h3>SLOs</h3>",
        slo_table(s),
        *(["<h3>GPU</h3>", gpu_table(gpu)] if isinstance(gpu, Mapping) else []),
    ]


def gpu_table(g: Section) -> str:
    """Each GPU's use, power, memory and energy (``--gpu-metrics``), and energy per unit."""
    rows = []
    for gpu in g.get("gpus") or []:
        cells = [f"{gpu.get('id', '')} {gpu.get('name', '')}"]
        for key, unit in (("util_pct", "%"), ("power_w", " W")):
            v = gpu.get(key) or {}
            cells.append(f"{v['mean']:.0f}{unit} / {v['max']:.0f}{unit}" if v else "-")
        mem = (gpu.get("mem_used_mib") or {}).get("max")
        cells.append(f"{mem / 1024:.1f} GiB" if mem is not None else "-")
        e = gpu.get("energy_j") or {}
        cells.append(f"{e['value']:.4g} J ({e['method']})" if e else "-")
        rows.append("<tr class='gpu-row'>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    per = []
    for key, what in (
        ("per_output_token_j", "per output token"),
        ("per_request_j", "per request"),
        ("per_good_request_j", "per good request"),
    ):
        est = g.get(key) or {}
        if est.get("value") is not None:
            ci = est.get("ci")
            shown = f"{ci[0]:.4g}-{ci[1]:.4g}" if ci else f"no interval ({est.get('reason', '')})"
            said = f"{what}: {est['value']:.4g} J, {shown}"
            per.append(f"<li class='energy-per'>{esc(said)}</li>")
    note = esc(g.get("note", "")) if "note" in g else ""
    return (
        f"<p class='note'>{esc(g.get('source'))}, {esc(g.get('samples_in_window', 0))} samples "
        f"in the window {note}</p><table class='gpu' id='gpu'><tr><th>GPU</th>"
        "<th>utilization mean / max</th><th>power mean / max</th><th>memory max</th>"
        "<th>energy in the window</th></tr>" + "".join(rows) + "</table><ul>" + "".join(per)
        + "</ul>"
    )  # fmt: skip


def _arrival_text(arrival: Any) -> str:
    if not isinstance(arrival, Mapping):
        return str(arrival)
    rate = arrival.get("rate_rps")
    parts = [str(arrival.get("process", "?"))]
    if isinstance(rate, int | float):
        parts.append(f"{rate:g}/s")
    parts += [f"{k} {v}" for k, v in arrival.items() if k not in ("process", "rate_rps")]
    return ", ".join(parts)


def run_page(s: Summary, charts: list[Chart], meta: dict[str, Any] | None = None) -> str:
    target = target_text(s)
    info = {"target": target, "slos": [x.spec for x in s.slos], **(meta or {})}
    info.setdefault("tool_version", s.tool_version)
    body = [
        f"<h1>tailwise run: {esc(target)}</h1>",
        meta_table(info),
        f"<p class='note'>{esc(s.mode)}-loop, arrival {esc(_arrival_text(s.arrival))}"
        f", window {s.window.start_s:.1f}-{s.window.end_s:.1f} s</p>",
        *run_sections(s),
        "<h2>Charts</h2>",
        *(figure(c, f"chart-{c.path.stem}") for c in charts),
    ]
    return page(f"tailwise run {target}", body)
