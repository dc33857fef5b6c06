"""User mistakes that were tracebacks (exit 4) and are now one line and exit 2 (issue 21).

Also: LatencyTracker refuses values that would poison its percentiles, ``--ray
local`` binds loopback, and an error message quotes at most a short, clean
excerpt of a file or a value.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest

from tailwise.errors import EXCERPT_CHARS, BadInput, excerpt
from tailwise.instrument.tracker import LatencyTracker
from tailwise.loadgen.runner import RunOptions, execute, prepare
from tailwise.loadgen.scale import ray_workers
from tailwise.loadgen.transport import FakeTransport
from tailwise.loadgen.transport.targets import parse_url, render
from tests.clirun import run_cli

pytestmark = pytest.mark.reliability
URL = "http://127.0.0.1:9/"


# ---- URLs ------------------------------------------------------------------------------


def test_non_ascii_path_is_percent_encoded_on_the_wire() -> None:
    """``/café€`` was a UnicodeEncodeError per run; curl sends it as UTF-8 %-escapes."""
    t = parse_url("http://127.0.0.1:9/café€?q=é")
    assert t.path == "/caf%C3%A9%E2%82%AC?q=%C3%A9"
    head = render(t, "GET", [], None)
    assert head.startswith(b"GET /caf%C3%A9%E2%82%AC?q=%C3%A9 HTTP/1.1\r\n")


def test_an_idn_host_goes_out_in_its_ascii_form() -> None:
    t = parse_url("http://bücher.example:8080/x")
    assert t.host == "xn--bcher-kva.example" and t.port == 8080
    assert b"Host: xn--bcher-kva.example:8080\r\n" in render(t, "GET", [], None)


def test_escapes_already_made_are_kept_and_control_characters_are_encoded() -> None:
    assert parse_url("http://h/a%20b").path == "/a%20b"
    assert parse_url("http://h/a\x01b").path == "/a%01b"  # never raw on the request line


@pytest.mark.parametrize("url", ["http://\u00ff\u0000bad/", "http://a b/", "http://\u2028x/"])
def test_hosts_no_encoding_can_fix_are_bad_input(url: str) -> None:
    with pytest.raises(BadInput, match="URL"):
        parse_url(url)


def test_seed_minus_one_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", URL, "--rate", "1/s", "--duration", "1s", "--seed", "-1"]
    code, _, err = run_cli([*argv, "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and err.startswith("tailwise: error: --seed: got -1"), err


# ---- summaries read back ---------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("run")
    opts = RunOptions(urls=[URL], rate="100/s", requests=10, arrival="constant", progress=False)
    execute(prepare(opts), directory, transport=FakeTransport(lambda seq: (1_000_000, 200, "")))
    return directory


def _edited(saved: Path, tmp_path: Path, edit: Any) -> Path:
    copy = tmp_path / "edited"
    copy.mkdir(parents=True)
    for f in saved.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    text = (saved / "summary.json").read_text()
    (copy / "summary.json").write_text(edit(text) if callable(edit) else edit)
    return copy


def _set(key: str, value: Any) -> Any:
    def edit(text: str) -> str:
        doc = json.loads(text)
        doc[key] = value
        return json.dumps(doc)

    return edit


def _set_count(value: Any) -> Any:
    def edit(text: str) -> str:
        doc = json.loads(text)
        doc["requests"]["scheduled"] = value
        return json.dumps(doc)

    return edit


CORRUPT = {
    "truncated": lambda text: text[: len(text) // 2],
    "empty": "",
    "not json": "xx{",
    "a list": "[1, 2]",
    "requests null": _set("requests", None),
    "a count of HTML": _set_count("<img src=x onerror=alert(document.domain)>"),
    "a negative count": _set_count(-5),
    "window a string": _set("window", "x"),
    "latency a list": _set("latency_ms", [1]),
    "rates a number": _set("rates", 5),
    "a NaN rate": lambda text: text.replace('"offered_rps": 100.0', '"offered_rps": NaN'),
    "an odd verdict": _set("verdict", "maybe"),
}


@pytest.mark.parametrize("case", list(CORRUPT))
@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_corrupt_summary_is_one_line(
    case: str,
    command: str,
    saved_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = _edited(saved_run, tmp_path, CORRUPT[case])
    argv = (
        ["report", str(bad), "-q"] if command == "report" else ["compare", str(saved_run), str(bad)]
    )
    code, _, err = run_cli(argv, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "summary.json" in err


def test_a_good_summary_still_passes_the_check(saved_run: Path) -> None:
    from tailwise.metrics.shape import check_summary

    doc = json.loads((saved_run / "summary.json").read_text())
    assert check_summary(doc, "DIR") is doc


def test_calibrate_on_corrupt_summaries_is_one_line(
    saved_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for case in ("truncated", "a list", "requests null"):
        bad = _edited(saved_run, tmp_path / case.replace(" ", "-"), CORRUPT[case])
        code, _, err = run_cli(["calibrate", str(bad), "-o", str(tmp_path / "m.yaml")], capsys)
        assert code == 2 and err.count("\n") == 1, (case, err)


def test_calibrate_llm_on_an_http_run_is_one_line(
    saved_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["calibrate", str(saved_run), "--kind", "llm", "-o", str(tmp_path / "m.yaml")]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1, err


# ---- LatencyTracker --------------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, 2**63, True, "5", None])
def test_tracker_refuses_values_that_poison_percentiles(value: Any) -> None:
    t = LatencyTracker()
    t.record(5_000_000)
    with pytest.raises(BadInput, match="latency_ns"):
        t.record(value)
    with pytest.raises(BadInput, match="latency_ns"):
        t.record_stage("db", value)
    t.record(7_000_000)  # the tracker is unharmed and goes on
    t.record(2.5e6)  # a finite float is rounded to whole ns


# ---- Ray on loopback -------------------------------------------------------------------


class FakeRay:
    """ray's surface that connect() touches, recording what init saw."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.seen: list[tuple[str | None, bool]] = []
        self._private = types.SimpleNamespace(
            ray_constants=types.SimpleNamespace(ENABLE_RAY_CLUSTER=True)
        )

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        flag = self._private.ray_constants.ENABLE_RAY_CLUSTER
        self.seen.append((os.environ.get(ray_workers.RAY_CLUSTERS_ENV), flag))


