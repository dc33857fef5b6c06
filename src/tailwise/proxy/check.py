"""Compare a tailwise run with the proxy's ground truth: what was sent, what happened to it.

From the shell: ``python -m tailwise.proxy.check RUN_DIR TRUTH_LOG [--json]``.

Each record is paired with the proxy's line for the same request. The pairing
is exact when every request has its own size (``--bodies`` with bodies of
distinct lengths: ``bytes_out`` on the record equals ``bytes_up`` in the log);
otherwise requests are paired in order (send order against arrival order),
which is only approximate: a request that waits for a new connection (after a
timeout or a reset closed one) reaches the proxy after later ones.

Two facts hold for every pair whatever the machine's load, because both sides
read the same monotonic clock and a response cannot arrive before it left:
the client's service time (``done - sent``) is at least the proxy's residence
time (``out_done - t``), and a request's bytes were forwarded no sooner than
its drawn delay. The rest (how close they are) is a measurement.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailwise.records import Records


@dataclass
class Check:
    """The comparison; ``lost`` counts requests one side has and the other lacks."""

    scheduled: int
    sent: int
    seen_by_proxy: int
    matched: int
    matched_by: str
    unmatched_records: int
    unmatched_truth: int
    # tailwise's error kinds of the sent requests the proxy has no line for (none, normally)
    unmatched_kinds: dict[str, int] = field(default_factory=dict)
    # proxy outcome -> tailwise error kind ("" is ok) -> count
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    # client service time minus proxy residence time over requests answered ok (ms)
    gap_ms: dict[str, float] = field(default_factory=dict)
    causal: bool = True  # service >= residence for every answered pair
    delay_honoured: bool = True  # forwarded no sooner than the drawn delay, every request
    latency_p99_ms: float | None = None  # tailwise's, over ok requests
    truth_p99_ms: float | None = None  # residence + send lag + the pair's gap median

    @property
    def lost(self) -> int:
        return self.unmatched_records + self.unmatched_truth

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "lost": self.lost}


def _pairs(records: Records, truth: list[dict[str, Any]]) -> tuple[list[tuple[int, int]], str]:
    """(record index, truth index) pairs of the requests both sides saw."""
    sent = np.flatnonzero(records.sent_ns >= 0)
    sizes = records.bytes_out[sent]
    if len(np.unique(sizes)) == len(sizes):
        by_size = {int(records.bytes_out[i]): int(i) for i in sent}
        pairs = [(by_size[t["bytes_up"]], k) for k, t in enumerate(truth)
                 if t["bytes_up"] in by_size]  # fmt: skip
        return pairs, "size"
    order = sent[np.argsort(records.sent_ns[sent], kind="stable")]
    return [(int(i), k) for k, i in enumerate(order[: len(truth)])], "order"


def check_run(records: Records, truth: list[dict[str, Any]]) -> Check:
    """Pair ``records`` (a run through the proxy) with the proxy's request lines."""
    pairs, how = _pairs(records, truth)
    kinds = records.error_kinds
    outcomes: dict[str, Counter[str]] = {}
    gaps: list[int] = []
    residence_ok: list[int] = []
    causal = True
    for i, k in pairs:
        t = truth[k]
        outcomes.setdefault(t["outcome"], Counter())[kinds[i]] += 1
        if t["outcome"] == "ok" and kinds[i] == "" and t["out_done_ns"] is not None:
            residence = t["out_done_ns"] - t["t_ns"]
            gap = int(records.done_ns[i] - records.sent_ns[i]) - residence
            causal = causal and gap >= 0
            gaps.append(gap)
            residence_ok.append(residence + int(records.sent_ns[i] - records.scheduled_ns[i]))
    ok = records.error == 0
    latency = (records.done_ns - records.scheduled_ns)[ok]
    gap_arr = np.asarray(gaps, dtype=np.float64) / 1e6
    truth_lat = np.asarray(residence_ok, dtype=np.float64) / 1e6
    faults: Counter[str] = Counter()
    for t in truth:
        faults.update(t["faults"])
    paired = {i for i, _ in pairs}
    unmatched = Counter(kinds[i] for i in np.flatnonzero(records.sent_ns >= 0) if i not in paired)
    return Check(
        scheduled=len(records),
        sent=int((records.sent_ns >= 0).sum()),
        seen_by_proxy=len(truth),
        matched=len(pairs),
        matched_by=how,
        unmatched_records=int((records.sent_ns >= 0).sum()) - len(pairs),
        unmatched_truth=len(truth) - len(pairs),
        unmatched_kinds=dict(unmatched),
        outcomes={o: dict(c) for o, c in sorted(outcomes.items())},
        faults=dict(sorted(faults.items())),
        gap_ms=_stats(gap_arr),
        causal=causal,
        delay_honoured=all(
            t["fwd_ns"] is None or t["fwd_ns"] - t["t_ns"] >= t["delay_ns"] for t in truth
        ),
        latency_p99_ms=float(np.percentile(latency, 99)) / 1e6 if len(latency) else None,
        truth_p99_ms=float(np.percentile(truth_lat + np.median(gap_arr), 99))
        if len(gaps)
        else None,
    )


