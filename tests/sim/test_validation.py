"""Is the simulator right? Its two engines agree request by request, they agree with an
independent engine (SimPy), and both agree with queueing theory's closed forms
(Erlang C, Pollaczek-Khinchine) within replication confidence intervals. Scenario
files fail with one line naming the field; the CLI exits by its verdict.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailwise.capacity import erlang_c, mmc_sojourn_survival
from tailwise.cli import main
from tailwise.distributions import parse_distribution
from tailwise.errors import BadInput
from tailwise.sim.fast import fcfs_one_server, fcfs_servers, jsq_kernel, jsq_python
from tailwise.sim.run import fast_path_applies, run_fast, simulate
from tailwise.sim.scenario import parse_scenario
from tailwise.sim.system import System
from tailwise.sim.system_spec import OK, SystemSpec
from tests.clirun import run_cli as _cli
from tests.sim import assert_covers, check_summary, poisson_arrivals, run

MS = 1_000_000

# -- 1. the vectorised fast path and the event kernel: the same run -------------------


def _bursts(n: int, size: int, every_ns: int) -> np.ndarray:
    """``size`` simultaneous arrivals every ``every_ns``: ties with each other and with
    departures (a constant service of ``every_ns / k`` ends exactly on later bursts)."""
    return np.repeat(np.arange(n // size, dtype=np.int64) * every_ns, size)


@pytest.mark.parametrize("servers", [1, 3])
@pytest.mark.parametrize(
    "service", ["exp:5ms", "lognormal:3ms,1.0", "5ms", "uniform:1ms-9ms", "gamma:4ms,0.5"]
)
def test_event_kernel_matches_fast_path_per_request(servers: int, service: str) -> None:
    """Same arrivals, same service draws: identical done instants, to the nanosecond."""
    spec = SystemSpec(parse_distribution(service), servers=servers)
    rate = 0.9 * servers / (spec.service.mean_ns / 1e9)  # heavy load: long busy periods
    arrivals = poisson_arrivals(rate, 4000, seed=servers)
    events = System(spec, np.random.default_rng(11)).run(arrivals)
    draws = spec.service.sample(np.random.default_rng(11), len(arrivals))
    fast = fcfs_servers(arrivals, draws, servers)
    np.testing.assert_array_equal(events.done_ns, fast)
    assert (events.status == OK).all()
    # Per leg: service is exactly its draw, and no one waits while a server is idle.
    np.testing.assert_array_equal(events.leg_done_ns - events.leg_start_ns, draws)
    assert (events.leg_start_ns >= events.leg_sent_ns).all()


@pytest.mark.parametrize(
    ("routing", "servers"),
    [("round_robin", 1), ("round_robin", 2), ("random", 1), ("random", 3), ("jsq", 1),
     ("least_outstanding", 1), ("power_of_d", 1)],
)  # fmt: skip
@pytest.mark.parametrize("bursts", [False, True])
def test_routed_fast_paths_match_the_event_engine(routing: str, servers: int, bursts: bool) -> None:
    """Several replicas: the vectorised split (round robin, random) and the one-loop
    join-shortest-queue give the event engine's done instant and replica for every
    request, ties included (bursts of simultaneous arrivals, constant service)."""
    service = "5ms" if bursts else "exp:5ms"
    spec = SystemSpec(parse_distribution(service), replicas=5, servers=servers, routing=routing)
    if bursts:
        arrivals = _bursts(3000, 7, 10 * MS)
    else:
        arrivals = poisson_arrivals(0.9 * 5 * servers / 0.005, 6000, seed=servers)
    assert fast_path_applies(spec)
    events = System(spec, np.random.default_rng([4, 9])).run(arrivals)
    done, status, replica = run_fast(spec, arrivals, np.random.default_rng([4, 9]))
    np.testing.assert_array_equal(done, events.done_ns)
    np.testing.assert_array_equal(replica, events.replica)
    assert (status == OK).all() and len(set(replica.tolist())) == 5


@pytest.mark.parametrize("load", [0.9, 1.3])  # 1.3: queues outgrow the kernel's first rings
def test_compiled_jsq_kernel_equals_the_python_loop(load: float) -> None:
    """The Numba kernel (the ``fast`` extra) and the plain loop: same done, same replica."""
    numba = pytest.importorskip("numba")
    kernel = numba.njit(cache=True)(jsq_kernel)
    arrivals = poisson_arrivals(load * 6 / 0.004, 30_000, seed=7)
    work = np.random.default_rng(8).exponential(4e6, len(arrivals)).astype(np.int64)
    done, chosen = kernel(arrivals, work, 6)
    ref_done, ref_chosen = jsq_python(arrivals, work, 6)
    np.testing.assert_array_equal(done, ref_done)
    np.testing.assert_array_equal(chosen, ref_chosen)
    if load > 1:  # the backlog at the last arrival outgrew the first 64-slot rings
        assert np.bincount(chosen[done > arrivals[-1]], minlength=6).max() > 64


@pytest.mark.parametrize("servers", [1, 2, 4])
def test_engines_agree_on_ties(servers: int) -> None:
    """Bursts of 4 simultaneous arrivals; departures land exactly on later bursts."""
    arrivals = _bursts(4000, 4, 20 * MS)
    for service in ("5ms", "10ms", "exp:5ms"):
        spec = SystemSpec(parse_distribution(service), servers=servers)
        events = System(spec, np.random.default_rng(3)).run(arrivals)
        draws = spec.service.sample(np.random.default_rng(3), len(arrivals))
        np.testing.assert_array_equal(events.done_ns, fcfs_servers(arrivals, draws, servers))


def test_one_server_recursion_is_lindley() -> None:
    """The cumulative-max form equals the textbook loop D_n = max(A_n, D_{n-1}) + S_n."""
    rng = np.random.default_rng(5)
    arrivals = np.cumsum(rng.integers(0, 10 * MS, 3000)).astype(np.int64)
    service = rng.integers(0, 12 * MS, 3000).astype(np.int64)
    expected, last = [], 0
    for a, s in zip(arrivals.tolist(), service.tolist(), strict=True):
        last = max(a, last) + s
        expected.append(last)
    np.testing.assert_array_equal(fcfs_one_server(arrivals, service), expected)
    np.testing.assert_array_equal(fcfs_servers(arrivals, service, 1), expected)


@pytest.mark.parametrize("servers", [1, 4])
def test_simulate_gives_the_same_records_on_either_engine(servers: int) -> None:
    """Through the public API: a queue bound too large to matter forces the event engine;
    the records (stragglers included, drawn by each engine's own code) do not change."""
    base: dict[str, Any] = {
        "arrival": {"rate": f"{150 * servers}/s", "duration": "20s", "warmup": "1s", "seed": 4},
        "service": "lognormal:4ms,0.6",
        "servers": servers,
        "stragglers": {"fraction": "5%", "factor": 8},
    }
    fast = run(base)
    events = run({**base, "queue_limit": 10**9})
    assert fast.summary["sim"]["engine"] == "vectorised"
    assert events.summary["sim"]["engine"] == "events"
    np.testing.assert_array_equal(fast.records.done_ns, events.records.done_ns)
    assert fast.summary["latency_ms"] == events.summary["latency_ms"]


# -- 2. closed forms: M/M/1, M/M/c (Erlang C), M/G/1 (Pollaczek-Khinchine) ------------

SEEDS = range(10)


@pytest.mark.parametrize(
    ("servers", "rate_rps", "duration"), [(1, 160.0, "300s"), (4, 640.0, "60s")]
)
def test_mmc_latency_mean_and_tail_match_erlang_c(
    servers: int, rate_rps: float, duration: str
) -> None:
    """rho = 0.8 with 5 ms exponential service: mean latency = C/(c mu - lam) + 1/mu, and
    P(latency > t) is the M/M/c sojourn survival, at three t."""
    service_s = 0.005
    ts_s = (0.005, 0.015, 0.040)
    means, tails = [], {t: [] for t in ts_s}
    for seed in SEEDS:
        sc = {
            "arrival": {
                "rate": f"{rate_rps:g}/s",
                "duration": duration,
                "warmup": "5s",
                "seed": seed,
            },
            "service": "exp:5ms",
            "servers": servers,
        }
        r = run(sc)
        means.append(r.summary["latency_ms"]["mean"])
        rec = r.records
        latency_s = (rec.done_ns - rec.scheduled_ns)[rec.in_window] / 1e9
        for t in ts_s:
            tails[t].append(float((latency_s > t).mean()))
    wait_p = erlang_c(servers, rate_rps * service_s)
    mean_ms = (wait_p / (servers / service_s - rate_rps) + service_s) * 1e3
    assert_covers(means, mean_ms, f"M/M/{servers} mean latency (ms)")
    for t in ts_s:
        truth = mmc_sojourn_survival(t, servers, service_s, rate_rps)
        assert_covers(tails[t], truth, f"M/M/{servers} P(latency > {t * 1e3:g} ms)")


def test_event_kernel_waits_match_erlang_c() -> None:
    """M/M/3 at rho = 0.8 on the event kernel: P(wait > 0) is Erlang C, mean wait C/(c mu - lam).
    Waits come from the legs (start - sent), which the fast path does not have."""
    servers, service_s, rate_rps = 3, 0.005, 480.0
    spec = SystemSpec(parse_distribution("exp:5ms"), servers=servers)
    p_wait, mean_wait = [], []
    for seed in range(16):
        arrivals = poisson_arrivals(rate_rps, 10_000, seed)
        res = System(spec, np.random.default_rng(seed)).run(arrivals)
        wait_s = (res.leg_start_ns - res.leg_sent_ns)[1000:] / 1e9  # 1000 requests warm up
        p_wait.append(float((wait_s > 0).mean()))
        mean_wait.append(float(wait_s.mean()))
    c = erlang_c(servers, rate_rps * service_s)
    assert_covers(p_wait, c, "M/M/3 P(wait > 0)")
    assert_covers(mean_wait, c / (servers / service_s - rate_rps), "M/M/3 mean wait (s)")


@pytest.mark.parametrize(
    "service", ["4ms", "uniform:1ms-7ms", "exp:4ms", "gamma:4ms,0.5", "lognormal:3ms,0.8"]
)
def test_mg1_mean_wait_is_pollaczek_khinchine(service: str) -> None:
    """M/G/1 at rho = 0.7: W = rho S (1 + SCV) / (2 (1 - rho)) + S, for SCV 0 (M/D/1) to 2."""
    dist = parse_distribution(service)
    s = dist.mean_ns / 1e9
    rho = 0.7
    rate = rho / s
    means = []
    for seed in SEEDS:
        arrival = {"rate": f"{rate:.9g}/s", "duration": "150s", "warmup": "5s", "seed": seed}
        means.append(run({"arrival": arrival, "service": service}).summary["latency_ms"]["mean"])
    truth_ms = (rho * s * (1 + dist.scv) / (2 * (1 - rho)) + s) * 1e3
    assert_covers(means, truth_ms, f"M/G/1 {service} mean latency (ms)")


def test_pollaczek_khinchine_distinguishes_the_service_shapes() -> None:
    """The check above has teeth: at rho = 0.7 the SCV 0 and SCV 2 waits differ 3x, far
    beyond either interval, so a simulator ignoring the service shape would fail it."""
    waits = {}
    for service in ("4ms", "gamma:4ms,0.5"):
        arrival = {"rate": "175/s", "duration": "150s", "warmup": "5s", "seed": 1}
        waits[service] = run({"arrival": arrival, "service": service}).summary["latency_ms"]
    d, g = waits["4ms"]["mean"] - 4.0, waits["gamma:4ms,0.5"]["mean"] - 4.0
    assert 2.4 < g / d < 3.6  # P-K: (1 + 2) / (1 + 0) = 3


# -- 12. an independent engine: SimPy -------------------------------------------------


def _simpy_fcfs(arrivals: np.ndarray, service: np.ndarray, servers: int) -> np.ndarray:
    simpy = pytest.importorskip("simpy")
    env = simpy.Environment()
    desk = simpy.Resource(env, capacity=servers)
    done = np.full(len(arrivals), -1, dtype=np.int64)

    def customer(i: int, work: float) -> Any:
        with desk.request() as turn:
            yield turn
            yield env.timeout(work)
            done[i] = round(env.now)

    def source() -> Any:
        for i, (a, s) in enumerate(zip(arrivals.tolist(), service.tolist(), strict=True)):
            yield env.timeout(a - env.now)
            env.process(customer(i, float(s)))

    env.process(source())
    env.run()
    return done


@pytest.mark.parametrize("servers", [1, 3])
@pytest.mark.parametrize("ties", [False, True])
def test_simpy_agrees_request_by_request(servers: int, ties: bool) -> None:
    """c FCFS servers in SimPy (integer ns as float time, exact below 2^53): the same
    done instants as tailwise's event kernel and its fast path."""
    spec = SystemSpec(parse_distribution("5ms" if ties else "lognormal:4ms,0.8"), servers=servers)
    rate = 0.85 * servers / (spec.service.mean_ns / 1e9)
    arrivals = _bursts(3000, 3, 5 * MS * 3 // servers) if ties else poisson_arrivals(rate, 3000, 2)
    draws = spec.service.sample(np.random.default_rng(9), len(arrivals))
    reference = _simpy_fcfs(arrivals, draws, servers)
    events = System(spec, np.random.default_rng(9)).run(arrivals)
    np.testing.assert_array_equal(events.done_ns, reference)
    np.testing.assert_array_equal(fcfs_servers(arrivals, draws, servers), reference)


# -- 10. scenario validation and the CLI ----------------------------------------------


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"bogus": 1}, "scenario.bogus"),
        ({"arrival": {"rate": "100/s", "bogus": 1}}, "scenario.arrival.bogus"),
        ({"service": "weibull:5ms"}, "scenario.service"),
        ({"service": "lognormal:5ms"}, "scenario.service"),
        ({"service": "exp:5 parsecs"}, "scenario.service"),
        ({"arrival": {"rate": "fast"}}, "scenario.arrival.rate"),
        ({"arrival": {"rate": "-5/s"}}, "scenario.arrival.rate"),
        ({"arrival": {"process": "weird", "rate": "5/s"}}, "scenario.arrival.process"),
        ({"arrival": {"rate": "5/s", "duration": None}}, "scenario.arrival.duration"),
        ({"arrival": {"rate": "5/s", "duration": "-3s"}}, "scenario.arrival.duration"),
        (
            {"replicas": 2, "stragglers": {"slow_replicas": [2]}},
            "scenario.stragglers.slow_replicas",
        ),
        ({"stragglers": {"slow_replicas": [-1]}}, "scenario.stragglers.slow_replicas"),
        ({"fanout": {"n": 3}, "hedge": {"after": "10ms"}}, "scenario.hedge"),
        ({"fanout": {"n": 3, "k": 4}}, "scenario.fanout.k"),
        ({"batching": {"mode": "static", "size": 0}}, "scenario.batching.size"),
        ({"batching": {"mode": "sometimes", "size": 4}}, "scenario.batching.mode"),
        ({"batching": {"mode": "dynamic", "size": 4, "max_wait": "soon"}}, "scenario.batching"),
        ({"hedge": {"after": "soon"}}, "scenario.hedge.after"),
        ({"stragglers": {"fraction": "200%"}}, "scenario.stragglers.fraction"),
        ({"routing": "magic"}, "scenario.routing"),
        ({"servers": 0}, "scenario.servers"),
        ({"slo": ["latency<=soon"]}, "scenario.slo.0"),
        ({"attainment": "2"}, "scenario.attainment"),
        ({"failures": {"mtbf": "exp:1s", "mttr": "often"}}, "scenario.failures.mttr"),
        ({"failures": {"mtbf": "0s", "mttr": "1s"}}, "scenario.failures.mtbf"),
        (
            {"failures": {"mtbf": "1s", "mttr": "1s", "in_flight": "pray"}},
            "scenario.failures.in_flight",
        ),
        ({"autoscale": {"max": 2, "min": 3, "target": 1}}, "scenario.autoscale.min"),
        ({"autoscale": {"max": 2, "target": "lots"}}, "scenario.autoscale.target"),
        ({"autoscale": {"max": 2, "metric": "p99", "target": "fast"}}, "scenario.autoscale.target"),
        ({"autoscale": {"max": 2, "target": 1, "interval": "0s"}}, "scenario.autoscale.interval"),
        ({"replicas": 0}, "scenario.replicas"),
        ({"stages": []}, "scenario.stages"),
        ({"stages": [{"service": "exp:1ms"}, {"service": "soon"}]}, "scenario.stages.1.service"),
        ({"stages": [{"routing": "magic"}]}, "scenario.stages.0.routing"),
        ({"stages": [{"service": "1ms"}], "servers": 2}, "scenario.servers"),
        ({"stages": [{"service": "1ms"}], "hedge": {"after": "1ms"}}, "scenario.hedge"),
    ],
)
def test_bad_scenario_is_one_line_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(BadInput) as raised:
        simulate(parse_scenario(data))
    message = str(raised.value)
    assert message.startswith(field), message
    assert message.startswith("scenario.") and "\n" not in message


