"""A clock the test moves by hand, so windows, rates and burn rates have exact answers."""

from __future__ import annotations

import pytest


class FakeClock:
    """Monotonic ns that only move when a test says so (starts mid-bucket, like real time)."""

    def __init__(self, start_ns: int = 1_000_000_000_000 + 100_000_000) -> None:
        self.start_ns = start_ns
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, ns: int) -> None:
        self.now_ns += ns


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
