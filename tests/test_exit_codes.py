"""Exit codes: one list in the code (:class:`tailwise.errors.ExitCode`), one full table in
the docs (docs/run.md#exit-codes), short lists in README and ``tailwise.cli`` that agree
with both; every code set in the source names a member, and the CLI's one error handler
exits with the ``exit_code`` of what it caught."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import tailwise.cli
from tailwise import errors
from tailwise.errors import EXIT_MEANINGS, ExitCode, TailwiseError
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tailwise"
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(.+?)\s*\|\s*$")


def table_after(text: str, marker: str) -> list[tuple[int, str]]:
    """The ``| code | meaning |`` rows of the first table after ``marker``."""
    lines = text[text.index(marker) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| code | meaning |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        m = ROW.match(line)
        assert m, line
        rows.append((int(m.group(1)), m.group(2)))
    return rows


def assert_lists_every_code(rows: list[tuple[int, str]], where: str) -> None:
    assert [code for code, _ in rows] == [int(c) for c in ExitCode], where
    for code, meaning in rows:
        short = EXIT_MEANINGS[ExitCode(code)]
        assert meaning.lower().startswith(short.lower()), (where, code, meaning, short)


def test_every_code_has_one_meaning() -> None:
    assert set(EXIT_MEANINGS) == set(ExitCode)
    assert len({int(c) for c in ExitCode}) == len(ExitCode)


def test_the_run_docs_table_is_the_code_list() -> None:
    text = (ROOT / "docs" / "run.md").read_text()
    assert_lists_every_code(table_after(text, "### Exit codes"), "docs/run.md")


def test_the_readme_table_is_the_code_list() -> None:
    text = (ROOT / "README.md").read_text()
    assert_lists_every_code(table_after(text, "the exit code is the verdict"), "README.md")


def test_the_cli_docstring_is_the_code_list() -> None:
    doc = tailwise.cli.__doc__ or ""
    rows = [(int(m[1]), m[2]) for m in re.finditer(r"^- (\d+) (.+)$", doc, re.M)]
    assert_lists_every_code(rows, "tailwise.cli")


def test_no_other_doc_lists_every_code() -> None:
    """Tables of a command's own codes (compare.md) use the codes of the one list, and
    only run.md and README list them all."""
    complete = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for m in re.finditer(r"^\| (?:exit )?code \| meaning \|$", text, re.M):
            rows = table_after(text[m.start() :], "|")
            assert {code for code, _ in rows} <= {int(c) for c in ExitCode}, path.name
            if len(rows) == len(ExitCode):
                complete.append(path.name)
    assert sorted(complete) == ["README.md", "run.md"]


def test_the_source_sets_no_exit_code_as_a_literal() -> None:
    """Each code is owned by ExitCode: no ``sys.exit(3)``, ``exit_code = 3`` or
    ``EXIT_X = 6`` anywhere in the package (a server process's own ``sys.exit(0)`` aside)."""
    literal = re.compile(
        r"sys\.exit\(\s*[1-9]|exit_code\s*=\s*\d|\bEXIT\w*\s*=\s*\d|return\s+[1-9]\d*\s+if\b"
    )
    found = [
        f"{p.relative_to(SRC)}:{n}: {line.strip()}"
        for p in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []


def test_every_error_class_is_raised_somewhere() -> None:
    """No dead branch of the tree: each class of tailwise.errors is raised (or chosen to be
    raised) by the package, or is the base of one that is."""
    classes = [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, TailwiseError) and c.__module__ == errors.__name__
    ]
    source = "\n".join(p.read_text() for p in SRC.rglob("*.py") if p != SRC / "errors.py")
    for c in classes:
        used = re.search(rf"\b{c.__name__}\(|= {c.__name__} if|\({c.__name__}\):", source)
        assert used or any(issubclass(d, c) and d is not c for d in classes), c.__name__
    for gone in ("TransportError", "ConnectError", "TLSError", "ResetError", "ReadTimeout"):
        assert not hasattr(errors, gone)


@pytest.mark.parametrize("code", [ExitCode.INVALID, ExitCode.HOST, ExitCode.REFUSED])
def test_the_one_handler_exits_with_the_errors_own_code(
    code: ExitCode, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Raised(TailwiseError):
        exit_code = code

    def raising(**kwargs: object) -> None:
        raise Raised("something went wrong")

    monkeypatch.setattr(tailwise.cli.cli, "main", raising)
    exit_code, out, err = run_cli(["run"], capsys)
    assert exit_code == code and out == ""
    assert err == "tailwise: error: something went wrong\n"
