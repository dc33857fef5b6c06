"""Scraping the server's /metrics during a run, live against the demo LLM server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tailwise
from tailwise.errors import BadInput
from tailwise.loadgen.observe.server_metrics import plan_scrape
from tailwise.loadgen.runner import RunOptions, RunResult, prepare
from tailwise.server import spawn


def run_llm(url: str, out: Path, **kw: object) -> RunResult:
    return tailwise.run(
        url,
        api="openai-chat",
        model="tailwise-demo",
        rate="10/s",
        requests=12,
        max_tokens=8,
        input_tokens=16,
        out=str(out),
        **kw,
    )


def test_the_default_scrapes_the_targets_metrics(llm: str, tmp_path: Path) -> None:
    res = run_llm(llm, tmp_path / "run", server_metrics_interval="200ms")
    req = res.summary["requests"]
    assert req["ok"] == 12
    doc = res.summary["server_metrics"]
    assert doc["url"] == llm + "/metrics" and doc["server"] == "tailwise-demo"
    # The first scrape precedes the run and the last follows it: every request is in
    # the server's own counters and histograms between them, exactly once.
    assert doc["generation_tokens"] == 12 * 8
    assert doc["ttft_ms"]["count"] == 12
    assert doc["queue_ms"]["count"] == 12
    split = doc["ttft_split"]
    # The server starts its clock when it has the request; the client, at the intended send.
    assert split["server_mean_ms"] <= split["client_mean_ms"]
    assert split["outside_server_mean_ms"] == pytest.approx(
        split["client_mean_ms"] - split["server_mean_ms"], abs=1e-3
    )
    rows = [json.loads(line) for line in (res.directory / "server_metrics.jsonl").open()]
    assert len(rows) == doc["scrapes"] >= 3
    times = [r["t_s"] for r in rows]
    assert times == sorted(times) and times[0] < 0 < times[-1]  # before and after the run
    # A scrape during the run may fail on a loaded machine (its timeout is under the
    # interval): it says why, and every one that answered is the demo's.
    assert all(r["reading"]["server"] == "tailwise-demo" for r in rows if "reading" in r)
    assert all(r["error"] for r in rows if "reading" not in r)
    assert "reading" in rows[0] and "reading" in rows[-1]  # the brackets: the full 2 s
    timeline = doc["timeline"]
    assert len(timeline["t_s"]) == len(rows)
    assert {"running", "waiting", "kv_cache_usage", "client_ttft_p50_ms"} <= set(timeline)
    # every completed request lands in exactly one timeline interval's p50 (some interval has one)
    assert any(v is not None for v in timeline["client_ttft_p50_ms"])
    tokens = res.summary["tokens"]
    per_user = tokens["per_request_decode_tps"]["mean"]
    assert tokens["output_tps_per_user"] == per_user > 0  # 1 / TPOT: the demo streams 8 tokens
    assert tokens["total_tps"] == pytest.approx(tokens["input_tps"] + tokens["output_tps"])
    on_disk = json.loads((res.directory / "summary.json").read_text())
    assert on_disk["server_metrics"]["ttft_ms"] == doc["ttft_ms"]
    # The run's report draws the server's timeline beside the client's latency.
    pytest.importorskip("matplotlib")
    from tailwise.report.render import render_directory

    written = render_directory(res.directory)
    chart = res.directory / "server_metrics.png"
    assert chart in written and chart.stat().st_size > 0
    page = (res.directory / "report.html").read_text()
    assert "Server metrics beside the client" in page and "running up to" in page


def test_off_means_no_scrape(llm: str, tmp_path: Path) -> None:
    res = run_llm(llm, tmp_path / "run", server_metrics="off")
    assert "server_metrics" not in res.summary
    assert not (res.directory / "server_metrics.jsonl").exists()


def test_a_target_without_metrics_is_not_scraped(tmp_path: Path) -> None:
    proc, url = spawn("tailwise.server.stream_lab", "--ttft", "5ms", "--lifetime", "60s")
    try:
        res = run_llm(url, tmp_path / "run")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert res.summary["requests"]["ok"] == 12
    doc = res.summary["server_metrics"]
    assert "not scraped" in doc["note"] and "scrapes" not in doc
    assert not (res.directory / "server_metrics.jsonl").exists()


def test_a_named_url_that_fails_is_counted_not_fatal(llm: str, tmp_path: Path) -> None:
    res = run_llm(
        llm,
        tmp_path / "run",
        server_metrics=llm + "/no-such-path",
        server_metrics_interval="200ms",
    )
    doc = res.summary["server_metrics"]
    assert res.summary["requests"]["ok"] == 12
    assert doc["scrapes"] == doc["scrapes_failed"] >= 2
    rows = [json.loads(line) for line in (res.directory / "server_metrics.jsonl").open()]
    assert {r["error"] for r in rows} == {"http_404"}


@pytest.mark.parametrize(
    ("given", "interval", "field"),
    [
        ("ftp://x/metrics", "1s", "--server-metrics"),
        ("not a url", "1s", "--server-metrics"),
        (None, "10ms", "--server-metrics-interval"),
        (None, "2h", "--server-metrics-interval"),
        (None, "soon", "--server-metrics-interval"),
    ],
)
def test_bad_options_are_bad_input(given: str | None, interval: str, field: str) -> None:
    with pytest.raises(BadInput) as err:
        plan_scrape(given, interval, "http://127.0.0.1:1/v1/chat/completions", llm=True)
    assert err.value.field == field


def test_plain_http_runs_scrape_only_when_asked() -> None:
    assert plan_scrape(None, "1s", "http://127.0.0.1:1/x", llm=False) is None
    plan = plan_scrape(None, "1s", "http://127.0.0.1:1/v1/completions", llm=True)
    assert plan is not None and plan.url == "http://127.0.0.1:1/metrics" and not plan.explicit
    p = prepare(RunOptions(urls=["http://127.0.0.1:1/"], server_metrics="OFF", rate="1/s"))
    assert p.scrape is None


def test_cli_rejects_a_bad_url_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "tailwise", "run", "http://127.0.0.1:9/", "--rate", "1/s"),
            *("--requests", "1", "--server-metrics", "gopher://x", "--out", str(tmp_path / "r")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--server-metrics" in proc.stderr and "Traceback" not in proc.stderr
