"""A real run directory, made once: the load generator against the loopback server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import tailwise
from tailwise.server import spawn


@pytest.fixture(scope="session")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """60 requests at 200/s to a 2 ms loopback target; every third one answers HTTP 500."""
    proc, url = spawn("tailwise.server.loopback", "--lifetime", "60s", "--service", "2ms")
    try:
        d = tmp_path_factory.mktemp("real")
        bodies = d / "bodies.jsonl"
        bodies.write_text("\n".join(json.dumps(b) for b in ({}, {}, {"status": 500})) + "\n")
        res = tailwise.run(
            url + "/x",
            rate="200/s",
            arrival="constant",
            requests=60,
            bodies=str(bodies),
            out=str(d / "run"),
        )
        assert res.summary["requests"]["errors"] == {"http_5xx": 20}
        yield d / "run"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
