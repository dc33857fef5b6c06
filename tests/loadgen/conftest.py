"""Fixtures the load generator's test modules share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tailwise.server import spawn_demo


@pytest.fixture(scope="module")
def llm() -> Iterator[str]:
    """The demo LLM server, one per test module (a module's own ``llm`` takes precedence)."""
    proc, url = spawn_demo("llm", lifetime="120s")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def lab(tmp_path: Path, stream_lab: Callable[..., str]) -> tuple[str, Path]:
    """A stream lab with TTFT 50 ms and ITL 10 ms, and its truth log (what it really sent)."""
    truth = tmp_path / "truth.jsonl"
    return stream_lab("50ms", "10ms", truth), truth
