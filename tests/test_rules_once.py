"""Rules the pipeline's stages share live in one place each (docs/architecture.md,
"One place for each rule"): the default confidence, the default SLO, when a loss watch
may judge, when none can, and the trial of a knee search, measured or simulated."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from tailwise.errors import BadInput
from tailwise.knee import GO_ON_CAUSES, TrialRun, make_trial, trial_detail, trial_window_s
from tailwise.loadgen.engine.watch import judge_from_ns
from tailwise.loadgen.prepare.plan import RunOptions, prepare, watch_blind
from tailwise.metrics.schema import Summary
from tailwise.metrics.slo import DEFAULT_SLO, or_default, parse_slo
from tailwise.metrics.uncertainty import CONFIDENCE
from tailwise.sim.run import sim_trial, simulate
from tailwise.sim.scenario import parse_scenario
from tailwise.units import parse_confidence

SRC = Path(__file__).resolve().parents[1] / "src" / "tailwise"
# 0.95 that is no confidence level: the share of throughput below which a sweep chart
# calls goodput lost; the p95 quantile of a queueing model's table; a share of the FIFO
# model's estimated exponent.
NOT_A_LEVEL = {"report/charts.py", "plan/queueing.py", "metrics/fifo.py"}


def test_the_default_confidence_is_written_once() -> None:
    """No module but metrics/uncertainty.py writes the level 0.95 as a number: a second
    literal is a second default that can drift from the first."""
    found = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel == "metrics/uncertainty.py" or rel in NOT_A_LEVEL:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value == 0.95:
                found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_the_cli_and_the_python_api_default_to_that_confidence() -> None:
    from tailwise.cli.measure import run

    option = next(p for p in run.params if p.name == "confidence")
    assert parse_confidence(str(option.default)) == CONFIDENCE
    assert RunOptions(urls=["http://127.0.0.1:9/"]).confidence == CONFIDENCE


def test_a_run_and_a_simulation_given_no_slo_are_judged_on_the_one_default() -> None:
    measured = prepare(RunOptions(urls=["http://127.0.0.1:9/"], rate="10/s", duration="1s"))
    assert measured.slos == [DEFAULT_SLO]
    sc = parse_scenario(
        {"arrival": {"process": "poisson", "rate": "50/s", "duration": "2s"}, "service": "exp:1ms"}
    )
    (entry,) = simulate(sc).summary["slos"]
    assert entry["spec"] == DEFAULT_SLO.spec and entry["implicit"] is True
    given = [parse_slo("p99(latency)<=1s")]
    assert or_default(given) == given


@pytest.mark.parametrize(
    ("window_ns", "first_ns"),
    [
        ((0, 10_000_000_000), 1_000_000_000),  # a second of window
        ((2_000_000_000, 3_000_000_000), 2_500_000_000),  # half of a shorter one
        ((5, 5), 5),  # no window: judge at once (nothing to wait for)
    ],
)
def test_a_loss_watch_judges_after_a_second_or_half_the_window(
    window_ns: tuple[int, int], first_ns: int
) -> None:
    assert judge_from_ns(window_ns) == first_ns


def test_no_watch_judges_auto_warmup_over_several_processes() -> None:
    base = RunOptions(urls=["http://127.0.0.1:9/"], rate="10/s", duration="2s", workers=2)
    assert watch_blind(prepare(base))
    fixed = prepare(RunOptions(**{**base.__dict__, "warmup": "1s"}))
    assert fixed.scaled_out and not watch_blind(fixed)
    assert not watch_blind(prepare(RunOptions(**{**base.__dict__, "workers": None})))
    with pytest.raises(BadInput, match="stop-on-slo-loss"):
        prepare(RunOptions(**{**base.__dict__, "stop_on_slo_loss": True}))


def _summary(verdict: str = "pass", cause: str | None = None) -> Summary:
    """The parts of a summary a trial reads, as summarize() writes them."""
    return Summary.from_json(
        {
            "rates": {"goodput_rps": 9.0, "throughput_rps": 10.0, "attainment": 0.9},
            "latency_ms": {"p99": 12.0},
            "slos": [{"spec": "p99(latency)<=50ms", "passed": verdict != "fail"}],
            "requests": {"scheduled": 100},
            "window": {"duration_s": 10.0},
            "verdict": verdict,
            "verdict_reason": f"the run is {verdict}",
            **({"verdict_cause": cause} if cause else {}),
        }
    )


def test_one_trial_builder_numbers_seeds_and_judges() -> None:
    calls: list[tuple[float, int, int]] = []
    summaries = iter([_summary(), _summary(), _summary("invalid", "client"), _summary("invalid")])

    def run_at(rate_rps: float, n: int, repeat: int) -> TrialRun:
        calls.append((rate_rps, n, repeat))
        return TrialRun(next(summaries), Path(f"t{n}") if n % 2 else None)

    numbers = itertools.count(1)
    steer = make_trial(run_at, firm=False, counter=numbers)
    settle = make_trial(run_at, counter=numbers)
    first, again = steer(10.0), settle(10.0)
    flippable, broken = steer(20.0), settle(40.0)
    # One numbering for both kinds; a rate tried again gets the next seed (its repeat).
    assert calls == [(10.0, 1, 0), (10.0, 2, 0), (20.0, 3, 0), (40.0, 4, 0)]
    assert not first.firm and again.firm
    assert first.detail["directory"] == "t1" and "directory" not in again.detail
    # A verdict the client's lag could have decided goes on (as a miss); others stop.
    assert "client" in GO_ON_CAUSES
    assert flippable.invalid_reason == "" and flippable.detail["client_decided"] is True
    assert broken.invalid_reason == "the run is invalid"


def test_a_rate_tried_again_by_one_builder_gets_a_fresh_seed() -> None:
    seen: list[int] = []

    def run_at(rate_rps: float, n: int, repeat: int) -> TrialRun:
        seen.append(repeat)
        return TrialRun(_summary())

    trial = make_trial(run_at)
    for rate in (10.0, 20.0, 10.0, 10.0):
        trial(rate)
    assert seen == [0, 0, 1, 2]


def test_a_trial_window_stretches_to_hold_its_least_requests() -> None:
    assert trial_window_s(10.0, 0, 5.0) == 10.0
    assert trial_window_s(10.0, 200, 5.0) == 40.0


def test_a_simulated_trial_reports_what_a_measured_one_does(tmp_path: Path) -> None:
    """The simulator's knee trials go through the same builder: the same detail keys,
    each trial's directory, a repeat with a fresh seed."""
    sc = parse_scenario(
        {
            "arrival": {"process": "poisson", "rate": "50/s", "duration": "4s", "seed": 2},
            "service": "exp:5ms",
            "slo": ["p99(latency)<=200ms"],
        }
    )
    trial = sim_trial(sc, tmp_path, min_requests=400)
    first, repeat = trial(50.0), trial(50.0)
    assert first.passed and first.firm
    assert first.detail.keys() == trial_detail(_summary(), False, tmp_path).keys()
    assert first.detail["window_s"] == pytest.approx(8.0)  # stretched to 400 requests
    assert Path(first.detail["directory"]).name == "trial-01-50rps"
    assert (Path(repeat.detail["directory"]) / "summary.json").is_file()
    assert first.detail["requests"] != repeat.detail["requests"]  # another seed's draw
