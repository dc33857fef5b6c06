"""Outputs (issue 21): whole files or none, no silent overwrite, no lost measurement.

* every results file is written under a temporary name and renamed: a failed
  write leaves the previous file (or none), never a truncated one;
* ``--out`` naming a directory that holds an earlier run is refused (exit 2, one
  line) unless ``--force``;
* a read-only ``--out`` is refused before any traffic;
* when the outputs cannot be written at the end (disk full), the summary and the
  records in memory go to a rescue directory and the one-line error names it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tailwise import files
from tailwise.errors import BadInput, ExitCode, HostFailure
from tailwise.files import OutputError, atomic_write_text, output_directory
from tailwise.loadgen import conclude
from tailwise.loadgen.runner import RunOptions, execute, prepare
from tailwise.loadgen.transport import FakeTransport
from tests.clirun import run_cli

pytestmark = pytest.mark.reliability
MS = 1_000_000
URL = "http://127.0.0.1:9/"


def _fake_run(directory: Path, n: int = 20) -> Any:
    opts = RunOptions(urls=[URL], rate="200/s", requests=n, arrival="constant", progress=False)
    directory.mkdir(exist_ok=True)
    return execute(prepare(opts), directory, transport=FakeTransport(lambda seq: (MS, 200, "")))


# ---- atomic writes -------------------------------------------------------------------


def test_a_failed_write_leaves_the_old_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "summary.json"
    atomic_write_text(path, '{"old": true}\n')

    def full(fd: int) -> None:  # the kernel reports ENOSPC when the data is flushed
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(OutputError, match="No space left on device"):
        atomic_write_text(path, '{"new": true, "long": "' + "x" * 100_000 + '"}\n')
    assert json.loads(path.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no temp left


def test_the_error_is_one_line_and_its_exit_code_says_whose_fault(tmp_path: Path) -> None:
    """A place that cannot be written is a bad --out (exit 2); a full disk is this
    machine's failure (exit 9), never "bad input"."""
    exc = OutputError(tmp_path / "x", OSError(errno.EROFS, "Read-only file system"))
    assert "\n" not in str(exc) and exc.exit_code == ExitCode.BAD_INPUT == 2
    assert "--out" in str(exc) and "Read-only file system" in str(exc)
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
        full = OutputError(tmp_path / "x", OSError(code, os.strerror(code)))
        assert full.exit_code == ExitCode.HOST == 9 and not isinstance(full, BadInput)
        assert "\n" not in str(full) and os.strerror(code) in str(full)


def test_a_full_disk_at_the_end_exits_9_not_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's handler reads the error's exit code: no room for summary.json is 9."""
    real = conclude.atomic_write_text
    out = tmp_path / "run"

    def no_space_for_the_summary(path: Path, text: str) -> None:
        if path.parent == out:
            raise OutputError(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        real(path, text)

    monkeypatch.setattr(conclude, "atomic_write_text", no_space_for_the_summary)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    monkeypatch.setattr(conclude.tempfile, "tempdir", None)
    argv = ["run", URL, "--rate", "50/s", "--requests", "5", "--out", str(out), "-q"]
    argv += ["--no-preflight"]
    code, _, err = run_cli(argv, capsys)
    assert code == 9 and err.count("\n") == 1, err
    assert err.startswith("tailwise: error: --out:") and "No space left on device" in err
    assert "were saved in" in err


def test_a_full_disk_when_the_out_directory_is_probed_exits_9(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.tempfile, "mkstemp", full)
    with pytest.raises(HostFailure, match="No space left on device") as caught:
        output_directory(tmp_path / "run", force=False)
    assert caught.value.exit_code == 9 and not isinstance(caught.value, BadInput)


def test_disk_full_at_the_end_rescues_the_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC on summary.json: the run's summary and all its records are saved elsewhere."""
    real = conclude.atomic_write_text

    def no_space_for_the_summary(path: Path, text: str) -> None:
        if path.parent == tmp_path / "run":
            raise OutputError(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        real(path, text)

    monkeypatch.setattr(conclude, "atomic_write_text", no_space_for_the_summary)
    with pytest.raises(OutputError) as caught:
        _fake_run(tmp_path / "run", n=20)
    message = str(caught.value)
    assert "\n" not in message and "No space left on device" in message
    rescue = Path(message.split("were saved in ")[1].split(" instead")[0])
    try:
        summary = json.loads((rescue / "summary.json").read_text())
        rows = (rescue / "records.jsonl").read_text().splitlines()
        assert summary["requests"]["scheduled"] == 20 and summary["requests"]["ok"] == 20
        assert len(rows) == 20 and "the summary and 20 records" in message
        assert not (tmp_path / "run" / "summary.json").exists()  # no half-written summary
    finally:
        for p in rescue.iterdir():
            p.unlink()
        rescue.rmdir()


# ---- --out and --force ---------------------------------------------------------------


def test_out_refuses_an_earlier_run_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    _fake_run(out)
    before = (out / "summary.json").read_bytes()
    argv = ["run", URL, "--rate", "1/s", "--duration", "1s", "--out", str(out), "-q"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "holds summary.json from an earlier run; --force overwrites it" in err
    assert (out / "summary.json").read_bytes() == before  # untouched


def test_force_lets_a_run_replace_an_earlier_one(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _fake_run(out, n=20)
    assert output_directory(out, force=True) == out
    with pytest.raises(BadInput, match="--force"):
        output_directory(out, force=False)


def test_an_empty_or_unrelated_directory_is_fine(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert output_directory(tmp_path, force=False) == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # the probe is gone


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_out_is_refused_before_sending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        argv = ["run", URL, "--rate", "1/s", "--duration", "1s", "--out", str(out), "-q"]
        code, _, err = run_cli(argv, capsys)
        assert code == 2 and "a directory tailwise can write to" in err, err
        assert list(out.iterdir()) == []
    finally:
        out.chmod(stat.S_IRWXU)


def test_an_unwritable_out_is_refused_even_as_root(tmp_path: Path) -> None:
    """chmod does not stop root; a path under a regular file fails for everyone."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(BadInput, match="a directory tailwise can write to"):
        output_directory(blocker / "run", force=False)


def test_simulate_refuses_an_earlier_run_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("arrival: {rate: 50/s, duration: 1s}\nservice: exp:5ms\n")
    out = tmp_path / "sim"
    first, _, err = run_cli(["simulate", str(scenario), "--out", str(out), "-q"], capsys)
    assert first == 0 and (out / "summary.json").exists(), err
    again, _, err = run_cli(["simulate", str(scenario), "--out", str(out), "-q"], capsys)
    assert again == 2 and "--force" in err
    forced, _, err = run_cli(
        ["simulate", str(scenario), "--out", str(out), "--force", "-q"], capsys
    )
    assert forced == 0, err
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
