"""Fitting an LLM endpoint's step law from TTFT and TPOT against load.

The model is the demo engine's (``tailwise serve-demo --kind llm``, vLLM's
shape; its law is :mod:`tailwise.laws.llm`): continuous batching where a step
costs

    a + b x (prompt tokens prefilled in it) + c x (sequences decoding in it)
      + k x (KV tokens the decoding sequences attend to)

with at most ``max_num_seqs`` sequences running, plus a delay D outside the
engine (HTTP, SSE framing) that every chunk of a stream carries.

* **Prefill, b**: at the lowest load a request is mostly alone, so its TTFT
  (from the send) is about D + a + b P; a line through TTFT against prompt
  tokens P gives b as its slope. One prompt length cannot separate b from a:
  then b is 0 and the run's prefill cost rides in D (the fit says so).
* **Decode, a and c**: TPOT grows with the running batch N (Little's law:
  N = throughput x mean time from first token to done). Prefill steps pause
  decoding, a share u = throughput x (a + b P) of the time, so
  TPOT (1 - u) = a + c N; the line through each step's (N, TPOT (1 - u)) gives
  a and c, iterated because u needs a.
* **max_num_seqs**: at saturation every slot is taken, so N there (plus the
  prefill step each sequence spends admitted) is the slot count.
* **D** is the low-load TTFT intercept less a.
* **Context, k**: the slope of each request's inter-token gaps against its own
  context (:mod:`tailwise.calibrate.context`); what it adds to a step,
  k N (P + O/2) on average, is taken off TPOT before a and c are fitted, and
  k is held at its value while the others are refined.

What the server says of itself comes first (llama.cpp's ``llama-server``;
see :mod:`tailwise.loadgen.observe.server_props` and ``server.jsonl``):

* its **slot count** (``-np``, from ``/props``) is max_num_seqs, not fitted;
* its **schedule**: llama.cpp puts every decoding slot's next token and then
  prompt tokens, up to ``n_batch`` (2048), in one batch, so a prompt stalls
  every decoding sequence for its step instead of pausing them for a
  prefill-only step: the model's ``prefill_chunk_tokens`` is 2048, and u
  above is the share of time spent on prompt tokens, b P x throughput;
* its **prefix cache**: tokens the server took from cache (the chat
  template's head) are not prefilled, in the runs or in the model;
* its own **prompt times** (``timings.prompt_ms`` per request) give b and the
  delay D without queueing in them, pooled over every step below saturation
  (a thin lowest step no longer drops them): b is what the prompts' times
  leave per prompt token once the step's base and the decodes riding in its
  batch (c per sequence, the step's running batch by Little's law) are taken
  off, held while the search moves the rest; D is the median of the client's
  TTFT less the server's prompt time. Fewer than MIN_SERVER_TIMINGS in the
  pool, or timings only past saturation, are not used, and a note says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailwise.calibrate.context import context_share_ms, fit_context
from tailwise.calibrate.fit import calm_steps, goodness, refine, token_form
from tailwise.calibrate.generic import Fit
from tailwise.calibrate.steps import Step
from tailwise.errors import BadInput
from tailwise.laws.llm import step_cost
from tailwise.loadgen.observe.server_props import LLAMA_CPP, LLAMA_CPP_BATCH_TOKENS

UNBOUNDED_SEQS = 1024  # when no step saturated: no slot limit is in evidence
MIN_SERVER_TIMINGS = 10  # requests with the server's prompt time, for a line through them


def server_facts(steps: list[Step]) -> tuple[str, int | None]:
    """(engine, slots) the server said of itself before the runs ("" and None: nothing)."""
    seen = {(s.server_info.get("engine"), s.server_info.get("slots")) for s in steps}
    seen.discard((None, None))
    if len(seen) > 1:
        told = ", ".join(sorted(str(n) for _, n in seen))
        raise BadInput("RUN_OR_SWEEP_DIR", f"slots {told}", "runs of one server setup")
    if not seen:
        return "", None
    engine, slots = seen.pop()
    if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 1:
        return str(engine or ""), slots
    return str(engine or ""), None


@dataclass(frozen=True)
class ServerPrefill:
    """The server's own prompt times (llama.cpp's ``timings``), pooled over the steps
    below saturation."""

    prompt_ms: np.ndarray  # per request: time to process its prompt
    processed: np.ndarray  # per request: prompt tokens processed (not cached)
    decoding: np.ndarray  # per request: sequences decoding beside it (its step's mean)
    delay_ms: float  # the client's TTFT less the server's prompt time, median
    note: str

    def per_token_ms(self, base_ms: float, decode_ms: float = 0.0) -> float:
        """b such that a prompt's time is a step's base, the decodes riding in its batch
        (``decode_ms`` each) and b per token, on average."""
        others = base_ms * len(self.prompt_ms) + decode_ms * float(self.decoding.sum())
        return max((float(self.prompt_ms.sum()) - others) / float(self.processed.sum()), 0.0)


def _running(step: Step) -> float:
    """The step's time-average number of sequences decoding (Little: throughput x the
    mean time from first token to done)."""
    r, ok = step.records, step.ok()
    span = (r.done_ns - r.first_token_ns)[ok]
    span = span[span >= 0]
    return step.throughput_rps * float(span.mean()) / 1e9 if len(span) else 0.0


def _server_prefill(steps: list[Step]) -> tuple[ServerPrefill | None, list[str]]:
    """The server's prompt times, pooled over every step below saturation (a saturated
    step's TTFT waited for a slot, so its delay is not the client's); None, with a note,
    when the pool holds fewer than MIN_SERVER_TIMINGS requests."""
    prompt_ms, processed, decoding, gap_ms, rates = [], [], [], [], []
    left_out = 0
    for st in steps:
        r, ok = st.records, st.ok()
        p_ms = st.server_column("prompt_ms")[ok]
        n = st.server_column("prompt_n")[ok]
        ttft_ms = (r.first_token_ns - r.sent_ns)[ok] / 1e6
        keep = np.isfinite(p_ms) & np.isfinite(n) & (n > 0) & (ttft_ms >= 0)
        if not keep.any():
            continue
        if st.saturated:
            left_out += int(keep.sum())
            continue
        prompt_ms.append(p_ms[keep])
        processed.append(n[keep])
        decoding.append(np.full(int(keep.sum()), _running(st)))
        gap_ms.append(ttft_ms[keep] - p_ms[keep])
        rates.append(st.rate_rps)
    count = sum(len(x) for x in prompt_ms)
    saturated = f"; {left_out} at saturated steps left out (their TTFT waited for a slot)"
    tail = saturated if left_out else ""
    if count == 0:
        return None, (
            [f"the server's own prompt times: none below saturation{tail}"] if left_out else []
        )
    where = (
        f"{rates[0]:g}/s"
        if len(rates) == 1
        else f"{len(rates)} steps, {rates[0]:g}-{rates[-1]:g}/s"
    )
    if count < MIN_SERVER_TIMINGS:
        return None, [
            f"the server's own prompt times: only {count} requests ({where}), fewer than "
            f"{MIN_SERVER_TIMINGS}: not used, prefill from the client's TTFT{tail}"
        ]
    gaps = np.concatenate(gap_ms)
    delay_ms = max(float(np.median(gaps)), 0.0)
    note = (
        f"prefill and delay from the server's own prompt times ({count} requests at "
        f"{where}): client TTFT - server prompt time p50 {delay_ms:.2f} ms{tail}"
    )
    pooled = ServerPrefill(
        np.concatenate(prompt_ms), np.concatenate(processed), np.concatenate(decoding),
        delay_ms, note,
    )  # fmt: skip
    return pooled, []


def _prefill(low: Step) -> tuple[float, float, list[str]]:
    """(intercept ms, ms per prompt token, notes) from TTFT against prompt length."""
    r, ok = low.records, low.ok()
    ttft = (r.first_token_ns - r.sent_ns)[ok]
    prompt = low.prompt_tokens()
    keep = (ttft >= 0) & (prompt > 0)
    ttft_ms, prompt = ttft[keep] / 1e6, prompt[keep].astype(np.float64)
    if len(np.unique(prompt)) < 2 or prompt.max() < 1.2 * prompt.min():
        note = (
            "one prompt length at the lowest load: prefill per token is not identified "
            "(run that step with --input-tokens uniform:A-B); it rides in the delay"
        )
        return float(np.median(ttft_ms)), 0.0, [note]
    slope, intercept = theil_sen(prompt, ttft_ms)
    return intercept, max(slope, 0.0), []


MAX_PAIRS_POINTS = 1000  # Theil-Sen's pairs grow as n^2: a larger sample is thinned


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of the median line: the median of the pairwise slopes, then the
    median intercept. A few wild points (a cold server's first request, a request that
    met a burst) cannot tilt it, as they tilt a least-squares line."""
    if len(x) > MAX_PAIRS_POINTS:
        keep = np.linspace(0, len(x) - 1, MAX_PAIRS_POINTS).astype(np.int64)
        x, y = x[keep], y[keep]
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    usable = dx != 0
    slope = float(np.median((y[j] - y[i])[usable] / dx[usable]))
    return slope, float(np.median(y - slope * x))


