"""HTML and PNG reports from real runs, opened in real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tailwise.cli import main
from tailwise.loadgen.runner import RunOptions, run
from tailwise.loadgen.sweep import Sweep
from tailwise.metrics.schema import Summary
from tailwise.report import html
from tailwise.report.render import render_directory, sweep_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def chromium_dom(page: Path) -> str:
    """The DOM after load, as Chromium renders it (scripts run, images decode)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium package is not installed (.ci/run installs it)")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    out = subprocess.run(
        [*cmd, "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def charts_rendered(dom: str) -> tuple[int, int]:
    m = re.search(r'data-charts-rendered="(\d+)" data-charts-total="(\d+)"', dom)
    assert m, "the page's load script did not run"
    return int(m.group(1)), int(m.group(2))


def assert_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 400
    assert pixels.std() > 0.01  # not a blank canvas


def test_run_report_renders_its_charts(loopback: Callable[..., str], tmp_path: Path) -> None:
    base = loopback("--service", "exp:3ms", "--workers", "2")
    run(base + "/predict", rate="150/s", duration="2s", out=str(tmp_path))
    written = render_directory(tmp_path)
    names = sorted(p.name for p in written)
    assert names == ["latency_over_time.png", "percentiles.png", "report.html"]
    for png in written[:-1]:
        assert_png(png)
    page = tmp_path / "report.html"
    assert not re.search(r"(src|href)=[\"']?(https?:|//)", page.read_text())  # self-contained
    dom = chromium_dom(page)
    assert charts_rendered(dom) == (2, 2)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert f"{summary['requests']['scheduled']} scheduled" in dom


def test_llm_run_report_has_ttft_and_tpot(demo_target: Callable[..., str], tmp_path: Path) -> None:
    base = demo_target("llm")
    run(
        base + "/v1/completions",
        rate="8/s",
        duration="2s",
        api="openai-completions",
        model="tailwise-demo",
        max_tokens=16,
        input_tokens=32,
        out=str(tmp_path),
    )
    written = render_directory(tmp_path)
    assert (tmp_path / "ttft_tpot.png") in written
    assert_png(tmp_path / "ttft_tpot.png")
    # ... and the demo server's own metrics (scraped by default) beside the client's latency
    assert (tmp_path / "server_metrics.png") in written
    assert charts_rendered(chromium_dom(tmp_path / "report.html")) == (4, 4)


def test_sweep_report_and_the_report_command(
    loopback: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = loopback("--service", "exp:5ms", "--workers", "1")  # capacity 200/s
    opts = RunOptions(urls=[base + "/predict"], duration="1.5s", slo=["p99(latency)<=60ms"])
    sweep = Sweep(opts, tmp_path)
    sweep.run_rates([50.0, 300.0])
    sweep.write()
    assert sweep_report(tmp_path) == str(tmp_path / "report.html")
    for name in ("throughput_goodput.png", "latency_vs_load.png"):
        assert_png(tmp_path / name)
    (tmp_path / "report.html").unlink()
    main(["report", str(tmp_path)])  # re-render from the saved files alone; returns = exit 0
    assert "knee" in capsys.readouterr().out
    dom = chromium_dom(tmp_path / "report.html")
    # throughput/goodput, latency vs load, the overlaid spectra, and one per step over time
    assert charts_rendered(dom) == (5, 5)
    assert "50/s" in dom and "300/s" in dom


def test_every_string_from_a_run_is_escaped() -> None:
    hostile = "<script>alert(1)</script>"
    summary = {
        "target": f"http://x/{hostile}",
        "mode": "open",
        "arrival": {"process": hostile},
        "window": {"start_s": 0.0, "end_s": 1.0},
        "verdict": "fail",
        "verdict_reason": hostile,
        "requests": {
            "scheduled": 1,
            "ok": 0,
            "failed": 1,
            "timed_out": 0,
            "cancelled": 0,
            "not_sent": 0,
            "errors": {hostile: 1},
        },
        "rates": {"offered_rps": 1, "throughput_rps": 0, "goodput_rps": 0, "attainment": 0},
        "slos": [{"spec": hostile, "kind": "rate", "value": hostile, "passed": False}],
        "errors": [{"kind": hostile, "status": 500, "count": 1, "warmup": 0, "samples": [hostile]}],
    }
    page = html.run_page(Summary.from_json(summary), [], {"command": hostile, "host": hostile})
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 8  # each place it was put


def test_report_command_rejects_a_directory_without_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["report", str(tmp_path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "summary.json" in err and len(err.strip().splitlines()) == 1
