"""``--duration auto``: a run lasts until every SLO is decided, or to its cap.

Each server's latency law is set by the test (the loopback target: fixed or
exponential service, unlimited workers), so what the sample must decide is
known: a p99 far inside its threshold passes early, one far outside fails
early, and one at the threshold cannot be decided before the cap.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tailwise.loadgen.engine.watch import FIRST_LOOK, plan_looks
from tailwise.loadgen.runner import RunOptions, execute, prepare
from tailwise.loadgen.transport import FakeTransport
from tests.clirun import oversubscribed, run_cli

MS = 1_000_000


def test_looks_double_and_spend_the_error_by_size() -> None:
    looks = plan_looks(3000.0)
    assert looks.sizes == (FIRST_LOOK, 256, 512, 1024, 2048)
    assert looks.count == 6  # five looks while running, and the final summary
    # each look spends the run's 5% in proportion to its size; the final, the cap's 3,000
    total = 128 + 256 + 512 + 1024 + 2048 + 3000
    errors = [1 - c for c in looks.confidences]
    assert errors == pytest.approx([0.05 * k / total for k in (128, 256, 512, 1024, 2048, 3000)])
    assert sum(errors) == pytest.approx(0.05)  # the whole run's error, as asked
    assert looks.confidence == looks.confidences[-1] == pytest.approx(1 - 0.05 * 3000 / total)
    assert plan_looks(100.0).sizes == () and plan_looks(100.0).confidence == pytest.approx(0.95)
    assert sum(1 - c for c in plan_looks(3000.0, 0.8).confidences) == pytest.approx(0.2)


def _summary(out: Path) -> dict[str, object]:
    doc: dict[str, object] = json.loads((out / "summary.json").read_text())
    return doc


def _auto(url: str, slo: str, out: Path, rate: str = "400/s", cap: str = "40s") -> list[str]:
    return [
        "run", url, "--rate", rate, "--duration", "auto", "--max-duration", cap,
        "--slo", slo, "--out", str(out), "-q",
    ]  # fmt: skip


def test_a_clear_pass_stops_long_before_the_cap(
    loopback: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = loopback("--service", "2ms", "--workers", "0")
    out = tmp_path / "pass"
    # A p90, not a p99: on a busy 2-core machine the client and server stall in bursts
    # of up to a few hundred ms, and a p99 must then honestly wait for more samples.
    code, _, err = run_cli(_auto(url, "p90(latency)<=500ms", out, "200/s"), capsys)
    s = _summary(out)
    seq = s["sequential"]
    assert isinstance(seq, dict) and isinstance(s["window"], dict)
    assert code == 0 and s["verdict"] == "pass", err
    assert seq["settled"] and str(seq["settled"]).startswith("decided after")
    assert seq["decided"] == {"p90(latency)<=500ms": "pass"}  # what the summary honours
    assert not seq["reached_cap"]
    assert s["window"]["duration_s"] < 20  # 40 s allowed; a thousand requests decide
    assert s["confidence"] == pytest.approx(seq["per_look_confidence"][-1])
    assert s["confidence"] > 0.95  # the looks spent the rest of the run's 5%


def test_looks_judge_past_the_cold_start_as_the_summary_does(tmp_path: Path) -> None:
    """The first 300 answers take 300 ms, the rest 2 ms: p90 <= 500 ms holds throughout,
    but judged with the cold start (a level shift the intervals read as autocorrelation)
    the pass took 16,416 requests (look 8) and the summary then cut nothing; judged past
    MSER-5's transient, as the summary is, it took about 1,900 (look 5) on a quiet machine
    and 7,561 in one busy CI run (MSER-5's guard confirms a clean step from about 4,096
    values), and the summary judges the sample the deciding look did."""

    def law(seq: int) -> tuple[int, int, str]:
        return ((300 if seq < 300 else 2) * MS, 200, "")

    opts = RunOptions(
        urls=["http://127.0.0.1:9/x"],
        rate="1000/s",
        duration="auto",
        max_duration="30s",
        slo=["p90(latency)<=500ms"],
    )
    res = execute(prepare(opts), tmp_path, transport=FakeTransport(law))
    s = res.summary
    settled = str(s["sequential"]["settled"])
    assert s["verdict"] == "pass" and settled.startswith("decided after")
    decided_n = int(settled.split()[2])
    assert decided_n < 16_384  # judged with the cold start, not before look 8 (16,384)
    assert s["warmup"]["from_look"] and s["warmup"]["cut_requests"] >= 250
    # the summary's window starts where the deciding look's did, and holds what it judged
    # (plus the rows sent while the look ran: how many depends on the machine's load)
    assert decided_n <= s["requests"]["scheduled"]
    first_kept = int(res.records.scheduled_ns[res.records.in_window].min())
    assert first_kept == pytest.approx(s["warmup"]["start_s"] * 1e9, abs=2 * MS)


def test_a_clear_fail_stops_early_and_fails(
    loopback: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = loopback("--service", "20ms", "--workers", "0")
    out = tmp_path / "fail"
    code, _, err = run_cli(_auto(url, "p99(latency)<=5ms", out), capsys)
    s = _summary(out)
    seq = s["sequential"]
    assert isinstance(seq, dict) and isinstance(s["window"], dict)
    assert code == 1 and s["verdict"] == "fail", err
    assert seq["settled"] and not seq["reached_cap"]
    assert s["window"]["duration_s"] < 20


def test_a_threshold_at_the_true_quantile_runs_to_the_cap_and_is_inconclusive(
    loopback: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Exponential service of mean 10 ms with unlimited workers: latency ~ Exp(10 ms), so
    # its p90 is 10 ms x ln 10 = 23.0 ms. No 2 s sample (400 requests, an interval of
    # about +-4% on the share) can tell p90 <= 23 ms, even with a busy machine's few ms added.
    url = loopback("--service", "exp:10ms", "--workers", "0")
    out = tmp_path / "edge"
    code, _, err = run_cli(_auto(url, "p90(latency)<=23ms", out, "200/s", "2s"), capsys)
    s = _summary(out)
    seq = s["sequential"]
    assert isinstance(seq, dict)
    assert seq["reached_cap"] and seq["settled"] is None
    if code == 3 and s["verdict_cause"] == "client" and oversubscribed(out):
        # Beside four CPU-bound processes (load 6.1 on 2 cores) the client's own lags
        # (send 6 ms, receive 8.8 ms at p99) could flip a p90 measured at 25.2 ms, and it
        # says so: an honest "invalid", which is what such a machine can tell.
        return
    assert code == 5 and s["verdict"] == "inconclusive", err
    assert s["verdict_cause"] == "undecided" and "p90(latency)<=23ms" in str(s["verdict_reason"])


@pytest.mark.parametrize(
    "extra",
    [["--concurrency", "4"], ["--arrival", "stages:10/s@2s,20/s@2s"], ["--workers", "2"]],
)
def test_auto_refuses_what_it_cannot_judge_before_any_traffic(
    extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "http://127.0.0.1:9/x", "--duration", "auto", "--slo", "p99(latency)<=1s"]
    if "--concurrency" not in extra:
        argv += ["--rate", "10/s"] if "--arrival" not in extra else []
    code, _, err = run_cli([*argv, *extra, "--out", str(tmp_path / "x")], capsys)
    assert code == 2 and "--duration" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_one_server_answering_in_order_is_read_by_the_fifo_queue_model(
    loopback: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One worker, exponential service of mean 10 ms, 40/s (40% load): an M/M/1 whose
    p99 is 10 ms x ln(100) / 0.6 = 77 ms, so ``p99(latency)<=250ms`` holds by far.
    Counting misses needs about 2,300 requests to show a 99% share there (a miss comes
    with about five more); read as one server answering in order, the run's own service
    times decide it sooner. Those are read off real loopback timestamps: they must
    average the server's 10 ms, and the answers must come in order."""
    import numpy as np

    from tailwise.metrics.fifo import fifo_queue

    url = loopback("--service", "exp:10ms", "--workers", "1")
    out = tmp_path / "fifo"
    code, _, err = run_cli(_auto(url, "p99(latency)<=250ms", out, "40/s", "90s"), capsys)
    s = _summary(out)
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["in_window"] and not r["error"]]
    sched = np.array([r["scheduled_ns"] for r in rows], dtype=np.int64)
    done = np.array([r["done_ns"] for r in rows], dtype=np.int64)
    queue = fifo_queue(sched, done)
    if oversubscribed(out) and (code != 0 or queue.why_not):
        # Beside CPU-bound processes the client's and the server's stalls blur the order
        # and the service; an undecided or refused run is then what the machine can tell.
        assert s["verdict"] != "fail", err
        return
    assert code == 0 and s["verdict"] == "pass", err
    assert queue.why_not == "", queue.why_not
    assert 0.0085 < float(queue.service_s[~queue.free].mean()) < 0.0125
    entry = s["slos"][0]
    assert entry["decided"] == "pass"
    assert "FIFO queue model" in str(entry["ci_note"]) or len(rows) < 2300, entry["ci_note"]
