"""The live figures of a running run, for whoever listens (the ``--dashboard`` page).

Once a second the live line's producer (:class:`tailwise.loadgen.execute.results.Progress`
in one process, the scale-out driver over several) publishes a snapshot: a
flat dict of numbers with unit suffixes (``elapsed_s``, ``target_rps``,
``rate_rps``, ``in_flight``, ``errors``, ``send_lag_p99_ms``, ``p99_ms`` and one
``<metric>_p99_ms`` per SLO metric shown, ``label``). Listeners are registered
for the length of a command (:func:`listening`); with none, nothing is built
beyond the live line itself. A listener that raises is dropped, never the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

Listener = Callable[[dict[str, Any]], None]
_listeners: list[Listener] = []


def active() -> bool:
    """Whether anyone listens (the live figures are then computed even without a line)."""
    return bool(_listeners)


def publish(snapshot: dict[str, Any]) -> None:
    for fn in list(_listeners):
        try:
            fn(snapshot)
        except Exception:  # a listener's bug must not end a measurement
            with contextlib.suppress(ValueError):
                _listeners.remove(fn)


@contextlib.contextmanager
def listening(fn: Listener) -> Iterator[None]:
    _listeners.append(fn)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _listeners.remove(fn)
