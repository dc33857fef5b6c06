"""``--dashboard``: the live line's figures as a page in a browser, while run, sweep or knee works.

A small HTTP server on 127.0.0.1 (a thread of the client process: one JSON
answer of a few kB a second, nothing on the hot path) serves one
self-contained page (no CDN) and ``/data``. The page asks for ``/data`` every
second and draws, from the figures the live line publishes
(:mod:`tailwise.loadgen.execute.live`): the offered and achieved rate, requests in
flight, the latency's p99 and the p99 of each SLO's own metric (TTFT, TPOT,
service), errors, the client's send lag, and the trials or steps so far with
their verdicts. Everything from a run is set as text (``textContent``), never
parsed as HTML. The server stops with the command; the page then says so.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_POINTS = 3600  # an hour of seconds; older points are dropped from the page
HOST = "127.0.0.1"


class Dashboard:
    """The live figures of one command, and the server that shows them."""

    def __init__(self, title: str, port: int = 0) -> None:
        self.title = title
        self.started = time.monotonic()
        self.points: deque[dict[str, Any]] = deque(maxlen=MAX_POINTS)
        self.trials: list[dict[str, Any]] = []
        self.done = False
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/data":
                    body, kind = json.dumps(owner.data()).encode(), "application/json"
                elif self.path in ("/", "/index.html"):
                    body, kind = PAGE.encode(), "text/html; charset=utf-8"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # quiet: stderr is the run's
                return

        self.server = ThreadingHTTPServer((HOST, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server.server_address[1]}/"

    def add(self, snapshot: dict[str, Any]) -> None:
        """A live-line snapshot (a :mod:`tailwise.loadgen.execute.live` listener)."""
        point = {k: v for k, v in snapshot.items() if isinstance(v, int | float | str | None)}
        point["t_s"] = round(time.monotonic() - self.started, 3)
        with self.lock:
            self.points.append(point)

    def add_trial(self, trial: dict[str, Any]) -> None:
        """A finished step or trial: ``{"name", "rate_rps", "verdict", ...}``."""
        with self.lock:
            self.trials.append(dict(trial))

    def data(self) -> dict[str, Any]:
        with self.lock:
            return {
                "title": self.title,
                "done": self.done,
                "uptime_s": round(time.monotonic() - self.started, 3),
                "points": list(self.points),
                "trials": list(self.trials),
            }

    def close(self, linger_s: float = 1.5) -> None:
        """Mark the command done, give an open page one more look, then stop serving."""
        with self.lock:
            self.done = True
        time.sleep(linger_s)
        self.server.shutdown()
        self.server.server_close()


PAGE = """<!DOCTYPE html>
<html lang='en'><head><meta charset='utf-8'><title>tailwise live</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1100px}
h1{font-size:1.3em;margin:0 0 .3em} #status{color:#555;margin:0 0 1em}
#status.done{color:#1a7f37;font-weight:bold}
table{border-collapse:collapse;margin:.5em 0 1em} td,th{padding:.2em .8em;text-align:right}
th{text-align:left;font-weight:normal;color:#555} #figures td{font-variant-numeric:tabular-nums}
.charts{display:grid;grid-template-columns:repeat(2,1fr);gap:1em}
figure{margin:0;border:1px solid #ddd;padding:.4em} figcaption{font-size:.9em;color:#444}
svg{width:100%;height:130px;background:#fafafa}
.pass{color:#1a7f37} .fail{color:#c62828} .inconclusive{color:#8a6d00} .invalid{color:#b35c00}
</style></head><body>
<h1>tailwise live: <span id='title'></span></h1>
<p id='status'>waiting for the first second of load ...</p>
<table id='figures'><tbody>
<tr><th>now</th><td id='label'>-</td></tr>
<tr><th>elapsed</th><td id='elapsed'>-</td></tr>
<tr><th>rate (target -&gt; achieved)</th><td id='rate'>-</td></tr>
<tr><th>in flight</th><td id='in-flight'>-</td></tr>
<tr><th>errors</th><td id='errors'>-</td></tr>
<tr><th>latency p99, last second</th><td id='p99'>-</td></tr>
<tr><th>send lag p99 (the client's)</th><td id='lag'>-</td></tr>
<tr><th>SLO metrics p99</th><td id='slo-metrics'>-</td></tr>
<tr><th>points</th><td id='points'>0</td></tr>
<tr><th>trials or steps so far</th><td id='trial-count'>0</td></tr>
</tbody></table>
<div class='charts' id='charts'></div>
<h2 style='font-size:1.1em'>Trials and steps</h2>
<table id='trials'><thead><tr><th>#</th><th>name</th><th>rate</th><th>verdict</th>
<th>throughput</th><th>goodput</th></tr></thead><tbody></tbody></table>
<script>
var SERIES = [
  ['rate_rps', 'achieved rate (/s)'], ['in_flight', 'in flight'], ['p99_ms', 'latency p99 (ms)'],
  ['ttft_p99_ms', 'TTFT p99 (ms)'], ['tpot_p99_ms', 'TPOT p99 (ms)'],
  ['service_p99_ms', 'service p99 (ms)'], ['errors', 'errors (so far)'],
  ['send_lag_p99_ms', 'send lag p99 (ms)']];
function text(id, v) { document.getElementById(id).textContent = v; }
function num(v, unit) { return (v === null || v === undefined) ? '-' :
  (Math.round(v * 100) / 100) + (unit || ''); }
function chart(key, title, points) {
  var vals = points.map(function (p) { return p[key]; });
  if (!vals.some(function (v) { return typeof v === 'number'; })) return;
  var id = 'chart-' + key, fig = document.getElementById(id);
  if (!fig) {
    fig = document.createElement('figure'); fig.id = id; fig.className = 'chart';
    fig.innerHTML = "<svg viewBox='0 0 400 130' preserveAspectRatio='none'>" +
      "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5'/></svg><figcaption></figcaption>";
    document.getElementById('charts').appendChild(fig);
  }
  var nums = vals.filter(function (v) { return typeof v === 'number'; });
  var hi = Math.max.apply(null, nums.concat([1e-9])), n = Math.max(vals.length - 1, 1);
  var pts = [];
  vals.forEach(function (v, i) { if (typeof v === 'number')
    pts.push((i * 400 / n).toFixed(1) + ',' + (125 - v / hi * 115).toFixed(1)); });
  fig.querySelector('polyline').setAttribute('points', pts.join(' '));
  fig.setAttribute('data-last', String(nums[nums.length - 1]));
  fig.querySelector('figcaption').textContent = title + ': now ' + num(nums[nums.length - 1]) +
    ', max ' + num(hi);
}
function render(d) {
  text('title', d.title);
  var last = d.points.length ? d.points[d.points.length - 1] : null;
  var st = document.getElementById('status');
  st.textContent = d.done ? 'finished' :
    (last ? 'running' : 'waiting for the first second of load ...');
  st.className = d.done ? 'done' : '';
  text('points', String(d.points.length));
  text('trial-count', String(d.trials.length));
  if (last) {
    text('label', last.label || '-');
    text('elapsed', num(last.elapsed_s, ' s') +
      (last.total_s ? ' of ' + num(last.total_s, ' s') : ''));
    text('rate', (last.target_rps ? num(last.target_rps, '/s') + ' -> ' : '') +
      (last.rate_rps !== undefined ? num(last.rate_rps, '/s') : num(last.sent) + ' sent'));
    text('in-flight', num(last.in_flight));
    text('errors', num(last.errors));
    text('p99', num(last.p99_ms, ' ms'));
    text('lag', num(last.send_lag_p99_ms, ' ms'));
    var slo = Object.keys(last).filter(function (k) {
      return /_p99_ms$/.test(k) && k !== 'p99_ms' && k !== 'send_lag_p99_ms'; });
    text('slo-metrics', slo.length ? slo.map(function (k) {
      return k.replace('_p99_ms', '') + ' ' + num(last[k], ' ms'); }).join(', ') : '-');
  }
  SERIES.forEach(function (s) { chart(s[0], s[1], d.points); });
  var body = document.querySelector('#trials tbody');
  while (body.rows.length < d.trials.length) {
    var t = d.trials[body.rows.length], tr = body.insertRow();
    [String(body.rows.length), t.name || '', num(t.rate_rps, '/s'), t.verdict || '',
     num(t.throughput_rps, '/s'), num(t.goodput_rps, '/s')].forEach(function (v, i) {
      var td = tr.insertCell(); td.textContent = v;
      if (i === 3) td.className = 'verdict ' + v.split(' ')[0]; });
  }
}
function tick() {
  fetch('/data', {cache: 'no-store'}).then(function (r) { return r.json(); }).then(render)
    .catch(function () {
      var st = document.getElementById('status');
      if (st.className !== 'done')
        st.textContent = 'the command has ended (tailwise no longer answers)';
    });
}
tick(); setInterval(tick, 1000);
</script></body></html>
"""
