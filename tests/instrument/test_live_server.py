"""A real uvicorn app with the middleware (``serve-demo``), load-tested by ``tailwise run``.

The server sees each request from the moment it reaches the app to the moment
its last byte is handed back; the client from its intended send time to the
last byte read. So every server-side percentile must sit at or below the
client's (within HdrHistogram's 3 significant digits), and the server's own
time-averaged in-flight count must equal its lambda x W (Little's law).
"""

from __future__ import annotations

import http.client
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

import tailwise

HDR_SLACK = 1 + 1 / 1024  # 3 significant digits: a bucket's top is < 0.1% above its values
SERVICE_MS = 4.0


def scrape(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}  # parses, or raises


def value(fams: dict[str, Any], family: str, name: str = "", **labels: str) -> float:
    for s in fams[family].samples:
        if s.name == (name or family) and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise KeyError((family, name, labels))


def test_server_percentiles_sit_under_the_clients_and_littles_law_holds(
    demo_target: Callable[..., str], tmp_path: Path
) -> None:
    # One FCFS worker, 4 ms constant service, Poisson 150/s: an M/D/1 queue at 60% load.
    url = demo_target("http", "--workers", "1", "--service", f"{SERVICE_MS:g}ms")
    result = tailwise.run(url + "/predict", rate="150/s", duration="3s", out=str(tmp_path / "r"))
    client = result.summary
    assert client["verdict"] != "invalid", client["verdict_reason"]
    fams = scrape(url)

    h = "tailwise_http_request_duration_seconds"
    served = value(fams, h, h + "_count", route="/predict")
    assert served == client["requests"]["ok"] == client["requests"]["scheduled"]
    demo_served = "tailwise_demo_requests_served"  # the demo's own names still there
    assert value(fams, demo_served, demo_served + "_total") == served

    for q, key in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p999")):
        server_ms = 1e3 * value(
            fams, "tailwise_http_request_window_seconds", route="/predict", quantile=f"{q:g}"
        )
        assert SERVICE_MS * 0.999 <= server_ms <= client["latency_ms"][key] * HDR_SLACK, key
    server_max = 1e3 * value(fams, "tailwise_http_request_window_max_seconds", route="/predict")
    assert server_max <= client["latency_ms"]["max"]

    l_measured = value(fams, "tailwise_http_littles_l")
    lambda_w = value(fams, "tailwise_http_littles_lambda_w")
    assert l_measured > 0
    assert abs(l_measured - lambda_w) / max(l_measured, lambda_w) <= 0.05
    assert value(fams, "tailwise_http_littles_rel_gap") <= 0.05
    assert value(fams, "tailwise_http_requests_in_flight") == 0


def test_streamed_completions_report_time_to_first_chunk(demo_target: Callable[..., str]) -> None:
    url = demo_target("llm")
    host, port = url.removeprefix("http://").rsplit(":", 1)
    for _ in range(3):
        conn = http.client.HTTPConnection(host, int(port), timeout=20)
        body = {"prompt": "hello there", "max_tokens": 8, "stream": True}
        headers = {"Content-Type": "application/json"}
        conn.request("POST", "/v1/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        assert resp.status == 200 and b"[DONE]" in resp.read()
        conn.close()
    fams = scrape(url)
    chunk = "tailwise_http_first_chunk_duration_seconds"
    assert value(fams, chunk, chunk + "_count", route="/v1/completions") == 3
    first_p50 = value(
        fams, "tailwise_http_first_chunk_window_seconds", route="/v1/completions", quantile="0.5"
    )
    whole_p50 = value(
        fams, "tailwise_http_request_window_seconds", route="/v1/completions", quantile="0.5"
    )
    assert 0 < first_p50 < whole_p50  # 8 tokens: the first arrives before the last
    finished = "tailwise_demo_requests_finished"
    assert value(fams, finished, finished + "_total") == 3
