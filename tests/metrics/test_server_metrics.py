"""Reading LLM servers' own metrics: fixtures of vLLM, SGLang, TGI and llama.cpp."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailwise.instrument.promtext import Exposition, parse_samples
from tailwise.metrics.server import (
    bucket_quantile,
    read_exposition,
    sparkline,
    summarize_server,
    text_lines,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "server_metrics"


def reading(name: str) -> dict:
    r = read_exposition((FIXTURES / name).read_text())
    assert r is not None
    return r


def test_vllm_names_are_recognised() -> None:
    r = reading("vllm_1.txt")
    assert r["server"] == "vllm"
    assert r["values"]["running"] == 12 and r["values"]["waiting"] == 3
    assert r["values"]["kv_cache_usage"] == 0.5
    assert r["values"]["preemptions"] == 4
    assert (r["values"]["prefix_hits"], r["values"]["prefix_queries"]) == (6200, 9000)
    assert set(r["hists"]) == {"ttft", "queue", "prefill"}
    assert r["hists"]["ttft"]["count"] == 90
    assert r["hists"]["ttft"]["le"][-1] == float("inf")


def test_sglang_names_are_recognised() -> None:
    r = reading("sglang.txt")
    assert r["server"] == "sglang"
    v = r["values"]
    assert (v["running"], v["waiting"], v["kv_cache_usage"]) == (7, 2, 0.25)
    assert v["preemptions"] == 5  # the retraction counter, not the gauge of the same idea
    assert v["prefix_cache_hit_rate"] == 0.375
    assert r["hists"]["ttft"]["count"] == 100 and r["hists"]["ttft"]["sum"] == 25.0
    assert r["hists"]["queue"]["count"] == 100


def test_tgi_names_are_recognised() -> None:
    r = reading("tgi.txt")
    assert r["server"] == "tgi"
    assert (r["values"]["running"], r["values"]["waiting"]) == (16, 6)
    assert "ttft" not in r["hists"]  # TGI exports none: not invented
    assert r["hists"]["queue"]["count"] == 198


def test_llamacpp_names_are_recognised() -> None:
    r = reading("llamacpp.txt")
    assert r["server"] == "llama.cpp"
    v = r["values"]
    assert (v["running"], v["waiting"]) == (4, 9)
    assert (v["prompt_tokens"], v["generation_tokens"]) == (10240, 8192)
    assert r["hists"] == {}


def test_unknown_metrics_are_no_reading() -> None:
    assert read_exposition("# TYPE up gauge\nup 1\nhttp_requests_total 7\n") is None
    assert read_exposition("") is None


def test_series_are_summed_and_ratios_averaged() -> None:
    text = (
        'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_running{engine="1"} 5\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.2\nvllm:kv_cache_usage_perc{engine="1"} 0.6\n'
    )
    r = read_exposition(text)
    assert r is not None
    assert r["values"]["running"] == 8
    assert r["values"]["kv_cache_usage"] == pytest.approx(0.4)


def _summary(client: dict | None = None) -> dict:
    a, b = reading("vllm_0.txt"), reading("vllm_1.txt")
    rows = [
        {"t_ns": 0, "reading": a},
        {"t_ns": 4_000_000_000, "reading": b},
        {"t_ns": 5_000_000_000},  # a failed scrape
        {"t_ns": 10_000_000_000, "reading": b},
    ]
    return summarize_server(rows, (1_000_000_000, 9_000_000_000), client)


def test_window_deltas_from_two_vllm_scrapes() -> None:
    doc = _summary()
    assert doc["server"] == "vllm"
    assert (doc["scrapes"], doc["scrapes_failed"], doc["scrapes_in_window"]) == (4, 1, 1)
    assert doc["running"] == {"mean": 12, "max": 12}
    assert doc["preemptions"] == 3
    assert doc["prefix_cache_hit_rate"] == {"ratio": 0.75, "queries": 8000}
    assert doc["generation_tokens"] == 5120
    ttft = doc["ttft_ms"]
    # 80 requests between the scrapes: 40 in (40, 60] ms, 40 in (60, 80] ms, sum 4.8 s
    assert ttft["count"] == 80 and ttft["mean"] == pytest.approx(60.0)
    assert ttft["p50"] == pytest.approx(60.0)  # rank 40: the top of the first bucket
    assert ttft["p90"] == pytest.approx(60 + 20 * (72 - 40) / 40)
    assert ttft["p90_bucket_ms"] == [60.0, 80.0]
    assert doc["queue_ms"]["mean"] == pytest.approx(10.0)
    assert doc["prefill_ms"]["mean"] == pytest.approx(40.0)


def test_ttft_splits_into_server_and_outside() -> None:
    client = {"mean": 100.0, "p50": 90.0, "p90": 150.0, "p99": 200.0, "count": 80}
    split = _summary(client)["ttft_split"]
    assert split["server_mean_ms"] == pytest.approx(60.0)
    assert split["outside_server_mean_ms"] == pytest.approx(40.0)
    assert split["server_queue_mean_ms"] == pytest.approx(10.0)
    assert split["client_p99_ms"] == 200.0
    lines = text_lines({**_summary(client), "url": "http://x/metrics"})
    assert any("TTFT mean: client 100.0ms = server 60.0ms" in line for line in lines)
    assert split["counts"] == {"client": 80, "server": 80}


def test_a_counter_reset_gives_no_increase() -> None:
    a, b = reading("vllm_1.txt"), reading("vllm_0.txt")  # went down: the server restarted
    doc = summarize_server([{"t_ns": 0, "reading": a}, {"t_ns": 9, "reading": b}], (1, 8))
    assert "preemptions" not in doc and "ttft_ms" not in doc
    assert "preemptions" in doc["counter_resets"]


def test_no_scrape_answered() -> None:
    doc = summarize_server([{"t_ns": 0, "error": "timeout"}], (0, 10))
    assert doc["server"] is None and doc["scrapes_failed"] == 1
    assert "no metrics in the window" in text_lines({**doc, "url": "u"})[0]


def test_bucket_quantile_matches_prometheus() -> None:
    inf = float("inf")
    # histogram_quantile(0.5) over buckets 1:10, 2:30, +Inf:30 -> 1 + (15-10)/(30-10) = 1.25
    assert bucket_quantile([1.0, 2.0, inf], [10, 30, 30], 0.5) == pytest.approx(1.25)
    assert bucket_quantile([1.0, 2.0, inf], [10, 30, 40], 0.99) == 2.0  # in +Inf: top bound
    assert bucket_quantile([1.0, inf], [0, 0], 0.5) is None


def test_demo_exposition_round_trips() -> None:
    ex = Exposition()
    ex.gauge("running_seqs", 3, "r")
    ex.gauge("queue_depth", 1, "q")
    ex.histogram("time_to_first_token_seconds", [0.1, 1.0], [2, 1], 4, 0.9, "t")
    r = read_exposition(ex.render())
    assert r is not None and r["server"] == "tailwise-demo"
    assert r["hists"]["ttft"]["cum"] == [2, 3, 4]


def test_hostile_lines_never_raise_and_are_counted() -> None:
    text = (
        'vllm:num_requests_running{engine="0" 5\n'  # unclosed labels
        "vllm:num_requests_waiting abc\n"
        'vllm:num_requests_running{a="x\\"y",b="\\n"} 2 1712345678000\n'  # escapes, timestamp
        + "vllm:num_requests_waiting{"
        + ",".join(f'l{i}="v"' for i in range(40))
        + "} 1\n"
        + "vllm:x "
        + "9" * 20_000
        + "\n"
    )
    samples, bad = parse_samples(text)
    assert [(n, v) for n, _, v in samples] == [("vllm:num_requests_running", 2.0)]
    assert samples[0][1] == {"a": 'x"y', "b": "\n"}
    assert bad == 4


@given(st.text(max_size=300))
def test_arbitrary_text_never_raises(text: str) -> None:
    parse_samples(text)
    read_exposition(text)


def test_sparkline_scales_to_its_max() -> None:
    assert sparkline([0, 4, 8, None]) == "▁▅█   max 8"
    assert sparkline([None]) == "(no values)"
    assert len(sparkline(list(range(600))).split()[0]) == 60
