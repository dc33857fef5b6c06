"""Bad input, fuzzed: every parser users feed answers with one line of BadInput, never a traceback.

Covered here (tests/test_units.py already fuzzes durations, rates, fractions
and counts one by one): SLO specs, distributions, arrival specs, trace files,
dataset (prompts) files, bodies files, scenario files (text, bytes, and
mappings of real field names with junk values), records files, the proxy's
fault options, and the command line itself, where a BadInput must become exit
code 2 and one line on stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailwise.arrivals import parse_schedule
from tailwise.cli import main
from tailwise.distributions import parse_distribution
from tailwise.errors import BadInput
from tailwise.loadgen.llm import openai
from tailwise.loadgen.sweep import parse_rates
from tailwise.loadgen.transport.targets import parse_header, parse_url, read_bodies_jsonl
from tailwise.metrics.slo import parse_slo
from tailwise.proxy import faults
from tailwise.records import read_jsonl
from tailwise.server.law import parse_law
from tailwise.sim.scenario import load_scenario, parse_scenario

pytestmark = pytest.mark.reliability
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text near the real forms: units, operators, separators, numbers at the edges.
_FORM_PIECES = ["ms", "s", "us", "m", "h", "/s", "%", "x", ":", ",", "-", "@", "+", "<=", ">=",
                "(", ")", "p99", "latency", "ttft", "exp", "lognormal", "gamma", "uniform",
                "const", "poisson", "trace", "stages", "ramp", "0", "1", "-1", "1e400", "nan",
                "inf", ".5", " ", "\n", "\x00", "empirical", "KB", "Mbit", "1%x10"]  # fmt: skip
_PIECES = st.sampled_from(_FORM_PIECES)
near_forms = st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=8).map("".join)
texts = st.one_of(st.text(max_size=40), near_forms)


def one_line_bad_input(call: Callable[[], object]) -> None:
    """``call`` succeeds or raises a one-line BadInput; anything else fails the test."""
    try:
        call()
    except BadInput as exc:
        assert "\n" not in str(exc), str(exc)


@FUZZ
@given(texts)
def test_string_parsers(text: str) -> None:
    rng = random.Random(0)
    for call in (
        lambda: parse_slo(text),
        lambda: parse_distribution(text, "--delay"),
        lambda: parse_schedule(text, None, seed=0, horizon_ns=10**9, max_count=None),
        lambda: parse_schedule("poisson", text, seed=0, horizon_ns=10**9, max_count=None),
        lambda: openai.sample_lengths(text, "--max-tokens", 4, rng),
        lambda: openai.parse_extra_body(text),
        lambda: parse_header(text),
        lambda: parse_url(text),
        lambda: parse_rates(text),
        lambda: parse_law(text, 1, None, 0),
        lambda: parse_law("5ms", 1, text, 0, text),
        lambda: faults.parse_slow(text),
        lambda: faults.parse_stall(text),
        lambda: faults.parse_bandwidth_bps(text),
        lambda: faults.parse_schedule(text),
        lambda: faults.parse_address(text, "--to"),
    ):
        one_line_bad_input(call)


def _file(content: str | bytes, suffix: str) -> Path:
    with tempfile.NamedTemporaryFile(suffix=suffix, delete=False) as fh:
        fh.write(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
    return Path(fh.name)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
dataset_rows = st.dictionaries(
    st.sampled_from(["prompt", "messages", "conversations", "max_tokens", "output_len", "x"]),
    json_values,
).map(json.dumps)
file_lines = st.lists(st.one_of(texts, dataset_rows), max_size=6).map("\n".join)
contents = st.one_of(file_lines, st.binary(max_size=64))


@FUZZ
@given(contents)
def test_user_files(content: str | bytes) -> None:
    path = _file(content, ".jsonl")
    try:
        one_line_bad_input(lambda: openai.read_dataset(str(path)))
        one_line_bad_input(lambda: read_bodies_jsonl(str(path)))
        one_line_bad_input(lambda: read_jsonl(path))
        one_line_bad_input(
            lambda: list(
                parse_schedule(
                    f"trace:{path}", None, seed=0, horizon_ns=None, max_count=50
                ).blocks()
            )
        )
        one_line_bad_input(lambda: parse_distribution(f"empirical:{path}"))
    finally:
        path.unlink()


records_rows = st.fixed_dictionaries(
    {"seq": st.integers(min_value=0, max_value=5)},
    optional={
        name: json_values
        for name in ("worker", "scheduled_ns", "done_ns", "error", "chunk_times", "in_window")
    },
).map(json.dumps)


@FUZZ
@given(st.lists(records_rows, min_size=1, max_size=4))
def test_records_files_with_odd_values(rows: list[str]) -> None:
    path = _file("\n".join(rows) + "\n", ".jsonl")
    try:
        one_line_bad_input(lambda: read_jsonl(path))
    finally:
        path.unlink()


_SCENARIO_KEYS = ["name", "arrival", "service", "replicas", "servers", "routing", "batching",
                  "slo", "hedge", "fanout", "straggler", "failures", "autoscale", "stages",
                  "llm", "delay", "seed"]  # fmt: skip
scenarios = st.dictionaries(st.sampled_from(_SCENARIO_KEYS), st.one_of(json_values, texts))


@FUZZ
@given(st.one_of(contents, scenarios.map(yaml.safe_dump)), st.sampled_from([".yaml", ".toml"]))
def test_scenario_files(content: str | bytes, suffix: str) -> None:
    path = _file(content, suffix)
    try:
        one_line_bad_input(lambda: load_scenario(path))
    finally:
        path.unlink()


@FUZZ
@given(scenarios)
def test_scenario_fields(data: dict[str, Any]) -> None:
    one_line_bad_input(lambda: parse_scenario(data))


def cli(argv: list[str]) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stderr)."""
    err = io.StringIO()
    with (
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
        pytest.raises(SystemExit) as exited,
    ):
        main(argv)
    code = exited.value.code
    assert isinstance(code, int)
    return code, err.getvalue()


