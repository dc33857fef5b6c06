"""Shared fixtures: real loopback targets in their own processes (so they get their own core)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator

import pytest

from tailwise.server import spawn


@contextlib.contextmanager
def _servers(
    start: Callable[..., tuple[subprocess.Popen[str], str]],
) -> Iterator[Callable[..., str]]:
    """A factory of server URLs; every process it started is stopped afterwards."""
    procs: list[subprocess.Popen[str]] = []

    def url(*args: str) -> str:
        proc, base = start(*args)
        procs.append(proc)
        return base

    try:
        yield url
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)


@pytest.fixture
def loopback() -> Iterator[Callable[..., str]]:
    """``loopback("--service", "5ms")`` -> base URL of a fresh target, stopped after the test."""
    with _servers(lambda *a: spawn("tailwise.server.loopback", "--lifetime", "120s", *a)) as url:
        yield url


@pytest.fixture
def demo_target() -> Iterator[Callable[..., str]]:
    """``demo_target("http", "--workers", "4")`` -> base URL of ``tailwise serve-demo``."""
    from tailwise.server import spawn_demo

    with _servers(lambda kind, *a: spawn_demo(kind, *a, lifetime="300s")) as url:
        yield url


@pytest.fixture
def stream_lab() -> Iterator[Callable[..., str]]:
    """``stream_lab("50ms", "10ms", truth_path)`` -> base URL of a stream lab with that TTFT
    and ITL, logging what it sent to ``truth_path``; stopped after the test."""

    def start(ttft: str, itl: str, truth: object) -> tuple[subprocess.Popen[str], str]:
        return spawn(
            "tailwise.server.stream_lab", "--ttft", ttft, "--itl", itl,
            "--truth", str(truth), "--lifetime", "120s",
        )  # fmt: skip

    with _servers(start) as url:
        yield url
