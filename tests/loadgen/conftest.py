"""Fixtures the load generator's test modules share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tailwise.server import spawn, spawn_demo


@pytest.fixture(scope="module")
def llm() -> Iterator[str]:
    """The demo LLM server, one per test module (a module's own ``llm`` takes precedence)."""
    proc, url = spawn_demo("llm", lifetime="120s")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A stream lab with TTFT 50 ms and ITL 10 ms, and its truth log (what it really sent)."""
    truth = tmp_path / "truth.jsonl"
    proc, url = spawn(
        "tailwise.server.stream_lab", "--ttft", "50ms", "--itl", "10ms",
        "--truth", str(truth), "--lifetime", "120s",
    )  # fmt: skip
    yield url, truth
    proc.terminate()
    proc.wait(timeout=10)
