"""Helpers of the reliability suite (fixtures are in conftest.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tailwise.proxy import spawn_proxy


class Proxies:
    """``proxies(target_url, "--stall", "200ms/1s")`` -> (proxy URL, its ground-truth log).

    :meth:`stop` stops every proxy started so far (SIGTERM: each logs what is open
    and ends its log) and waits, so their logs are complete.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[subprocess.Popen[str]] = []

    def __call__(self, target: str, *faults: str) -> tuple[str, Path]:
        truth = self.folder / f"truth-{len(self.procs)}.jsonl"
        to = target.removeprefix("http://").split("/")[0]
        proc, url = spawn_proxy(to, *faults, "--log", str(truth), lifetime="120s")
        self.procs.append(proc)
        return url, truth

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=10)


def unique_bodies(folder: Path, n: int) -> str:
    """A --bodies file whose bodies all differ in length, so the truth pairs records exactly."""
    path = folder / "bodies.jsonl"
    path.write_text("".join(json.dumps("x" * i) + "\n" for i in range(n)))
    return str(path)
