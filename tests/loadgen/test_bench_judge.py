"""The wrk benchmark's trial judge on a real run: a trial where the in-flight cap bound is
not a sustained open-loop rate, even when every request it sent went out on time."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import tailwise

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from wrk_vs_tailwise import judge


def test_a_trial_that_hit_the_in_flight_cap_is_not_sustained(
    loopback: Callable[..., str], tmp_path: Path
) -> None:
    # 1 ms answers, but a 200 ms stall every 2 s: with at most 10 in flight, most of the
    # 40 requests due during a stall wait in the client (capped), then go out in a burst.
    url = loopback("--service", "1ms", "--stall", "200ms/2s") + "/x"
    res = tailwise.run(
        url,
        rate="200/s",
        arrival="constant",
        duration="3s",
        warmup="500ms",
        max_in_flight=10,
        out=str(tmp_path),
    )
    s = res.summary
    assert s["requests"]["ok"] == s["requests"]["scheduled"]
    assert s["rates"]["achieved_send_rps"] >= 0.99 * s["rates"]["offered_rps"]
    t = judge(s)
    # A 3 s window holds one or two whole stalls (measured: 31-64 capped).
    assert t["cap_bound"] == s["generator"]["cap_bound"] >= 10
    # Every request's lag counts: the capped ones waited up to the stall.
    assert t["lag_p99_ms"] > 50
    assert t["lag_p99_ms"] > s["generator"]["send_lag_p99_uncapped_ms"]
    assert t["ok"] is False
