"""records.jsonl: valid JSON for every input, a strict reader that forgives only a torn tail."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tailwise.errors import BadInput
from tailwise.records import INT_COLUMNS, error_code, format_rows, read_jsonl


def batch(n: int, kinds: list[str]) -> str:
    cols = {c: np.arange(n, dtype=np.int64) for c in INT_COLUMNS}
    cols["sent_ns"][0] = -1
    return format_rows(
        cols,
        [error_code(k) for k in kinds],
        [None, [1, 2, 3]] * (n // 2),
        [True, False] * (n // 2),
        [0, 1] * (n // 2),
    )


def test_every_line_is_json_even_for_odd_error_kinds() -> None:
    kinds = ['we"ird', "back\\slash", "tab\there", "50%", "", "reset"]
    for line, kind in zip(batch(6, kinds).splitlines(), kinds, strict=True):
        row = json.loads(line)
        assert row["error"] == kind
    assert json.loads(batch(2, ["", ""]).splitlines()[0])["sent_ns"] is None


def test_round_trip_and_torn_last_line(tmp_path: Path) -> None:
    text = batch(4, ["", "timeout", "", "reset"])
    p = tmp_path / "records.jsonl"
    p.write_text(text + text.splitlines()[0][:40])  # a run killed mid-line
    r = read_jsonl(p)
    assert len(r) == 4 and r.error_kinds == ["", "timeout", "", "reset"]
    assert r.chunk_times[1] == [1, 2, 3] and r.capped.tolist() == [0, 1, 0, 1]
    assert r.sent_ns[0] == -1


def test_a_bad_line_in_the_middle_is_an_error_not_a_silent_gap(tmp_path: Path) -> None:
    lines = batch(4, [""] * 4).splitlines()
    p = tmp_path / "records.jsonl"
    p.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(BadInput, match=r"records\.jsonl:2"):
        read_jsonl(p)
    p.write_text('{"seq": null}\n')
    with pytest.raises(BadInput, match="integer seq"):
        read_jsonl(p)
