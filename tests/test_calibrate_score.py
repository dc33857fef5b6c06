"""One score for every decision: a model with the wrong capacity is never kept silently.

The truth is an LLM step law we chose (16 slots, so capacity is where 16
sequences decode at once), swept from calm to past saturation. Two wrong
models bracket it: one with three times the slots (the calm steps, where
fewer than 16 sequences run, cannot tell it apart; past saturation it serves
far more than the server did), one with a step 15% slower (a little off
everywhere, capacity close). Scored on the calm percentiles alone, the first
wins; the one objective the search and the keep-or-replace check share says
the second, and the first is POOR, with a note saying why.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tailwise.calibrate.fit import POOR_CAPACITY, goodness, objective
from tailwise.calibrate.steps import load_steps
from tests.test_calibrate import simulated_sweep

LAW = {
    "base": "4ms",
    "prefill_per_token": "0.02ms",
    "decode_per_seq": "0.3ms",
    "max_num_seqs": 16,
    "prompt_tokens": "uniform:32-512",
    "output_tokens": 32,
}
TRUTH: dict[str, Any] = {"llm": LAW, "delay": "2ms"}
REQUESTS = 3000  # per step: enough for the medians compared here


def _with(**llm: Any) -> dict[str, Any]:
    model = copy.deepcopy(TRUTH)
    model["llm"] |= llm
    return model


def test_the_objective_weighs_capacity_where_the_calm_steps_cannot(tmp_path: Path) -> None:
    steps, _ = load_steps([simulated_sweep(tmp_path, TRUTH, [2, 8, 16, 80], 20)])
    assert [s.saturated for s in steps] == [False, False, False, True]
    truth = goodness(TRUTH, steps, REQUESTS)
    roomy = goodness(_with(max_num_seqs=48), steps, REQUESTS)  # 3x the slots
    slow = goodness(_with(base="4.6ms", decode_per_seq="0.345ms"), steps, REQUESTS)
    assert not truth.poor and not truth.capacity_off
    # the calm percentiles alone would keep the model with three times the slots...
    assert roomy.rms_log_error < slow.rms_log_error
    # ...the one objective does not, and the search minimises that same number
    assert slow.objective < roomy.objective
    assert objective(_with(max_num_seqs=48), steps, REQUESTS) == pytest.approx(
        roomy.objective, rel=0.3
    )
    # and a capacity off by more than 20% is POOR, whatever the calm steps say
    assert roomy.rms_log_error < 0.14 and roomy.poor and roomy.capacity_off
    assert roomy.capacity is not None and roomy.capacity[0] == 80
    assert roomy.capacity[1] > POOR_CAPACITY
    [note] = roomy.notes()
    assert "throughput at 80/s is off by +" in note and "POOR" in note
    assert truth.notes() == []
