"""Multi-window burn-rate alerts fire and clear exactly when the workbook's arithmetic says.

The SRE workbook's default rules are scaled by 1/300 (1 h -> 12 s, 5 m -> 1 s),
a fake clock drives 100 requests a second, and an oracle recomputes every
burn rate from the list of requests sent.
"""

from __future__ import annotations

import math

import pytest

from tailwise.errors import BadInput
from tailwise.instrument import DEFAULT_RULES, Alert, LatencyTracker, exposition
from tailwise.instrument import promtext as prom
from tests.instrument.conftest import FakeClock

MS = 1_000_000
S = 1_000_000_000
BUCKET_NS = 100 * MS  # a tenth of the shortest scaled window (5 m / 300 = 1 s)


def test_default_rules_are_the_workbooks_table() -> None:
    table = [(r.long_s, r.short_s, r.factor, r.severity) for r in DEFAULT_RULES]
    assert table == [
        (3600, 300, 14.4, "page"),
        (21600, 1800, 6.0, "page"),
        (259200, 21600, 1.0, "ticket"),
    ]
    # 14.4 x 1 h spends 2% of a 30-day budget; 6 x 6 h spends 5%; 1 x 3 d spends 10%
    for rule, spent in zip(DEFAULT_RULES, (0.02, 0.05, 0.10), strict=True):
        assert rule.factor * rule.long_s / (30 * 86400) == pytest.approx(spent)


def oracle_burn(sent: list[tuple[int, bool]], now_ns: int, window_ns: int, budget: float) -> float:
    first = now_ns // BUCKET_NS - math.ceil(window_ns / BUCKET_NS) + 1
    inside = [bad for t, bad in sent if t // BUCKET_NS >= first and t <= now_ns]
    return sum(inside) / len(inside) / budget if inside else 0.0


def test_page_fires_during_a_burst_and_clears_after_it() -> None:
    clock = FakeClock(1000 * S)
    t = LatencyTracker(window="2s", bucket="100ms", clock=clock)
    heard: list[Alert] = []
    monitor = t.burn_monitor("latency<=100ms@99%", scale=1 / 300, on_alert=heard.append)
    assert monitor.bucket_ns == BUCKET_NS and monitor.budget == pytest.approx(0.01)
    sent: list[tuple[int, bool]] = []
    expected_events: list[tuple[str, float, bool]] = []
    state = [False] * 3
    for i in range(4000):  # 40 s at 100/s; seconds 20-24 half the requests are slow
        clock.now_ns = 1000 * S + i * 10 * MS
        bad = 2000 <= i < 2400 and i % 2 == 0
        t.record(200 * MS if bad else 10 * MS)
        sent.append((clock.now_ns, bad))
        if i % 50 == 49:  # check twice a second, as a scrape would
            alerts = monitor.check()
            for k, (rule, alert) in enumerate(zip(DEFAULT_RULES, alerts, strict=True)):
                long_ns, short_ns = round(rule.long_s * S / 300), round(rule.short_s * S / 300)
                burn_long = oracle_burn(sent, clock.now_ns, long_ns, 0.01)
                burn_short = oracle_burn(sent, clock.now_ns, short_ns, 0.01)
                assert alert.burn_long == pytest.approx(burn_long)
                assert alert.burn_short == pytest.approx(burn_short)
                firing = burn_long > rule.factor and burn_short > rule.factor
                assert alert.firing == firing, (i, rule, alert)
                if firing != state[k]:
                    state[k] = firing
                    expected_events.append((rule.severity, rule.long_s, firing))
    heard_events = [(a.severity, a.long_s * 300, a.firing) for a in heard]
    assert heard_events == [(s, pytest.approx(long_s), f) for s, long_s, f in expected_events]
    fired = {(s, round(long_s)) for s, long_s, f in expected_events if f}
    assert fired == {("page", 3600), ("page", 21600), ("ticket", 259200)}
    cleared = {(s, round(long_s)) for s, long_s, f in expected_events if not f}
    assert cleared == {("page", 3600), ("page", 21600)}  # the ticket's 72 s window still burns

    text = exposition(t)
    m = prom.parse(text)
    slo = 'slo="latency<=100ms@99%"'
    assert m[f'tailwise_slo_burn_rate{{tracker="request",{slo},window="1s"}}'] == 0.0
    ticket = (
        f'tailwise_slo_burn_alert{{tracker="request",{slo},severity="ticket",'
        'long="864s",short="72s",factor="1"}'
    )
    assert m[ticket] == 1.0


def test_error_rate_slo_burns_on_failures_only(clock: FakeClock) -> None:
    t = LatencyTracker(bucket="100ms", clock=clock)
    monitor = t.burn_monitor("error_rate<=2%", scale=1 / 300)
    for i in range(100):
        clock.advance(10 * MS)
        t.record(5 * S, ok=i % 10 != 0)  # slow but fine: only failures count
    rates = monitor.burn_rates()
    assert rates[round(3600 * S / 300)] == pytest.approx(0.10 / 0.02)


@pytest.mark.parametrize("spec", ["p99(latency)<=1s", "latency<=1s@100%", "ttft<=1s", "nonsense"])
def test_unusable_slos_are_refused(spec: str) -> None:
    with pytest.raises(BadInput):
        LatencyTracker().burn_monitor(spec)
