"""Studies: replications with confidence intervals, and one-key variations (`--vary`).

The oracles: an M/M/1 queue's mean latency 1/(mu - lambda) for the replication
interval, and seed 000's static-batching capacity B / (c0 + c1 B) for the
variation over batch sizes.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tailwise.errors import BadInput, MissingExtra
from tailwise.metrics.schema import Summary
from tailwise.report import study as study_text
from tailwise.sim import study
from tailwise.sim.run import simulate
from tailwise.sim.scenario import Scenario, load_scenario, parse_scenario
from tests.clirun import run_cli
from tests.sim import CI, t975

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"

# M/M/1 at rho = 0.5: mean latency 1 / (200/s - 100/s) = 10 ms; ~20k requests a run.
MM1: dict[str, Any] = {
    "name": "M/M/1",
    "arrival": {"rate": "100/s", "requests": 20_000, "duration": None, "warmup": "5s"},
    "service": "exp:5ms",
}


def _interval(stat: dict[str, Any]) -> CI:
    return CI(stat["mean"], stat["half"], stat["n"], stat["sd"])


def test_mm1_replications_cover_the_closed_form_and_shrink_like_root_n() -> None:
    sc = parse_scenario(MM1)
    ticks: list[tuple[int, int]] = []
    doc = study.replications(sc, 10, lambda done, total: ticks.append((done, total)))
    assert doc["schema"] == "tailwise.replications/1" and doc["seeds"] == list(range(10))
    assert ticks == [(i, 10) for i in range(1, 11)]
    mean = doc["metrics"]["latency_mean_ms"]
    values = mean["values"]
    assert len(set(values)) == 10, "distinct seeds give distinct runs"
    assert mean["mean"] == pytest.approx(sum(values) / 10)
    assert mean["half"] == pytest.approx(t975(9) * mean["sd"] / math.sqrt(10))
    interval = _interval(mean)
    assert interval.covers(10.0), f"M/M/1 mean latency 10 ms outside {interval}"
    assert not interval.covers(10.0 * 1.1), "the interval is informative: 11 ms lies outside"
    assert doc["verdict"] == "pass" and doc["verdicts"] == {"pass": 10}
    assert "ttft_p99_ms" not in doc["metrics"] and "extra_load" not in doc["metrics"]

    # The half-width is t(n-1) sd / sqrt(n): with the t quantile taken out, 16 runs'
    # half-width is about half of 4 runs' (sd estimates from 4 runs are rough: loose).
    h4 = study.replications(sc, 4)["metrics"]["latency_mean_ms"]["half"]
    h16 = study.replications(sc, 16)["metrics"]["latency_mean_ms"]["half"]
    assert h16 < h4
    assert 1.2 < (h4 / t975(3)) / (h16 / t975(15)) < 4.0, (h4, h16)


def _static_batching(requests: int = 20_000) -> Scenario:
    sc = load_scenario(EXAMPLES / "static_batching.yaml")
    return sc.model_copy(update={"arrival": sc.arrival.model_copy(update={"requests": requests})})


def test_vary_batch_size_finds_where_batching_keeps_up() -> None:
    """Seed 000 (c0 = 4 ms, c1 = 0.9 ms, 800/s): a batch of B serves B / (c0 + c1 B) per
    second, so B <= 8 cannot keep up (throughput pinned at that capacity, the queue and
    the p99 grow without bound) and B = 16 meets p99 <= 100 ms."""
    sizes = ["1", "2", "4", "8", "16", "32", "64"]
    doc = study.vary(_static_batching(), "batching.size", sizes)
    points = {p["value"]: p for p in doc["points"]}
    assert doc["schema"] == "tailwise.vary/1" and [p["value"] for p in doc["points"]] == sizes
    offered = points["1"]["offered_rps"]
    capacity = {b: int(b) / (0.004 + 0.0009 * int(b)) for b in sizes}
    unstable = [b for b in sizes if capacity[b] < offered]
    assert unstable == ["1", "2", "4", "8"]
    for b in sizes:
        expected = capacity[b] if b in unstable else offered
        assert points[b]["throughput_rps"] == pytest.approx(expected, rel=0.01), b
    rising = [points[b]["throughput_rps"] for b in unstable]
    assert rising == sorted(rising) and len(set(rising)) == len(rising)
    assert points["1"]["latency_p99_ms"] > 10_000 and points["1"]["verdict"] == "fail"
    # One 20 s run per value: p99 ~50 ms against 100 ms as measured (shown or not, as
    # the run's memory allows); 64 waits too long to fill its batches.
    assert points["16"]["latency_p99_ms"] <= 100
    assert points["16"]["verdict"] in ("pass", "inconclusive")
    assert points["64"]["verdict"] == "fail"
    assert points["16"]["half_width"] is None  # one run per value: no interval
    assert doc["verdict"] == "fail" and study.exit_code(doc) == 1

    head, rows, notes = study_text.table(doc)
    assert head[0] == "batching.size" and [r[0] for r in rows] == sizes
    assert "extra load" not in head  # no redundancy, no cost column
    assert [r[-1] for r in rows] == [points[b]["verdict"] for b in sizes]
    passed = sum(points[b]["verdict"] == "pass" for b in sizes)
    assert notes[-1].startswith(f"verdict   FAIL  {passed}/7 runs passed")


def test_vary_with_replications_gives_each_point_an_interval() -> None:
    sc = parse_scenario({**MM1, "arrival": {"rate": "100/s", "duration": "20s", "seed": 5}})
    ticks: list[tuple[int, int]] = []
    doc = study.vary(sc, "servers", ["1", "2"], replications=3, progress=lambda *t: ticks.append(t))
    assert ticks == [(i, 6) for i in range(1, 7)]
    one, two = doc["points"]
    assert [r["seed"] for r in one["runs"]] == [5, 6, 7] == [r["seed"] for r in two["runs"]]
    for p in doc["points"]:
        assert p["half_width"]["latency_p99_ms"] > 0
        assert p["metrics"]["latency_p99_ms"]["n"] == 3
    # Common random numbers: the same arrivals at every point, more servers never slower.
    assert one["metrics"]["offered_rps"]["values"] == two["metrics"]["offered_rps"]["values"]
    assert two["latency_p99_ms"] < one["latency_p99_ms"]
    assert "± is the 95% confidence half-width" in study_text.table(doc)[2][0]


def test_vary_hedge_delay_trades_tail_for_extra_load() -> None:
    """Hedging earlier costs more duplicate work: the table shows it. When losers in
    service run to their end (cancel: queued_only, the default), hedging at about the
    median (5 ms) overloads the replicas and the p99 is worse than hedging late; only
    with free cancellation does hedging earlier cut the p99."""
    sc = load_scenario(EXAMPLES / "hedging.yaml")
    sc = sc.model_copy(update={"arrival": sc.arrival.model_copy(update={"duration": "10s"})})
    doc = study.vary(sc, "hedge.after", ["5ms", "50ms"])
    early, late = doc["points"]
    assert early["latency_p99_ms"] > late["latency_p99_ms"]
    load = [p["metrics"]["extra_load"]["mean"] for p in doc["points"]]
    assert load[0] > 3 * load[1] > 0, load
    head, rows, _ = study_text.table(doc)
    assert head[-2] == "extra load" and rows[0][-2].endswith("%")
    assert sc.hedge is not None
    free = sc.model_copy(update={"hedge": sc.hedge.model_copy(update={"cancel": "instant"})})
    early, late = study.vary(free, "hedge.after", ["5ms", "50ms"])["points"]
    assert early["latency_p99_ms"] < late["latency_p99_ms"]


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("nosuch", "1", "KEY a dotted scenario field: one of"),
        ("replica", "2", "did you mean replicas"),
        ("batching.size", "2", "a scenario with a batching section"),
        ("hedge.after", "10ms", "a scenario with a hedge section"),
        ("replicas", "0", "scenario.replicas"),
        ("routing", "fastest", "scenario.routing"),
        ("arrival.rate", "fast", "scenario.arrival.rate"),
    ],
)
def test_a_bad_key_or_value_is_one_line_naming_vary(key: str, value: str, says: str) -> None:
    with pytest.raises(BadInput) as raised:
        study.vary(parse_scenario(MM1), key, [value])
    message = str(raised.value)
    assert raised.value.field == "--vary" and f"{key}={value}" in message and says in message
    assert "\n" not in message


def test_every_value_is_checked_before_the_first_run() -> None:
    ticks: list[Any] = []
    with pytest.raises(BadInput, match="replicas=0"):
        study.vary(
            parse_scenario(MM1), "replicas", ["2", "3", "0"], progress=lambda *t: ticks.append(t)
        )
    assert ticks == []


def test_values_become_what_each_field_wants() -> None:
    sc = parse_scenario({**MM1, "queue_limit": 8, "stragglers": {"fraction": "1%"}})
    assert study.with_value(sc, "replicas", "3").replicas == 3
    assert study.with_value(sc, "stragglers.factor", "2.5").stragglers.factor == 2.5  # type: ignore[union-attr]
    assert study.with_value(sc, "queue_limit", "none").queue_limit is None
    assert study.with_value(sc, "arrival.rate", "150/s").arrival.rate == "150/s"
    assert study.with_value(sc, "slo", "p99(latency)<=20ms").slo == ["p99(latency)<=20ms"]
    assert study.parse_vary("service=lognormal:5ms,0.5;exp:5ms") == (
        "service",
        ["lognormal:5ms,0.5", "exp:5ms"],
    )
    for bad in ("replicas", "=1,2", "replicas=1,,2", "replicas="):
        with pytest.raises(BadInput, match="--vary"):
            study.parse_vary(bad)
    with pytest.raises(BadInput, match="--replications"):
        study.replications(sc, 1)


def test_metrics_follow_llm_and_redundancy_sections_only_when_present() -> None:
    summary = simulate(parse_scenario({**MM1, "arrival": {"rate": "100/s", "duration": "2s"}}))
    first = summary.summary
    assert "ttft_p50_ms" not in study.metrics_of(first)
    assert "extra_load" not in study.metrics_of(first)
    s = first.to_json()
    s["ttft_ms"] = {"p50": 40.0, "p99": 90.0}
    s["sim"] = {**s["sim"], "legs": {"extra_load": 0.25}}
    s["latency_ms"] = None  # nothing completed
    got = study.metrics_of(Summary.from_json(s))
    assert got["ttft_p50_ms"] == 40.0 and got["ttft_p99_ms"] == 90.0 and "tpot_p50_ms" not in got
    assert got["extra_load"] == 0.25 and got["latency_p99_ms"] is None


def _scenario_file(tmp_path: Path) -> Path:
    """M/M/c at 150/s, service exp:5ms: one replica's p99 (~90 ms) fails 50 ms, two pass."""
    path = tmp_path / "scen.yaml"
    path.write_text(
        "name: mmc\narrival: {rate: 150/s, duration: 10s, warmup: 1s, seed: 3}\n"
        "service: exp:5ms\nslo: ['p99(latency)<=50ms']\n"
    )
    return path


