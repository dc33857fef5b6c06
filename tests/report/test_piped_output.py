"""Output into pipes and files: whole table cells, and a closed pipe that keeps the exit code.

Real CLI processes against the demo server, their stdout a pipe as in
``tailwise sweep ... | cat`` and ``tailwise run ... | head -2``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from rich.table import Table

from tailwise.report.text import PIPED_WIDTH, console

ENV = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # a pipe has no width


def _tailwise(*args: str) -> list[str]:
    return [sys.executable, "-m", "tailwise", *args]


def test_a_piped_sweep_shows_whole_verdicts_and_the_knee_on_its_row(
    demo_target: Callable[..., str], tmp_path: Path
) -> None:
    url = demo_target("llm")
    argv = [url, "--api", "openai-chat", "--model", "tailwise-demo", "--max-tokens", "16"]
    argv += ["--rates", "20,150", "--duration", "1.5s", "--slo", "ttft<=300ms@95%"]
    argv += ["--slo", "p99(tpot)<=30ms", "--slo", "p99(latency)<=2s", "--out", str(tmp_path)]
    p = subprocess.run(_tailwise("sweep", *argv), capture_output=True, text=True, env=ENV)
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "sweep.json").read_text())
    rows = [ln for ln in p.stdout.splitlines() if ln.lstrip().startswith(("20/s", "150/s"))]
    assert len(rows) == 2, p.stdout
    for row, step in zip(rows, doc["steps"], strict=True):
        assert row.split()[-1] in ("◀", step["verdict"]), row  # whole, never "inconclu..."
        assert step["verdict"] in row.split()
    knee = f"{doc['knee_rps']:g}/s"
    marked = [ln for ln in rows if ln.rstrip().endswith("◀")]
    assert len(marked) == 1 and marked[0].lstrip().startswith(knee), p.stdout
    assert not any(ln.strip() == "◀" for ln in p.stdout.splitlines())  # not on a line alone


def test_a_piped_table_is_as_wide_as_it_needs(capsys: object) -> None:
    wide = Table()
    for i in range(12):
        wide.add_column(f"column {i}")
    wide.add_row(*[f"a cell of twenty {i:02d}" for i in range(12)])
    out = console(fit=wide)  # stdout is pytest's capture here: not a terminal
    assert not out.is_terminal and out.width > PIPED_WIDTH
    assert out.width >= out.measure(wide, options=out.options.update_width(10_000)).maximum
    assert console().width == PIPED_WIDTH


def test_head_2_keeps_the_runs_exit_code(demo_target: Callable[..., str], tmp_path: Path) -> None:
    url = demo_target("http") + "/predict"
    run = ["run", url, "--rate", "50/s", "--duration", "1s", "--slo", "p99(latency)<=1ms"]
    cmd = shlex.join(_tailwise(*run, "--out", str(tmp_path / "r")))
    p = subprocess.run(
        ["bash", "-c", f"{cmd} | head -2; echo exit=${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        env=ENV,
    )
    lines = p.stdout.splitlines()
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["verdict"] == "fail"  # 1 ms: no demo request is that fast
    assert lines[-1] == "exit=1" and len(lines) == 3, p.stdout  # two lines, then the code
    assert "BrokenPipe" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr


def test_a_reader_gone_before_the_first_line(
    demo_target: Callable[..., str], tmp_path: Path
) -> None:
    """The pipe's read end closed before tailwise writes anything: every write fails."""
    url = demo_target("http") + "/predict"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        p = subprocess.run(
            _tailwise("run", url, "--rate", "50/s", "--duration", "1s", "--json",
                      "--out", str(tmp_path / "r")),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )  # fmt: skip
    finally:
        os.close(write_end)
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    expected = {"pass": 0, "fail": 1, "invalid": 3, "inconclusive": 5}[s["verdict"]]
    assert p.returncode == expected, p.stderr
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
