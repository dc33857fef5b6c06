"""The quick examples in README.md and docs/ still run, and still print what they show.

Each example is a console block marked ``<!-- example: NAME ... -->`` in its
document. The command is read from the document itself (a ``$ `` line and its
``\\`` continuations; lines that start a server in the background are setup),
run against a fresh target of the kind the example names (the document's
``127.0.0.1:PORT`` replaced by the target's), with ``--out`` moved to a
temporary directory. Then the exit code (the block's own ``$ echo $?`` or
``exit=N`` line, or the one this table expects) and the key lines are compared:
for each pattern, the first line it matches in the document and in the real
output must agree on what the pattern captures. A deterministic example (the
simulator's) is compared line by line.

Slow examples (a minute or more) are not run here: their blocks say they are
excerpts and give the date they were recorded.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARK = re.compile(r"<!-- example: ([\w-]+)")


@dataclass(frozen=True)
class Example:
    doc: str
    target: str | None  # "http", "llm" (serve-demo), "lab" (the stream lab), or None
    keys: tuple[str, ...] = ()  # regexes: the first line each matches must agree
    exit_code: int | None = None  # when the block shows none
    every_line: bool = False  # deterministic: every line but those matching `skip`
    skip: tuple[str, ...] = field(default=(r"^saved\s", r"^simulated \d+ requests in"))


EXAMPLES = {
    "rerank-demo": Example(
        "docs/rerank.md",
        "llm",
        keys=(
            r"^requests\s+(\d+) = (\d+) ok",
            r"^\s+\(\+(\d+) warm-up requests",
            r"^(.) p99\(latency\)<=500ms\s",
            r"^verdict\s+(\S+)",
        ),
    ),
    "readme-simulate": Example("README.md", None, exit_code=5, every_line=True),
    "readme-json-jq": Example("README.md", "http", keys=(r"^(pass|fail|inconclusive|invalid)$",)),
    "llm-chat": Example(
        "docs/llm.md",
        "lab",
        keys=(
            r"^requests\s+(\d+) = (\d+) ok",
            r"^\s+\(\+(\d+) warm-up requests",
            r"^(.) ttft<=100ms\s",
            r"^(.) tpot<=15ms\s",
            r"^verdict\s+(\S+)",
        ),
    ),
    "llm-truncated": Example(
        "docs/llm.md",
        "lab",
        keys=(
            r"^requests\s+(.*)",
            r"^\s+errors: (.*)",
            r"^(.) ttft<=100ms\s+attainment (\S+)",
            r"^verdict\s+(\S+)\s+([^;]*)",
            r"^hint\s+(.*)",
        ),
    ),
    "run-refused": Example("docs/run.md", None, keys=(r"^(tailwise: preflight: .*)",)),
    "run-wrong-model": Example("docs/run.md", "llm", keys=(r"^(tailwise: preflight: .*)",)),
    "run-head-2": Example(
        "docs/run.md",
        "http",
        keys=(r"^(http://\S+\s+open-loop .*)", r"^requests\s+(.*)", r"^exit=(\d+)"),
    ),
}


def block(doc: str, name: str) -> tuple[list[str], list[str]]:
    """(commands, output lines) of the block marked ``name`` in ``doc``."""
    text = (ROOT / doc).read_text()
    at = next((m.end() for m in MARK.finditer(text) if m.group(1) == name), None)
    assert at is not None, f"{doc} has no example marked {name}"
    start = text.index("```", at)
    body = text[text.index("\n", start) + 1 : text.index("\n```", start)]
    commands, output, pending = [], [], ""
    for line in body.splitlines():
        if pending or line.startswith("$ "):
            pending += line.removeprefix("$ ").rstrip("\\").strip() + " "
            if not line.endswith("\\"):
                commands.append(pending.strip())
                pending = ""
        else:
            output.append(line)
    return commands, output


def _command(text: str, port: int | None, out: Path) -> str:
    """The document's command for this machine: our interpreter, target and --out."""
    args = shlex.split(text.split(" | ")[0].split("; ")[0])
    rest = text[len(text.split(" | ")[0].split("; ")[0]) :]
    assert args[0] == "tailwise", text
    if "--out" in args:
        args[args.index("--out") + 1] = str(out)
    else:
        args += ["--out", str(out)]
    line = shlex.join([sys.executable, "-m", "tailwise", *args[1:]]) + rest
    if port is not None:
        line = re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", line)
    return line


def _agree(name: str, ex: Example, shown: list[str], got: list[str]) -> None:
    if ex.every_line:
        keep = [re.compile(s) for s in ex.skip]
        strip = [ln.rstrip() for ln in shown if not any(k.search(ln) for k in keep)]
        real = [ln.rstrip() for ln in got if not any(k.search(ln) for k in keep)]
        assert real == strip, f"{name}: the output changed; regenerate the block"
        return
    for key in ex.keys:
        pattern = re.compile(key)
        doc_match = next((m for ln in shown if (m := pattern.search(ln))), None)
        assert doc_match is not None, f"{name}: the document shows no line {key!r}"
        real_match = next((m for ln in got if (m := pattern.search(ln))), None)
        assert real_match is not None, f"{name}: no line {key!r} in:\n" + "\n".join(got)
        assert real_match.groups() == doc_match.groups(), (name, key)


@pytest.fixture
def target(
    demo_target: Callable[..., str], stream_lab: Callable[..., str], tmp_path: Path
) -> Callable[[str | None], int | None]:
    def start(kind: str | None) -> int | None:
        if kind is None:
            return None
        url = stream_lab("50ms", "10ms", tmp_path / "truth.jsonl") if kind == "lab" else (
            demo_target(kind)
        )  # fmt: skip
        return int(url.rsplit(":", 1)[1].split("/")[0])

    return start


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_documented_example_runs_as_shown(
    name: str, target: Callable[[str | None], int | None], tmp_path: Path
) -> None:
    ex = EXAMPLES[name]
    commands, shown = block(ex.doc, name)
    runs = [c for c in commands if c.startswith("tailwise ") and not c.endswith("&")]
    runs = [c for c in runs if not c.startswith("tailwise serve-demo")]
    assert len(runs) == 1, commands  # one command per checked example
    expected = ex.exit_code
    if "echo $?" in commands:
        expected = int(shown.pop())
    port = target(ex.target)
    line = _command(runs[0], port, tmp_path / "out")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # as piped into a file
    p = subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    got = (p.stdout + p.stderr).splitlines()
    if port is not None:  # the document's port, back in the real output
        doc_port = re.search(r"127\.0\.0\.1:(\d+)", runs[0])
        assert doc_port is not None
        got = [ln.replace(f"127.0.0.1:{port}", f"127.0.0.1:{doc_port.group(1)}") for ln in got]
    if expected is not None and "|" not in runs[0]:
        assert p.returncode == expected, f"{name}: exit {p.returncode}\n{p.stderr}"
    _agree(name, ex, shown, got)
