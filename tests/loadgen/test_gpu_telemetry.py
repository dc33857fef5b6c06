"""GPU telemetry during a run: a loopback DCGM exporter with a known power, and NVML refused.

The exporter (:mod:`tests.loadgen.dcgm_exporter`) serves a real dcgm-exporter
scrape whose power is constant (300 W and 100 W) and whose energy counter grows
with it, so the energy of any span is known by hand; the demo LLM server makes
the tokens. Truth is computed here from ``records.jsonl`` with plain loops.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

import tailwise
from tailwise.errors import BadInput
from tailwise.loadgen.observe.gpu_metrics import FILE, GpuPlan, GpuSampler, NvmlSource, plan_gpu
from tailwise.records import Records
from tests.clirun import run_cli
from tests.loadgen.dcgm_exporter import Exporter

WATTS = (300.0, 100.0)


def _rows(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (directory / "records.jsonl").open()]


def _tokens_in(rows: list[dict[str, Any]], a_ns: float, b_ns: float) -> float:
    """Output tokens of ok requests made inside [a, b]: spread over [first token, done]."""
    total = 0.0
    for r in rows:
        n = r["output_tokens"] or 0
        if r["error"] or n <= 0 or r["done_ns"] is None:
            continue
        first, done = r["first_token_ns"], r["done_ns"]
        if first is None or first >= done:
            total += n if a_ns <= done <= b_ns else 0
            continue
        overlap = max(0.0, min(b_ns, done) - max(a_ns, first))
        total += n * overlap / (done - first)
    return total


def _timing_slack_j(directory: Path, watts: float) -> float:
    """How far the energy may honestly be off: each edge's sample is placed at the middle
    of its scrape, and the exporter read its clock somewhere inside it (up to half the
    scrape's time either way, at each of the two edges)."""
    took = [json.loads(line)["took_ms"] for line in (directory / FILE).open()]
    return watts * max(took) / 1e3 + 1e-3 * watts  # + the counter's whole-mJ rounding


def _good_in(rows: list[dict[str, Any]], a_ns: float, b_ns: float, ttft_ms: float) -> int:
    return sum(
        1
        for r in rows
        if not r["error"]
        and r["first_token_ns"] is not None
        and (r["first_token_ns"] - r["scheduled_ns"]) <= ttft_ms * 1e6
        and a_ns <= r["done_ns"] < b_ns
    )


def test_dcgm_energy_per_token_is_the_known_power_over_the_tokens(
    llm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with Exporter(WATTS) as exporter:
        code, stdout, err = run_cli(
            [
                *("run", llm, "--api", "openai-chat", "--model", "tailwise-demo"),
                *("--rate", "20/s", "--duration", "6s", "--warmup", "1s", "--max-tokens", "12"),
                *("--input-tokens", "16", "--slo", "ttft<=40ms", "--server-metrics", "off"),
                *("--gpu-metrics", f"dcgm={exporter.url}", "--gpu-metrics-interval", "200ms"),
                *("--out", str(out), "--json"),
            ],
            capsys,
        )
    assert code in (0, 1, 5), err
    summary = json.loads(stdout)
    g = summary["gpu"]
    assert g["source"] == "dcgm" and g["url"] == exporter.url and g["samples_failed"] == 0
    assert [x["name"] for x in g["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    energy = g["energy_j"]
    assert energy["method"] == "counter" and energy["gpus_with_energy"] == 2
    span_s = energy["window_s"]
    start_s = summary["window"]["start_s"]
    assert 0 < span_s <= summary["window"]["duration_s"]
    truth_j = sum(WATTS) * span_s
    slack = _timing_slack_j(out, sum(WATTS))
    assert energy["value"] == pytest.approx(truth_j, abs=slack)
    assert energy["bounds"][0] - slack <= truth_j <= energy["bounds"][1] + slack
    for gpu, watts in zip(g["gpus"], WATTS, strict=True):
        assert gpu["energy_j"]["value"] == pytest.approx(watts * span_s, abs=slack)
        assert gpu["power_w"] == {"mean": watts, "max": watts}
    assert g["power_w"] == {"mean": sum(WATTS), "max": sum(WATTS)}
    # per output token: the known energy over the tokens made in the same span
    rows = _rows(out)
    a_ns, b_ns = start_s * 1e9, (start_s + span_s) * 1e9
    tokens = _tokens_in(rows, a_ns, b_ns)
    per_token = g["per_output_token_j"]
    assert per_token["units"] == pytest.approx(tokens, rel=1e-5)
    assert per_token["value"] == pytest.approx(truth_j / tokens, abs=slack / tokens)
    good = _good_in(rows, a_ns, b_ns, 40.0)
    assert g["per_good_request_j"]["units"] == good > 0
    assert g["per_good_request_j"]["value"] == pytest.approx(truth_j / good, abs=slack / good)
    lo, hi = per_token["ci"]
    assert lo <= per_token["value"] <= hi and per_token["slices"] >= 10
    # every sample is a line of gpu_metrics.jsonl, on the run's clock, bracketing the run
    lines = [json.loads(line) for line in (out / FILE).open()]
    assert len(lines) == g["samples"] >= 20
    times = [r["t_s"] for r in lines]
    assert times == sorted(times) and times[0] < 0 < times[-1]
    timeline = g["timeline"]
    assert set(timeline["util_pct"]) == {(87 + 0) / 2} and set(timeline["power_w"]) == {400.0}
    assert any(v is not None for v in timeline["client_ttft_p50_ms"])
    # the terminal's gpu lines
    assert "gpu       2 x NVIDIA H100 80GB HBM3 (dcgm)" in err
    assert "power 400 W mean / 400 W max" in err and "J in the window (counter)" in err
    assert json.loads((out / "summary.json").read_text())["gpu"]["energy_j"] == energy


def test_without_the_counter_power_is_integrated(llm: str, tmp_path: Path) -> None:
    with Exporter(WATTS, energy=False) as exporter:
        res = _run(llm, tmp_path, exporter.url)
    energy = res.summary["gpu"]["energy_j"]
    assert energy["method"] == "power_integral" and "bounds" not in energy
    assert energy["value"] == pytest.approx(sum(WATTS) * energy["window_s"], rel=1e-6)


def test_a_counter_reset_mid_run_falls_back_to_power(llm: str, tmp_path: Path) -> None:
    with Exporter(WATTS, reset_after=5) as exporter:
        res = _run(llm, tmp_path, exporter.url)
    energy = res.summary["gpu"]["energy_j"]
    assert energy["method"] == "power_integral"
    assert energy["value"] == pytest.approx(sum(WATTS) * energy["window_s"], rel=1e-6)


def _run(llm: str, tmp_path: Path, url: str) -> tailwise.loadgen.runner.RunResult:
    return tailwise.run(
        llm,
        api="openai-chat",
        model="tailwise-demo",
        rate="10/s",
        duration="2s",
        warmup="0.5s",
        max_tokens=8,
        input_tokens=8,
        server_metrics="off",
        gpu_metrics=f"dcgm={url}",
        gpu_metrics_interval="200ms",
        out=str(tmp_path / "run"),
    )


def _hostile_bodies() -> list[bytes]:
    line = 'DCGM_FI_DEV_POWER_USAGE{gpu="%d",UUID="GPU-%d"} %s\n'
    many = "".join(line % (i, i, "100") for i in range(120_000))  # 8 MB: over the cap
    return [
        b"",  # an empty answer
        b"<html>502 Bad Gateway</html>",
        (line % (0, 0, "NaN") + line % (1, 1, "-40") + line % (2, 2, "1e300")).encode(),
        many.encode()[: 7 << 20],  # 7 MB of GPUs, cut mid-line, no newline
        b'DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="' + b"\xff<script>" * 100_000 + b'"} 50',
    ]


@pytest.mark.parametrize(
    ("body", "expect"),
    list(zip(_hostile_bodies(), ["failed", "failed", "rejected", "capped", "failed"], strict=True)),
    ids=["empty", "html", "nan-negative-huge", "many-gpus-cut", "8mb-label"],
)
def test_a_hostile_exporter_is_counted_and_bounded(
    llm: str, tmp_path: Path, body: bytes, expect: str
) -> None:
    with Exporter(WATTS, body=body) as exporter:
        res = _run(llm, tmp_path, exporter.url)
    assert res.summary["requests"]["ok"] == res.summary["requests"]["scheduled"] > 0
    g = res.summary["gpu"]
    n = g["samples"]
    assert n >= 3
    if expect == "failed":  # no GPU field in the answer: each sample a failure, no numbers
        assert g["samples_failed"] == n and g["gpus"] == [] and "energy_j" not in g
    elif expect == "rejected":  # three GPUs, every value out of bounds: none kept
        assert g["rejected_total"] == 3 * n and "energy_j" not in g and "power_w" not in g
        assert [set(x) for x in g["gpus"]] == [{"key", "id", "uuid"}] * 3
    else:  # 120,000 GPUs offered: the first 64 kept, the rest counted
        assert len(g["gpus"]) == 64 and g["gpus_dropped_total"] >= n * 10_000
        assert g["energy_j"]["method"] == "power_integral"
        assert g["energy_j"]["value"] == pytest.approx(64 * 100 * g["energy_j"]["window_s"])
    size = (res.directory / FILE).stat().st_size
    assert size <= n * 64 * 400  # a line per sample, bounded however big the text


def test_a_bad_gpu_metrics_form_is_bad_input() -> None:
    for given, interval, field in (
        ("nvidia", "500ms", "--gpu-metrics"),
        ("dcgm=ftp://x/metrics", "500ms", "--gpu-metrics"),
        ("dcgm=", "500ms", "--gpu-metrics"),
        ("off", "10ms", "--gpu-metrics-interval"),
        ("off", "2h", "--gpu-metrics-interval"),
    ):
        with pytest.raises(BadInput) as err:
            plan_gpu(given, interval)
        assert err.value.field == field
    assert plan_gpu(None, "500ms") is None and plan_gpu("off", "1s") is None


def test_nvml_without_a_gpu_is_refused_in_one_line_before_any_request(tmp_path: Path) -> None:
    out = tmp_path / "never"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "tailwise", "run", "http://127.0.0.1:9/", "--rate", "1/s"),
            *("--requests", "1", "--gpu-metrics", "nvml", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tailwise: error: --gpu-metrics nvml")
    assert "tailwise[gpu]" in lines[0] or "NVIDIA GPU" in lines[0]
    assert not out.exists()  # refused while preparing: no run directory, nothing sent


# -- NVML through a stand-in pynvml module (this one module only) ---------------------


class _NvmlError(Exception):
    pass


def _fake_pynvml(*, init_fails: bool = False) -> types.ModuleType:
    """The calls NvmlSource makes, as nvidia-ml-py names them: two GPUs, the second with
    no energy counter (NVML_ERROR_NOT_SUPPORTED) and bytes for its name."""
    m = types.ModuleType("pynvml")
    state = {"energy": 5_000_000, "inits": 0}
    m.NVMLError = _NvmlError  # type: ignore[attr-defined]
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2  # type: ignore[attr-defined]

    def init() -> None:
        if init_fails:
            raise _NvmlError("NVML Shared Library Not Found")
        state["inits"] += 1

    def energy(h: int) -> int:
        if h == 1:
            raise _NvmlError("Not Supported")
        state["energy"] += 250_000  # mJ: 250 J a call
        return state["energy"]

    calls = {
        "nvmlInit": init,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: "NVIDIA H200" if h == 0 else b"NVIDIA H200",
        "nvmlDeviceGetUUID": lambda h: f"GPU-fake-{h}",
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=71, memory=30),
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(
            total=150_754_820_096, used=2 * 1048576 * 1024, free=0
        ),
        "nvmlDeviceGetPowerUsage": lambda h: 412_345 if h == 0 else float("nan"),
        "nvmlDeviceGetTotalEnergyConsumption": energy,
        "nvmlDeviceGetClockInfo": lambda h, kind: 1980 if kind == 1 else 3201,
    }
    for name, fn in calls.items():
        setattr(m, name, fn)
    return m


def test_nvml_source_reads_each_gpu_in_tailwise_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    assert plan_gpu("nvml", "100ms") == GpuPlan("nvml", "", 100_000_000)
    src = NvmlSource()
    gpus, counts = src.read()
    g0, g1 = gpus
    assert g0 == {
        "key": "GPU-fake-0", "id": "0", "uuid": "GPU-fake-0", "name": "NVIDIA H200",
        "util_pct": 71.0, "mem_used_mib": 2048.0, "mem_total_mib": 150_754_820_096 / 1048576,
        "power_w": 412.345, "energy_mj": 5_250_000.0, "sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 3201.0,
    }  # fmt: skip
    assert g1["name"] == "NVIDIA H200" and "energy_mj" not in g1 and "power_w" not in g1
    assert counts == {"rejected": 1}  # GPU 1's NaN power


def test_nvml_sampler_thread_brackets_and_integrates(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    sampler = GpuSampler(GpuPlan("nvml", "", 100_000_000), tmp_path)
    t0_unix_s = time.time()
    sampler.start()
    time.sleep(0.45)
    sampler.stop()
    rows = sampler.rows
    assert len(rows) >= 4 and all(len(r["gpus"]) == 2 for r in rows)
    counters = [r["gpus"][0]["energy_mj"] for r in rows]
    assert counters == sorted(counters) and len(set(counters)) == len(rows)  # a call a sample
    doc = sampler.finish(
        t0_unix_s, (50_000_000, 300_000_000), Records.from_blocks([], 0, (0, 0)), [], True, 0.95
    )
    assert doc["source"] == "nvml" and [g["name"] for g in doc["gpus"]] == ["NVIDIA H200"] * 2
    assert doc["energy_j"]["method"] == "counter" and doc["energy_j"]["gpus_with_energy"] == 1
    assert doc["energy_j"]["value"] > 0 and doc["gpus"][0]["power_w"]["max"] == 412.345
    lines = [json.loads(line) for line in (tmp_path / FILE).read_text().splitlines()]
    assert len(lines) == len(rows) and lines[0]["t_s"] < 0.2


def test_nvml_init_failure_is_bad_input_naming_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_fails=True))
    with pytest.raises(BadInput) as err:
        plan_gpu("nvml", "500ms")
    assert err.value.field == "--gpu-metrics"
    assert "NVIDIA GPU and driver" in str(err.value) and "\n" not in str(err.value)


def _plain_run(tmp_path: Path, gpu_url: str, **run: Any) -> Any:
    """A 50/s run against a 2 ms loopback HTTP server, sampling ``gpu_url`` every 200 ms."""
    from tailwise.server import spawn

    proc, url = spawn("tailwise.server.loopback", "--lifetime", "60s", "--service", "2ms")
    try:
        return tailwise.run(
            url + "/x",
            rate="50/s",
            gpu_metrics=f"dcgm={gpu_url}",
            gpu_metrics_interval="200ms",
            out=str(tmp_path / "run"),
            **run,
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_plain_http_run_gets_energy_per_request(tmp_path: Path) -> None:
    with Exporter(WATTS) as exporter:
        # a 2 ms service: no request is good
        res = _plain_run(tmp_path, exporter.url, duration="2s", warmup="0.5s", slo=["latency<=1ms"])
    g = res.summary["gpu"]
    assert "per_output_token_j" not in g
    start_s, span_s = res.summary["window"]["start_s"], g["energy_j"]["window_s"]
    a_ns, b_ns = start_s * 1e9, (start_s + span_s) * 1e9
    done = [r["done_ns"] for r in _rows(res.directory) if not r["error"]]
    completed = sum(1 for d in done if a_ns <= d < b_ns)
    assert g["per_request_j"]["units"] == completed > 0
    truth_j, slack = sum(WATTS) * span_s, _timing_slack_j(res.directory, sum(WATTS))
    assert g["per_request_j"]["value"] == pytest.approx(truth_j / completed, abs=slack / completed)
    good = g["per_good_request_j"]
    assert good["value"] is None and good["units"] == 0 and good["ci"] is None


def test_an_exporter_that_serves_a_cached_scrape_is_called_out(
    llm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dcgm-exporter refreshes its values every 30 s by default: the same text each time."""
    from tests.loadgen.dcgm_exporter import FIXTURE

    with Exporter(WATTS, body=FIXTURE.read_bytes()) as exporter:
        res = _run(llm, tmp_path, exporter.url)
    g = res.summary["gpu"]
    assert all(x["repeated_share"] == 1.0 for x in g["gpus"])
    assert "-c 500" in g["note"] and g["energy_j"]["value"] == 0.0
    from tailwise.metrics.gpu import text_lines

    assert any("note:" in line and "collect-interval" in line for line in text_lines(g))


def test_an_exporter_url_with_credentials_is_masked_in_every_file(tmp_path: Path) -> None:
    """A DCGM exporter URL with a password and a token in its query (this test exporter
    answers neither form, so its scrapes fail and are counted): neither value is written
    anywhere in the run directory; the summary shows the URL as outputs do (no user or
    password, query values masked)."""
    password, token = "gpu-exporter-pass-4242", "tok-secret-98765"
    with Exporter(WATTS) as exporter:
        secret_url = exporter.url.replace("http://", f"http://scraper:{password}@")
        res = _plain_run(tmp_path, f"{secret_url}?token={token}", duration="1s", warmup="0s")
    g = res.summary["gpu"]
    assert g["samples"] == g["samples_failed"] > 0
    assert g["url"] == exporter.url + "?token=***"
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert password.encode() not in data and token.encode() not in data, f.name
