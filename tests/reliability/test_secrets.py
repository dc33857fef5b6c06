"""An API key never leaves the process: not in any file, not on the terminal.

tests/loadgen/test_llm.py checks a plain ``tailwise run --api-key``. These add
the other places a key travels: through ``tailwise proxy`` (its ground-truth
log and its terminal), a ``sweep`` and a ``knee`` (every step's directory),
``--workers 2`` (the key crosses a process boundary), the ``OPENAI_API_KEY``
variable, and a credential in a ``-H`` header and in the URL's query string.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tailwise.server import spawn
from tests.reliability.conftest import Answer

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


# Issue 40 (S1-S3): a server that echoes the key and every request header in its error,
# the key given by every form tailwise takes, and credentials in --server-metrics's URL.
# tailwise knows the exact values: none may reach any file or the terminal.
PLANTED = {
    "hdr": "plantedHDR7731",  # -H "X-Key: ..."
    "attached": "plantedATT5520",  # -H'X-Token: ...' (attached to the flag)
    "combined": "plantedCMB9043",  # -qH 'X-Key: ...' (after another short flag)
    "long": "plantedLNG1187",  # --header=Authorization: Bearer ...
    "api": "plantedAPI3369",  # --api-key
    "env": "plantedENV4412",  # OPENAI_API_KEY
    "user": "plantedUSR2290",  # --server-metrics http://USER:PASS@host/metrics?token=...
    "password": "plantedPWD8851",
    "query": "plantedQRY6604",
}


def _echo_server(raw_server: Callable[[Answer], str]) -> str:
    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await r.readexactly(int(line.split(b":")[1]))
            key = next(
                (x.split(b" ")[-1] for x in head.split(b"\r\n") if x.lower().startswith(b"auth")),
                b"none",
            )
            body = b'{"error": {"message": "Incorrect API key provided: %s. You sent: %s"}}' % (
                key,
                head.replace(b"\r\n", b" | ").replace(b'"', b"'"),
            )
            w.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n")
            w.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            await w.drain()

    return raw_server(echo)


def _assert_no_planted(where: Path, *texts: str) -> None:
    for text in texts:
        for name, value in PLANTED.items():
            assert value not in text, name
    files = [p for p in where.rglob("*") if p.is_file()]
    assert any(p.name == "summary.json" for p in files)
    for f in files:
        data = f.read_bytes()
        for name, value in PLANTED.items():
            assert value.encode() not in data, (f, name)


def test_known_secret_values_never_leave_whatever_a_server_echoes(
    raw_server: Callable[[Answer], str], tmp_path: Path
) -> None:
    url = _echo_server(raw_server)
    host = url.removeprefix("http://")
    p = PLANTED
    metrics = f"http://{p['user']}:{p['password']}@{host}/metrics?token={p['query']}"
    common = ["--api", "openai-chat", "--model", "m", "--rate", "20/s", "--requests", "6"]
    # The preflight's one request meets the 401 first: its one line names the echo, scrubbed.
    pre = tailwise(
        "run",
        url + "/v1",
        *common,
        *("-H", f"X-Key: {p['hdr']}", "--api-key", p["api"], "--out", str(tmp_path / "p")),
    )
    assert pre.returncode == 7 and "Incorrect API key provided: ***" in pre.stderr, pre.stderr
    common.append("--no-preflight")  # the runs themselves: every answer a 401
    first = tailwise(
        "run",
        url + "/v1",
        *common,
        *("-H", f"X-Key: {p['hdr']}", f"-HX-Token: {p['attached']}", "--api-key", p["api"]),
        *("--server-metrics", metrics, "--out", str(tmp_path / "a"), "--json"),
    )
    second = tailwise(
        "run",
        url + "/v1",
        *common,
        *("-qH", f"X-Key: {p['combined']}", f"--header=Authorization: Bearer {p['long']}"),
        *("--out", str(tmp_path / "b")),
    )
    third = tailwise(
        "run", url + "/v1", *common, "--out", str(tmp_path / "c"), env={"OPENAI_API_KEY": p["env"]}
    )
    outputs = [pre.stdout, pre.stderr]
    for run, name in ((first, "a"), (second, "b"), (third, "c")):
        assert run.returncode == 1, run.stderr  # every request failed: 401
        assert "Traceback" not in run.stderr
        outputs += [run.stdout, run.stderr]
        s = json.loads((tmp_path / name / "summary.json").read_text())
        samples = [x for e in s["errors"] for x in e.get("samples", [])]
        assert any("Incorrect API key provided: ***" in x for x in samples), name
        report = tailwise("report", str(tmp_path / name))
        assert report.returncode == 0, report.stderr
        outputs += [report.stdout, report.stderr]
    assert (tmp_path / "a" / "report.html").is_file()
    _assert_no_planted(tmp_path, *outputs)