def _stats(values_ms: np.ndarray) -> dict[str, float]:
    if not len(values_ms):
        return {}
    return {
        "p50": float(np.percentile(values_ms, 50)),
        "p95": float(np.percentile(values_ms, 95)),
        "max": float(values_ms.max()),
    }


def format_check(check: Check) -> str:
    """A few lines for the terminal (``python -m tailwise.proxy.check RUN TRUTH``)."""
    lines = [
        f"requests   scheduled {check.scheduled}, sent {check.sent}, "
        f"seen by the proxy {check.seen_by_proxy}",
        f"paired     {check.matched} (by {check.matched_by}); lost {check.lost}"
        + (" (approximate: see below)" if check.matched_by == "order" else ""),
        "injected   " + (", ".join(f"{k} {n}" for k, n in check.faults.items()) or "nothing"),
    ]
    for outcome, kinds in check.outcomes.items():
        saw = ", ".join(f"{k or 'ok'} {n}" for k, n in sorted(kinds.items()))
        lines.append(f"  proxy {outcome:<14} -> tailwise {saw}")
    if check.gap_ms:
        g = check.gap_ms
        lines.append(
            f"client service - proxy time (ms): p50 {g['p50']:.2f}  p95 {g['p95']:.2f}  "
            f"max {g['max']:.2f}"
        )
    if check.latency_p99_ms is not None and check.truth_p99_ms is not None:
        lines.append(
            f"latency p99 (ms, ok requests): tailwise {check.latency_p99_ms:.1f}, "
            f"truth {check.truth_p99_ms:.1f}"
        )
    lines.append(
        f"checks     service >= proxy time: {'yes' if check.causal else 'NO'}; "
        f"delays honoured: {'yes' if check.delay_honoured else 'NO'}"
    )
    if check.matched_by == "order":
        lines.append(
            "note       paired in order of sending; timeouts and resets reorder connections, "
            "so give each request a body of its own length (--bodies) to pair exactly"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import argparse
    import sys
    from pathlib import Path

    from tailwise.errors import BadInput
    from tailwise.proxy.truth import read_truth
    from tailwise.records import read_jsonl

    ap = argparse.ArgumentParser(
        prog="python -m tailwise.proxy.check", description="Compare a run with a proxy log."
    )
    ap.add_argument("run", help="run directory (or its records.jsonl)")
    ap.add_argument("truth", help="the proxy's --log file")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    a = ap.parse_args(argv)
    run = Path(a.run)
    try:
        records = read_jsonl(run / "records.jsonl" if run.is_dir() else run)
        _, truth = read_truth(a.truth)
    except BadInput as exc:
        print(f"tailwise: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    check = check_run(records, truth)
    print(json.dumps(check.as_dict(), indent=2) if a.json else format_check(check))


if __name__ == "__main__":
    main()
