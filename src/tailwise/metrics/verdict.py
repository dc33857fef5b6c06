"""The run's verdict, and its real cause when it is not the server's result.

The rule (DESIGN invariant 3), in the order applied:

1. **invalid**: the run was interrupted, its accounting does not hold, or no
   request was scheduled in its window.
2. **invalid, target unreachable** (its own exit code, 6): requests were sent
   but none reached a server: every one failed to connect (refused, no route,
   no name, TLS). Never called a generator problem.
3. **invalid, client out of file descriptors**: connections failed with
   EMFILE/ENFILE: the client, not the target, ran out.
4. **invalid, client over ``--max-send-lag``**: only when the user set that
   bound explicitly (there is no default bound).
5. **fail**: the run stopped early on a certainly lost SLO, or an SLO failed on
   the server's *lower* bound (:mod:`tailwise.metrics.client`) and its interval
   decides the failure (:mod:`tailwise.metrics.intervals`): whatever the
   client's lag and the sample's noise, the server missed it.
6. **invalid, client lag could flip**: an SLO passes on the server's lower
   bound but fails on its upper bound, and its interval decides it: the
   client's own lateness (send lag, receive lag) is large enough to decide it.
   (When the interval cannot decide it either, the run is inconclusive, rule 8.)
   The reason names the SLO, both values, the client's lag, its CPU use and the
   machine's load.
7. **invalid, load fell short**: every SLO passed, but the load that reached
   the server fell short of the plan (achieved send rate under 99% of offered,
   in open loop): a pass at less load than planned proves nothing. A failure at
   less load than planned stands (rule 5), as more load can only make it worse.
8. **inconclusive** (exit 5): no SLO certainly failed, but the sample cannot
   decide one of them at the summary's confidence: its interval straddles the
   threshold, or the sample is too small ("n too small") or too correlated to
   carry one. The reason names the first such SLO, the share of requests within
   its threshold and that share's interval beside the share needed.
9. **pass**: every SLO decided pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tailwise.errors import ExitCode
from tailwise.metrics.schema import Summary
from tailwise.metrics.uncertainty import (
    CONFIDENCE,
    FIFO_NOTE,
    HEAVY_SERVICE_MARGIN,
    HEAVY_SERVICE_STRONG,
    heavy_label,
)

UNREACHABLE_KINDS = frozenset({"connect", "tls"})
FD_EXHAUSTED = ("too many open files",)
SHORT_SEND_SHARE = 0.99  # achieved send rate below this share of offered: load fell short
EXIT_CODES = {
    "pass": ExitCode.PASS,
    "fail": ExitCode.FAIL,
    "invalid": ExitCode.INVALID,
    "inconclusive": ExitCode.INCONCLUSIVE,
}
CAUSE_EXIT_CODES = {"target_unreachable": ExitCode.UNREACHABLE}


@dataclass(frozen=True)
class Judged:
    """One SLO judged three ways: as measured, and on the server's lower and upper bound."""

    spec: str
    measured: dict[str, Any]
    lower: dict[str, Any]
    upper: dict[str, Any]

    @property
    def certain_fail(self) -> bool:
        return not self.lower["passed"]

    @property
    def flippable(self) -> bool:
        return bool(self.lower["passed"]) != bool(self.upper["passed"])


@dataclass(frozen=True)
class Verdict:
    verdict: str  # pass | fail | invalid | inconclusive
    reason: str
    cause: str = ""  # why a run is invalid: client, target_unreachable, load_short, ...
    hint: str = ""


def point_passed(summary: Summary) -> bool:
    """Whether the run passed on its point estimates: a pass, or an inconclusive run
    whose every SLO passed as measured. Steers a knee search or names a sweep's knee."""
    verdict = summary.verdict
    return verdict == "pass" or (verdict == "inconclusive" and all(e.passed for e in summary.slos))


