"""summary.json: the contract that tests, users' CI and every report read.

:func:`summarize` is a pure function of records plus a :class:`RunInfo`; it does
not know whether a load generator or a simulator made the records. Populations:

* ``requests`` and the distributions describe requests *scheduled* inside the
  measurement window ``[warmup, warmup + duration)``; warm-up requests are
  counted apart under ``requests.warmup``.
* ``throughput_rps`` and ``goodput_rps`` count completions whose *done* time
  falls inside the window, so a saturated target shows its real completion
  rate rather than the offered rate.
* ``attainment`` is the share of window-scheduled requests that were good.

Every estimate carries its interval (``ci``, ``confidence``), each SLO what the
sample alone decides, and ``steady_state`` says whether the window looks
stationary: :mod:`tailwise.metrics.intervals`, which changes no value above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailwise.metrics import catalog, derive
from tailwise.metrics.catalog import bounds_view
from tailwise.metrics.client import ClientLag, receive_lag_ns
from tailwise.metrics.error_samples import ErrorSamples, breakdown
from tailwise.metrics.intervals import annotate, honour_looks
from tailwise.metrics.littles import littles_law
from tailwise.metrics.percentiles import distribution_ms, nearest_rank
from tailwise.metrics.reasoning import reasoning_section
from tailwise.metrics.schema import SCHEMA, Summary
from tailwise.metrics.slo import SLO, evaluate, good_mask
from tailwise.metrics.uncertainty import CONFIDENCE
from tailwise.metrics.verdict import EXIT_CODES, Judged, Verdict, decide
from tailwise.records import ERROR_KINDS, Records, category_of
from tailwise.version import __version__

CLIENT_CAUSES = frozenset({"client", "client_fds", "load_short"})
__all__ = ["EXIT_CODES", "SCHEMA", "RunInfo", "Summary", "summarize"]
CATEGORIES = ("ok", "failed", "timed_out", "cancelled", "not_sent")


@dataclass
class RunInfo:
    """What a summary needs to know about a run besides its records."""

    source: str  # "loadgen" | "sim"
    target: str | list[str]
    mode: str  # "open" | "closed"
    arrival: dict[str, Any]
    window_ns: tuple[int, int]
    slos: list[SLO] = field(default_factory=list)
    max_send_lag_ns: int | None = None  # only the user's explicit --max-send-lag
    max_in_flight: int | None = None
    concurrency: int | None = None
    interrupted: bool = False
    interrupt_note: str = ""
    stopped_early: str = ""  # the run stopped because an SLO was certainly lost
    rows_on_disk: int | None = None  # rows the records writer reported, when there is one
    llm: bool = False
    # Two-sided level of every interval; a sequential run lowers each look's error
    # (see tailwise.loadgen.engine.watch.Sequential) and says so in ``sequential``.
    confidence: float = CONFIDENCE
    sequential: dict[str, Any] | None = None
    # Sections added by name after the typed ones, in this order (warmup, workers, sim...).
    extra: dict[str, Any] = field(default_factory=dict)
    # Prompt tokens the server counted beyond the prompt's own: ``tokens.template_overhead``.
    template_overhead: dict[str, Any] | None = None
    client_lag: ClientLag | None = None  # the load generator's receive-lag probe
    client_load: dict[str, Any] | None = None  # cpu_s, cpu_share, load_avg_1m, cores
    connect_failures: dict[str, int] = field(default_factory=dict)  # why connects failed
    error_samples: ErrorSamples = field(default_factory=ErrorSamples)  # failed answers' bodies
    percentiles: tuple[float, ...] = ()  # --percentiles: the ones to show, computed beside the rest
    # False: point estimates only, no intervals and so no verdict (INCONCLUSIVE). For the
    # calibration's objective, which reads the percentiles of thousands of simulated runs
    # and spent a fifth of its time on intervals nobody read.
    intervals: bool = True


def _counts(r: Records, rows: np.ndarray) -> dict[str, Any]:
    codes = np.bincount(r.error[rows].astype(np.int64), minlength=len(ERROR_KINDS))
    out: dict[str, Any] = dict.fromkeys(CATEGORIES, 0)
    errors: dict[str, int] = {}
    for code, n in enumerate(codes.tolist()):
        if n:
            kind = ERROR_KINDS[code]
            out[category_of(kind)] += n
            if kind:
                errors[kind] = n
    out = {"scheduled": int(rows.sum()), "sent": int((r.sent_ns[rows] >= 0).sum()), **out}
    out["errors"] = errors
    out["accounted"] = out["scheduled"] == sum(out[c] for c in CATEGORIES)
    return out


def _rates(r: Records, info: RunInfo, good: np.ndarray) -> dict[str, float]:
    start, end = info.window_ns
    t_s = (end - start) / 1e9
    window = r.in_window
    done_in = (r.done_ns >= start) & (r.done_ns < end)
    n = int(window.sum())
    ok = r.error == 0
    sent_in = (r.sent_ns >= start) & (r.sent_ns < end)
    return {
        "offered_rps": n / t_s if t_s else 0.0,
        "throughput_rps": float((ok & done_in).sum()) / t_s if t_s else 0.0,
        "goodput_rps": float((good & done_in).sum()) / t_s if t_s else 0.0,
        "attainment": float((good & window).sum()) / n if n else 0.0,
        "error_rate": float((~ok & window).sum()) / n if n else 0.0,
        "achieved_send_rps": float(sent_in.sum()) / t_s if t_s else 0.0,
    }


def _client(r: Records, info: RunInfo) -> dict[str, Any]:
    """The client's own error: send lag, receive lag, the in-flight cap, its CPU and load.

    ``send_lag_p99_ms`` covers every sent request (a wait for the in-flight cap is
    client-side queueing, so it counts); ``send_lag_p99_uncapped_ms`` leaves the
    cap-bound ones out, for the generator's own pacing alone.
    """
    window = r.in_window
    capped_all = (r.capped > 0) if r.capped is not None else np.zeros(len(r), dtype=bool)
    rows = window & (r.sent_ns >= 0)
    lag = derive.send_lag_ns(r)
    every = np.sort(lag[rows])
    own = np.sort(lag[rows & ~capped_all])
    recv = np.sort(receive_lag_ns(r, info.client_lag)[window & (r.done_ns >= 0)])
    n_window = int(window.sum())
    cap_bound = int((capped_all & window).sum())
    p99_ns = nearest_rank(every, 99.0) if len(every) else 0.0
    bound = info.max_send_lag_ns
    out: dict[str, Any] = {
        "max_in_flight": info.max_in_flight,
        "cap_bound": cap_bound,
        "cap_bound_share": cap_bound / n_window if n_window else 0.0,
        "send_lag_p99_ms": p99_ns / 1e6,
        "send_lag_p99_uncapped_ms": (nearest_rank(own, 99.0) if len(own) else 0.0) / 1e6,
        "recv_lag_measured": info.client_lag is not None,
        "recv_lag_p99_ms": (nearest_rank(recv, 99.0) if len(recv) else 0.0) / 1e6,
        "recv_lag_max_ms": (float(recv[-1]) if len(recv) else 0.0) / 1e6,
        "max_send_lag_ms": bound / 1e6 if bound is not None else None,
        "over_max_send_lag": bool(info.mode == "open" and bound is not None and p99_ns > bound),
    }
    out.update(info.client_load or {})
    return out


def _judge_bounds(
    r: Records, info: RunInfo, slos: list[dict[str, Any]], window: np.ndarray
) -> list[Judged]:
    """Each SLO judged again on the server's lower and upper bound (metrics.client)."""
    lower_values, upper_values = bounds_view(r, info.client_lag)
    judged: list[list[dict[str, Any]]] = []
    for values in (lower_values, upper_values):
        rates = _rates(r, info, good_mask(r, info.slos, values))
        judged.append(evaluate(r, info.slos, rates, window, values))
    out = []
    for entry, lower, upper in zip(slos, judged[0], judged[1], strict=True):
        entry["server_bound"] = {
            "lower": _judged_value(lower),
            "upper": _judged_value(upper),
            "client_could_flip": bool(lower["passed"]) != bool(upper["passed"]),
        }
        out.append(Judged(entry["spec"], entry, lower, upper))
    return out


