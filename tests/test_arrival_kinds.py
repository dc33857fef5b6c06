"""The arrival registry: every ``--arrival`` kind says whether its load is steady, and
only a steady load gets the MSER warm-up cut, ``--duration auto`` and the loss watch.

The test-only ``wave`` profile (a sine around a mean rate) is also the worked example
of docs/architecture.md's "Add an arrival profile": one class, one parser, one
:func:`tailwise.arrivals.register` call. Before the registry, "is this load steady?"
was a string prefix in the simulator (``startswith(("stages", "ramp", "trace"))``), so
a new profile such as this one was silently cut as if it were a steady load's
transient: :func:`test_a_simulated_wave_is_not_cut_where_mser_would_cut` is that bug.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from tailwise import arrivals
from tailwise.arrivals import parse_schedule
from tailwise.errors import BadInput
from tailwise.loadgen.conclude import auto_warmup
from tailwise.loadgen.prepare.plan import RunOptions, loss_watch, prepare, sequential
from tailwise.metrics import derive
from tailwise.metrics.steady import auto_start_ns
from tailwise.sim.run import simulate
from tailwise.sim.scenario import parse_scenario
from tailwise.units import parse_duration_ns, parse_rate_rps
from tests.synthetic import make_records

S = 1_000_000_000
F64Array = npt.NDArray[np.float64]


# ---- the test-only profile: the worked example ----------------------------------------


@dataclass(frozen=True)
class Wave:
    """Rate ``mean + amp * sin(2 pi t / period)`` (``amp < mean``): it changes on purpose."""

    mean_rps: float
    amp_rps: float
    period_s: float
    steady = False  # a shaped load: its early rows are no transient to cut
    end_s = None  # it runs until a duration or a count ends it

    def total_events(self, horizon_s: float) -> float:
        w = 2 * math.pi / self.period_s
        return self.mean_rps * horizon_s + self.amp_rps / w * (1 - math.cos(w * horizon_s))

    def to_time_s(self, u: F64Array) -> F64Array:
        # Solves total_events(t) = u: a contraction by amp / mean < 1, from u / mean.
        w = 2 * math.pi / self.period_s
        t = u / self.mean_rps
        for _ in range(100):
            t = (u - self.amp_rps / w * (1 - np.cos(w * t))) / self.mean_rps
        return t

    def describe(self) -> dict[str, object]:
        return {
            "profile": "wave",
            "mean_rps": self.mean_rps,
            "amp_rps": self.amp_rps,
            "period_s": self.period_s,
        }


def parse_wave(shape: str, horizon_ns: int | None) -> Wave:
    """``wave:<mean>~<amplitude>@<period>``, e.g. ``wave:100/s~50/s@2s``."""
    mean, _, rest = shape.partition("~")
    amp, sep, period = rest.partition("@")
    if not sep:
        raise BadInput("--arrival", shape, "wave:<mean>~<amplitude>@<period>")
    wave = Wave(
        parse_rate_rps(mean, "--arrival"),
        parse_rate_rps(amp, "--arrival"),
        parse_duration_ns(period, "--arrival", allow_zero=False) / S,
    )
    if wave.amp_rps >= wave.mean_rps:
        raise BadInput("--arrival", shape, "an amplitude below the mean rate")
    return wave


WAVE = arrivals.Shaped("wave", "wave:<mean>~<amplitude>@<period>", parse_wave)


@pytest.fixture(autouse=True)
def wave_registered() -> Iterator[None]:
    arrivals.register(WAVE)
    yield
    arrivals.unregister("wave")


# ---- every kind states what its schedule is ---------------------------------------------


def examples(tmp_path: Path) -> dict[str, tuple[str, str | None]]:
    """One written form per registered kind, with its ``--rate`` (None: it carries its own)."""
    trace = tmp_path / "offsets.txt"
    trace.write_text("0\n0.5\n1.5\n")
    return {
        "constant": ("constant", "10/s"),
        "poisson": ("poisson", "10/s"),
        "gamma": ("gamma:0.5", "10/s"),
        "ramp": ("ramp:10/s-20/s+poisson", None),
        "stages": ("stages:10/s@1s,20/s@1s", None),
        "trace": (f"trace:{trace}", None),
        "wave": ("wave:10/s~5/s@1s", None),
    }


def test_every_kind_is_steady_exactly_when_its_schedule_is(tmp_path: Path) -> None:
    forms = examples(tmp_path)
    assert set(forms) == {kind.name for kind in arrivals.kinds()}  # a new kind adds a row
    for name, (spec, rate) in forms.items():
        kind = arrivals.get(spec)
        sched = parse_schedule(spec, rate, seed=1, horizon_ns=3 * S, max_count=None)
        assert sched.steady is kind.steady, name
        assert (sched.rate_rps is not None) is kind.steady, name
        assert arrivals.is_steady(spec) is kind.steady, name
    steady = {kind.name for kind in arrivals.kinds() if kind.steady}
    assert steady == {"constant", "poisson", "gamma"}
    assert parse_schedule("gamma:0.5", "10/s", seed=1, horizon_ns=S, max_count=None).rate_rps == 10


def test_a_kind_bounds_a_run_by_itself_exactly_when_it_says_so(tmp_path: Path) -> None:
    for name, (spec, rate) in examples(tmp_path).items():
        if arrivals.get(spec).own_span:
            sched = parse_schedule(spec, rate, seed=1, horizon_ns=None, max_count=None)
            assert len(sched.offsets_ns()) > 0, name
        else:
            with pytest.raises(BadInput):
                parse_schedule(spec, rate, seed=1, horizon_ns=None, max_count=None)


def test_rate_is_required_or_refused_as_the_kind_says(tmp_path: Path) -> None:
    for name, (spec, rate) in examples(tmp_path).items():
        other = None if arrivals.get(spec).takes_rate else "10/s"
        with pytest.raises(BadInput) as caught:
            parse_schedule(spec, other, seed=1, horizon_ns=S, max_count=None)
        assert caught.value.field == "--rate", name
        assert (rate is not None) is arrivals.get(spec).takes_rate, name


def test_an_unknown_name_is_one_line_listing_every_known_form() -> None:
    with pytest.raises(BadInput) as caught:
        parse_schedule("sawtooth:10/s", None, seed=0, horizon_ns=S, max_count=None)
    message = str(caught.value)
    assert caught.value.field == "--arrival" and "\n" not in message
    for kind in arrivals.kinds():
        assert kind.form in message
    assert "wave:<mean>~<amplitude>@<period>" in message  # registered ones too
    assert arrivals.find("sawtooth") is None and not arrivals.is_steady("sawtooth")


def test_a_name_is_registered_once_and_a_builtin_stays() -> None:
    with pytest.raises(ValueError, match="poisson"):
        arrivals.register(arrivals.Shaped("poisson", "poisson", parse_wave))
    arrivals.unregister("poisson")
    assert arrivals.find("poisson") is not None


# ---- the wave itself ---------------------------------------------------------------------


def test_the_wave_keeps_its_mean_and_its_shape() -> None:
    sched = parse_schedule(
        "wave:100/s~50/s@2s+poisson", None, seed=3, horizon_ns=20 * S, max_count=None
    )
    o = sched.offsets_ns()
    # Ten whole periods: 2,000 expected, within 4 sigma; the rising half-periods hold
    # 100 + 2 * 50 / pi = 131.8/s on average, the falling ones 68.2/s.
    assert abs(len(o) - 2000) < 4 * math.sqrt(2000)
    rising = int(np.sum((o % (2 * S)) < S))
    assert rising / len(o) == pytest.approx(131.8 / 200, abs=0.04)
    assert not sched.steady and sched.rate_rps is None
    assert sched.describe()["profile"] == "wave" and sched.describe()["process"] == "poisson"


# ---- only a steady load is cut, decided sequentially, or watched ---------------------------


def _transient(window: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """1,000 rows over the window, about 10 ms each, but for a backlog draining over the
    first 50 (300 ms down to 10 ms more): a transient that MSER-5 cuts in full."""
    rng = np.random.default_rng(5)
    sched = np.linspace(window[0], window[1] - 1, 1000).astype(np.int64)
    lat = rng.exponential(10e6, 1000)
    lat[:50] += np.linspace(300e6, 10e6, 50)
    return sched, lat.astype(np.int64)


@pytest.mark.parametrize(
    ("arrival", "rate", "cut"),
    [("poisson", "100/s", True), ("wave:100/s~50/s@2s", None, False)],
)
def test_a_measured_run_cuts_a_transient_only_under_a_steady_load(
    arrival: str, rate: str | None, cut: bool
) -> None:
    url = "http://127.0.0.1:9/x"
    p = prepare(RunOptions([url], rate=rate, arrival=arrival, duration="10s", warmup="auto"))
    window = (0, 10 * S)
    sched, lat = _transient(window)
    records = make_records(sched, lat, [""] * len(sched), window)
    start_ns, doc = auto_warmup(p, records, window)
    assert doc["mode"] == "auto"
    assert start_ns == (sched[50] if cut else 0)  # the backlog's 50 rows, or nothing
    assert doc["cut_requests"] == (50 if cut else 0)
    assert int(records.in_window.sum()) == int((sched >= start_ns).sum())


def test_duration_auto_and_the_loss_watch_need_a_steady_rate() -> None:
    base = {"urls": ["http://127.0.0.1:9/x"], "slo": ["p99(latency)<=100ms"]}
    wave = prepare(RunOptions(**base, arrival="wave:100/s~50/s@2s", duration="10s"))
    steady = prepare(RunOptions(**base, rate="100/s", duration="10s"))
    assert loss_watch(wave) is None and loss_watch(steady) is not None
    with pytest.raises(BadInput, match="one steady --rate"):
        sequential(prepare(RunOptions(**base, arrival="wave:100/s~50/s@2s", duration="auto")))
    assert sequential(prepare(RunOptions(**base, rate="100/s", duration="auto"))) is not None


def _autoscaled(process: str, rate: str | None) -> dict[str, object]:
    """One replica at 150/s where it serves 100/s, until the autoscaler adds more: a
    transient of seconds, then a steady state that MSER-5 confirms."""
    arrival: dict[str, object] = {"process": process, "duration": "40s", "warmup": "auto"}
    if rate is not None:
        arrival["rate"] = rate
    scale = {"target": 1, "max": 4, "interval": "1s", "cold_start": "1s", "stabilization": "1s"}
    return {"arrival": arrival, "service": "exp:10ms", "replicas": 1, "autoscale": scale}


def test_a_simulated_wave_is_not_cut_where_mser_would_cut() -> None:
    for process, rate, cut in [
        ("poisson", "150/s", True),
        ("wave:150/s~20/s@1s+poisson", None, False),
    ]:
        run = simulate(parse_scenario(_autoscaled(process, rate)))
        r = run.records
        window = (0, round(run.summary["window"]["end_s"] * S))
        mser_ns, _ = auto_start_ns(r.scheduled_ns, derive.latency_ns(r), r.error == 0, window)
        assert mser_ns > 2 * S, process  # the transient is there, and MSER-5 sees it
        start_ns = round(run.summary["window"]["start_s"] * S)
        assert start_ns == pytest.approx(mser_ns if cut else 0, abs=1), process
