"""``make bench``: every benchmark, each writing its numbers into docs/benchmarks.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [
    ["wrk_vs_tailwise.py", "--write-docs"],
    ["llm_client_overhead.py", "--write-docs"],
    ["stream_scale.py", "--write-docs"],  # about three minutes (more with GuideLLM installed)
    ["knee_accuracy.py", "--write-docs"],
    ["sim_vs_simpy.py", "--write-docs"],
    ["calibrate_predict.py", "--write-docs"],
    ["calibrate_llama.py", "--write-docs"],  # builds llama-server once; about 20 minutes
    ["calibrate_paged.py", "--write-docs"],  # about fifteen minutes on two cores
    ["calibrate_cross.py", "--write-docs"],  # about ten minutes on two cores
    ["calibrate_llama_cross.py", "--write-docs"],  # llama-server; about 25 minutes
    ["instrument_overhead.py", "--write-docs"],
    ["scale_local.py", "--write-docs"],
    ["reliability_table.py", "--write-docs"],
    ["ci_coverage.py", "--write-docs"],  # about four minutes on two cores
    ["validation_grid.py", "--write-docs"],  # ~30 min on two cores (+10 once: the truth)
    ["quick_decisions.py", "--write-docs"],  # about two minutes
    ["knee_emulated.py", "--searches", "100", "--write-docs"],  # under a minute
    ["knee_default.py", "--write-docs"],  # about 20 minutes: real knee searches
    ["soak.py", "--write-docs"],  # ten minutes
]

if __name__ == "__main__":
    for script, *args in BENCHMARKS:
        print(f"== {script}", flush=True)
        subprocess.run([sys.executable, str(HERE / script), *args], check=True)
