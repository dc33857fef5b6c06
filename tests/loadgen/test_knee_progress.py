"""A knee search's live lines: one trial numbering across phases, and each SLO's own metric.

Against the demo LLM server with a TTFT SLO: the live line shows TTFT p99 beside
the end-to-end p99 (a 1 s e2e p99 beside a 200 ms TTFT SLO read as a violation),
and the settling trials go on from the steering trials' numbers ("trial 5", not a
second "trial 1"), in the live label and in their directories' names.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path


def test_a_ttft_knee_numbers_its_trials_once_and_shows_ttft_live(llm: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "tailwise", "knee", llm, "--api", "openai-chat"]
    argv += ["--model", "tailwise-demo", "--max-tokens", "16", "--slo", "p99(ttft)<=200ms"]
    argv += ["--start", "40/s", "--max-rate", "200/s", "--duration", "1s", "--progress"]
    p = subprocess.run([*argv, "--out", str(tmp_path)], capture_output=True, text=True)
    assert p.returncode in (0, 3), p.stderr
    live = [ln for ln in p.stderr.splitlines() if re.match(r"  trial \d+: ", ln)]
    assert live, p.stderr
    assert all("ttft p99" in ln and "e2e p99" in ln for ln in live), live[:3]
    numbers = [int(re.match(r"  trial (\d+): ", ln).group(1)) for ln in live]  # type: ignore[union-attr]
    firsts = list(dict.fromkeys(numbers))
    doc = json.loads((tmp_path / "knee.json").read_text())
    assert firsts == list(range(1, len(doc["trials"]) + 1)), firsts
    assert numbers == sorted(numbers)  # never back to "trial 1"
    phases = {t["phase"] for t in doc["trials"]}
    dirs = sorted(d.name for d in tmp_path.iterdir() if d.is_dir())
    taken = [int(d.split("-")[1]) for d in dirs]
    assert sorted(taken) == list(range(1, len(dirs) + 1)), dirs  # one numbering for both
    assert any(d.startswith("settle-") for d in dirs) or phases <= {"bracket", "bisect"}