def test_cli_vary_writes_the_study_and_exits_by_every_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scen, out = _scenario_file(tmp_path), tmp_path / "vary"
    code, stdout, _ = run_cli(
        ["simulate", str(scen), "--vary", "replicas=1,2", "--out", str(out)], capsys
    )
    assert code == 1  # replicas=1 failed its p99
    doc = json.loads((out / "vary.json").read_text())
    assert [(p["value"], p["verdict"]) for p in doc["points"]] == [("1", "fail"), ("2", "pass")]
    rows = [line.split()[0] for line in stdout.splitlines()[2:4]]
    assert rows == ["1", "2"] and "saved" in stdout
    assert not (out / "records.jsonl").exists()
    has_plot = importlib.util.find_spec("matplotlib") is not None
    assert (out / "vary_p99_vs_throughput.png").exists() == has_plot

    code, stdout, _ = run_cli(
        ["simulate", str(scen), "--vary", "replicas=2,3", "--out", str(out), "--force", "--json"],
        capsys,
    )  # the same --out again: an earlier study is replaced only with --force
    assert code == 0 and json.loads(stdout) == json.loads((out / "vary.json").read_text())


def test_cli_replications_prints_intervals_and_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scen, out = _scenario_file(tmp_path), tmp_path / "reps"
    argv = ["simulate", str(scen), "--replications", "3", "--out", str(out), "--json"]
    code, stdout, stderr = run_cli(argv, capsys)
    doc = json.loads(stdout)
    assert doc == json.loads((out / "replications.json").read_text())
    assert doc["seeds"] == [3, 4, 5] and code == (0 if doc["verdict"] == "pass" else 1)
    assert "latency p99" in stderr and "±" in stderr and "3 replications" in stderr