def _judged_value(entry: dict[str, Any]) -> Any:
    return entry["attainment"] if entry["kind"] == "deadline" else entry.get("value")


def _distributions(
    r: Records, rows: np.ndarray, llm_only: bool, extra: tuple[float, ...]
) -> dict[str, Any]:
    """One distribution (ms) per catalog metric, over the selected rows that have a value."""
    idx = np.flatnonzero(rows)
    return {
        m.summary_key: distribution_ms(
            catalog.summary_sample(m, r, m.per_request_ns(r), idx), extra
        )
        for m in catalog.distributions(llm_only)
    }


def _llm_sections(
    r: Records, window_ok: np.ndarray, done_in: np.ndarray, t_s: float, extra: tuple[float, ...]
) -> dict[str, Any]:
    """LLM distributions over window-scheduled ok requests; ``output_tps`` over the
    tokens of requests *completed* in the window (throughput's population), so a
    saturated server's token rate is not inflated by answers that finished later."""

    out_tokens = r.output_tokens[window_ok & (r.output_tokens >= 0)]
    in_tokens = r.input_tokens[window_ok & (r.input_tokens >= 0)]
    tpot = derive.tpot_ns(r)[window_ok]
    decode_tps = 1e9 / tpot[tpot > 0]  # a request's decode pace, tokens/s = 1 / TPOT
    chunks = [len(c) for c, ok in zip(r.chunk_times, window_ok.tolist(), strict=False) if ok and c]
    out_done = float(r.output_tokens[done_in & (r.output_tokens > 0)].sum())
    in_done = float(r.input_tokens[done_in & (r.input_tokens > 0)].sum())
    per_user = _plain_distribution(decode_tps)
    return {
        **_distributions(r, window_ok, True, extra),
        "tokens": {
            "output_tps": out_done / t_s if t_s else 0.0,
            # The same population (completed in the window): prompt tokens the server took
            # in, and both together, per second of window.
            "input_tps": in_done / t_s if t_s else 0.0,
            "total_tps": (in_done + out_done) / t_s if t_s else 0.0,
            "input_total": int(in_tokens.sum()),
            "output_total": int(out_tokens.sum()),
            "per_request_decode_tps": per_user,
            # What one user sees of the decode: the mean of 1 / TPOT (AIPerf's name)
            "output_tps_per_user": per_user["mean"] if per_user else None,
            "tokens_per_chunk": float(out_tokens.sum()) / sum(chunks) if chunks else None,
        },
    }


