"""Words that agree when a heavy service decides what may be certified (issue 39).

A simulated M/G/1 at 70% load with lognormal service (sigma 1, mean 20 ms; its
steady-state p99 is 491.6 ms from 10^9 customers of an independent recursion,
benchmarks/validation_queue.c), 200,000 requests: its bare service reads heavy
(about 1.2), so no interval is given above the median; ``p99<=740ms`` (1.5x the
truth) passes with its margin, ``p99.9<=5s`` and ``mean<=500ms`` stay inconclusive
however far under their thresholds they sit. The terminal, the verdict and its hint,
summary.json and report.html (read in real headless Chromium) must all say so, and
none may show a pass or an interval the engine refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailwise.cli import main
from tests.clirun import run_cli
from tests.report.test_html_reports import query_dom

SCENARIO = """\
name: mg1-ln1
arrival: {process: poisson, rate: 35/s, requests: 200000, seed: 3}
replicas: 1
service: lognormal:12.13ms,1.0
slo: ["p99(latency)<=740ms", "p99.9(latency)<=5s", "mean(latency)<=500ms"]
"""

SLO_ROWS = """
<script>
window.addEventListener('load', function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll('tr[data-slo]'));
  var out = rows.map(function (r) {
    var cells = r.querySelectorAll('td');
    return {spec: r.getAttribute('data-slo'), interval: cells[3].textContent,
            decided: cells[4].textContent, cls: cells[4].className,
            why: cells[5].textContent}; });
  var pre = document.createElement('pre');
  pre.id = 'dom-probe';
  pre.textContent = JSON.stringify({rows: out});
  document.body.appendChild(pre);
});
</script>
"""


@pytest.fixture(scope="module")
def heavy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("heavy")
    (path / "mg1.yaml").write_text(SCENARIO)
    return path


def test_a_heavy_service_is_told_alike_everywhere(
    heavy_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = heavy_run / "run"
    code, text, err = run_cli(["simulate", str(heavy_run / "mg1.yaml"), "--out", str(out)], capsys)
    assert code == 5, err  # inconclusive: two SLOs no run of this kind certifies
    s = json.loads((out / "summary.json").read_text())
    slos = {x["spec"]: x for x in s["slos"]}
    assert slos["p99(latency)<=740ms"]["decided"] == "pass"
    assert slos["p99(latency)<=740ms"]["ci"] is not None  # what the margin was read from
    assert slos["p99(latency)<=740ms"]["ci_note"].startswith("heavy service, passed")
    for spec in ("p99.9(latency)<=5s", "mean(latency)<=500ms"):
        assert slos[spec]["decided"] == "inconclusive"
        assert slos[spec]["ci"] is None  # as in the distribution's row: none is given
        assert slos[spec]["ci_note"].startswith("heavy service: ")
    ci = s["latency_ms"]["ci"]
    assert ci["p50"] is not None and all(ci[k] is None for k in ("p90", "p99", "p999", "mean"))

    said = text + err
    assert said.count("heavy service") >= 5  # the interval row's cells say why, not "n too small"
    assert "n too small" not in said
    assert "heavy service: passed 1.1x under" in said
    assert "(heavy service: its tail may rest on jobs rarer than this run holds" in said
    assert "undecided: measured 760 ms; heavy service" in said
    assert "measure longer" not in said  # more requests would not decide a p99.9 here

    main(["report", "-q", str(out)])  # report.html from the saved run, as a user re-renders
    rows = query_dom(out / "report.html", SLO_ROWS)["rows"]
    assert [r["decided"] for r in rows] == [slos[r["spec"]]["decided"] for r in rows]
    assert [r["cls"] for r in rows] == ["pass", "inconclusive", "inconclusive"]
    assert rows[1]["interval"] == rows[2]["interval"] == "-"
    assert all(r["why"].startswith("heavy service") for r in rows)
