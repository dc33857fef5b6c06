"""Hostile files (issue 40, D6, D7, D9, D10): each is one line and exit 2, never a traceback,
never read past its bound.

Offsets past int64 nanoseconds, a trace slowed past ten years, JSON nested 100,000 deep in
every file tailwise reads, devices that never end (``/dev/zero``) where a file is read
whole, tampered run, sweep and summary files.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tailwise
from tailwise import files, traces
from tests.clirun import run_cli
from tests.reliability.conftest import Answer, raw_servers

pytestmark = pytest.mark.reliability
DEEP = "[" * 100_000
URL = "http://127.0.0.1:9/x"  # never dialled: each case fails before anything is sent


_SSE = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n'


async def _stream(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    while True:
        head = await r.readuntil(b"\r\n\r\n")
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                await r.readexactly(int(line.split(b":")[1]))
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
        w.write(b"Content-Length: %d\r\n\r\n%s" % (len(_SSE), _SSE))
        await w.drain()


async def _ok(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    while True:
        head = await r.readuntil(b"\r\n\r\n")
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                await r.readexactly(int(line.split(b":")[1]))
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A real run directory and a real sweep directory, made once, copied per case."""
    from tailwise.cli import main

    where = tmp_path_factory.mktemp("made")
    with raw_servers() as start:
        url = start(_ok) + "/x"
        tailwise.run(url, rate="50/s", requests=20, out=str(where / "run"), progress=False)
        tailwise.run(
            start(_stream) + "/v1", api="openai-chat", model="m", rate="50/s", requests=20,
            server_metrics="off", out=str(where / "llm"), progress=False,
        )  # fmt: skip
        with pytest.raises(SystemExit):
            argv = ["sweep", url, "--rates", "20,40", "--duration", "300ms", "-q"]
            main([*argv, "--out", str(where / "sweep")])
    yield {"run": where / "run", "sweep": where / "sweep", "llm": where / "llm"}


def _copy(made: dict[str, Path], kind: str, tmp_path: Path) -> Path:
    to = tmp_path / kind
    shutil.copytree(made[kind], to)
    return to


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *said: str) -> str:
    code, _, err = run_cli(argv, capsys)
    assert code == 2, (code, err)
    assert "Traceback" not in err and err.startswith("tailwise: error: ")
    for text in said:
        assert text in err, err
    return err


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ("0,10,5\n1e11,10,5\n", "a trace spanning at most 10 years"),
        ("0001-01-01 00:00:00,10,5\n9999-12-31 00:00:00,10,5\n", "at most 10 years"),
    ],
)
def test_trace_offsets_past_int64_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str, said: str
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,ContextTokens,GeneratedTokens\n" + rows)
    argv = ["run", URL, "--arrival", f"trace:{trace}", "--out", str(tmp_path / "r")]
    _refused(argv, capsys, said)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"arrival: {{process: 'trace:{trace}'}}\nservice: 5ms\n")
    _refused(["simulate", str(scenario), "--out", str(tmp_path / "s")], capsys, said)


def test_a_trace_slowed_past_ten_years_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,ContextTokens,GeneratedTokens\n0,10,5\n300000000,10,5\n")
    argv = ["run", URL, "--arrival", f"trace:{trace}", "--trace-speed", "0.001x"]
    _refused([*argv, "--out", str(tmp_path / "r")], capsys, "--trace-speed", "within 10 years")


