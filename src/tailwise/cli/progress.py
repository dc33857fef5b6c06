"""Progress of long work (calibrate, plan capacity) on stderr, on a terminal or in a log.

On a terminal: one rich status line, updated in place and gone at the end. In a
pipe or a log file (stderr not a terminal), where a status line shows nothing:
one plain line per phase the work reports, ``tailwise <command>: <what> (<elapsed>
s)`` (``first`` is the terminal's line until then, not logged); repeated
updates inside one phase at most every :data:`LOG_EVERY_S` seconds, so a
90-second fit leaves a few lines, not thousands.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Protocol

LOG_EVERY_S = 10.0


class Tell(Protocol):
    def __call__(self, message: str, phase: str | None = None) -> None: ...


@contextlib.contextmanager
def phases(command: str, first: str) -> Iterator[Tell]:
    """A ``tell(message, phase=None)`` for the work inside; a message with a new ``phase``
    (by default the message itself) is a new line in a log."""
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    if console.is_terminal:
        with console.status(first) as status:

            def update(message: str, phase: str | None = None) -> None:
                status.update(message)

            yield update
        return
    start = time.monotonic()
    last_phase, last_at = "", -LOG_EVERY_S

    def log(message: str, phase: str | None = None) -> None:
        nonlocal last_phase, last_at
        now = time.monotonic()
        key = phase if phase is not None else message
        if key == last_phase and now - last_at < LOG_EVERY_S:
            return
        last_phase, last_at = key, now
        print(f"tailwise {command}: {message} ({now - start:.0f} s)", file=sys.stderr, flush=True)

    yield log  # nothing before the first phase: an input error stays one line
