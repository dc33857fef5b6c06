"""Fixtures the load generator's test modules share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tailwise.server import spawn_demo


@pytest.fixture(scope="module")
def llm() -> Iterator[str]:
    """The demo LLM server, one per test module (a module's own ``llm`` takes precedence)."""
    proc, url = spawn_demo("llm", lifetime="120s")
    yield url
    proc.terminate()
    proc.wait(timeout=10)
