"""Run the CLI in-process as a user would: (exit code, stdout, stderr)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tailwise.cli import main
from tailwise.metrics.shape import read_summary


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)`` must exit through SystemExit with an int code, as every command does."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    code = exited.value.code
    assert isinstance(code, int)
    return code, out, err


def oversubscribed(run_dir: Path) -> bool:
    """Whether the run's client saw a 1-minute load average above the machine's cores
    (its summary's ``generator.load``): where an honest "invalid" from the client's own
    lag or shortfall is what the machine can tell."""
    load = read_summary(run_dir / "summary.json", str(run_dir)).generator.load
    avg, cores = load.get("load_avg_1m"), load.get("cores")
    return avg is not None and cores is not None and float(avg) > float(cores)


def wait_until_sending(out_dir: Path, timeout_s: float = 60.0) -> None:
    """Block until a ``tailwise run`` in a subprocess has started its clock.

    A fixed sleep after Popen measures the machine, not tailwise: on a busy 2-core
    machine the child's imports alone took over a second, and a signal sent "1.5 s
    into the run" arrived before the first request. ``run.json`` is written just
    before the records writer starts and the clock follows it within ~20 ms.
    """
    deadline = time.monotonic() + timeout_s
    while not (out_dir / "run.json").exists() or not (out_dir / "records.jsonl").exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"the run in {out_dir} did not start in {timeout_s:g} s")
        time.sleep(0.05)
