"""An API key never leaves the process: not in any file, not on the terminal.

tests/loadgen/test_llm.py checks a plain ``tailwise run --api-key``. These add
the other places a key travels: through ``tailwise proxy`` (its ground-truth
log and its terminal), a ``sweep`` and a ``knee`` (every step's directory),
``--workers 2`` (the key crosses a process boundary), the ``OPENAI_API_KEY``
variable, and a credential in a ``-H`` header and in the URL's query string.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailwise.server import spawn

pytestmark = pytest.mark.reliability
KEY = "sk-tailwise-secret-7c41e9"
HEADER_KEY = "hdr-secret-51aa03"
QUERY_KEY = "qs-secret-99b2f0"
SECRETS = (KEY, HEADER_KEY, QUERY_KEY)


@pytest.fixture
def lab() -> Iterator[str]:
    proc, url = spawn("tailwise.server.stream_lab", "--ttft", "5ms", "--itl", "1ms")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def tailwise(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailwise", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def assert_nowhere(where: Path, *texts: str) -> None:
    """No secret in ``texts`` (terminal output) nor in any file under ``where``."""
    for text in texts:
        for secret in SECRETS:
            assert secret not in text
    files = [p for p in where.rglob("*") if p.is_file()]
    assert files
    for f in files:
        data = f.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f


LLM = ["--api", "openai-chat", "--model", "lab", "--max-tokens", "4", "--input-tokens", "8"]
CREDENTIALS = ["-H", f"X-Api-Key: {HEADER_KEY}"]


def test_through_the_proxy_with_key_header_and_query(lab: str, tmp_path: Path) -> None:
    truth = tmp_path / "proxy" / "truth.jsonl"
    truth.parent.mkdir()
    argv = ["proxy", "--listen", "127.0.0.1:0", "--to", lab.removeprefix("http://")]
    argv += ["--delay", "exp:2ms", "--truncate", "10%", "--log", str(truth), "--lifetime", "60s"]
    proxy = subprocess.Popen(
        [sys.executable, "-m", "tailwise", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdout is not None
    url = proxy.stdout.readline().strip().removeprefix("listening on ")
    p = tailwise(
        "run",
        f"{url}/v1/chat/completions?key={QUERY_KEY}",
        *LLM,
        *CREDENTIALS,
        *("--api-key", KEY, "--rate", "20/s", "--requests", "20", "--out", str(tmp_path / "r")),
        *("--server-metrics", "off"),  # the proxy's log counts the run's requests only
        "--no-preflight",  # (the preflight's own request would be a 21st)
        "--json",
    )
    assert p.returncode in (0, 1), p.stderr  # truncated streams may fail the implicit SLO
    proxy.terminate()
    out, err = proxy.communicate(timeout=10)
    assert truth.read_text().count('"kind":"request"') == 20
    assert_nowhere(tmp_path, p.stdout, p.stderr, out, err)


def test_sweep_and_knee_directories(lab: str, tmp_path: Path) -> None:
    sweep = tailwise(
        "sweep",
        lab,
        *LLM,
        *CREDENTIALS,
        *("--rates", "5,10", "--duration", "0.5s", "--out", str(tmp_path / "sweep")),
        env={"OPENAI_API_KEY": KEY},
    )
    assert sweep.returncode == 0, sweep.stderr
    knee = tailwise(
        "knee",
        lab,
        *LLM,
        *CREDENTIALS,
        *("--slo", "ttft<=5s", "--start", "10/s", "--max-rate", "20/s", "--resolution", "50%"),
        *("--duration", "0.5s", "--api-key", KEY, "--out", str(tmp_path / "knee"), "--json"),
    )
    assert knee.returncode == 0, knee.stderr
    assert_nowhere(tmp_path, sweep.stdout, sweep.stderr, knee.stdout, knee.stderr)


def test_two_worker_processes(lab: str, tmp_path: Path) -> None:
    p = tailwise(
        "run",
        lab,
        *LLM,
        *CREDENTIALS,
        *("--workers", "2", "--rate", "20/s", "--duration", "1s", "--out", str(tmp_path / "r")),
        env={"OPENAI_API_KEY": KEY},
    )
    assert p.returncode == 0, p.stderr
    assert "workers" in (tmp_path / "r" / "summary.json").read_text()
    assert_nowhere(tmp_path, p.stdout, p.stderr)
