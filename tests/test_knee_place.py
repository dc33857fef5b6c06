"""The knee search's placement phase on trials whose truth is a closed form.

An M/M/1 server (mean service 20 ms) against ``p99(latency)<=300ms``: its p99 is
``ln(100) / (mu - rate)``, the knee 34.65/s. A trial decides (firm at 95%, steering at
less) only where the p99 is at least 25% away from the threshold, as a run of a few
thousand requests does; nearer, it is inconclusive. Bisection spent one trial after
another there; placement puts its firm trials where they decide.
"""

from __future__ import annotations

import math

import pytest

from tailwise.knee import KneeSearch, Outcome, TrialRecord, level_knee
from tailwise.knee_law import Point, fit

THRESHOLD_MS = 300.0


def p99_ms(rate: float, mu: float = 50.0, servers: int = 1) -> float:
    return math.inf if rate >= servers * mu else 1000.0 * math.log(100.0) / (mu - rate)


def mm1_trial(firm: bool, noise: float = 0.0, seen: list[float] | None = None):  # type: ignore[no-untyped-def]
    def trial(rate: float) -> Outcome:
        if seen is not None:
            seen.append(rate)
        level = p99_ms(rate) * (1.0 + noise * math.sin(rate))  # a fixed, rate-bound error
        ratio = level / THRESHOLD_MS
        decided = "pass" if ratio <= 0.8 else "fail" if ratio >= 1.25 else "inconclusive"
        within = [
            {
                "spec": "p99(latency)<=300ms",
                "share": 1.0 - math.exp(-(50.0 - rate) * 0.3) if rate < 50 else 0.0,
                "n": 3000,
                "needed": 0.99,
                "level_ms": level if math.isfinite(level) else None,
                "threshold_ms": THRESHOLD_MS,
            }
        ]
        return Outcome(ratio <= 1.0, detail={"within": within}, decided=decided, firm=firm)

    return trial


TRUTH = 50.0 - math.log(100.0) / 0.3  # 34.65/s


@pytest.mark.parametrize("noise", [0.0, 0.1])
def test_placement_decides_both_ends_near_the_knee_without_trials_at_it(noise: float) -> None:
    confirmed: list[float] = []
    search = KneeSearch(
        mm1_trial(False, noise),
        confirm=mm1_trial(True, noise, confirmed),
        place=True,
    )
    result = search.run(10.0, 0.5, 1e5)
    assert result.knee_rps == pytest.approx(TRUTH, rel=0.10)
    assert result.method == "levels"
    lo, hi = result.band_rps or (None, None)
    assert lo is not None and hi is not None
    assert 0.75 * TRUTH <= lo < TRUTH < hi <= 1.25 * TRUTH
    # every firm trial decided: none was spent where the sample cannot decide
    assert confirmed and all(
        t.settled != "inconclusive" for t in result.trials if t.phase == "place"
    )
    assert len(result.trials) <= 7  # bracket 10, 20, 40; one firm trial at each end


def test_without_a_level_the_search_bisects_as_before() -> None:
    def sharp(rate: float) -> Outcome:
        return Outcome(rate <= 123.4)

    result = KneeSearch(sharp, resolution=0.05, place=True).run(100, 0.5, 1e5)
    assert result.method == "bisection" and result.band_rps is not None
    lo, hi = result.band_rps
    assert lo is not None and hi is not None and lo <= 123.4 < hi


def test_an_end_that_comes_out_the_other_way_refits_and_places_again() -> None:
    """The steering trials (300 requests each) read their levels 30% low: the knee is
    placed too high, the firm trial at the low end (3,000 requests, an exact level)
    does not pass, the levels are read again with it, and the band still closes around
    the true knee."""

    def biased(firm: bool):  # type: ignore[no-untyped-def]
        inner = mm1_trial(firm)

        def trial(rate: float) -> Outcome:
            out = inner(rate)
            if not firm:
                for w in out.detail["within"]:
                    w["n"] = 300
                    if w["level_ms"] is not None:
                        w["level_ms"] *= 0.7
            return out

        return trial

    result = KneeSearch(biased(False), confirm=biased(True), place=True).run(10.0, 0.5, 1e5)
    lo, hi = result.band_rps or (None, None)
    assert lo is not None and hi is not None and lo < TRUTH < hi
    assert result.knee_rps == pytest.approx(TRUTH, rel=0.10)


