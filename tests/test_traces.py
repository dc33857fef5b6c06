"""Trace files: offsets, Azure LLM CSV and Mooncake JSONL, with lengths and a speed factor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailwise import traces
from tailwise.arrivals import parse_schedule
from tailwise.errors import BadInput
from tailwise.loadgen.prepare.trace_bodies import BLOCK_WORDS, rows_used, trace_prompts
from tailwise.traces import parse_speed, read_trace

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "traces"


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_azure_csv_sample() -> None:
    t = read_trace(str(EXAMPLES / "azure_llm_sample.csv"))
    assert t.form == "csv" and len(t.offsets_ns) == 10
    # 18:15:46.6805900 -> 18:15:50.9951690: 4.314579 s, to the 100 ns the file has
    assert t.offsets_ns[:2] == (0, 4_314_579_000)
    assert t.offsets_ns[-1] == 8_638_412_000
    assert t.input_lengths is not None and t.input_lengths[:3] == (374, 396, 879)
    assert t.output_lengths is not None and t.output_lengths[-1] == 27
    assert t.hash_ids is None


def test_mooncake_jsonl_sample() -> None:
    t = read_trace(str(EXAMPLES / "mooncake_sample.jsonl"))
    assert t.form == "jsonl"
    assert t.offsets_ns[:3] == (0, 310_000_000, 725_000_000)  # timestamps in ms
    assert t.input_lengths is not None and t.input_lengths[0] == 1200
    assert t.output_lengths is not None and sum(t.output_lengths) == 256
    assert t.hash_ids is not None and t.hash_ids[1] == (0, 1, 3)


def test_csv_with_seconds_and_no_lengths(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "time,user\n10.5,a\n11,b\n\n13.25,c\n")
    t = read_trace(path)
    assert t.offsets_ns == (0, 500_000_000, 2_750_000_000)
    assert t.input_lengths is None and t.output_lengths is None


def test_plain_offsets_keep_working(tmp_path: Path) -> None:
    path = write(tmp_path, "t.txt", "# offsets\n0.5\n750ms\n")
    assert read_trace(path).offsets_ns == (500_000_000, 750_000_000)  # absolute, as written


def test_speed_divides_offsets() -> None:
    path = str(EXAMPLES / "mooncake_sample.jsonl")
    s = parse_schedule(
        f"trace:{path}", None, seed=0, horizon_ns=None, max_count=None, trace_speed=2.0
    )
    assert s.offsets_ns().tolist()[:3] == [0, 155_000_000, 362_500_000]
    assert parse_speed("2x") == 2.0 and parse_speed("0.5") == 0.5 and parse_speed(None) == 1.0


@pytest.mark.parametrize("bad", ["0x", "-2x", "fast", "nanx", "1e9x"])
def test_bad_speed(bad: str) -> None:
    with pytest.raises(BadInput, match="--trace-speed"):
        parse_speed(bad)


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("a.csv", "when,ContextTokens\n1,2\n", r"a\.csv:1"),  # no timestamp column
        ("b.csv", "timestamp,ContextTokens\n1,2\n2,-5\n", r"b\.csv:3 contexttokens"),
        ("c.csv", "timestamp,ContextTokens\n1,2\n2,2.5\n", r"c\.csv:3"),
        ("d.csv", "timestamp,ContextTokens\n5,2\n4,2\n", r"d\.csv:3"),  # out of order
        ("e.csv", "timestamp,ContextTokens\n1,2,3\n", r"e\.csv:2"),  # a column too many
        ("f.csv", "TIMESTAMP,GeneratedTokens\n2023-13-01 00:00:00,1\n", r"f\.csv:2"),
        ("g.jsonl", '{"timestamp": 1}\n[1, 2]\n', r"g\.jsonl:2"),
        ("h.jsonl", '{"timestamp": 1}\n{"time": 2}\n', r"h\.jsonl:2"),
        ("i.jsonl", '{"timestamp": "soon"}\n', r"i\.jsonl:1 timestamp"),
        ("j.jsonl", '{"timestamp": 1, "input_length": 1e12}\n', r"j\.jsonl:1 input_length"),
        ("k.jsonl", '{"timestamp": 1, "hash_ids": ["x"]}\n', r"k\.jsonl:1 hash_ids"),
        ("l.jsonl", '{"timestamp": 1, "input_length": 3}\n{"timestamp": 2}\n', "every row"),
        ("m.jsonl", "{not json\n", r"m\.jsonl:1"),
        ("n.jsonl", "", "at least one row"),
    ],
)
def test_hostile_files_are_one_line_errors(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    with pytest.raises(BadInput, match=where) as err:
        read_trace(write(tmp_path, name, text))
    assert "\n" not in str(err.value)


def test_row_and_size_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = "".join(json.dumps({"timestamp": i}) + "\n" for i in range(20))
    path = write(tmp_path, "big.jsonl", rows)
    monkeypatch.setattr(traces, "MAX_ROWS", 10)
    with pytest.raises(BadInput, match="at most 10 rows"):
        read_trace(path)
    monkeypatch.setattr(traces, "MAX_BYTES", 100)
    with pytest.raises(BadInput, match="MiB"):
        read_trace(path)
    with pytest.raises(BadInput, match="readable"):
        read_trace(str(tmp_path / "missing.csv"))


def test_prompts_have_the_rows_lengths_and_shared_blocks() -> None:
    t = read_trace(str(EXAMPLES / "mooncake_sample.jsonl"))
    prompts = trace_prompts(t, len(t.offsets_ns), seed=3)
    assert t.input_lengths is not None
    assert [len(p.split()) for p in prompts] == list(t.input_lengths)
    words = [p.split() for p in prompts]
    # rows 0 and 1 share blocks 0 and 1 (1024 words), then differ (block 2 vs 3)
    assert words[0][: 2 * BLOCK_WORDS] == words[1][: 2 * BLOCK_WORDS]
    assert words[0][2 * BLOCK_WORDS : 1200] != words[1][2 * BLOCK_WORDS : 1200]
    # row 3 has row 0's blocks: row 0's prompt is its prefix
    assert words[3][:1200] == words[0]
    assert words[2][:BLOCK_WORDS] == words[7]  # block 4, alone
    assert trace_prompts(t, 8, seed=3) == prompts  # deterministic for a seed


def test_rows_used_follow_the_runs_bounds() -> None:
    t = read_trace(str(EXAMPLES / "mooncake_sample.jsonl"))
    assert rows_used(t, None, None) == 8
    assert rows_used(t, 1_000_000_000, None) == 3  # offsets 0, 0.31, 0.725 s
    assert rows_used(t, None, 5) == 5
    assert rows_used(t.sped_up(10.0), 1_000_000_000, None) == 8


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet='0123456789.,:- TZtimesaContxkn"', max_size=40),
            st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens", "timestamp", "1,2,3"]),
        ),
        max_size=6,
    ),
    st.sampled_from([".csv", ".jsonl", ".txt"]),
)
def test_any_file_is_a_trace_or_one_line_of_bad_input(lines: list[str], suffix: str) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as f:
        f.write("\n".join(lines))
    try:
        t = read_trace(f.name)
        assert list(t.offsets_ns) == sorted(t.offsets_ns) and len(t.offsets_ns) >= 1
    except BadInput as exc:
        assert "\n" not in str(exc)
    finally:
        Path(f.name).unlink()
