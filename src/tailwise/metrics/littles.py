"""Little's law self-check: L = lambda * W over the measurement window.

``L`` is measured directly as the time-average of requests in the system
(scheduled but not finished, so client-side queueing counts, as it does in
latency). ``lambda * W`` is computed from the requests scheduled in the window:
(count / T) x (mean time in system). Both sides use the same end instant per
request (done, failed, or given up), so on a stable run they differ only by
the requests straddling the window's edges: a gap over a few percent means
the run was not in steady state, or something was lost.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tailwise.records import Records


def littles_law(r: Records, start_ns: int, end_ns: int) -> dict[str, Any]:
    t_ns = end_ns - start_ns
    ended = r.done_ns >= 0
    begin, finish = r.scheduled_ns[ended], r.done_ns[ended]
    overlap = np.clip(finish, start_ns, end_ns) - np.clip(begin, start_ns, end_ns)
    l_measured = float(overlap.sum()) / t_ns if t_ns > 0 else 0.0
    win = ended & r.in_window
    in_system = (r.done_ns[win] - r.scheduled_ns[win]).astype(np.float64)
    lam = len(in_system) / (t_ns / 1e9) if t_ns > 0 else 0.0
    w_s = float(in_system.mean()) / 1e9 if len(in_system) else 0.0
    lw = lam * w_s
    gap = abs(l_measured - lw) / max(l_measured, lw) if max(l_measured, lw) > 0 else 0.0
    return {
        "l_measured": l_measured,
        "lambda_w": lw,
        "rel_gap": gap,
        "lambda_rps": lam,
        "w_ms": w_s * 1e3,
    }
