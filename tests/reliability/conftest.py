"""Fixtures of the reliability suite: a fault-injecting proxy in front of a loopback target.

Every module here sets ``pytestmark = pytest.mark.reliability``; full lengths
are marked ``long`` as well (deselected by default, ``pytest -m long`` runs them).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.helpers import Proxies


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[Proxies]:
    """Proxies started by the test, all stopped after it (see :class:`Proxies`)."""
    proxies = Proxies(tmp_path)
    try:
        yield proxies
    finally:
        proxies.stop()
