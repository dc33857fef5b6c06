"""Sweep and compare reports, opened in real headless Chromium and checked by DOM queries.

The reports come from real sweeps against loopback targets. A copy of each page
gets one more script (the probe below) that runs ``querySelectorAll`` after
load and writes what it found into the page as JSON, which ``--dump-dom``
returns: the queries run in the browser, on the DOM it built.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailwise.cli import main
from tests.clirun import run_cli

PROBE = """
<script>
window.addEventListener('load', function () {
  function all(s) { return Array.prototype.slice.call(document.querySelectorAll(s)); }
  var meta = {};
  all('tr[data-meta]').forEach(function (r) {
    meta[r.getAttribute('data-meta')] = r.querySelector('td').textContent; });
  var out = {
    meta: meta,
    links: all('a.step-link').map(function (a) {
      var id = a.getAttribute('href');
      return {text: a.textContent, href: id, target: !!document.querySelector(id)}; }),
    untrusted: all('tr.untrusted a.step-link').map(function (a) { return a.textContent; }),
    sloLines: all('li.slo-line').map(function (l) { return l.getAttribute('data-slo'); }),
    charts: all('figure.chart').map(function (f) {
      var i = f.querySelector('img');
      return {id: f.id, alt: i.alt, drawn: i.complete && i.naturalWidth > 0,
              caption: f.querySelector('figcaption').textContent}; }),
    sections: all('section.step').map(function (s) { return s.id; }),
    errorBodies: all('pre.error-body').map(function (p) { return p.textContent; }),
    warnings: all('.warning').map(function (p) { return p.textContent; }),
    notes: all('.note').map(function (p) { return p.textContent; }),
    band: (document.getElementById('band') || {}).textContent || '',
    scripts: all('script').length,
    bold: all('b.injected').length
  };
  var pre = document.createElement('pre');
  pre.id = 'dom-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium package is not installed (.ci/run installs it)")
    return exe


def query_dom(page: Path, probe: str = PROBE) -> dict[str, Any]:
    """Open a copy of ``page`` with the ``probe`` script in Chromium; what the probe found
    (the probe writes its JSON into ``<pre id="dom-probe">``)."""
    probed = page.with_name(page.stem + "-probed.html")
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", probe + "</body>"))
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000"]
    out = subprocess.run(
        [*cmd, "--dump-dom", probed.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    ).stdout
    m = re.search(r'<pre id="dom-probe">(.*?)</pre>', out, re.S)
    assert m, "the probe did not run"
    doc: dict[str, Any] = json.loads(html.unescape(m.group(1)))
    return doc


def screenshot(page: Path, png: Path) -> None:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    cmd += ["--window-size=1100,1800", "--virtual-time-budget=8000", f"--screenshot={png}"]
    subprocess.run([*cmd, page.resolve().as_uri()], capture_output=True, timeout=90, check=True)
    assert png.read_bytes()[:4] == b"\x89PNG"


HOSTILE = "<script>window.pwned=1</script><b class='injected'>x</b>"


def _sweep(cli_args: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, _, err = run_cli([*cli_args, "--out", str(out), "--json"], capsys)
    assert code == 0, err
    doc: dict[str, Any] = json.loads((out / "sweep.json").read_text())
    return doc


def test_sweep_report_in_chromium(
    loopback: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = loopback("--service", "exp:5ms", "--workers", "1")  # M/M/1, capacity 200/s
    args = ["sweep", base + "/predict", "--rates", "50,120,300", "--slo", "p(99)<60ms"]
    args += ["--slo", "latency<=80ms", "--duration", "1.5s", "--warmup", "0.5s"]
    args += ["-H", "Authorization: Bearer sk-test-0123456789"]
    doc = _sweep(args, tmp_path, capsys)
    # A step the sample could not decide is marked; here we say so in sweep.json (the
    # report shows what the file says) and re-render from the saved files.
    doc["steps"][1]["verdict"] = "inconclusive"
    (tmp_path / "sweep.json").write_text(json.dumps(doc))
    main(["report", "-q", str(tmp_path)])
    found = query_dom(tmp_path / "report.html")
    meta = found["meta"]
    assert meta["command"].startswith("tailwise sweep http://127.0.0.1:")
    assert "sk-test" not in meta["command"] and "***" in meta["command"]
    assert meta["tool_version"] and meta["date_utc"] != "not recorded"
    assert meta["host"] != "not recorded" and int(meta["cpus"]) >= 1
    assert meta["target"].endswith("/predict") and "p(99)<60ms" in meta["slos"]
    assert [link["text"] for link in found["links"]] == ["50/s", "120/s", "300/s"]
    assert all(link["target"] for link in found["links"])  # each links to its own section
    assert found["sections"] == ["step-1", "step-2", "step-3"]
    # The marked steps are exactly those sweep.json calls invalid or inconclusive (on a busy
    # machine the client's own lag may make another one so).
    bad = [
        f"{r['offered_rps']:g}/s"
        for r in doc["steps"]
        if r["verdict"] != "pass" and r["verdict"] != "fail"
    ]
    assert found["untrusted"] == bad and "120/s" in bad
    # An undecided step is said to be undecided, not "not to be trusted" (that is an
    # invalid step's), and the band says the level its ends were decided at.
    assert any("could not decide" in n and "120/s" in n for n in found["notes"])
    assert not any("120/s" in w for w in found["warnings"])
    assert "decided at 95% confidence" in found["band"]
    charts = {c["id"]: c for c in found["charts"]}
    assert {"chart-throughput_goodput", "chart-latency_vs_load", "chart-spectra"} <= set(charts)
    assert {f"chart-step-{i}-step-0{i}-over-time" for i in (1, 2, 3)} <= set(charts)
    assert all(c["drawn"] for c in found["charts"])
    # SLO thresholds: drawn lines, listed as labelled elements and in the alt text.
    assert "p(99)<60ms at 60 ms" in charts["chart-latency_vs_load"]["alt"]
    assert {"p(99)<60ms at 60 ms", "latency<=80ms at 80 ms"} <= set(found["sloLines"])
    assert "warm-up (0.5 s) shaded" in charts["chart-step-1-step-01-over-time"]["caption"]
    # Titles say what the data shows: the 300/s step is past the capacity of 200/s.
    assert "levels off" in charts["chart-throughput_goodput"]["caption"]
    screenshot(tmp_path / "report.html", tmp_path / "sweep.png")


def test_compare_report_overlays_a_and_b(
    loopback: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fast = loopback("--service", "exp:2ms", "--workers", "2")
    slow = loopback("--service", "exp:6ms", "--workers", "2")
    for name, url in (("a", fast), ("b", slow)):
        args = ["sweep", url + "/predict", "--rates", "50,150", "--slo", "p99(latency)<=100ms"]
        _sweep([*args, "--duration", "1.5s"], tmp_path / name, capsys)
    page = tmp_path / "compare.html"
    code, out, _ = run_cli(
        ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--report", str(page)], capsys
    )
    assert code in (0, 1, 3) and f"report      {page}" in out  # 3: a step the client could flip
    found = query_dom(page)
    charts = {c["id"]: c for c in found["charts"]}
    assert set(charts) == {"chart-compare-throughput", "chart-compare-p99", "chart-compare-spectra"}
    assert all(c["drawn"] for c in found["charts"])
    assert "p99(latency)<=100ms at 100 ms" in found["sloLines"]
    assert "p99(latency)<=100ms at 100 ms" in charts["chart-compare-p99"]["alt"]
    assert charts["chart-compare-throughput"]["caption"].startswith("Throughput: A ")
    assert found["meta"]["target"].endswith("/predict")
    screenshot(page, tmp_path / "compare.png")


def test_hostile_strings_are_escaped_in_chromium(
    loopback: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = loopback("--service", "1ms")
    bodies = tmp_path / "bodies.jsonl"
    bodies.write_text(json.dumps({"status": 404}) + "\n" + json.dumps({}) + "\n")
    args = ["sweep", base + "/x", "--rates", "20", "--bodies", str(bodies)]
    args.append("--no-preflight")  # its first body asks for a 404, which the preflight stops
    doc = _sweep([*args, "--duration", "1s"], tmp_path, capsys)
    doc["target"] = "http://x/" + HOSTILE
    doc["slos"] = [HOSTILE]
    doc["note"] = HOSTILE
    doc["meta"]["command"] = HOSTILE
    (tmp_path / "sweep.json").write_text(json.dumps(doc))
    step = Path(doc["steps"][0]["directory"]) / "summary.json"
    summary = json.loads(step.read_text())
    summary["errors"][0]["samples"] = [HOSTILE]
    step.write_text(json.dumps(summary))
    main(["report", "-q", str(tmp_path)])
    found = query_dom(tmp_path / "report.html")
    assert found["scripts"] == 2  # the page's own and the probe: nothing injected ran
    assert found["bold"] == 0
    assert found["errorBodies"] == [HOSTILE]  # shown as text, exactly
    assert found["meta"]["command"] == HOSTILE and found["meta"]["slos"] == HOSTILE
