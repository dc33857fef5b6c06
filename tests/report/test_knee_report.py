"""``tailwise report KNEE_DIR``: a knee search's page, opened in real headless Chromium.

The knee comes from a real search against the demo LLM server; the page is
queried in the browser (a probe script appended to a copy, as in
test_html_reports.py), so what is checked is the DOM Chromium built.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tailwise.cli import main
from tests.clirun import run_cli
from tests.report.test_html_reports import query_dom

PROBE = """
<script>
window.addEventListener('load', function () {
  function all(s) { return Array.prototype.slice.call(document.querySelectorAll(s)); }
  var meta = {};
  all('tr[data-meta]').forEach(function (r) {
    meta[r.getAttribute('data-meta')] = r.querySelector('td').textContent; });
  var out = {
    meta: meta,
    rows: all('tr.trial-row').map(function (r) {
      var a = r.querySelector('a.trial-link');
      var f = r.querySelector('a.trial-files');
      return {verdict: r.getAttribute('data-verdict'), firm: r.getAttribute('data-firm'),
              text: a.textContent, target: !!document.querySelector(a.getAttribute('href')),
              files: f ? f.getAttribute('href') : null,
              slo: (r.querySelector('td.slo') || {}).textContent || ''}; }),
    sections: all('section.trial').map(function (s) { return s.id; }),
    charts: all('figure.chart').map(function (f) {
      var i = f.querySelector('img');
      return {id: f.id, alt: i.alt, drawn: i.complete && i.naturalWidth > 0}; }),
    knee: (document.getElementById('knee') || {}).textContent || '',
    band: (document.getElementById('band') || {}).textContent || ''
  };
  var pre = document.createElement('pre');
  pre.id = 'dom-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def test_a_knee_directory_gets_its_report(
    demo_target: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One knee with a TTFT SLO against the demo LLM server, and what it shows: its live
    lines (one trial numbering across phases, TTFT beside e2e), then its report."""
    llm = demo_target("llm")
    argv = ["knee", llm, "--api", "openai-chat", "--model", "tailwise-demo", "--max-tokens", "16"]
    argv += ["--slo", "p99(ttft)<=200ms", "--start", "40/s", "--max-rate", "200/s"]
    argv += ["--duration", "1s", "--api-key", "sk-knee-secret-0123456789", "--progress"]
    code, out, err = run_cli([*argv, "--out", str(tmp_path)], capsys)
    assert code in (0, 3), err
    assert f"report    {tmp_path}/report.html" in out  # written by the search itself
    _check_live_lines(err, tmp_path)
    (tmp_path / "report.html").unlink()
    main(["report", str(tmp_path)])  # and again, from the files
    out = capsys.readouterr().out
    assert f"wrote     {tmp_path}/report.html" in out and "knee " in out
    doc = json.loads((tmp_path / "knee.json").read_text())
    found = query_dom(tmp_path / "report.html", PROBE)

    meta = found["meta"]
    assert meta["command"].startswith("tailwise knee http://127.0.0.1:")
    assert "sk-knee-secret" not in meta["command"] and "***" in meta["command"]
    assert meta["tool_version"] != "not recorded" and meta["date_utc"] != "not recorded"
    assert meta["host"] != "not recorded" and meta["slos"] == "p99(ttft)<=200ms"
    assert meta["target"].endswith("/v1/chat/completions")

    trials = doc["trials"]
    rows = found["rows"]
    assert [r["text"] for r in rows] == [str(i + 1) for i in range(len(trials))]
    settled = [t["decided"] or ("pass" if t["passed"] else "fail") for t in trials]
    assert [r["verdict"] for r in rows] == settled
    assert all(r["target"] for r in rows)  # each trial links to its own section
    assert found["sections"] == [f"trial-{i + 1}" for i in range(len(trials))]
    for r, t in zip(rows, trials, strict=True):
        assert r["files"] == f"{Path(t['directory']).name}/summary.json"
        assert (tmp_path / r["files"]).is_file()
        assert "within: " in r["slo"] and "99.00% needed" in r["slo"]  # share and its interval
    (chart,) = found["charts"]
    assert chart["drawn"] and chart["id"] == "chart-knee_trials"
    assert f"{len(trials)} trials" in chart["alt"]
    knee = doc["knee_rps"]
    assert (f"{knee:.4g}/s" if knee is not None else "none found") in found["knee"]
    held, failed = doc["band_rps"]
    assert (f"{failed:.4g}/s" if failed is not None else "no rate tried") in found["band"]
    assert (f"{held:.4g}/s" if held is not None else "no rate tried") in found["band"]


def _check_live_lines(err: str, directory: Path) -> None:
    """A TTFT SLO shows TTFT p99 on the live line (a 1 s e2e p99 beside a 200 ms TTFT SLO
    read as a violation); the settling trials go on from the steering trials' numbers
    ("trial 5", not a second "trial 1"), in the live label and in their directories."""
    live = [ln for ln in err.splitlines() if re.match(r"  trial \d+: ", ln)]
    assert live, err
    assert all("ttft p99" in ln and "e2e p99" in ln for ln in live), live[:3]
    numbers = [int(ln.split()[1].rstrip(":")) for ln in live]
    doc = json.loads((directory / "knee.json").read_text())
    dirs = sorted(d.name for d in directory.iterdir() if d.is_dir())
    # (a search stopped by an invalid trial keeps it out of knee.json: count directories)
    assert list(dict.fromkeys(numbers)) == list(range(1, len(dirs) + 1)), (numbers, dirs)
    assert numbers == sorted(numbers)  # never back to "trial 1"
    taken = sorted(int(d.split("-")[1]) for d in dirs)
    assert taken == list(range(1, len(dirs) + 1)), dirs  # one numbering for both kinds
    phases = {t["phase"] for t in doc["trials"]}
    assert any(d.startswith("settle-") for d in dirs) or phases <= {"bracket", "bisect"}


def test_a_simulated_run_records_how_it_was_made(tmp_path: Path) -> None:
    scenario = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "llm.yaml"
    out = tmp_path / "sim"
    p = subprocess.run(
        [sys.executable, "-m", "tailwise", "simulate", str(scenario), "--out", str(out), "-q"],
        capture_output=True,
        text=True,
    )
    assert p.returncode in (0, 5), p.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["command"].startswith("tailwise simulate ") and meta["host"] and meta["date_utc"]
