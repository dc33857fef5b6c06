"""Run the CLI in-process as a user would: (exit code, stdout, stderr)."""

from __future__ import annotations

import pytest

from tailwise.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)`` must exit through SystemExit with an int code, as every command does."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    code = exited.value.code
    assert isinstance(code, int)
    return code, out, err