def _plain_distribution(values: np.ndarray) -> dict[str, Any] | None:
    """p50/p90/p99/mean/count of unitless values (no ms conversion)."""
    if len(values) == 0:
        return None
    v = np.sort(values)
    return {
        "p50": nearest_rank(v, 50.0),
        "p90": nearest_rank(v, 90.0),
        "p99": nearest_rank(v, 99.0),
        "mean": float(v.mean()),
        "count": len(v),
    }


def _check_accounting(r: Records, info: RunInfo, requests: dict[str, Any]) -> None:
    """``accounted``: the identity holds, no row was left open, and every row reached disk."""
    lost = int(requests["errors"].get("lost", 0) + requests["warmup"]["errors"].get("lost", 0))
    on_disk_ok = info.rows_on_disk is None or info.rows_on_disk == len(r)
    requests["accounted"] = bool(
        requests["accounted"] and requests["warmup"]["accounted"] and lost == 0 and on_disk_ok
    )
    requests["records_on_disk"] = info.rows_on_disk
    if not on_disk_ok:
        requests["accounting_note"] = f"{len(r)} rows measured, {info.rows_on_disk} on disk"
    elif lost:
        requests["accounting_note"] = f"{lost} requests were never closed by the engine"


def _preliminary(r: Records, info: RunInfo, requests: dict[str, Any]) -> Verdict | None:
    """What makes a run invalid before any SLO is looked at."""
    if info.interrupted:
        note = f": {info.interrupt_note}" if info.interrupt_note else ""
        return Verdict("invalid", f"interrupted{note}", "interrupted")
    if not requests["accounted"]:
        note = requests.get("accounting_note", "")
        return Verdict("invalid", "accounting mismatch: " + note, "accounting")
    short = _window_shorter_than_a_request(r, info, requests)
    if short is not None:
        return short
    if requests["scheduled"] == 0:
        return Verdict("invalid", "no request was scheduled inside the measurement window", "empty")
    return None


