"""Shared fixtures: real loopback targets in their own processes (so they get their own core)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest


def _start(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tailwise.server.loopback",
            "--port",
            "0",
            "--lifetime",
            "120s",
            *args,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), line
    return proc, line.removeprefix("listening on ")


@pytest.fixture
def loopback() -> Iterator[Callable[..., str]]:
    """``loopback("--service", "5ms")`` -> base URL of a fresh target, stopped after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        proc, url = _start(list(args))
        procs.append(proc)
        return url

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)
