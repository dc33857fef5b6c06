"""Replace (or append) one benchmark's marked block in docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def splice(text: str, begin: str, end: str, block: str) -> str:
    """``text`` with the span from ``begin`` to ``end`` replaced by ``block`` (or appended)."""
    if begin in text:
        return text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    return text.rstrip() + "\n\n" + block + "\n"


def write_block(begin: str, end: str, block: str) -> None:
    DOCS.write_text(splice(DOCS.read_text(), begin, end, block))
    print(f"wrote {DOCS.relative_to(DOCS.parent.parent)}")


def machine_label() -> str:
    """The machine line every benchmark block states."""
    return f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"
