"""Knee search on trials whose truth is known: a sharp threshold, noise, refusals."""

from __future__ import annotations

import random

import pytest

from tailwise.knee import KneeAborted, KneeSearch, Outcome, TrialRecord, band


def threshold(knee: float) -> tuple[list[float], object]:
    calls: list[float] = []

    def trial(rate: float) -> Outcome:
        calls.append(rate)
        return Outcome(rate <= knee, detail={"seen": rate})

    return calls, trial


@pytest.mark.parametrize("true_knee", [3.3, 123.4, 999.0, 7777.0])
def test_sharp_threshold_is_found_within_the_resolution(true_knee: float) -> None:
    calls, trial = threshold(true_knee)
    result = KneeSearch(trial, resolution=0.05, repeats=1).run(100, 0.5, 1e5)  # type: ignore[arg-type]
    assert result.knee_rps is not None and result.band_rps is not None
    lo, hi = result.band_rps
    assert lo <= true_knee < hi
    assert (hi - lo) / lo <= 0.05
    assert result.knee_rps == lo
    assert len(calls) == len(result.trials) <= 20
    assert [t.rate_rps for t in result.trials] == calls


def test_repeats_rerun_the_final_bracket() -> None:
    _, trial = threshold(50.0)
    result = KneeSearch(trial, resolution=0.1, repeats=2).run(10, 1, 1000)  # type: ignore[arg-type]
    repeats = [t for t in result.trials if t.phase == "repeat"]
    assert len(repeats) == 4
    assert {t.rate_rps for t in repeats} == set(result.band_rps or ())


def test_noise_near_the_knee_widens_the_band() -> None:
    rng = random.Random(1)

    def noisy(rate: float) -> Outcome:  # passes below 90, fails above 110, coin flip between
        return Outcome(rate < 90 or (rate <= 110 and rng.random() < 0.5))

    result = KneeSearch(noisy, resolution=0.02, repeats=3).run(20, 1, 1000)
    assert result.band_rps is not None
    lo, hi = result.band_rps
    assert lo <= 110 and hi >= 90
    tried = {t.rate_rps for t in result.trials}
    for r in tried:  # the band's edges obey the definition
        runs = [t.passed for t in result.trials if t.rate_rps == r]
        if r <= lo:
            assert all(runs)
        if r >= hi:
            assert not any(runs)


def test_band_definition() -> None:
    def t(rate: float, ok: bool) -> TrialRecord:
        return TrialRecord(rate, ok, "bisect", {})

    assert band([t(10, True), t(20, False)]) == (10, (10, 20))
    assert band([t(10, True), t(15, True), t(15, False), t(20, False)]) == (10, (10, 20))
    assert band([t(10, False)]) == (None, None)
    assert band([t(10, True)]) == (10, None)


def test_passing_everywhere_and_failing_everywhere_say_so() -> None:
    _, always = threshold(1e9)
    result = KneeSearch(always).run(10, 1, 100)  # type: ignore[arg-type]
    assert "ceiling" in result.note and result.knee_rps == 80
    assert result.band_rps == (80, None)  # shown to hold up to 80/s, never shown to fail
    _, never = threshold(0.0)
    result = KneeSearch(never).run(10, 1, 100)  # type: ignore[arg-type]
    assert "floor" in result.note and result.knee_rps is None


def test_an_invalid_trial_stops_the_search_and_keeps_what_ran() -> None:
    def trial(rate: float) -> Outcome:
        if rate > 50:
            return Outcome(False, invalid_reason="generator saturated: send-lag p99 9ms")
        return Outcome(True)

    with pytest.raises(KneeAborted, match="generator saturated") as info:
        KneeSearch(trial).run(20, 1, 1000)
    assert info.value.result is not None
    assert [t.rate_rps for t in info.value.result.trials] == [20, 40]
    assert info.value.exit_code == 3


def test_to_json_shape() -> None:
    _, trial = threshold(100.0)
    doc = KneeSearch(trial).run(64, 1, 1000).to_json(["p99(latency)<=50ms"])  # type: ignore[arg-type]
    assert set(doc) == {
        "knee_rps", "knee_method", "band_rps", "undecided_rps", "trials", "slos", "note"
    }
    first = {"rate_rps": 64, "passed": True, "decided": "pass", "firm": True, "phase": "bracket"}
    first["seen"] = 64
    assert doc["trials"][0] == first


def undecided_near(knee: float, margin: float) -> tuple[list[float], object]:
    """Point results are exact; within ``margin`` (relative) of the knee no trial decides."""
    calls: list[float] = []

    def trial(rate: float) -> Outcome:
        calls.append(rate)
        close = abs(rate - knee) <= margin * knee
        decided = "inconclusive" if close else ("pass" if rate <= knee else "fail")
        return Outcome(rate <= knee, decided=decided)

    return calls, trial


def test_band_holds_only_decided_rates_and_lists_the_undecided() -> None:
    _, trial = undecided_near(100.0, 0.15)
    result = KneeSearch(trial, resolution=0.05).run(10, 1, 1e4)  # type: ignore[arg-type]
    assert result.band_rps is not None
    lo, hi = result.band_rps
    assert lo is not None and hi is not None
    assert lo < 85 and hi > 115  # only decided trials make the band's ends
    assert result.knee_rps is not None and 95 <= result.knee_rps <= 100  # point: resolution
    undecided = result.undecided_rps
    assert undecided and all(85 <= r <= 115 for r in undecided)
    doc = result.to_json(["p99(latency)<=1s"])
    assert {t["decided"] for t in doc["trials"]} == {"pass", "fail", "inconclusive"}


def test_settle_trials_look_further_out_for_an_end_of_the_band() -> None:
    # Bracketing from 90 never meets a decided pass (90 is undecided): settle goes down.
    _, trial = undecided_near(100.0, 0.15)
    result = KneeSearch(trial, resolution=0.05).run(90, 1, 1e4)  # type: ignore[arg-type]
    settle = [t for t in result.trials if t.phase == "settle"]
    assert settle and settle[0].rate_rps < 90
    assert result.band_rps is not None and result.band_rps[0] is not None
    assert result.band_rps[0] < 85


def test_settle_gives_up_and_says_the_end_is_unknown() -> None:
    _, trial = undecided_near(100.0, 0.9)  # nothing below 190/s is decided
    result = KneeSearch(trial, resolution=0.05).run(100, 50, 1e4)  # type: ignore[arg-type]
    assert result.band_rps is not None and result.band_rps[0] is None
    assert result.knee_rps is not None and 95 <= result.knee_rps <= 100
