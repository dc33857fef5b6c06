"""A run's report with GPU telemetry, opened in headless Chromium and checked by DOM queries.

A real run against the demo LLM server, sampled from a loopback DCGM exporter
whose GPUs call themselves ``<script>...``: the report must draw GPU
utilization and power beside the client's TTFT on one timeline, list the
energy per token, and show the hostile name as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailwise.cli import main
from tailwise.server import spawn_demo
from tests.clirun import run_cli
from tests.loadgen.dcgm_exporter import Exporter
from tests.report.test_html_reports import HOSTILE, chromium, query_dom

PROBE = """
<script>
window.addEventListener('load', function () {
  function all(s) { return Array.prototype.slice.call(document.querySelectorAll(s)); }
  var out = {
    charts: all('figure.chart').map(function (f) {
      var i = f.querySelector('img');
      return {id: f.id, drawn: i.complete && i.naturalWidth > 0,
              caption: f.querySelector('figcaption').textContent}; }),
    gpuRows: all('table.gpu tr.gpu-row').map(function (r) { return r.textContent; }),
    perUnit: all('li.energy-per').map(function (l) { return l.textContent; }),
    bold: all('b.injected').length,
    pwned: !!window.pwned
  };
  var pre = document.createElement('pre');
  pre.id = 'dom-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


@pytest.fixture(scope="module")
def llm() -> Iterator[str]:
    proc, url = spawn_demo("llm", lifetime="120s")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_gpu_utilization_and_power_beside_ttft_in_chromium(
    llm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    chromium()  # skips without the browser
    out = tmp_path / "run"
    with Exporter((300.0, 100.0), model_name=HOSTILE) as exporter:
        code, stdout, err = run_cli(
            [
                *("run", llm, "--api", "openai-chat", "--model", "tailwise-demo"),
                *("--rate", "10/s", "--duration", "3s", "--warmup", "0.5s"),
                *("--max-tokens", "8", "--input-tokens", "8", "--server-metrics", "off"),
                *("--gpu-metrics", f"dcgm={exporter.url}", "--gpu-metrics-interval", "200ms"),
                *("--out", str(out), "--json", "-q"),
            ],
            capsys,
        )
    assert code in (0, 5), err
    summary = json.loads(stdout)
    main(["report", "-q", str(out)])
    found = query_dom(out / "report.html", PROBE)
    chart = next(c for c in found["charts"] if c["id"] == "chart-gpu_metrics")
    assert chart["drawn"]
    assert chart["caption"] == (
        "Client TTFT p50 beside GPU utilization (up to 44%) and power (up to 400 W)"
    )
    assert len(found["gpuRows"]) == 2
    assert all(HOSTILE[:40] in row for row in found["gpuRows"])  # shown as text, cut to 96
    assert found["bold"] == 0 and not found["pwned"]
    per_token = summary["gpu"]["per_output_token_j"]["value"]
    assert any(t.startswith(f"per output token: {per_token:.4g} J") for t in found["perUnit"]), (
        found["perUnit"]
    )
