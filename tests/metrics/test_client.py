"""The client's error bounds and the verdict rule, on hand-made records and counts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tailwise.metrics.catalog import metric_bounds
from tailwise.metrics.client import ClientLag, LagSeries, receive_lag_ns
from tailwise.metrics.schema import Summary
from tailwise.metrics.verdict import Judged, Verdict, decide, exit_code
from tests.synthetic import make_records

MS = 1_000_000
S = 1_000_000_000


def test_a_read_is_bounded_by_the_stall_around_it_plus_one_period() -> None:
    # Slices of 5 ms; the loop was 30 ms late in slice 4 ([20, 25) ms) only.
    series = LagSeries(5 * MS, MS, np.array([0, 0, 0, 0, 30 * MS, 0, 0, 0], dtype=np.int64))
    t = np.array([-1, 2 * MS, 17 * MS, 22 * MS, 27 * MS, 33 * MS, 90 * MS], dtype=np.int64)
    # No read: 0. Far from the stall: one period. In it or a slice beside it: 30 + 1 ms.
    assert series.at(t).tolist() == [0, MS, 31 * MS, 31 * MS, 31 * MS, MS, MS]


def test_point_metrics_lose_the_lag_and_gap_metrics_widen_both_ways() -> None:
    n = 4
    sched = np.arange(n, dtype=np.int64) * 100 * MS
    send = np.array([0, 2, 0, 0], dtype=np.int64) * MS
    r = make_records(sched, np.full(n, 50 * MS), [""] * n, (0, S), lag=send)
    r.first_token_ns = sched + 10 * MS
    r.output_tokens = np.full(n, 5, dtype=np.int64)  # 4 gaps: TPOT = 40 ms / 4 = 10 ms
    flat = LagSeries(5 * MS, MS, np.zeros(100, dtype=np.int64))  # only the period: 1 ms
    lag = ClientLag([flat])
    assert receive_lag_ns(r, lag).tolist() == [MS] * n
    lo, hi = metric_bounds(r, "latency", lag)
    assert hi.tolist() == [50 * MS] * n  # as measured, from the intended send time
    assert lo.tolist() == [49 * MS, 47 * MS, 49 * MS, 49 * MS]  # minus send and receive lag
    lo, hi = metric_bounds(r, "tpot", lag)
    assert lo.tolist() == [(40 * MS - MS) // 4] * n and hi.tolist() == [(40 * MS + MS) // 4] * n
    # Without a probe (a simulation): send lag alone, and nothing for gaps.
    lo, hi = metric_bounds(r, "tpot", None)
    assert lo.tolist() == hi.tolist() == [10 * MS] * n


def _requests(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"scheduled": 10, "sent": 10, "ok": 10, "errors": {}}
    base.update(kw)
    return base


def _judged(lower: bool, upper: bool) -> Judged:
    entry = {"spec": "p99(latency)<=50ms", "kind": "objective", "unit": "ms"}
    return Judged(
        entry["spec"],
        {**entry, "value": 60.0, "passed": upper},
        {**entry, "value": 40.0, "passed": lower},
        {**entry, "value": 60.0, "passed": upper},
    )


RATES = {"offered_rps": 100.0, "achieved_send_rps": 100.0}
CLIENT = {"send_lag_p99_ms": 9.0, "recv_lag_p99_ms": 2.0, "cpu_share": 0.95, "cores": 2}


def _decide(**kw: Any) -> Verdict:
    args: dict[str, Any] = {
        "preliminary": None,
        "requests": _requests(),
        "rates": RATES,
        "client": CLIENT,
        "judged": [_judged(True, True)],
        "open_loop": True,
        "stopped_early": "",
        "connect_failures": {},
    }
    args.update(kw)
    return decide(**args)


def test_each_verdict_and_cause() -> None:
    assert _decide().verdict == "pass"
    fail = _decide(judged=[_judged(False, False)])
    assert (fail.verdict, fail.cause) == ("fail", "")
    flip = _decide(judged=[_judged(True, False)])
    assert (flip.verdict, flip.cause) == ("invalid", "client")
    assert "client CPU 95% of a core" in flip.reason and "--workers" in flip.hint
    capped = _decide(judged=[_judged(True, False)], client={**CLIENT, "cap_bound_share": 0.3})
    assert "--max-in-flight" in capped.hint
    # A certain failure elsewhere outweighs a flippable SLO: the run failed regardless.
    assert _decide(judged=[_judged(True, False), _judged(False, False)]).verdict == "fail"
    short = _decide(rates={"offered_rps": 100.0, "achieved_send_rps": 90.0})
    assert (short.verdict, short.cause) == ("invalid", "load_short")
    # Less load than planned and still failing: the failure stands.
    assert _decide(
        rates={"offered_rps": 100.0, "achieved_send_rps": 90.0}, judged=[_judged(False, False)]
    ).verdict == ("fail")
    refused = _decide(
        requests=_requests(ok=0, errors={"connect": 10}),
        connect_failures={"connection refused": 10},
    )
    assert (refused.verdict, refused.cause) == ("invalid", "target_unreachable")
    assert "connection refused" in refused.reason
    fds = _decide(
        requests=_requests(ok=0, errors={"connect": 10}),
        connect_failures={"too many open files": 10},
    )
    assert (fds.verdict, fds.cause) == ("invalid", "client_fds")
    every = _decide(
        requests=_requests(ok=0, errors={"http_5xx": 10}), judged=[_judged(False, False)]
    )
    assert every.verdict == "fail" and "every request failed: http_5xx 10" in every.reason
    assert "see its logs" in every.hint
    resets = _decide(requests=_requests(ok=9, errors={"reset": 1}), judged=[_judged(False, False)])
    assert "keep-alive" in resets.hint


@pytest.mark.parametrize(
    ("verdict", "cause", "code"),
    [
        ("pass", None, 0),
        ("fail", None, 1),
        ("invalid", "client", 3),
        ("invalid", "target_unreachable", 6),
        ("inconclusive", None, 5),
    ],
)
def test_exit_codes(verdict: str, cause: str | None, code: int) -> None:
    assert exit_code(Summary(verdict=verdict, verdict_cause=cause)) == code


def test_an_early_stop_the_client_could_have_caused_names_the_client() -> None:
    stopped = _decide(
        stopped_early="p99(latency)<=50ms: 11 certain misses", judged=[_judged(True, False)]
    )
    assert (stopped.verdict, stopped.cause) == ("invalid", "client")
    lost = _decide(
        stopped_early="p99(latency)<=50ms: 11 certain misses", judged=[_judged(False, False)]
    )
    assert lost.verdict == "fail" and lost.reason.startswith("SLO lost, stopped early")
    # One request sent just past the end of a short window is not a shortfall; ten are.
    few = {"offered_rps": 10.0, "achieved_send_rps": 9.0}
    assert _decide(rates=few, window_s=1.0).verdict == "pass"
    assert _decide(rates=few, window_s=10.0).cause == "load_short"


WITHIN = {"share": 0.995, "ci": [0.97, 0.999], "needed": 0.99, "n": 900, "threshold_ms": 50.0}


def test_three_valued_verdicts_follow_what_the_sample_decides() -> None:
    entry = {"spec": "p99(latency)<=50ms", "kind": "objective", "value": 40.0, "unit": "ms"}
    undecided = {**entry, "within": WITHIN}
    # Passed as measured, but its interval straddles 99%: inconclusive (exit 5), and the
    # reason gives the share, its interval and what was needed.
    v = _decide(decided=["inconclusive"], entries=[undecided])
    assert v.verdict == "inconclusive" and v.cause == "undecided"
    assert "99.50% within 50 ms" in v.reason and "97.00-99.90%" in v.reason
    assert "99% needed (n=900)" in v.reason and "--duration auto" in v.hint
    assert exit_code(Summary(verdict=v.verdict, verdict_cause=None)) == 5
    # "n too small": no share interval, the value's note instead.
    small = {**entry, "ci": None, "ci_note": "n too small: 1.6 values beyond the quantile"}
    v = _decide(decided=["inconclusive"], entries=[small])
    assert v.verdict == "inconclusive" and "n too small" in v.reason
    # Failed as measured on the server's lower bound, but not shown: inconclusive, not fail.
    v = _decide(judged=[_judged(False, False)], decided=["inconclusive"], entries=[undecided])
    assert v.verdict == "inconclusive"
    # Shown to fail: fail. Shown to pass: pass.
    assert _decide(judged=[_judged(False, False)], decided=["fail"]).verdict == "fail"
    assert _decide(decided=["pass"], entries=[undecided]).verdict == "pass"
    # A client flip the sample could not decide anyway is the sample's to report ...
    v = _decide(judged=[_judged(True, False)], decided=["inconclusive"], entries=[undecided])
    assert v.verdict == "inconclusive"
    # ... and one it decides is the client's.
    v = _decide(judged=[_judged(True, False)], decided=["fail"], entries=[undecided])
    assert v.verdict == "invalid" and v.cause == "client"
    # A shortfall of load outranks an undecided SLO: the plan was not run.
    short = {"offered_rps": 100.0, "achieved_send_rps": 90.0}
    v = _decide(rates=short, decided=["inconclusive"], entries=[undecided], window_s=10.0)
    assert v.verdict == "invalid" and v.cause == "load_short"
