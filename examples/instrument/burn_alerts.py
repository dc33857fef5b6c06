"""Burn-rate alerts through a simulated incident, on a simulated clock (runs in about a second).

A checkout service with the SLO ``latency<=200ms@99.9%`` (error budget 0.1%)
takes 50 requests a second. Normally 0.05% of requests are slow (burn rate
0.5); from minute 5 to minute 7 an incident makes 5% slow (burn rate 50).
The SRE workbook's rules are scaled by 1/60, so "1 h" is 60 s of this
simulation and the whole story fits in 15 simulated minutes.

Run: ``python examples/instrument/burn_alerts.py``.
"""

from __future__ import annotations

import random

from tailwise.instrument import Alert, LatencyTracker

RATE_RPS = 50
INCIDENT_S = (300, 420)
END_S = 900


class SimClock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


def main() -> None:
    clock = SimClock()
    tracker = LatencyTracker("checkout", window="10s", bucket="500ms", clock=clock)

    def on_alert(a: Alert) -> None:
        state = "FIRING  " if a.firing else "resolved"
        print(
            f"t={clock.now_ns / 1e9:6.1f}s  {state} {a.severity:6s} "
            f"(long {a.long_s:g}s burn {a.burn_long:5.1f}, short {a.short_s:g}s burn "
            f"{a.burn_short:5.1f}, factor {a.factor:g})"
        )

    monitor = tracker.burn_monitor("latency<=200ms@99.9%", scale=1 / 60, on_alert=on_alert)
    rng = random.Random(3)
    for i in range(END_S * RATE_RPS):
        clock.now_ns = i * 1_000_000_000 // RATE_RPS
        t_s = clock.now_ns / 1e9
        slow_share = 0.05 if INCIDENT_S[0] <= t_s < INCIDENT_S[1] else 0.0005
        tracker.record(450_000_000 if rng.random() < slow_share else 40_000_000)
        if i % (5 * RATE_RPS) == 0:
            monitor.check()  # what a scrape every 5 s would do
    rates = {f"{w / 1e9:g}s": round(r, 2) for w, r in monitor.burn_rates().items()}
    print(f"t={END_S}s burn rates by window: {rates}")


if __name__ == "__main__":
    main()