def settled(summary: Summary) -> str:
    """What the sample decides about the whole run: pass, fail or inconclusive.

    A fail needs the intervals' decision too: a run stopped early on a loss that its
    planned sample could not recover fails, but is *shown* to fail only when its
    intervals say so."""
    verdict = summary.verdict
    if verdict == "pass":
        return "pass"
    if verdict == "fail" and (summary.decided or "fail") == "fail":
        return "fail"
    return "inconclusive"


def exit_code(summary: Summary) -> int:
    """The CLI's exit code for a summary: by verdict, or by cause where one has its own."""
    cause = summary.verdict_cause or ""
    verdict = summary.verdict or ""
    return CAUSE_EXIT_CODES.get(cause, EXIT_CODES.get(verdict, ExitCode.INVALID))


def _value_text(entry: dict[str, Any]) -> str:
    if entry.get("kind") == "deadline":
        return f"attainment {100 * entry['attainment']:.2f}%"
    value = entry.get("value")
    if value is None:
        return "unbounded"
    return f"{value:.3g} {entry['unit']}" if entry.get("unit") else f"{value:.4g}"


def _errors_text(requests: dict[str, Any]) -> str:
    errors = sorted(requests["errors"].items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {n}" for k, n in errors[:3])


def _unreachable(requests: dict[str, Any], connect_failures: dict[str, int]) -> Verdict | None:
    kinds = requests["errors"]
    failed = sum(n for k, n in kinds.items() if k in UNREACHABLE_KINDS)
    if requests["sent"] == 0 or requests["ok"] or failed < requests["sent"]:
        return None
    why = max(connect_failures.items(), key=lambda kv: kv[1])[0] if connect_failures else ""
    if any(why.lower().startswith(f) for f in FD_EXHAUSTED):
        return None  # the client's limit, not the target: see _fd_exhausted
    detail = f" ({why})" if why else ""
    return Verdict(
        "invalid",
        f"target unreachable{detail}: none of {requests['sent']} requests could connect",
        "target_unreachable",
        "check the URL and that the server is listening on that address"
        + ("; for a certificate it does not trust, --insecure" if "TLS" in why else ""),
    )


def _fd_exhausted(connect_failures: dict[str, int]) -> Verdict | None:
    n = sum(v for k, v in connect_failures.items() if k.lower().startswith(FD_EXHAUSTED))
    if not n:
        return None
    return Verdict(
        "invalid",
        f"client out of file descriptors: {n} connections could not be opened",
        "client_fds",
        "raise the open-file limit (ulimit -n) or lower --max-in-flight",
    )


def _client_text(client: dict[str, Any]) -> str:
    parts = [
        f"send-lag p99 {client['send_lag_p99_ms']:.2f} ms",
        f"receive-lag p99 {client['recv_lag_p99_ms']:.2f} ms",
    ]
    if client.get("cpu_share") is not None:
        parts.append(f"client CPU {100 * client['cpu_share']:.0f}% of a core")
    if client.get("load_avg_1m") is not None:
        parts.append(f"load {client['load_avg_1m']:.1f} on {client['cores']} cores")
    return ", ".join(parts)


def _flipped(judged: list[Judged], client: dict[str, Any]) -> Verdict:
    j = next(j for j in judged if j.flippable)
    busy = (client.get("cpu_share") or 0.0) >= 0.9
    starved = (client.get("load_avg_1m") or 0.0) > (client.get("cores") or 1)
    capped = client.get("cap_bound_share") or 0.0
    if capped >= 0.01:
        hint = (
            f"the in-flight cap (--max-in-flight {client.get('max_in_flight')}) held back "
            f"{100 * capped:.1f}% of requests in the client: raise it to judge the server"
        )
    elif busy:
        hint = "the client used a whole core: spread the load with --workers N"
    elif starved:
        hint = "the machine is busier than its cores: stop other work, or use --workers N"
    else:
        hint = "the client's lateness is close to the SLO's margin: rerun, or use --workers N"
    return Verdict(
        "invalid",
        f"client lag could flip {j.spec}: measured {_value_text(j.measured)}, "
        f"server's share {_value_text(j.lower)} ({_client_text(client)})",
        "client",
        hint,
    )


def _model_fail(entry: dict[str, Any]) -> bool:
    """Whether an SLO entry's failure was shown by the FIFO queue model."""
    return entry.get("decided") == "fail" and str(entry.get("ci_note") or "").startswith(FIFO_NOTE)


def _failed(
    judged: list[Judged], requests: dict[str, Any], modelled: Sequence[str] = ()
) -> Verdict:
    """``modelled``: SLOs shown to fail by the FIFO queue model though their sample,
    as measured, passed (its clustered misses not yet come)."""
    specs = [j.spec for j in judged if j.certain_fail]
    specs += [f"{spec} (by the FIFO queue model; the sample itself passed)" for spec in modelled]
    reason = "SLO failed: " + "; ".join(specs)
    if requests["scheduled"] and requests["ok"] == 0 and requests["errors"]:
        reason += f" (every request failed: {_errors_text(requests)})"
    elif (
        any(j.measured.get("kind") == "rate" for j in judged if j.certain_fail)
        and requests["errors"]
    ):
        reason += f" (errors: {_errors_text(requests)})"
    return Verdict("fail", reason, "", _failure_hint(requests))


def _failure_hint(requests: dict[str, Any]) -> str:
    """What the most common error says about the target, when there are errors."""
    errors = requests["errors"]
    if not errors:
        return ""
    kind = max(errors.items(), key=lambda kv: kv[1])[0]
    hints = {
        "reset": "the target closed or reset connections mid-request: check its keep-alive "
        "and connection limits, or its logs",
        "timeout": "requests outlived --timeout: the target is overloaded or stuck",
        "http_5xx": "the target answered with server errors: see its logs",
        "http_4xx": "the target refused the requests (4xx): check the URL, --model, "
        "headers and body",
        "truncated": "streams ended without a finish: the target cut them short",
    }
    return hints.get(kind, "")


def _short(rates: dict[str, float], client: dict[str, Any]) -> Verdict:
    capped = client.get("cap_bound_share") or 0.0
    why = f"; the in-flight cap held back {100 * capped:.1f}% of requests" if capped else ""
    return Verdict(
        "invalid",
        f"load fell short of the plan: sent {rates['achieved_send_rps']:.1f}/s of "
        f"{rates['offered_rps']:.1f}/s offered{why}",
        "load_short",
        "a pass at less load than planned proves nothing: raise --max-in-flight or use --workers N",
    )


def _short_of_plan(rates: dict[str, float], window_s: float) -> bool:
    """Fewer than 99% of the offered requests sent in the window, by more than two requests
    (in a run of a dozen, one request sent just past the window's end is not a shortfall)."""
    missing = (rates["offered_rps"] - rates["achieved_send_rps"]) * window_s
    return rates["achieved_send_rps"] < SHORT_SEND_SHARE * rates["offered_rps"] and missing > 2


def _undecided(
    judged: list[Judged], decided: list[str], entries: list[dict[str, Any]], confidence: float
) -> Verdict | None:
    """Inconclusive when some SLO's interval cannot decide it (see the module docstring)."""
    for j, d, entry in zip(judged, decided, entries, strict=False):
        if d == "pass":
            continue
        note = entry.get("ci_note") or ""
        heavy = heavy_label(note)
        if heavy:  # more requests would not decide it: say why, not "measure longer"
            return Verdict(
                "inconclusive",
                f"{j.spec} undecided: measured {_value_text(entry)}; {heavy}: the tail "
                "rests on long jobs rarer than this run holds",
                "undecided",
                "a longer run decides only a p99 (or lower) under a service that reads "
                f"under {HEAVY_SERVICE_STRONG:g}x, with a {HEAVY_SERVICE_MARGIN:g}x margin "
                "(docs/metrics.md, heavy tail); the SLO's ci_note says what was read",
            )
        return Verdict(
            "inconclusive",
            f"{j.spec} undecided: {_evidence_text(entry, confidence)}",
            "undecided",
            "measure longer (--duration auto extends the run until it is decided), or "
            "accept the interval: the sample cannot say pass or fail at this confidence",
        )
    return None


def _evidence_text(entry: dict[str, Any], confidence: float) -> str:
    """What the decision rested on: the share within the threshold, or the value's interval."""
    within = entry.get("within")
    if within and within.get("ci"):
        lo, hi = within["ci"]
        return (
            f"{100 * within['share']:.2f}% within {within['threshold_ms']:.4g} ms,"
            f" {100 * confidence:g}% interval {100 * lo:.2f}-{100 * hi:.2f}% around the "
            f"{100 * within['needed']:.4g}% needed (n={within['n']})"
        )
    note = entry.get("ci_note") or ""
    ci = entry.get("ci")
    if ci and ci[0] is not None and ci[1] is not None:
        level = f"{100 * confidence:g}%"
        return f"measured {_value_text(entry)}, {level} interval {ci[0]:.4g}-{ci[1]:.4g}"
    return f"measured {_value_text(entry)}" + (f"; {note}" if note else "")


def decide(
    *,
    preliminary: Verdict | None,
    requests: dict[str, Any],
    rates: dict[str, float],
    client: dict[str, Any],
    judged: list[Judged],
    open_loop: bool,
    stopped_early: str,
    connect_failures: dict[str, int],
    window_s: float = float("inf"),
    decided: list[str] | None = None,
    entries: list[dict[str, Any]] | None = None,
    confidence: float = CONFIDENCE,
) -> Verdict:
    """Apply the rule of this module's docstring, in order.

    ``decided`` holds what each SLO's interval decides (pass, fail, inconclusive),
    ``entries`` the summary's SLO entries, both in ``judged``'s order; without them
    every point result counts as decided (the two-valued rule)."""
    if decided is None:
        decided = ["fail" if j.certain_fail else "pass" for j in judged]
    for check in (
        preliminary,
        _unreachable(requests, connect_failures),
        _fd_exhausted(connect_failures),
    ):
        if check is not None:
            return check
    if client.get("over_max_send_lag"):
        return Verdict(
            "invalid",
            f"send-lag p99 {client['send_lag_p99_ms']:.2f} ms > --max-send-lag "
            f"{client['max_send_lag_ms']:g} ms",
            "client",
            "the bound is yours: raise it, or spread the load with --workers N",
        )
    # A failure the FIFO queue model shows needs no failing sample: a queue at 80% load
    # holds its clustered misses in a few excursions a run may not have had yet, where the
    # model reads the steady state from every service time (tailwise.metrics.fifo).
    by_model = [_model_fail(e) for e in entries or []]
    if len(by_model) != len(judged):
        by_model = [False] * len(judged)
    certain = any(
        (j.certain_fail or m) and d == "fail"
        for j, d, m in zip(judged, decided, by_model, strict=True)
    )
    if (
        stopped_early
        and not any(j.certain_fail for j in judged)
        and any(j.flippable for j in judged)
    ):
        # The watch counted misses as measured, the client's lag included: when the
        # window it left passes on the server's lower bound, the client may have lost it.
        return _flipped(judged, client)
    if stopped_early:
        return Verdict("fail", f"SLO lost, stopped early: {stopped_early}")
    if certain:
        failed = [j for j, d in zip(judged, decided, strict=True) if d == "fail"]
        modelled = [
            j.spec
            for j, d, m in zip(judged, decided, by_model, strict=True)
            if m and d == "fail" and not j.certain_fail
        ]
        return _failed(failed, requests, modelled)
    # A flip the sample could not decide anyway is the sample's to report (below): even a
    # perfect client would leave it undecided.
    if any(j.flippable and d != "inconclusive" for j, d in zip(judged, decided, strict=True)):
        return _flipped(
            [j for j, d in zip(judged, decided, strict=True) if d != "inconclusive"], client
        )
    if open_loop and _short_of_plan(rates, window_s):
        return _short(rates, client)
    undecided = _undecided(judged, decided, entries or [{} for _ in judged], confidence)
    if undecided is not None:
        return undecided
    return Verdict("pass", f"all {len(judged)} SLOs met" if judged else "no SLO given")