def _decode_points(
    steps: list[Step], kv_ms: float = 0.0
) -> list[tuple[float, float, float, float]]:
    """Per step: (throughput /s, running batch N, mean TPOT ms, mean prompt tokens); with
    a context term, TPOT less what that term adds to a step."""
    points = []
    for s in steps:
        r, ok = s.records, s.ok()
        tpot = s.tpot_ms()
        span = (r.done_ns - r.first_token_ns)[ok]
        span = span[span >= 0]
        if len(tpot) == 0 or len(span) == 0:
            continue
        n = s.throughput_rps * float(span.mean()) / 1e9
        prompt = float(s.prompt_tokens().mean())  # prefilled: less the server's cache
        context = float(r.input_tokens[ok].mean())  # attended to: the cached part too
        kv = context_share_ms(kv_ms, n, context, float(r.output_tokens[ok].mean()))
        points.append((s.throughput_rps, n, float(tpot.mean()) - kv, prompt))
    return points


def _prefill_cost_ms(a_ms: float, b_ms: float, c_ms: float, p: float, mixed: bool) -> float:
    """What one prompt of p tokens adds to the time decodes wait: a prefill-only step,
    or (``mixed``: prompts ride in the decodes' steps) its tokens' share of a step."""
    return b_ms * p if mixed else step_cost(a_ms, b_ms, c_ms, p, 0)


