"""tailwise export: a run's records as CSV or Parquet, with derived columns in ms."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tailwise.cli import main
from tailwise.records import INT_COLUMNS, error_code, format_rows, read_jsonl
from tailwise.report.export import columns, export


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def as_int(cell: str) -> int:
    """The records' convention: an empty cell is an absent value, -1 in memory."""
    return -1 if cell == "" else int(cell)


def test_csv_holds_every_record_and_the_derived_latency(real_run: Path) -> None:
    main(["export", str(real_run), "--format", "csv"])
    rows = read_csv(real_run / "records.csv")
    rec = read_jsonl(real_run / "records.jsonl")
    assert len(rows) == len(rec) == 60
    for name in INT_COLUMNS:
        assert [as_int(r[name]) for r in rows] == getattr(rec, name).tolist(), name
    assert [r["error"] for r in rows] == rec.error_kinds
    assert [r["in_window"] == "true" for r in rows] == rec.in_window.tolist()
    for r in rows:
        if r["error"]:  # the HTTP 500s: no latency, but a send lag
            assert r["status"] == "500" and r["latency_ms"] == r["service_ms"] == ""
            assert float(r["send_lag_ms"]) >= 0
        else:
            latency_ns = int(r["done_ns"]) - int(r["scheduled_ns"])
            assert float(r["latency_ms"]) == latency_ns / 1e6
            service_ns = int(r["done_ns"]) - int(r["sent_ns"])
            assert float(r["service_ms"]) == service_ns / 1e6
        assert r["ttft_ms"] == "" and r["chunk_times"] == ""  # not an LLM run


def llm_run(tmp_path: Path) -> Path:
    """Three LLM-style records written by the records formatter: ok, ok, timed out."""
    cols = {c: np.full(3, -1, dtype=np.int64) for c in INT_COLUMNS}
    cols["seq"] = np.arange(3, dtype=np.int64)
    cols["worker"][:] = 0
    cols["scheduled_ns"] = np.array([0, 10, 20], dtype=np.int64) * 1_000_000
    cols["sent_ns"] = cols["scheduled_ns"] + 100_000
    cols["first_token_ns"] = cols["scheduled_ns"] + np.array([30, 45, -1]) * 1_000_000
    cols["first_token_ns"][2] = -1
    cols["done_ns"] = cols["scheduled_ns"] + 80_000_000
    cols["done_ns"][2] = -1
    cols["output_tokens"] = np.array([3, 2, -1], dtype=np.int64)
    chunks = [[30_000_000, 55_000_000, 80_000_000], [55_000_000, 90_000_000], None]
    errors = [error_code(k) for k in ("", "", "timeout")]
    text = format_rows(cols, errors, chunks, [True, True, True], [0, 0, 0])
    run = tmp_path / "llm"
    run.mkdir()
    (run / "records.jsonl").write_text(text)
    return run


def test_csv_ttft_and_chunk_times_of_an_llm_run(tmp_path: Path) -> None:
    run = llm_run(tmp_path)
    path, n = export(run, "csv", tmp_path / "out.csv")
    assert (path, n) == (tmp_path / "out.csv", 3)
    rows = read_csv(path)
    assert [r["ttft_ms"] for r in rows] == ["30.0", "45.0", ""]
    assert [r["latency_ms"] for r in rows] == ["80.0", "80.0", ""]
    assert [r["error"] for r in rows] == ["", "", "timeout"]
    assert json.loads(rows[0]["chunk_times"]) == [30_000_000, 55_000_000, 80_000_000]
    assert rows[2]["chunk_times"] == "" and rows[2]["done_ns"] == ""


def test_parquet_round_trips_when_pyarrow_is_installed(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    run = llm_run(tmp_path)
    path, n = export(run, "parquet")
    assert path == run / "records.parquet" and n == 3
    table = pq.read_table(path)
    assert table.to_pydict() == columns(read_jsonl(run / "records.jsonl"))
    chunk_type = table.schema.field("chunk_times").type
    assert str(chunk_type.value_type) == "int64" and chunk_type.num_fields == 1
    assert table.column("ttft_ms").to_pylist() == [30.0, 45.0, None]


def test_parquet_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    run = llm_run(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["export", str(run), "--format", "parquet"])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "tailwise: error: --format parquet: got 'module pyarrow not installed', "
        "expected pip install 'tailwise[parquet]'"
    ]
    assert not (run / "records.parquet").exists()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["{tmp}"], "DIR: got"),  # no records.jsonl there
        (["{tmp}/llm", "--format", "xlsx"], "--format"),
        (["{tmp}/llm", "--out", "{tmp}/no/such/dir/x.csv"], "--out"),
    ],
)
def test_bad_export_input_exits_2(
    args: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    llm_run(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["export", *(a.format(tmp=tmp_path) for a in args)])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and lines[0].startswith("tailwise: error:")