# An output directory that cannot be made: a run whose options are all valid stops
# there with exit 2 too, so no case here ever sends a request or binds a port.
NOWHERE = "/dev/null/nowhere"
RUN_OPTIONS = ["--rate", "--duration", "--warmup", "--timeout", "--slo", "--arrival",
               "--requests", "--attainment", "--max-in-flight", "--concurrency", "--header",
               "--workers", "--grace", "--max-send-lag"]  # fmt: skip
LLM_OPTIONS = ["--max-tokens", "--input-tokens", "--extra-body", "--shared-prefix"]
PROXY_OPTIONS = ["--delay", "--stall", "--slow", "--reset", "--drop", "--truncate",
                 "--bandwidth", "--schedule", "--listen", "--to", "--lifetime"]  # fmt: skip


def exits_2_in_one_line(argv: list[str]) -> None:
    code, err = cli(argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("tailwise: error:"), (argv, err)


@FUZZ
@given(st.sampled_from(RUN_OPTIONS + LLM_OPTIONS), texts.filter(lambda t: not t.startswith("-")))
def test_cli_run_options(option: str, value: str) -> None:
    argv = ["run", "http://127.0.0.1:9/", option, value, "--out", NOWHERE, "-q"]
    if option in LLM_OPTIONS:
        argv += ["--api", "openai-chat", "--model", "m"]
    exits_2_in_one_line(argv)


@FUZZ
@given(st.sampled_from(PROXY_OPTIONS), texts.filter(lambda t: not t.startswith("-")))
def test_cli_proxy_options(option: str, value: str) -> None:
    argv = ["proxy", "--to", "127.0.0.1:9", "--listen", "127.0.0.1:0", option, value]
    exits_2_in_one_line([*argv, "--log", f"{NOWHERE}/truth.jsonl", "--lifetime", "1ms"])


@FUZZ
@given(contents)
def test_cli_files(content: str | bytes) -> None:
    path = _file(content, ".jsonl")
    try:
        base = ["run", "http://127.0.0.1:9/", "--out", NOWHERE, "-q"]
        exits_2_in_one_line([*base, "--arrival", f"trace:{path}"])
        exits_2_in_one_line([*base, "--bodies", str(path)])
        exits_2_in_one_line([*base, "--api", "openai-chat", "--model", "m", "--prompts", str(path)])
        scenario = path.rename(path.with_suffix(".yaml"))
        path = scenario
        exits_2_in_one_line(["simulate", str(scenario), "--out", NOWHERE, "-q"])
    finally:
        path.unlink()