def test_the_law_fits_an_mm1_exactly_and_refuses_what_does_not_rise() -> None:
    law = fit([Point(r, p99_ms(r), 10) for r in (10.0, 20.0, 40.0)], THRESHOLD_MS)
    assert law is not None and law.rate_at(THRESHOLD_MS) == pytest.approx(TRUTH, rel=0.01)
    assert fit([Point(10.0, 100.0, 10)], THRESHOLD_MS) is None  # one rate
    assert fit([Point(10.0, 200.0, 10), Point(20.0, 100.0, 10)], THRESHOLD_MS) is None
    # a filling queue's level (beyond 5x the threshold) is left out of the fit
    law = fit([Point(r, p99_ms(r), 10) for r in (10.0, 20.0)] + [Point(80.0, 9e4, 10)], 300.0)
    assert law is not None and law.rate_at(THRESHOLD_MS) == pytest.approx(TRUTH, rel=0.02)


def _record(rate: float, level: float | None, firm: bool, n: int) -> TrialRecord:
    within = {"spec": "ttft<=200ms", "share": 0.99, "n": n, "needed": 0.99,
              "level_ms": level, "threshold_ms": 200.0}  # fmt: skip
    return TrialRecord(rate, level is not None and level <= 200, "x", {"within": [within]},
                       firm=firm)  # fmt: skip


def test_firm_levels_that_bracket_the_knee_are_read_alone() -> None:
    """The demo LLM server's search (TTFT p99 <= 200 ms, 128-token answers): a 20 s
    steering trial at 15.55/s read 180 ms (its queue had not filled; 300 s there read
    1.2-1.9 s) and, taken as under the threshold, put the knee at 15.6/s. The firm trials
    (12.18/s: 176 ms over 3,584 requests; 17.96/s: 5.8 s) bracket it near 12.2/s, where
    the simulator's twin of the same workload puts it (12-12.5/s in 300 s windows)."""
    trials = [
        _record(10.0, 17.0, False, 174),
        _record(20.0, 1446.0, False, 280),
        _record(15.55, 180.4, False, 270),
        _record(12.18, 175.6, True, 3584),
        _record(9.746, 23.6, True, 2050),
        _record(17.96, 5780.0, True, 1024),
    ]
    knee = level_knee(trials)
    assert knee is not None and 12.18 <= knee <= 13.0
    assert level_knee(trials[:3]) == pytest.approx(15.6, abs=0.5)  # steering alone: too high


def test_a_queue_models_reading_places_the_band_and_names_the_knee() -> None:
    """Trials read as one FIFO server carry the model's rate at the threshold
    (``within.model_rps``, from the run's service times: here the truth with a +-6%
    error per trial, what 800-4,000 service times give). The search reads the knee from
    it (method ``queue model``), spends no probe, and closes the band around the truth;
    the levels, 30% low in every steering trial, do not move it."""
    errors = iter([0.06, -0.05, 0.04, -0.03, 0.02, -0.02, 0.01, 0.0, 0.0, 0.0])
    phases: list[str] = []

    def modelled(firm: bool):  # type: ignore[no-untyped-def]
        inner = mm1_trial(firm)

        def trial(rate: float) -> Outcome:
            out = inner(rate)
            for w in out.detail["within"]:
                if not firm and w["level_ms"] is not None:
                    w["level_ms"] *= 0.7
                if rate < 50.0:  # an overloaded run has no free requests: no reading
                    w["model_rps"] = TRUTH * (1.0 + next(errors))
            return out

        return trial

    search = KneeSearch(modelled(False), confirm=modelled(True), place=True,
                        on_trial=lambda t: phases.append(t.phase))  # fmt: skip
    result = search.run(10.0, 0.5, 1e5)
    assert result.method == "queue model"
    assert result.knee_rps == pytest.approx(TRUTH, rel=0.03)
    assert "probe" not in phases
    lo, hi = result.band_rps or (None, None)
    assert lo is not None and hi is not None
    assert 0.75 * TRUTH <= lo < TRUTH < hi <= 1.25 * TRUTH


def test_the_models_reading_weighs_trials_by_requests_and_prefers_firm_ones() -> None:
    def rec(rate: float, model: float | None, firm: bool, n: int) -> TrialRecord:
        r = _record(rate, 150.0, firm, n)
        if model is not None:
            r.detail["within"][0]["model_rps"] = model
        return r

    steering = [
        rec(10.0, None, False, 200), rec(20.0, 30.0, False, 400), rec(40.0, 36.0, False, 800)
    ]  # fmt: skip
    assert level_knee(steering) == pytest.approx((30.0 * 400 + 36.0 * 800) / 1200)
    firm = [*steering, rec(27.0, 34.0, True, 2000), rec(40.0, 35.0, True, 2000)]
    assert level_knee(firm) == pytest.approx(34.5)