def test_cli_without_matplotlib_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing() -> Any:
        raise MissingExtra("charts", "plot", "matplotlib")

    monkeypatch.setattr("tailwise.report.plot.pyplot", missing)
    out = tmp_path / "v"
    argv = ["simulate", str(_scenario_file(tmp_path)), "--vary", "replicas=2", "--out", str(out)]
    code, stdout, _ = run_cli(argv, capsys)
    assert code == 0 and (out / "vary.json").exists()
    hints = [line for line in stdout.splitlines() if "tailwise[plot]" in line]
    assert len(hints) == 1 and hints[0].startswith("no chart:")


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--vary", "nosuch=1"], "--vary"),
        (["--vary", "replicas"], "--vary"),
        (["--vary", "batching.size=2"], "batching"),
        (["--replications", "1"], "--replications"),
        (["--replications", "0", "--vary", "replicas=1"], "--replications"),
    ],
)
def test_cli_bad_study_options_exit_2_with_one_line(
    args: list[str], names: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    code, _, err = run_cli(
        ["simulate", str(_scenario_file(tmp_path)), *args, "--out", str(out)], capsys
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and names in lines[0] and "Traceback" not in err, err
    assert not out.exists(), "nothing runs or is written"


def test_progress_bar_is_quiet_unless_shown() -> None:
    with study_text.progress_bar(False) as tick:
        assert tick is None
    with study_text.progress_bar(True) as tick:
        assert tick is not None
        tick(1, 2)
        tick(2, 2)


def test_vary_none_is_null_unless_the_field_takes_the_word() -> None:
    """``none`` means null (queue_limit: no bound), except where the field takes the word
    itself (hedge.cancel: none, losers run to their end)."""
    sc = load_scenario(EXAMPLES / "hedging.yaml")
    varied = study.with_value(sc, "hedge.cancel", "none")
    assert varied.hedge is not None and varied.hedge.cancel == "none"
    bounded = study.with_value(sc, "queue_limit", "4")
    assert bounded.queue_limit == 4
    assert study.with_value(bounded, "queue_limit", "none").queue_limit is None
    with pytest.raises(BadInput) as err:
        study.with_value(sc, "hedge.cancel", "sometimes")
    assert err.value.field == "--vary"