def _seen_batch(n: float, slots: int | None) -> float:
    """The batch a decoding sequence decodes in, from the time-average N: itself and
    about N others at low load, the full batch (``slots``) when every slot is held."""
    return 1 + n * (1 - 1 / slots) if slots else 1 + n


def _decode(
    points: list[tuple[float, float, float, float]],
    b_ms: float,
    a0_ms: float,
    mixed: bool,
    slots: int | None = None,
) -> tuple[float, float]:
    """(a, c) in ms from TPOT (1 - u) = a + c N', u the share of time decodes wait on
    prompts, N' the batch a decoding sequence sees (:func:`_seen_batch`)."""
    a_ms, c_ms = a0_ms, 0.0
    for _ in range(5):
        xs = [_seen_batch(n, slots) for _, n, _, _ in points]
        ys = [
            tpot * (1 - x * _prefill_cost_ms(a_ms, b_ms, c_ms, p, mixed) / 1e3)
            for x, _, tpot, p in points
        ]
        if len(points) >= 2 and max(xs) > min(xs):
            c_ms, a_ms = (float(v) for v in np.polyfit(xs, ys, 1))
        else:
            a_ms = ys[0] - c_ms * xs[0]
    return max(a_ms, 0.01), max(c_ms, 0.0)


def _slots(
    steps: list[Step], a_ms: float, b_ms: float, c_ms: float, mixed: bool
) -> tuple[int, list[str]]:
    """max_num_seqs from the saturated steps' running batch."""
    sat = [s for s in steps if s.saturated]
    if not sat:
        note = "no step reached saturation: max_num_seqs is not identified (left unbounded)"
        return UNBOUNDED_SEQS, [note]
    best = 0.0
    for x, n, _, p in _decode_points(sat):
        best = max(best, n + x * _prefill_cost_ms(a_ms, b_ms, c_ms, p, mixed) / 1e3)
    return max(1, round(best)), []


