"""The floor client of ``benchmarks/stream_scale.py`` (``benchmarks/floor_client.c``).

Its CPU per chunk is what the benchmark reads tailwise's own cost against, so it must
read the lab's streams whole and time them as the lab wrote them: checked here against a
real lab process on loopback whose TTFT and ITL are set, and against its truth log.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tailwise.server import spawn
from tailwise.server.stream_lab import read_truth

SRC = Path(__file__).parents[2] / "benchmarks" / "floor_client.c"
CC = shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(
    CC is None or not sys.platform.startswith("linux"), reason="needs Linux and a C compiler"
)


@pytest.fixture(scope="module")
def floor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("floor") / "floor_client"
    assert CC is not None
    subprocess.run([CC, "-O2", "-o", str(exe), str(SRC), "-lm"], check=True)
    return exe


@pytest.mark.parametrize("rest_ns", ["0", "2000000"])  # waking per arrival; 2 ms rests
def test_reads_every_stream_whole_and_times_it_as_the_lab_wrote_it(
    floor: Path, tmp_path: Path, rest_ns: str
) -> None:
    truth = tmp_path / "truth.jsonl"
    lab, url = spawn(
        "tailwise.server.stream_lab", "--ttft", "40ms", "--itl", "20ms", "--truth", str(truth)
    )
    port = url.rsplit(":", 1)[1]
    out = tmp_path / "times.txt"
    tokens = 6
    try:
        done = subprocess.run(
            [str(floor), port, "40", "0.2", "1", str(tokens), "7", str(out)],
            capture_output=True,
            text=True,
            timeout=60,
            env={"FLOOR_REST_NS": rest_ns},
        )
    finally:
        lab.terminate()
        lab.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout)
    assert res["sent"] > 10 and res["done"] == res["sent"]
    assert res["failed"] == 0 and res["bad"] == 0
    # The head (with the role chunk), one read per token, the end alone or with the last.
    assert 2 * res["done"] <= res["reads"] <= res["done"] * (tokens + 2)
    lines = [ln.split() for ln in out.read_text().splitlines()]
    ttft = np.array([float(v) for k, v in lines if k == "t"])
    gaps = np.array([float(v) for k, v in lines if k == "g"])
    assert len(ttft) == res["in_window"] > 0
    truth_ttft, truth_gaps = read_truth(truth)
    assert len(truth_ttft) == res["sent"]
    # From the intended send: never before the lab's 40 ms, its median near the lab's own.
    assert ttft.min() >= 39.0
    assert abs(np.median(ttft) - np.median(truth_ttft) / 1e6) < 5.0
    assert len(gaps) <= len(ttft) * (tokens - 1)
    assert abs(np.median(gaps) - np.median(truth_gaps) / 1e6) < 5.0


def test_refuses_bad_arguments(floor: Path) -> None:
    for args in (["0", "10", "0", "1", "4", "1", "x"], ["80", "-1", "0", "1", "4", "1", "x"]):
        done = subprocess.run([str(floor), *args], capture_output=True, text=True, timeout=10)
        assert done.returncode == 2 and "bad argument" in done.stderr


def test_refuses_a_bad_rest(floor: Path) -> None:
    for rest in ("-1", "100000001", "250us"):
        done = subprocess.run(
            [str(floor), "80", "10", "0", "1", "4", "1", "x"],
            capture_output=True,
            text=True,
            timeout=10,
            env={"FLOOR_REST_NS": rest},
        )
        assert done.returncode == 2 and "FLOOR_REST_NS" in done.stderr
