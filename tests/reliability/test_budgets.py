"""Resource budgets decided before work starts (issue 21): each reproduction is a row.

Every row is a command the red-team pass ran that overflowed, hung, ate gigabytes
or spawned processes without end. Now each must be refused up front: exit code 2,
one line on stderr naming the option (or the scenario field), no traceback, and
nothing started (no run directory written, no request sent: the URLs point at a
port nobody listens on, and a run that started would leave records behind).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tailwise import limits
from tailwise.errors import BadInput
from tailwise.files import safe_yaml
from tests.clirun import run_cli

pytestmark = pytest.mark.reliability

URL = "http://127.0.0.1:9/"  # discard port: nothing listens, nothing may be sent
RUN = ["run", URL, "--duration", "1s"]

# (argv after the command, the option the error must name)
RUN_CASES = [
    (["--rate", "1e-12/s"], "--rate"),  # an int64 overflow in the schedule, endless plan
    (["--rate", "1e-9/s"], "--rate"),  # hung forever
    (["--rate", "10/s", "--arrival", "gamma:1e-10"], "--arrival"),  # endless bursts at t=0
    (["--rate", "1e9/s"], "--rate"),  # 1e9 requests planned
    (["--rate", "200000/s", "--duration", "1000s"], "--rate"),  # 2e8 planned
    (["--rate", "100/s", "--workers", "100000"], "--workers"),  # 92 processes and counting
    (["--concurrency", "1e9"], "--concurrency"),
    (["--rate", "10/s", "--max-in-flight", "1e9"], "--max-in-flight"),
    (["--rate", "1/s", "--seed", "-1"], "--seed"),  # a NumPy ValueError traceback
    (["--rate", "1/s", "--duration", "100000h"], "--duration"),
    (
        ["--rate", "1/s", "--api", "openai-chat", "--model", "m", "--input-tokens", "1000000"],
        "--input-tokens",  # 256 synthetic prompts of a million words: 1.8 GB
    ),
]


@pytest.mark.parametrize(("args", "field"), RUN_CASES, ids=[" ".join(a) for a, _ in RUN_CASES])
def test_run_refuses_before_sending(
    args: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code, _, err = run_cli([*RUN, *args, "--out", str(out), "-q"], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"tailwise: error: {field}:"), err
    assert not out.exists()  # refused before the run directory, so before any traffic


def test_sweep_refuses_a_billion_users(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", URL, "--concurrency", "1,1e9", "--duration", "1s", "--out", str(tmp_path)]
    code, _, err = run_cli(argv, capsys)  # was a SIGSEGV
    assert code == 2 and "--concurrency" in err and "100,000" in err, err


def test_the_limit_is_in_the_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*RUN, "--rate", "1e9/s", "--out", str(tmp_path / "r")]
    _, _, err = run_cli(argv, capsys)
    assert f"{limits.MAX_PLANNED_REQUESTS:,}" in err and "docs/run.md#limits" in err
    assert "'1e9/s for 1s'" in err  # what the user typed, not a derived float


def test_a_plan_at_the_limit_is_accepted(tmp_path: Path) -> None:
    """The bound is a bound, not a guess: exactly MAX_PLANNED_REQUESTS passes."""
    from tailwise.loadgen.prepare.plan import RunOptions, prepare

    n = limits.MAX_PLANNED_REQUESTS
    p = prepare(RunOptions(urls=[URL], rate=f"{n}/s", duration="1s", out=str(tmp_path)))
    assert p.schedule is not None and p.horizon_ns == 1_000_000_000
    with pytest.raises(BadInput, match="--rate"):
        prepare(RunOptions(urls=[URL], rate=f"{n}/s", duration="1.01s"))


# ---- scenarios ---------------------------------------------------------------------

BILLION_LAUGHS = """\
name: bomb
service: exp:5ms
calibration:
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""

