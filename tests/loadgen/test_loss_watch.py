"""The SLO-loss watch (knee trials) under ``--warmup auto``, the default.

The summary judges the window past MSER-5's transient, which may cut up to half of the
window's successful requests. A watch that counted misses from the start would stop a
trial whose slow cold start the summary cuts, and report it lost while its own summary
passes. The latency law is the fake transport's, so the truth is known.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tailwise.loadgen.prepare.plan import loss_watch
from tailwise.loadgen.runner import RunOptions, execute, prepare
from tailwise.loadgen.transport import FakeTransport
from tests.clirun import run_cli

MS = 1_000_000


def _trial(rate: str, slo: str = "p99(latency)<=50ms", **kw: object) -> RunOptions:
    kw.setdefault("duration", "5s")
    return RunOptions(
        urls=["http://127.0.0.1:9/x"],
        rate=rate,
        slo=[slo],
        stop_on_slo_loss=True,
        **kw,  # type: ignore[arg-type]
    )


def test_a_slow_cold_start_that_the_summary_cuts_does_not_stop_the_trial(
    tmp_path: Path,
) -> None:
    """The first 400 answers take 300 ms, the rest 2 ms: 400 misses are more than the 261
    a p95 may lose in 5,000 requests, so a watch counting from the start stopped this
    trial after its first second, "lost", while its summary would cut the cold start and
    pass it. Now it runs to its end and is judged by its summary alone: a pass, or
    undecided where MSER-5's guard does not confirm the cut (1 of 3 tries: the step then
    reads as autocorrelation), never a loss. (A p95, not a p99: after the cold start a
    host stall on a busy machine must not lose it either.)"""

    def law(seq: int) -> tuple[int, int, str]:
        return ((300 if seq < 400 else 2) * MS, 200, "")

    opts = _trial("1000/s", "p95(latency)<=50ms")
    res = execute(prepare(opts), tmp_path, transport=FakeTransport(law))
    s = res.summary
    assert not s["stopped_early"], s["verdict_reason"]
    assert s["window"]["end_s"] == pytest.approx(5.0, abs=0.05)
    assert s["warmup"]["mode"] == "auto"
    assert s["verdict"] in ("pass", "inconclusive"), (s["verdict_reason"], s["warmup"])


def test_a_lost_trial_still_stops_in_its_second_half(tmp_path: Path) -> None:
    """Every answer 300 ms: lost from the start, but only the requests after the N/2-th
    success are past every cut, so the stop comes after half the window, not after 1 s,
    and the summary of the window it leaves fails too."""

    def law(seq: int) -> tuple[int, int, str]:
        return (300 * MS, 200, "")

    res = execute(prepare(_trial("1000/s")), tmp_path, transport=FakeTransport(law))
    s = res.summary
    assert s["verdict"] == "fail" and s["stopped_early"], s["verdict_reason"]
    assert "certain misses" in s["verdict_reason"]
    # n_upper = 5,000 + 3 sqrt(5,000) = 5,212: the 2,606th answer is scheduled near 2.6 s
    assert 2.6 <= s["window"]["end_s"] < 5.0


def test_a_fixed_warmup_is_judged_from_its_end_as_before(tmp_path: Path) -> None:
    """With a fixed warm-up nothing is cut after it: the same lost trial stops after the
    window's first second, as it always did."""

    def law(seq: int) -> tuple[int, int, str]:
        return (300 * MS, 200, "")

    opts = _trial("1000/s", warmup="0.5s")
    res = execute(prepare(opts), tmp_path, transport=FakeTransport(law))
    s = res.summary
    assert s["verdict"] == "fail" and s["stopped_early"], s["verdict_reason"]
    assert s["window"]["end_s"] < 2.6


def test_several_processes_need_a_fixed_warmup_to_stop_early(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No process sees the ranks that tell which requests no cut can reach: asked for
    with --warmup auto over several processes, the early stop is refused before anything
    is sent (a knee search, where it is on by default, says so and goes without it)."""
    argv = ["run", "http://127.0.0.1:9/x", "--rate", "10/s", "--duration", "2s"]
    argv += ["--workers", "2", "--stop-on-slo-loss", "--slo", "p99(latency)<=50ms"]
    code, out, err = run_cli([*argv, "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--stop-on-slo-loss" in err and "fixed --warmup" in err and "Traceback" not in err
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").rglob("records.jsonl"))
    fixed = prepare(_trial("100/s", workers=2, warmup="1s"))
    assert fixed.scaled_out and loss_watch(fixed) is not None


def test_a_knee_over_several_processes_with_auto_warmup_says_it_goes_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["knee", "http://127.0.0.1:9/x", "--workers", "2", "--slo", "p99(latency)<=50ms"]
    argv += ["--duration", "1s", "--start", "10/s", "--max-rate", "20/s"]
    argv.append("--no-preflight")  # the note, then trials (the preflight would stop it at once)
    _, _, err = run_cli([*argv, "--out", str(tmp_path)], capsys)
    assert "no early stop over several processes with --warmup auto" in err
    _, _, err = run_cli([*argv, "--warmup", "0.2s", "--out", str(tmp_path / "b")], capsys)
    assert "no early stop" not in err


def test_misses_after_a_quiet_spell_in_the_same_block_are_counted(tmp_path: Path) -> None:
    """At 5/s nearly every answer is in before the next request, so the block being
    filled often has every row finished at a check; the misses of rows added to it later
    must still count (a block's count is kept as final only once the block is full)."""

    def law(seq: int) -> tuple[int, int, str]:
        return ((2 if seq < 20 else 100) * MS, 200, "")

    opts = _trial("5/s", warmup="0.5s", duration="10s")
    res = execute(prepare(opts), tmp_path, transport=FakeTransport(law))
    s = res.summary
    assert s["verdict"] == "fail" and s["stopped_early"], s["verdict_reason"]
    assert s["window"]["end_s"] < 8.0