GOOD = """\
name: m/m/1 at half load
arrival: {process: poisson, rate: 100/s, duration: 120s, warmup: 1s, seed: 3}
service: exp:5ms
slo: ["p99(latency)<=200ms"]
"""


@pytest.mark.parametrize(("slo", "code"), [("p99(latency)<=200ms", 0), ("p99(latency)<=5ms", 1)])
def test_cli_simulate_exits_by_verdict_and_writes_the_run(
    slo: str, code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "mm1.yaml"
    scenario.write_text(GOOD.replace("p99(latency)<=200ms", slo))
    out_dir = tmp_path / "run"
    got, out, _ = _cli(["simulate", str(scenario), "--out", str(out_dir), "--json", "-q"], capsys)
    assert got == code
    summary = json.loads((out_dir / "summary.json").read_text())
    assert json.loads(out) == summary
    assert summary["verdict"] == ("pass" if code == 0 else "fail")
    check_summary(summary, littles_tol=0.02)
    rows = [json.loads(line) for line in (out_dir / "records.jsonl").read_text().splitlines()]
    total = summary["requests"]["scheduled"] + summary["requests"]["warmup"]["scheduled"]
    assert len(rows) == total  # every scheduled request, warm-up included, one row each
    assert [r["seq"] for r in rows] == list(range(total))
    assert all(r["done_ns"] >= r["scheduled_ns"] for r in rows)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("arrival: {rate: 100/s\nservice: exp:5ms\n", "SCENARIO"),  # unclosed flow mapping
        ("- just\n- a list\n", "SCENARIO"),
        ("service: exp:5ms\nreplicas: many\n", "scenario.replicas"),
        ("service: weibull:5ms\n", "scenario.service"),
    ],
)
def test_cli_simulate_bad_file_exits_2_with_one_line(
    text: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(text)
    code, out, err = _cli(["simulate", str(scenario), "--out", str(tmp_path / "r")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in err, err
    assert not (tmp_path / "r").exists() and out == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a misspelt key: its line, and the field it was meant to be
        (
            "arrival:\n  rate: 10/s\n  duraton: 5s\nservice: exp:5ms\n",
            "scenario.arrival.duraton (bad.yaml line 3): got '5s', expected a known field "
            "(no such field; did you mean 'duration'?)",
        ),
        (
            "service: exp:5ms\nstages:\n  - {name: a, service: exp:1ms, servrs: 2}\n",
            "scenario.stages.0.servrs (bad.yaml line 3)",
        ),
        ("service: exp:5ms\nzzz: 1\n", "expected a known field (no such field)"),  # no hint
        # a wrong value: its line
        ("service: exp:5ms\n\nreplicas: many\n", "scenario.replicas (bad.yaml line 3)"),
        # YAML's own syntax: where the parser stopped
        ("arrival:\n  rate: [10/s\nservice: exp:5ms\n", "at line 3, column 8)"),
    ],
)
def test_cli_simulate_says_which_line_and_what_was_meant(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(text)
    code, _, err = _cli(["simulate", str(scenario), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert expected in err, err


def test_toml_typo_names_the_field_it_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "bad.toml"
    scenario.write_text('service = "exp:5ms"\n[arrival]\nrate = "10/s"\nduratoin = "5s"\n')
    code, _, err = _cli(["simulate", str(scenario)], capsys)
    assert code == 2 and "scenario.arrival.duratoin" in err and "did you mean 'duration'" in err


def test_cli_simulate_missing_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(["simulate", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_toml_scenario_runs_like_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    yaml_file, toml_file = tmp_path / "s.yaml", tmp_path / "s.toml"
    yaml_file.write_text(GOOD)
    toml_file.write_text(
        'name = "m/m/1 at half load"\nservice = "exp:5ms"\nslo = ["p99(latency)<=200ms"]\n'
        '[arrival]\nprocess = "poisson"\nrate = "100/s"\nduration = "120s"\n'
        'warmup = "1s"\nseed = 3\n'
    )
    docs = []
    for f in (yaml_file, toml_file):
        code, out, _ = _cli(
            ["simulate", str(f), "--out", str(tmp_path / f.suffix), "--json", "-q"], capsys
        )
        assert code == 0
        docs.append(json.loads(out))
    assert docs[0]["latency_ms"] == docs[1]["latency_ms"]
    assert math.isclose(docs[0]["rates"]["offered_rps"], docs[1]["rates"]["offered_rps"])


@pytest.mark.parametrize("d", [1, 3, 7])
def test_power_of_d_fast_path_matches_the_event_engine_for_any_d(d: int) -> None:
    """d = 1 is random routing by another name, d = 7 > 5 replicas samples all five (the
    least loaded wins, the first sampled on a tie): done and replica match the event
    engine request by request, and the run reports the loop it took."""
    spec = SystemSpec(parse_distribution("exp:5ms"), replicas=5, routing="power_of_d", power_d=d)
    arrivals = poisson_arrivals(0.9 * 5 / 0.005, 6000, seed=d)
    assert fast_path_applies(spec)
    events = System(spec, np.random.default_rng([2, d])).run(arrivals)
    done, _, replica = run_fast(spec, arrivals, np.random.default_rng([2, d]))
    np.testing.assert_array_equal(done, events.done_ns)
    np.testing.assert_array_equal(replica, events.replica)
    sc = {"arrival": {"rate": "500/s", "duration": "2s"}, "replicas": 5, "routing": "power_of_d"}
    assert simulate(parse_scenario(sc)).summary["sim"]["engine"] == "power-of-d loop"


def test_o_is_out_for_every_command_that_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One short flag everywhere: simulate, then export of that run (run, sweep and knee
    share the option with simulate's help text form)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(GOOD)
    code, _, err = _cli(["simulate", str(scenario), "-o", str(tmp_path / "r"), "-q"], capsys)
    assert code == 0 and (tmp_path / "r" / "summary.json").is_file(), err
    main(["export", str(tmp_path / "r"), "-o", str(tmp_path / "r.csv")])
    assert (tmp_path / "r.csv").is_file()
    capsys.readouterr()
    for command in ("run", "sweep", "knee"):
        main([command, "--help"])
        assert "-o, --out" in capsys.readouterr().out
