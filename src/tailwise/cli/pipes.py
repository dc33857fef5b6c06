"""A closed pipe ends the output, not the command: ``tailwise run ... | head -2``.

When the reader of stdout (or stderr) goes away, Python raises BrokenPipeError
on the next write, and again when it flushes at exit: the command would end
with exit code 1 or 120 instead of the run's own verdict. Each stream is
wrapped for the length of a command: the first broken write points the stream's
file descriptor at ``/dev/null`` (so that nothing fails later, at exit
included), every later write is dropped, and the command goes on to exit with
its own code.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class QuietPipe:
    """A text stream that drops what it cannot write once its reader has gone."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._close()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._close()

    def _close(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)  # what the stream still buffers now goes nowhere, quietly
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def quiet_pipes() -> Iterator[None]:
    """stdout and stderr wrapped in :class:`QuietPipe` while a command runs."""
    out, err = sys.stdout, sys.stderr
    guards = QuietPipe(out), QuietPipe(err)
    sys.stdout, sys.stderr = guards
    try:
        yield
    finally:
        for guard in guards:
            guard.flush()  # a reader gone by now still leaves the command's own exit code
        sys.stdout, sys.stderr = out, err
