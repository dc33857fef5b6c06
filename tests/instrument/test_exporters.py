"""Prometheus text parses and agrees with the tracker; OpenTelemetry spans form the stage tree."""

from __future__ import annotations

import asyncio
import http.server
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client.parser import text_string_to_metric_families

from tailwise.errors import MissingExtra
from tailwise.instrument import LatencyTracker, exposition, instrument_otel, metrics_app
from tailwise.instrument import prometheus as tw_prom
from tests.instrument.conftest import FakeClock

MS = 1_000_000


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams: dict[str, Any], family: str, name: str, **labels: str) -> float:
    for s in fams[family].samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise KeyError((family, name, labels))


@pytest.fixture
def busy_tracker(clock: FakeClock) -> LatencyTracker:
    t = LatencyTracker("rag", slos=["latency<=8ms@90%", "p99(latency)<=50ms"], clock=clock)
    for i in range(200):
        with t.request(), t.stage("embed"):
            clock.advance((i % 10 + 1) * MS)  # 1..10 ms, 20 of each
        clock.advance(MS)
    t.record(3 * MS, ok=False)
    return t


def test_exposition_parses_and_agrees_with_the_tracker(busy_tracker: LatencyTracker) -> None:
    fams = families(exposition(busy_tracker))
    h = "tailwise_request_duration_seconds"
    assert fams[h].type == "histogram"
    assert sample(fams, h, h + "_count", tracker="rag") == 201
    assert sample(fams, h, h + "_bucket", tracker="rag", le="0.005") == 100 + 1  # 1..5 ms, +fail
    assert sample(fams, h, h + "_bucket", tracker="rag", le="0.01") == 201
    assert sample(fams, h, h + "_sum", tracker="rag") == pytest.approx((20 * 55 + 3) / 1000)
    fail = "tailwise_request_failures"
    assert sample(fams, fail, fail + "_total", tracker="rag") == 1
    p99 = busy_tracker.stats().percentile_ms(99) / 1e3
    w = "tailwise_request_window_seconds"
    assert sample(fams, w, w, tracker="rag", quantile="0.99") == pytest.approx(p99)
    att = busy_tracker.stats().attainment(8 * MS)
    assert att == pytest.approx(160 / 201)
    assert sample(fams, "tailwise_slo_attainment", "tailwise_slo_attainment") == pytest.approx(att)
    objective = "tailwise_slo_objective_seconds"
    assert sample(fams, objective, objective) == pytest.approx(0.010, rel=1e-3)
    stage = "tailwise_stage_duration_seconds"
    assert sample(fams, stage, stage + "_count", tracker="rag", stage="embed") == 200


@pytest.fixture
def pushgateway() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    """A loopback stand-in for a Pushgateway that keeps what it was sent."""
    got: list[tuple[str, str, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.command, self.path, body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", got
    server.shutdown()
    server.server_close()


def test_push_sends_the_same_families(
    busy_tracker: LatencyTracker, pushgateway: tuple[str, list[tuple[str, str, bytes]]]
) -> None:
    address, got = pushgateway
    tw_prom.push(address, "rag-service", busy_tracker)
    [(method, path, body)] = got
    assert method == "PUT" and path == "/metrics/job/rag-service"
    fams = families(body.decode())
    h = "tailwise_request_duration_seconds"
    assert sample(fams, h, h + "_count", tracker="rag") == 201


def test_scrape_over_http_from_prometheus_client_server(busy_tracker: LatencyTracker) -> None:
    server = tw_prom.serve(0, busy_tracker)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            fams = families(resp.read().decode())
    finally:
        server.shutdown()
        server.server_close()
    stage = "tailwise_stage_duration_seconds"
    assert sample(fams, stage, stage + "_count", tracker="rag", stage="embed") == 200


def test_metrics_app_answers_with_the_exposition(busy_tracker: LatencyTracker) -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    asyncio.run(metrics_app(busy_tracker)({"type": "http", "path": "/metrics"}, receive, send))
    assert sent[0]["status"] == 200
    assert dict(sent[0]["headers"])[b"content-type"].startswith(b"text/plain; version=0.0.4")
    assert "tailwise_request_window_count" in families(sent[1]["body"].decode())


def test_opentelemetry_spans_form_the_stage_tree(clock: FakeClock) -> None:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    t = LatencyTracker("rag", clock=clock)
    instrument_otel(t, tracer_provider=tracer_provider, meter_provider=meter_provider)

    @t.stage("generate")
    async def generate() -> None:
        with t.stage("prefill"):
            clock.advance(5 * MS)
        with t.stage("decode"):
            clock.advance(20 * MS)

    async def handle() -> None:
        async with t.request("rag_pipeline"):
            with t.stage("embed"):
                clock.advance(3 * MS)
            await asyncio.gather(asyncio.to_thread(search), generate())

    def search() -> None:
        with t.stage("search"):
            clock.advance(7 * MS)

    asyncio.run(handle())
    with pytest.raises(TimeoutError), t.request("rag_pipeline"), t.stage("embed"):
        raise TimeoutError("embedder timed out")

    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}

    def tree(span: Any) -> tuple[str, list[Any]]:
        me = span.context.span_id
        kids = [c for c in finished if c.parent is not None and c.parent.span_id == me]
        return span.name, sorted(tree(c) for c in kids)

    roots = [s for s in finished if s.parent is None]
    assert [tree(r) for r in roots] == [
        (
            "rag_pipeline",
            [("embed", []), ("generate", [("decode", []), ("prefill", [])]), ("search", [])],
        ),
        ("rag_pipeline", [("embed", [])]),
    ]
    assert all(s.parent is None or s.parent.span_id in by_id for s in finished)
    prefill = next(s for s in finished if s.name == "prefill")
    assert prefill.attributes["tailwise.stage"] == "generate/prefill"
    failed = [s for s in finished if s.status.status_code == StatusCode.ERROR]
    assert sorted(s.name for s in failed) == ["embed", "rag_pipeline"]
    assert any(e.name == "exception" for e in failed[0].events)

    data = reader.get_metrics_data()
    scopes = [sm for rm in data.resource_metrics for sm in rm.scope_metrics]
    metrics = {m.name: m for sm in scopes for m in sm.metrics}
    stage_hist = metrics["tailwise.stage.duration"].data.data_points
    decode = next(p for p in stage_hist if p.attributes["tailwise.stage"] == "generate/decode")
    assert decode.count == 1 and decode.sum == pytest.approx(0.020)
    gauge = metrics["tailwise.window.duration"].data.data_points
    want = {"tailwise.stage": "generate/prefill", "quantile": "0.99"}
    p99_prefill = next(p for p in gauge if want.items() <= dict(p.attributes).items())
    assert p99_prefill.value == pytest.approx(0.005, rel=1e-3)


def test_extras_are_imported_only_when_used() -> None:
    code = (
        "import sys, tailwise.instrument as ti; ti.LatencyTracker().record(1);"
        "print(sorted(m for m in ('opentelemetry', 'prometheus_client', 'starlette') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    with pytest.raises(MissingExtra) as caught:
        instrument_otel(LatencyTracker())
    assert caught.value.extra == "otel"
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingExtra) as caught:
        tw_prom.Collector(LatencyTracker())
    assert caught.value.extra == "prometheus"