def _window_shorter_than_a_request(
    r: Records, info: RunInfo, requests: dict[str, Any]
) -> Verdict | None:
    """A closed loop whose window is shorter than one request: its users spend the whole
    window waiting for answers, so nothing is scheduled in it, or nothing scheduled in it
    completes in it (throughput 0, Little's law meaningless). Said as such, with what to
    change, rather than as an empty window or a pass."""
    if info.mode != "closed" or not len(r):
        return None
    start, end = info.window_ns
    window_s = (end - start) / 1e9
    answered = r.done_ns >= 0
    if not answered.any():
        return None
    typical_s = float(np.median((r.done_ns - r.scheduled_ns)[answered])) / 1e9
    done_in = answered & (r.done_ns >= start) & (r.done_ns < end)
    if typical_s <= window_s or (requests["scheduled"] and done_in.any()):
        return None
    users = f"{info.concurrency} closed-loop users" if info.concurrency else "closed-loop users"
    return Verdict(
        "invalid",
        f"the measurement window ({window_s:.3g}s) is shorter than one request (median "
        f"latency {typical_s:.3g}s): the {users} waited for answers through it, so "
        + (
            "no request was scheduled inside it"
            if not requests["scheduled"]
            else "none of "
            "its requests completed inside it (throughput and Little's law mean nothing)"
        ),
        "short_window",
        f"a --duration of several request times (at least {max(10 * typical_s, 1):.0f}s), "
        "or an open-loop --rate",
    )


def summarize(r: Records, info: RunInfo) -> Summary:
    """The run's summary, final: nothing changes it afterwards (see
    :mod:`tailwise.metrics.schema`; a later section makes a new one)."""
    start, end = info.window_ns
    t_s = (end - start) / 1e9
    window = r.in_window
    ok = r.error == 0
    good = good_mask(r, info.slos)
    rates = _rates(r, info, good)
    requests = _counts(r, window)
    requests["warmup"] = _counts(r, ~window)
    _check_accounting(r, info, requests)
    client = _client(r, info)
    slos = evaluate(r, info.slos, rates, window)
    judged = _judge_bounds(r, info, slos, window)
    doc: dict[str, Any] = {  # the JSON form, typed once complete
        "schema": SCHEMA,
        "tool_version": __version__,
        "source": info.source,
        "target": info.target,
        "mode": info.mode,
        "arrival": info.arrival,
        "window": {"start_s": start / 1e9, "end_s": end / 1e9, "duration_s": t_s},
        "requests": requests,
        "errors": breakdown(r, info.error_samples),
        "rates": rates,
        **_distributions(r, window, False, info.percentiles),
        "ttft_ms": None,
        "itl_ms": None,
        "tpot_ms": None,
        "tokens": None,
        "littles_law": littles_law(r, start, end),
        "slos": slos,
        "verdict": None,  # set below, once the intervals say what the sample decides
        "verdict_reason": None,
        "verdict_cause": None,
        "verdict_hint": None,
        "interrupted": info.interrupted,
        "stopped_early": info.stopped_early or None,
        "generator": client,
    }
    if info.llm:
        start, end = info.window_ns
        done_in = ok & (r.done_ns >= start) & (r.done_ns < end)
        doc.update(_llm_sections(r, window & ok, done_in, t_s, info.percentiles))
        doc["reasoning"] = reasoning_section(r, window & ok)
    if info.percentiles:
        doc["percentiles"] = list(info.percentiles)
    if info.mode == "closed":
        doc["concurrency"] = info.concurrency
        doc["note"] = (
            "closed-loop: each user waits for its response before sending again, so a slow "
            "server slows the load; latencies hide coordinated omission. Compare, don't certify."
        )
    if info.intervals:
        annotate(doc, r, info.window_ns, info.slos, good, info.confidence)
    if info.sequential is not None:
        doc["sequential"] = info.sequential
        honour_looks(slos, info.sequential)
    v = decide(
        preliminary=_preliminary(r, info, requests),
        requests=requests,
        rates=rates,
        client=client,
        judged=judged,
        open_loop=info.mode == "open",
        stopped_early=info.stopped_early,
        connect_failures=info.connect_failures,
        window_s=t_s,
        decided=[e.get("decided", "inconclusive") for e in slos],
        entries=slos,
        confidence=info.confidence,
    )
    client["saturated"] = v.cause in CLIENT_CAUSES
    client["reason"] = v.reason if client["saturated"] else ""
    hint = v.hint
    if v.cause == "undecided" and (info.sequential or {}).get("reached_cap"):
        hint = (
            "--duration auto reached its cap (--max-duration) undecided: the SLO sits near its "
            "threshold; a longer cap narrows the interval, or accept it"
        )
    doc.update(
        verdict=v.verdict,
        verdict_reason=v.reason,
        verdict_cause=v.cause or None,
        verdict_hint=hint or None,
    )
    doc.update(info.extra)
    if info.template_overhead is not None and isinstance(doc.get("tokens"), dict):
        doc["tokens"]["template_overhead"] = info.template_overhead
    return Summary.from_json(_finite(doc), strict=True)


def _finite(obj: Any) -> Any:
    """JSON has no NaN or infinity: replace them by null."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