def llm_model(p: dict[str, float], timeout: str, chunk_tokens: int = 0) -> dict[str, Any]:
    """Scenario fields for step-law numbers (ms), a slot count and the prompt schedule."""
    llm: dict[str, Any] = {
        "base": f"{p['base_ms']:.6g}ms",
        "prefill_per_token": f"{p['prefill_ms_per_token']:.6g}ms",
        "decode_per_seq": f"{p['decode_ms_per_seq']:.6g}ms",
        "max_num_seqs": int(p["max_num_seqs"]),
        # Not identified from outside: the slot count is the binding limit here.
        "kv_cache_tokens": 1 << 30,
        "max_waiting": 1 << 20,
        "max_model_len": 1 << 20,
        "timeout": timeout,
    }
    if chunk_tokens:
        llm["prefill_chunk_tokens"] = chunk_tokens
    if p.get("kv_ms_per_token"):
        llm["kv_per_token"] = f"{p['kv_ms_per_token']:.6g}ms"
    model: dict[str, Any] = {"llm": llm}
    if p["delay_ms"] > 0:
        model["delay"] = f"{p['delay_ms']:.6g}ms"
    return model


def fit_llm(
    steps: list[Step],
    on_step: Callable[[int, float], None] | None = None,
    *,
    slots: int | None = None,
    prefill_chunk: int | None = None,
) -> Fit:
    """Closed forms for a first guess, then a pattern search on the simulated steps.

    ``slots`` (``--slots``) and ``prefill_chunk`` (``--prefill-chunk``, 0 for
    prefill-only steps) state what the user knows; by default they come from what
    the server said of itself (llama.cpp), else the slots are fitted and prompts
    are prefilled in steps of their own (vLLM without chunked prefill)."""
    engine, told_slots = server_facts(steps)
    notes: list[str] = []
    if slots is None and told_slots is not None:
        slots = told_slots
        notes.append(f"max_num_seqs {slots}: the server's own slot count ({engine} /props)")
    elif slots is not None:
        notes.append(f"max_num_seqs {slots}: as given (--slots)")
    if prefill_chunk is None:
        prefill_chunk = LLAMA_CPP_BATCH_TOKENS if engine == LLAMA_CPP else 0
        if prefill_chunk:
            notes.append(
                f"prompts share the decodes' steps, up to {prefill_chunk} tokens a step "
                f"({engine}'s default batch; --prefill-chunk to change)"
            )
    mixed = prefill_chunk > 0
    low = steps[0]
    kv_ms, more = fit_context(steps)  # the step law holds at any load: every step counts
    notes += more
    told, more = _server_prefill(steps)
    notes += more
    points = _decode_points(calm_steps(steps), kv_ms)
    first_tpot = points[0][2] if points else 1.0
    if told is not None:
        # b and a depend on each other: a prompt's time is a + b x its tokens, and
        # decodes wait on prompts' tokens. Twice round converges (b moves a little).
        notes.append(told.note)
        delay_ms: float | None = told.delay_ms
        intercept_ms, b_ms = 0.0, told.per_token_ms(0.0)
        for _ in range(2):
            a_ms, c_ms = _decode(points, b_ms, first_tpot, mixed, slots)
            b_ms = told.per_token_ms(a_ms, c_ms if mixed else 0.0)
    else:
        intercept_ms, b_ms, more = _prefill(low)
        notes += more
        delay_ms = None
    a_ms, c_ms = _decode(points, b_ms, first_tpot, mixed, slots)
    fitted_slots = slots is None
    if slots is None:
        slots, more = _slots(steps, a_ms, b_ms, c_ms, mixed)
        notes += more
    start = {
        "base_ms": a_ms,
        "prefill_ms_per_token": b_ms,
        "decode_ms_per_seq": c_ms,
        "delay_ms": delay_ms if delay_ms is not None else max(intercept_ms - a_ms, 0.0),
        "max_num_seqs": float(slots),
    }
    timeout = str(low.options.get("timeout") or "60s")
    refit_slots = fitted_slots and slots != UNBOUNDED_SEQS
    integers = frozenset({"max_num_seqs"}) if refit_slots else frozenset()
    if not refit_slots:
        start.pop("max_num_seqs")
    chosen = slots
    # b is measured, not guessed: from the client's TTFT line at the lowest load (there a
    # prompt is alone in its step and nothing queues), or from the server's own prompt
    # times, less the step's base and the decodes riding in its batch. The search holds
    # it, as it holds k, and moves what the closed forms only approximate (left free, it
    # traded b for the noise in one run's TTFT p99, or, with one prompt length, for the
    # base: a model that then mispredicted every longer prompt).
    held = {"prefill_ms_per_token": start.pop("prefill_ms_per_token")}

    def build(p: dict[str, float]) -> dict[str, Any]:
        return llm_model(
            {"max_num_seqs": float(chosen), "kv_ms_per_token": kv_ms, **held, **p},
            timeout,
            prefill_chunk,
        )

    best, _ = refine(build, start, steps, integers=integers, on_step=on_step)
    # The search scores small samples (fixed seeds, so it is deterministic, but a p99
    # of 1,500 simulated requests is noisy); the closed forms are kept when the full
    # comparison says they fit better, on the search's own objective (the calm steps'
    # percentiles and the throughput where the server's peaked), never on a part of it.
    if best != start:
        refined, closed = (goodness(build(p), steps) for p in (best, start))
        if closed.objective < refined.objective:
            best = dict(start)
            notes.append(
                f"the closed forms fit better than the search's refinement (objective "
                f"{closed.objective:.3f} vs {refined.objective:.3f}, calm percentiles and "
                "peak throughput): kept"
            )
    order = ("base_ms", "prefill_ms_per_token", "decode_ms_per_seq", "delay_ms", "max_num_seqs")
    best = {k: v for k in order if (v := {**held, **best}.get(k)) is not None}
    start = {k: v for k in order if (v := {**held, **start}.get(k)) is not None}
    params: dict[str, Any] = {k: round(v, 6) for k, v in best.items()}
    params["kv_ms_per_token"] = round(kv_ms, 9)
    params["max_num_seqs"] = int(best.get("max_num_seqs", slots))
    if prefill_chunk:
        params["prefill_chunk_tokens"] = prefill_chunk
    params["closed_form_start"] = {k: round(v, 6) for k, v in start.items()}
    params["highest_throughput_rps"] = round(max(s.throughput_rps for s in steps), 3)
    model = build(best)
    # The workload the runs sent, so the model predicts for it until told otherwise
    # (prompt tokens as prefilled: less what the server's prefix cache held).
    prompts = np.concatenate([s.prompt_tokens() for s in steps])
    outputs = np.concatenate([s.records.output_tokens[s.ok()] for s in steps])
    model["llm"] |= {"prompt_tokens": token_form(prompts), "output_tokens": token_form(outputs)}
    return Fit("llm", model, params, notes)
