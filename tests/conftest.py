"""Shared fixtures: real loopback targets in their own processes (so they get their own core)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from tailwise.server import spawn


@pytest.fixture
def loopback() -> Iterator[Callable[..., str]]:
    """``loopback("--service", "5ms")`` -> base URL of a fresh target, stopped after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        proc, url = spawn("tailwise.server.loopback", "--lifetime", "120s", *args)
        procs.append(proc)
        return url

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


@pytest.fixture
def demo_target() -> Iterator[Callable[..., str]]:
    """``demo_target("http", "--workers", "4")`` -> base URL of ``tailwise serve-demo``."""
    from tailwise.server import spawn_demo

    procs: list[subprocess.Popen[str]] = []

    def start(kind: str, *args: str) -> str:
        proc, url = spawn_demo(kind, *args, lifetime="180s")
        procs.append(proc)
        return url

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)