def test_a_bom_before_a_trace_header_is_not_part_of_its_name(
    raw_server: Callable[[Answer], str], tmp_path: Path
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_bytes(
        b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\n"
        b"2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:46.78,396,109\n"
    )
    res = tailwise.run(
        raw_server(_ok) + "/x", arrival=f"trace:{trace}", out=str(tmp_path / "r"), progress=False
    )
    assert res.summary["requests"]["scheduled"] + res.summary["requests"]["warmup"]["scheduled"]


@pytest.mark.parametrize(
    "option",
    [["--bodies", "{f}"], ["--api", "openai-chat", "--model", "m", "--prompts", "{f}"]],
)
def test_json_nested_past_any_depth_in_an_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text(DEEP + "\n")
    argv = ["run", URL, "--rate", "10/s", "--requests", "2", "--out", str(tmp_path / "r")]
    _refused(argv + [o.format(f=deep) for o in option], capsys, f"{deep}:1")


@pytest.mark.parametrize(
    "option",
    [
        ["--bodies", "/dev/zero"],
        ["--body", "@/dev/zero"],
        ["--api", "openai-chat", "--model", "m", "--prompts", "/dev/zero"],
        ["--arrival", "trace:/dev/zero"],
    ],
)
def test_a_device_that_never_ends_is_read_only_to_the_bound(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    option: list[str],
) -> None:
    """Read to the bound (1 MiB here, 256 MiB by default: docs/run.md#limits), then refused."""
    monkeypatch.setattr(files.limits, "MAX_INPUT_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(traces, "MAX_BYTES", 1 << 20)
    argv = ["run", URL, "--rate", "10/s", "--requests", "2", "--out", str(tmp_path / "r")]
    _refused(argv + option, capsys, "at most 1 MiB")


def test_records_that_are_a_device_are_refused(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(made, "run", tmp_path)
    (run / "records.jsonl").unlink()
    (run / "records.jsonl").symlink_to("/dev/zero")
    _refused(["calibrate", str(run), "--out", str(tmp_path / "c.yaml")], capsys, "records")


@pytest.mark.parametrize("name", ["records.jsonl", "summary.json"])
def test_deep_json_in_a_run_directory_is_one_line(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    run = _copy(made, "run", tmp_path)
    with open(run / name, "a" if name == "records.jsonl" else "w") as fh:
        fh.write(DEEP + "\n")
    _refused(["report", str(run)], capsys)
    _refused(["calibrate", str(run), "--out", str(tmp_path / "c.yaml")], capsys)
    if name == "summary.json":
        _refused(["compare", str(run), str(made["run"])], capsys)
    else:
        _refused(["export", str(run)], capsys)
        scenario = tmp_path / "s.yaml"
        scenario.write_text(f"arrival: {{rate: 10/s, requests: 10}}\nservice: 'empirical:{run}'\n")
        _refused(["simulate", str(scenario), "--out", str(tmp_path / "s")], capsys)


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("sweep.json", lambda d: {**d, "steps": {"a": 1}}),
        ("sweep.json", lambda d: DEEP),
        ("run.json", lambda d: {**d, "options": 5}),
    ],
)
def test_tampered_run_and_sweep_files_are_one_line(
    made: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: str,
    change: Callable[[dict[str, object]], object],
) -> None:
    kind = "sweep" if where == "sweep.json" else "run"
    d = _copy(made, kind, tmp_path)
    doc = change(json.loads((d / where).read_text()))
    (d / where).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    _refused(["calibrate", str(d), "--out", str(tmp_path / "c.yaml")], capsys)
    if kind == "sweep":
        _refused(["compare", str(d), str(made["sweep"])], capsys)


def test_a_bad_stream_lab_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tailwise.server import stream_lab

    with pytest.raises(SystemExit) as exited:
        stream_lab.main(["--lifetime", "1100"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--lifetime: got '1100'" in err and "Traceback" not in err


def test_a_shared_prefix_counts_once_per_prompt_it_is_copied_into(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """D8: a million-word prefix, drawn once, is copied into 256 prompts (4.8 GB resident)."""
    argv = ["run", URL, "--api", "openai-chat", "--model", "m", "--shared-prefix", "1000000"]
    _refused([*argv, "--out", str(tmp_path / "r")], capsys, "--shared-prefix", "16,000,000 words")


@pytest.mark.parametrize("kind", ["run", "llm"])
def test_an_empty_records_file_beside_a_summary_still_reports(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """D10: a log-scaled latency chart with no value above 0 raised ValueError (exit 4)."""
    run = _copy(made, kind, tmp_path)
    (run / "records.jsonl").write_text("")
    from tailwise.cli import main

    main(["report", str(run), "-q"])  # returns: no SystemExit (an error would exit 2 or 4)
    assert "Traceback" not in capsys.readouterr().err
    assert (run / "report.html").is_file()
