"""tailwise compare: B against the baseline A, for runs and for sweeps.

Every summary here is made by :func:`summarize` from records whose latencies
we choose, so the expected percentiles are known exactly; no number in a
summary is written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailwise.cli import main
from tailwise.errors import BadInput
from tailwise.loadgen.sweep import Step, sweep_json
from tailwise.metrics.schema import Summary
from tailwise.metrics.slo import parse_slo
from tailwise.metrics.summary import RunInfo, summarize
from tailwise.report.compare import Comparison, compare_dirs, compare_runs, worse_by_more_than
from tests.clirun import run_cli as cli
from tests.synthetic import make_records

MS = 1_000_000
S = 1_000_000_000
WINDOW = (0, 2 * S)


def summary(
    lat_ms: float,
    *,
    rate: int = 100,
    errors_every: int = 0,
    lag_ms: float = 0.0,
    slos: tuple[str, ...] = (),
    llm: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """A 2 s constant-rate run at ``rate``/s where every ok request takes ``lat_ms``.

    ``errors_every=k`` makes every k-th request a reset; ``lag_ms`` delays every
    send (over the run's explicit ``--max-send-lag`` of 5 ms, the run is invalid);
    ``llm=(ttft_ms, tpot_ms)`` gives each request 11 output tokens, its first at
    ``ttft_ms`` and then one per ``tpot_ms``.
    """
    n = 2 * rate
    sched = np.arange(n, dtype=np.int64) * (S // rate)
    lat = np.full(n, round(lat_ms * MS), dtype=np.int64)
    errors = ["reset" if errors_every and i % errors_every == 0 else "" for i in range(n)]
    lag = np.full(n, round(lag_ms * MS), dtype=np.int64)
    if llm:
        lat[:] = round((llm[0] + 10 * llm[1]) * MS)
    rec = make_records(sched, lat, errors, WINDOW, lag=lag)
    if llm:
        rec.first_token_ns = sched + round(llm[0] * MS)
        rec.output_tokens = np.full(n, 11, dtype=np.int64)
    info = RunInfo(
        source="sim",
        target="synthetic",
        mode="open",
        arrival={"process": "constant", "rate_rps": rate},
        window_ns=WINDOW,
        slos=[parse_slo(s) for s in slos],
        llm=llm is not None,
        max_send_lag_ns=5 * MS,
    )
    return summarize(rec, info).to_json()


def write_run(path: Path, s: dict[str, Any]) -> str:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps(s, indent=2))
    return str(path)


def _compare(a: dict[str, Any], b: dict[str, Any], threshold: float) -> Comparison:
    """compare_runs on two summary.json documents, read back as compare reads them."""
    return compare_runs(Summary.from_json(a), Summary.from_json(b), threshold)


def regressed(a: dict[str, Any], b: dict[str, Any], threshold: float = 0.10) -> list[str]:
    return [m.key for m in _compare(a, b, threshold).regressions]


# ---- runs -----------------------------------------------------------------------------


def test_a_slower_b_exits_1_and_names_p99_latency(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_run(tmp_path / "a", summary(20.0))
    b = write_run(tmp_path / "b", summary(30.0))
    code, out, _ = cli(["compare", a, b], capsys)
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert lines == ["REGRESSION  latency p99: 20.0ms -> 30.0ms (+50.0%), rose by more than 10%"]
    assert "verdict" in out and "pass" in out


def test_an_improvement_or_a_small_change_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_run(tmp_path / "a", summary(20.0))
    faster = write_run(tmp_path / "faster", summary(12.0))
    slightly = write_run(tmp_path / "slightly", summary(21.0))  # +5%
    for b in (faster, slightly):
        code, out, _ = cli(["compare", a, b], capsys)
        assert code == 0
        assert "no regression beyond 10%" in out and "REGRESSION" not in out


def test_the_threshold_itself_is_not_a_regression() -> None:
    a, b = summary(20.0), summary(22.0)  # p99 exactly +10%
    assert regressed(a, b, 0.10) == []
    assert regressed(a, b, 0.099) == ["latency_ms.p99"]
    # The same boundary on a higher-is-better metric (goodput, knee): a relative fall.
    assert not worse_by_more_than(100.0, 90.0, "higher", 0.10)
    assert worse_by_more_than(100.0, 89.9, "higher", 0.10)
    assert not worse_by_more_than(100.0, 110.0, "lower", 0.10)
    assert worse_by_more_than(100.0, 110.1, "lower", 0.10)


def test_lost_goodput_is_a_regression_even_when_latency_holds() -> None:
    a, b = summary(20.0), summary(20.0, errors_every=5)  # B: 20% resets
    c = _compare(a, b, 0.10)
    assert [m.key for m in c.regressions] == ["rates.goodput_rps"]
    goodput = c.regressions[0]
    assert goodput.rel_delta == pytest.approx(-0.20, abs=0.01)
    error_rate = next(m for m in c.metrics if m.key == "rates.error_rate")
    assert (error_rate.a, error_rate.b, error_rate.regressed) == (0.0, 0.2, False)


def test_llm_runs_also_gate_p99_ttft_and_tpot() -> None:
    # Same end-to-end latency (30 ms) but B's first token is twice as late.
    a = summary(0, llm=(10.0, 2.0))
    b = summary(0, llm=(20.0, 1.0))
    assert a["latency_ms"]["p99"] == b["latency_ms"]["p99"] == 30.0
    c = _compare(a, b, 0.10)
    assert [m.key for m in c.regressions] == ["ttft_ms.p99"]
    assert {"TTFT p50", "TPOT p99"} <= {m.label for m in c.metrics}
    assert [m.key for m in _compare(b, a, 0.10).regressions] == ["tpot_ms.p99"]
    # Plain HTTP runs have no TTFT rows at all.
    plain = _compare(summary(5.0), summary(5.0), 0.1)
    assert not any(m.key.startswith("ttft") for m in plain.metrics)


def test_an_invalid_run_cannot_gate_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = summary(20.0)
    saturated = summary(20.0, lag_ms=8.0)  # the generator sent every request 8 ms late
    assert saturated["verdict"] == "invalid"
    a = write_run(tmp_path / "a", good)
    b = write_run(tmp_path / "b", saturated)
    code, out, _ = cli(["compare", a, b], capsys)
    assert code == 3
    notes = [line for line in out.splitlines() if line.startswith("INVALID")]
    assert len(notes) == 1 and "run B is invalid (send-lag p99 8.00 ms > --max-send-lag" in notes[0]


def test_json_result_lists_regressions_and_every_metric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_run(tmp_path / "a", summary(20.0))
    b = write_run(tmp_path / "b", summary(30.0, errors_every=4))
    code, out, err = cli(["compare", a, b, "--threshold", "15%", "--json"], capsys)
    assert code == 1
    doc = json.loads(out)
    assert doc["threshold"] == 0.15 and doc["kind"] == "run" and doc["exit_code"] == 1
    assert [r["metric"] for r in doc["regressions"]] == ["rates.goodput_rps", "latency_ms.p99"]
    p99 = next(m for m in doc["metrics"] if m["metric"] == "latency_ms.p99")
    assert (p99["a"], p99["b"], p99["delta"]) == (20.0, 30.0, 10.0)
    assert p99["rel_delta"] == pytest.approx(0.5)
    assert doc["verdicts"] == {"a": "pass", "b": "pass"}
    assert "REGRESSION" in err  # the table goes to stderr with --json


def test_a_real_run_against_itself_changes_nothing(real_run: Path) -> None:
    c = compare_dirs(real_run, real_run, 0.0)
    assert c.exit_code == 0 and c.kind == "run"
    assert all(m.delta in (0.0, None) for m in c.metrics)


# ---- sweeps ---------------------------------------------------------------------------


def write_sweep(path: Path, service_ms: float, rates: tuple[int, ...], note: str = "") -> str:
    """A sweep whose latency at rate r is an M/M/1-like service/(1 - r/200) ms, SLO p99<=20ms."""
    slos = ("p99(latency)<=20ms",)
    steps = []
    for rate in rates:
        lat_ms = service_ms / max(1 - rate / 200, 0.05)
        step_dir = path / f"step-{rate}"
        doc = summary(lat_ms, rate=rate, slos=slos)
        steps.append(Step(float(rate), step_dir, Summary.from_json(doc)))
    path.mkdir(parents=True)
    (path / "sweep.json").write_text(json.dumps(sweep_json(steps, "synthetic", list(slos), note)))
    return str(path)


def test_a_lower_knee_is_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_sweep(tmp_path / "a", 5.0, (50, 100, 150))  # 6.7, 10, 20 ms: knee 150/s
    b = write_sweep(tmp_path / "b", 8.0, (50, 100, 150))  # 10.7, 16, 32 ms: knee 100/s
    code, out, _ = cli(["compare", a, b, "--json"], capsys)
    assert code == 1
    doc = json.loads(out)
    assert doc["kind"] == "sweep"
    knee = doc["metrics"][0]
    assert (knee["metric"], knee["a"], knee["b"], knee["regressed"]) == ("knee_rps", 150, 100, True)
    keys = [r["metric"] for r in doc["regressions"]]
    assert keys == ["knee_rps", "latency_ms.p99@50", "latency_ms.p99@100", "latency_ms.p99@150"]
    code, out, _ = cli(["compare", b, a], capsys)  # the other way round is an improvement
    assert code == 0 and "knee" in out


def test_sweeps_compare_only_the_rates_both_ran(tmp_path: Path) -> None:
    a = write_sweep(tmp_path / "a", 5.0, (50, 100))
    b = write_sweep(tmp_path / "b", 5.0, (100, 150))
    c = compare_dirs(a, b, 0.10)
    assert {m.rate_rps for m in c.metrics} == {None, 100.0}
    assert c.notes == [
        "rates only in A (not compared): 50/s",
        "rates only in B (not compared): 150/s",
    ]
    # Knees: 100/s in A, 150/s in B: an improvement, so nothing regressed.
    assert c.exit_code == 0


def test_a_sweep_that_stopped_cannot_gate(tmp_path: Path) -> None:
    a = write_sweep(tmp_path / "a", 5.0, (50, 100))
    b = write_sweep(tmp_path / "b", 5.0, (50, 100), note="stopped at 100/s: generator saturated")
    c = compare_dirs(a, b, 0.10)
    assert c.exit_code == 3 and c.invalid[0].startswith("sweep B is invalid (stopped at 100/s")


# ---- bad input ------------------------------------------------------------------------


def bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    run = write_run(tmp / "run", summary(5.0))
    sweep = write_sweep(tmp / "sweep", 5.0, (50,))
    (tmp / "empty").mkdir()
    (tmp / "broken").mkdir()
    (tmp / "broken" / "summary.json").write_text("{not json")
    (tmp / "other").mkdir()
    (tmp / "other" / "summary.json").write_text('{"schema": "something/9"}')
    return [
        ([run, str(tmp / "missing")], "B: got"),
        ([str(tmp / "empty"), run], "A: got"),
        ([run, sweep], "the same kind as A (a run directory)"),
        ([run, run, "--threshold", "ten"], "--threshold"),
        ([run, run, "--threshold", "150%"], "--threshold"),
        ([run, str(tmp / "broken")], "B: got"),
        ([run, str(tmp / "other")], "B (summary.json): got 'something/9'"),
    ]


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for args, expected in bad_inputs(tmp_path):
        with pytest.raises(SystemExit) as exited:
            main(["compare", *args])
        out, err = capsys.readouterr()
        assert exited.value.code == 2, args
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tailwise: error: "), err
        assert expected in lines[0] and "Traceback" not in err and out == ""


# ---- unlike workloads -----------------------------------------------------------------


def test_runs_at_different_rates_are_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_run(tmp_path / "a", summary(20.0, rate=300))
    b = write_run(tmp_path / "b", summary(20.0, rate=100))
    with pytest.raises(SystemExit) as exited:
        main(["compare", a, b])
    _, err = capsys.readouterr()
    assert exited.value.code == 2
    (line,) = err.strip().splitlines()
    assert "rate 300/s vs 100/s" in line and "--allow-different" in line
    code, out, err = cli(["compare", a, b, "--allow-different", "--json"], capsys)
    doc = json.loads(out)
    assert doc["warnings"] and "rate 300/s vs 100/s" in doc["warnings"][0]
    assert "WARNING" in err and "DIFFERENT workloads" in err
    # The "regression" the issue saw (goodput -67%) is still computed, under the warning.
    assert code == 1 and [r["metric"] for r in doc["regressions"]] == ["rates.goodput_rps"]


def test_api_lengths_source_and_duration_differences_are_named(tmp_path: Path) -> None:
    s = summary(20.0)
    run_json = {"options": {"api": "openai-chat", "max_tokens": "128", "input_tokens": "128"}}
    a = tmp_path / "a"
    write_run(a, s)
    (a / "run.json").write_text(json.dumps(run_json))
    b = tmp_path / "b"
    other = {**s, "source": "loadgen", "window": {**s["window"], "duration_s": 15.0}}
    write_run(b, other)
    changed = {"options": {**run_json["options"], "api": None, "max_tokens": "512"}}
    (b / "run.json").write_text(json.dumps(changed))
    with pytest.raises(BadInput) as exc:
        compare_dirs(a, b, 0.1)
    message = str(exc.value)
    for field in ("source sim vs loadgen", "duration 2s vs 15s", "API openai-chat vs none"):
        assert field in message
    assert "output length 128 vs 512" in message and "prompt length" not in message
    # The same workload with another seed or target is the same workload.
    same = {**s, "target": "http://elsewhere", "arrival": {**s["arrival"], "seed": 9}}
    assert compare_dirs(a, write_run(tmp_path / "c", same), 0.1).warnings == []