SCENARIO_CASES = {
    "billion laughs": (BILLION_LAUGHS, "SCENARIO", "aliases expanded"),
    "5000 brackets": ("a: " + "[" * 5000 + "]" * 5000 + "\n", "SCENARIO", "64 levels"),
    "a billion requests": (
        "arrival: {rate: 1000/s, requests: 1000000000, duration: 1000000s}\n",
        "scenario.arrival.rate",
        "requests planned",
    ),
    "a billion replicas": ("replicas: 1000000000\n", "scenario.replicas", "10000"),
    "a billion servers": ("servers: 1000000000\n", "scenario.servers", "100000"),
    "fan-out to a billion": ("fanout: {n: 1000000000}\n", "scenario.fanout.n", "1000"),
    "autoscale to a billion": (
        "autoscale: {min: 0, max: 1000000000, target: 1}\n",
        "scenario.autoscale.max",
        "10000",
    ),
    "failures every nanosecond": (
        "failures: {mtbf: 1ns, mttr: 1ns}\n",
        "scenario.failures.mtbf",
        "expected failures",
    ),
    "an autoscaler ticking every nanosecond": (
        "autoscale: {max: 4, target: 1, interval: 1ns}\n",
        "scenario.autoscale.interval",
        "ticks",
    ),
    "stragglers 1e308 times slower": (
        "stragglers: {fraction: 100%, factor: 1e308}\n",  # was a negative p50
        "scenario.stragglers.factor",
        "1000000",
    ),
    "lognormal sigma 1e308": ("delay: lognormal:1ms,1e308\n", "scenario.delay", "shape"),
    "a rate of 1e-12/s": ("arrival: {rate: 1e-12/s, duration: 1s}\n", "scenario.arrival.rate", ""),
    "gamma burstiness 1e-10": (
        "arrival: {process: 'gamma:1e-10', rate: 100/s, duration: 1s}\n",
        "scenario.arrival.process",
        "0.01",
    ),
    "a negative seed": ("arrival: {rate: 10/s, seed: -1}\n", "scenario.arrival.seed", ""),
}


@pytest.mark.parametrize("case", list(SCENARIO_CASES))
def test_simulate_refuses_before_simulating(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, field, hint = SCENARIO_CASES[case]
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    code, _, err = run_cli(["simulate", str(path), "--out", str(out), "-q"], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and f"error: {field}" in err and hint in err, err
    assert not out.exists()


def test_a_huge_scenario_file_is_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("w") as fh:  # a sparse file: the size costs no disk
        fh.write("name: x\n")
        fh.truncate(limits.MAX_SCENARIO_BYTES * 4)
    code, _, err = run_cli(["simulate", str(path), "-q"], capsys)
    assert code == 2 and "bytes in a scenario file" in err, err


def test_replications_and_vary_are_bounded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("arrival: {rate: 10/s, duration: 1s}\n")
    code, _, err = run_cli(["simulate", str(path), "--replications", "1000000000"], capsys)
    assert code == 2 and "--replications" in err and "10,000" in err, err


def test_yaml_anchors_within_bounds_still_load() -> None:
    """Anchors are legitimate YAML: a shared block reused a few times is accepted."""
    text = textwrap.dedent(
        """\
        base: &base {service: exp:5ms, servers: 2}
        stages: [*base, *base, *base]
        """
    )
    doc = safe_yaml(text, "SCENARIO", "x.yaml")
    assert doc["stages"] == [{"service": "exp:5ms", "servers": 2}] * 3


def test_yaml_node_count_includes_expanded_aliases() -> None:
    """Nine levels of nine aliases: 9**9 values from 400 bytes, counted before building."""
    with pytest.raises(BadInput, match="aliases expanded"):
        safe_yaml(BILLION_LAUGHS, "SCENARIO", "bomb.yaml")


# ---- plan ----------------------------------------------------------------------------

PLAN_CASES = [
    # ZeroDivisionError: a tiny rate needed "0 replicas"
    (["replicas", "--rate", "1e-9", "--latency", "40ms", "--per-replica", "10"], "--rate"),
    # an Erlang C over 1e12 slots: hung
    (
        ["replicas", "--rate", "100/s", "--latency", "40ms", "--per-replica", "1e12"],
        "--per-replica",
    ),
    (["queue", "--servers", "1e9", "--service", "5ms", "--utilization", "50%"], "--servers"),
]


@pytest.mark.parametrize(
    ("args", "field"), PLAN_CASES, ids=[a[0] + " " + a[-1] for a, _ in PLAN_CASES]
)
def test_plan_refuses(args: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["plan", *args], capsys)
    assert code == 2 and err.startswith(f"tailwise: error: {field}:"), err


def test_plan_replicas_needs_at_least_one(capsys: pytest.CaptureFixture[str]) -> None:
    """A rate far below one replica's capacity plans one replica, never zero (or 1/0)."""
    argv = ["plan", "replicas", "--rate", "1e-6/s", "--latency", "40ms", "--per-replica", "10"]
    argv.append("--json")
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert '"replicas": 1' in out
