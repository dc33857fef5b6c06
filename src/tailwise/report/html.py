"""One self-contained HTML file per run or sweep: no CDN, no external file, works offline.

Charts are the PNGs of :mod:`tailwise.report.plot`, embedded as data URIs.
Every string that comes from a run (target URL, SLO specs, error kinds,
verdict reasons) passes through :func:`html.escape`; nothing is inserted raw.
A tiny inline script records how many charts decoded (``data-charts-rendered``
on ``<body>``) so a headless browser test can check the page really renders.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from tailwise.report.text import DIST_ROWS

_DISTS = DIST_ROWS  # the rows of the terminal summary, in its order
_QS = ("p50", "p90", "p95", "p99", "p999", "max", "mean", "count")
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:60rem;color:#222}
h1{font-size:1.3rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{padding:.2rem .7rem;text-align:right}
th{border-bottom:1px solid #999}td:first-child,th:first-child{text-align:left}
.pass{color:#1a7f37;font-weight:bold}.fail{color:#cf222e;font-weight:bold}
.invalid{color:#9a6700;font-weight:bold}img{max-width:100%;display:block;margin:1rem 0}
.note{color:#555}code{background:#f3f3f3;padding:0 .2rem}
"""
_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.querySelectorAll('img.chart'));
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  document.body.setAttribute('data-charts-rendered', String(ok.length));
  document.body.setAttribute('data-charts-total', String(imgs.length));
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _ms(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v / 1000:.2f} s" if v >= 1000 else f"{v:.2f} ms"


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img class="chart" alt="{_e(path.stem)}" src="data:image/png;base64,{data}">'


def _page(title: str, body: list[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_STYLE}</style>"
        f"<script>{_SCRIPT}</script></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _verdict(verdict: str, reason: str) -> str:
    cls = verdict if verdict in ("pass", "fail", "invalid") else "note"
    return f"<p>verdict <span class='{cls}'>{_e(verdict.upper())}</span> {_e(reason)}</p>"


def _dist_table(s: dict[str, Any]) -> str:
    head = "".join(f"<th>{_e(q)}</th>" for q in _QS)
    rows = []
    for label, key in _DISTS:
        d = s.get(key)
        if not d:
            continue
        cells = "".join(
            f"<td>{_e(d.get(q, '-'))}</td>" if q == "count" else f"<td>{_ms(d.get(q))}</td>"
            for q in _QS
        )
        rows.append(f"<tr><td>{_e(label)}</td>{cells}</tr>")
    return f"<table><tr><th></th>{head}</tr>{''.join(rows)}</table>"


def _slo_table(s: dict[str, Any]) -> str:
    rows = []
    for slo in s.get("slos", []):
        value = slo.get("attainment", slo.get("value"))
        shown = f"{value:.2%}" if slo.get("kind") == "deadline" else _e(value)
        mark = "pass" if slo.get("passed") else "fail"
        rows.append(
            f"<tr><td><code>{_e(slo.get('spec'))}</code></td><td>{_e(slo.get('kind'))}</td>"
            f"<td>{shown}</td><td class='{mark}'>{mark}</td></tr>"
        )
    return (
        "<table><tr><th>SLO</th><th>kind</th><th>value</th><th></th></tr>"
        + "".join(rows)
        + ("</table>")
    )


def run_page(s: dict[str, Any], charts: list[Path]) -> str:
    target = s["target"] if isinstance(s["target"], str) else ", ".join(s["target"])
    req, rates = s["requests"], s["rates"]
    body = [
        f"<h1>tailwise run: {_e(target)}</h1>",
        f"<p class='note'>{_e(s['mode'])}-loop, arrival {_e(s.get('arrival'))}, window "
        f"{s['window']['start_s']:.1f}-{s['window']['end_s']:.1f} s</p>",
        _verdict(s["verdict"], s["verdict_reason"]),
        "<h2>Accounting</h2>",
        f"<p>{req['scheduled']} scheduled = {req['ok']} ok + {req['failed']} failed + "
        f"{req['timed_out']} timed out + {req['cancelled']} cancelled + {req['not_sent']} "
        f"not sent; errors: {_e(req.get('errors') or 'none')}</p>",
        "<h2>Rates</h2>",
        f"<p>offered {rates['offered_rps']:.1f}/s, throughput {rates['throughput_rps']:.1f}/s, "
        f"goodput {rates['goodput_rps']:.1f}/s, attainment {rates['attainment']:.2%}</p>",
        "<h2>Distributions</h2>",
        _dist_table(s),
        "<h2>SLOs</h2>",
        _slo_table(s),
        "<h2>Charts</h2>",
        *(_img(p) for p in charts),
    ]
    return _page(f"tailwise run {target}", body)


def _step_name(row: dict[str, Any]) -> str:
    if row.get("concurrency"):
        return f"{row['concurrency']} users (closed loop)"
    return f"{row['offered_rps']:g}/s"


def sweep_page(doc: dict[str, Any], charts: list[Path]) -> str:
    steps = doc["steps"]
    llm = any("ttft_ms" in row for row in steps)
    dist = "ttft_ms" if llm else "latency_ms"
    label = "TTFT" if llm else "latency"
    head = (
        "<tr><th>rate</th><th>offered</th><th>throughput</th><th>goodput</th><th>attainment</th>"
        f"<th>{label} p50</th><th>{label} p99</th><th>verdict</th></tr>"
    )
    rows = []
    for row in steps:
        d = row.get(dist) or {}
        knee_here = doc.get("knee_rps") is not None and row["offered_rps"] == doc["knee_rps"]
        mark = " ◀ knee" if knee_here else ""
        rows.append(
            f"<tr><td>{_e(_step_name(row))}</td><td>{row['measured_offered_rps']:.1f}</td>"
            f"<td>{row['throughput_rps']:.1f}</td><td>{row['goodput_rps']:.1f}</td>"
            f"<td>{row['attainment']:.1%}</td><td>{_ms(d.get('p50'))}</td>"
            f"<td>{_ms(d.get('p99'))}</td>"
            f"<td class='{_e(row['verdict'])}'>{_e(row['verdict'])}{mark}</td></tr>"
        )
    knee = doc.get("knee_rps")
    body = [
        f"<h1>tailwise sweep: {_e(doc.get('target'))}</h1>",
        f"<p>knee: <b>{_e(f'{knee:g}/s' if knee is not None else 'none')}</b>, the highest "
        "rate at which this step and every lower one met every SLO</p>",
        f"<p class='note'>SLOs: {_e(', '.join(doc.get('slos', [])) or 'implicit')}"
        f"{'; ' + _e(doc['note']) if doc.get('note') else ''}</p>",
        f"<table>{head}{''.join(rows)}</table>",
        "<h2>Charts</h2>",
        *(_img(p) for p in charts),
    ]
    return _page(f"tailwise sweep {doc.get('target')}", body)