def test_ray_local_binds_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the local cluster starts, Ray is told to keep to loopback (its servers
    otherwise listen on every interface); the switches are restored afterwards."""
    monkeypatch.delenv(ray_workers.RAY_CLUSTERS_ENV, raising=False)
    ray = FakeRay()
    assert ray_workers.connect(ray, "local") is True
    assert ray.calls == [{"include_dashboard": False, "_node_ip_address": "127.0.0.1"}]
    assert ray.seen == [("0", False)]
    assert ray_workers.RAY_CLUSTERS_ENV not in os.environ
    assert ray._private.ray_constants.ENABLE_RAY_CLUSTER is True


@pytest.mark.long
def test_ray_local_listens_on_loopback_only() -> None:
    """The real thing: every socket a local Ray cluster listens on is 127.0.0.1."""
    ray = pytest.importorskip("ray")
    if shutil.which("ss") is None or ray.is_initialized():
        pytest.skip("needs ss and no Ray session yet")
    ray_workers.connect(ray, "local")
    try:
        listening = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
        ours = [
            line.split()[3]
            for line in listening.splitlines()
            if any(name in line for name in ("gcs_server", "raylet", "ray::"))
        ]
        assert ours and all("127.0.0.1" in addr for addr in ours), ours
    finally:
        ray.shutdown()


def test_ray_auto_joins_the_running_cluster_as_configured() -> None:
    ray = FakeRay()
    ray_workers.connect(ray, "auto")
    assert ray.calls == [{"address": "auto"}]


# ---- excerpts in error messages --------------------------------------------------------


def test_an_excerpt_is_short_and_clean() -> None:
    nasty = "root:x:0:0\x1b[31m\r\nroot\x07" + "y" * 500
    shown = excerpt(nasty)
    assert len(shown) <= EXCERPT_CHARS and shown.endswith("...")
    assert all(c.isprintable() for c in shown)


def test_a_trace_file_line_is_quoted_as_an_excerpt(tmp_path: Path) -> None:
    """``trace:/etc/passwd`` printed the file's first line whole; now a short, clean excerpt."""
    from tailwise.arrivals import read_trace_ns

    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:" + "A" * 300 + "\x1b]0;pwned\x07:/bin/bash\n")
    with pytest.raises(BadInput) as caught:
        read_trace_ns(str(secret))
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message and "\x07" not in message
    assert "A" * 100 not in message and "/bin/bash" not in message


def test_a_long_given_value_is_cut() -> None:
    exc = BadInput("--header", "v" * 10_000 + "\n", "'Name: value'")
    assert len(str(exc)) < 200 and "\n" not in str(exc)
