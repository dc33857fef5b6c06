"""Synthetic records with known answers, for unit tests of everything downstream of producers."""

from __future__ import annotations

import numpy as np

from tailwise.records import Records, error_code


def make_records(
    sched: np.ndarray,
    lat: np.ndarray,
    errors: list[str],
    window: tuple[int, int],
    lag: np.ndarray | None = None,
) -> Records:
    """Rows scheduled at ``sched`` that end ``lat`` later; ``not_sent`` kinds are never sent."""
    n = len(sched)
    lag = np.zeros(n, dtype=np.int64) if lag is None else lag
    z, absent = np.zeros(n, np.int64), np.full(n, -1, np.int64)
    unsent = np.array([e.startswith("not_sent") for e in errors], dtype=bool)
    return Records(
        seq=np.arange(n, dtype=np.int64),
        parent=absent,
        worker=z,
        scheduled_ns=sched,
        sent_ns=np.where(unsent, -1, sched + lag),
        first_byte_ns=sched + lat,
        first_token_ns=absent,
        done_ns=sched + lat,
        status=z + 200,
        error=np.array([error_code(e) for e in errors], dtype=np.int16),
        bytes_out=z,
        bytes_in=z,
        input_tokens=absent,
        output_tokens=absent,
        replica=absent,
        in_window=(sched >= window[0]) & (sched < window[1]),
        capped=np.zeros(n, np.int8),
    )
