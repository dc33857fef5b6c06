"""The demo LLM engine's continuous batching as a discrete-event model in virtual time.

:func:`simulate_llm` predicts what ``tailwise serve-demo --kind llm`` does with
the same arrivals: it replays the scheduling of
:class:`tailwise.server.engine.Engine` step by step, in integer nanoseconds,
with the engine's own :class:`~tailwise.server.engine.EngineConfig` (a step
costs ``EngineConfig.step_s(prefill_tokens, decoding)``, rounded to the
nanosecond). In real time the engine sleeps on an absolute timeline; in
virtual time its steps simply run back to back.

Colocated engines (``prefill_replicas == 0``), per engine, exactly as the demo:

* **arrival**: a request whose prompt + max_tokens exceeds ``max_model_len`` or
  ``kv_cache_tokens`` is answered 400 at once. Otherwise it joins ``waiting``
  and admission runs at once: FCFS while fewer than ``max_num_seqs`` run and
  the KV cache has room for prompt + max_tokens (reserved until it ends); a
  head that does not fit blocks everyone behind it. If more than
  ``max_waiting`` still wait, the newest is answered 429. An admitted sequence
  joins the work at the next step start (the step in progress was planned
  without it); an idle engine starts a step at the arrival instant.
* **step start**: expire (every waiting or running request whose deadline,
  arrival + ``request_timeout_s``, is at or before the start is answered 504
  there and frees its slot and KV), admit, plan. Without chunked prefill, if
  any running sequence still needs its prompt the step prefills all of them
  whole and decodes nobody; otherwise it decodes every running sequence. With
  ``prefill_chunk_tokens`` Q > 0 every decoding sequence takes one token of Q
  and what is left goes to prompt chunks FCFS.
* **step end**: the step that completes a prompt emits its first token (so
  first token = that step's end); every sequence decoded emits one token; a
  sequence ends after exactly ``max_tokens`` tokens (done = that step's end,
  status 200) and frees its slot and KV. The next step starts at once if any
  sequence runs.
* **same instant**: arrivals at an instant are handled before a step that ends
  or starts at that instant (several requests arriving together at an idle
  engine share its first step, as in the demo, whose loop runs after the
  request handlers).

Replicas: ``replicas`` identical engines behind a router that picks at arrival
(a 400 or 429 counts as routed): ``round_robin`` (in arrival order),
``random`` (uniform, one draw per request from the ``rng`` given) or
``least_outstanding`` (fewest waiting + running, ties to the lowest index).

Disaggregated serving (``prefill_replicas`` > 0; ``replicas`` then counts the
decode engines), modelled as disaggregated vLLM does it:

* **prefill engines** (routed as above) run prefill-only steps costing
  ``step_s(prompt tokens in the step, 0)``. Each engine has ``max_num_seqs``
  slots for its *next* step, filled FCFS from its queue at arrival and at each
  step start while the prompts of that next step fit in ``kv_cache_tokens``
  (the KV of a step is not held past it, so a step's prompts are the only
  budget); at a step start the next batch becomes the step and the slots
  refill from the queue. More than ``max_waiting`` queued beyond the slots:
  the newest gets 429. Too long: 400, as above. Expiry (504) happens at step
  starts, for requests not yet in a step; ``prefill_chunk_tokens`` is not used.
* **first token** = the end of the prompt's prefill step (the prefill node
  samples it). A request with ``max_tokens == 1`` is then done (200).
* **KV transfer**: the sequence reaches the decode pool at step end +
  ``transfer_ns`` + ``transfer_ns_per_token`` x prompt tokens (rounded to the
  ns); transfers arriving at the same instant go in request order.
* **decode engines**: it goes to the decode engine with the fewest waiting +
  running (ties to the lowest index) and is admitted as in a colocated engine
  (``max_num_seqs``, prompt + max_tokens of KV, FCFS, no ``max_waiting``: a
  stream already started is never refused) and joins at the next step start.
  Steps are decode-only, ``step_s(0, n)`` for its n sequences; it emits the
  remaining ``max_tokens - 1`` tokens and is done with the last. Deadlines
  still count from the arrival; expiry at a decode step start answers 504.

Results are indexed like the inputs. A timeout is reported as 504 even when
tokens were already emitted (a streaming demo sends that 504 as an error event
after its 200 header); ``first_token_ns`` and ``token_times`` keep what was
emitted before. ``replica`` is the engine that answered
(the decode engine when disaggregated; -1 there for a request no decode engine
took: 400, 429, expired before its prefill step, or max_tokens == 1).
``token_times`` keeps every token's emission instant (None for a request that
got none) and costs memory: turn it off for very long runs. Every request
needs at least 1 prompt token and max_tokens >= 1 (else :class:`BadInput`).

Speed: every decoding sequence emits one token in each step that decodes, so
an engine counts its decoding steps and a sequence's last token is a step
number fixed when it starts decoding (a heap holds them); steps cost O(1) and
sequences are touched only when they start, finish or expire. A run of
decode-only steps with no arrival, finish or expiry inside is jumped in one go
(``k`` steps of equal cost, token instants an arithmetic sequence); passing
``jump=False`` to :func:`_simulate` takes every step on its own, and gives the
same numbers.

The scenario file's ``llm:`` section is :class:`LlmModel`; :func:`llm_spec`
and :func:`token_counts` turn it into this model's inputs.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tailwise.errors import BadInput
from tailwise.server.engine import EngineConfig
from tailwise.units import parse_duration_ns

ROUTINGS = ("round_robin", "random", "least_outstanding")

# Per-request states (the same list serves the prefill and the decode side).
_WAITING = 1  # in an engine's waiting queue
_ADMITTED = 2  # holds a slot; prompt not done (colocated) or not yet joined (decode pool)
_DECODING = 3  # emits one token per decoding step
_TRANSFER = 4  # in a prefill engine's step, or prefilled and on its way to the decode pool
_DONE = 5

_IDLE_NS = 2**63 - 1  # an idle engine's next event: never
_NOT_ROUTED = -1


@dataclass(frozen=True)
class LlmSpec:
    engine: EngineConfig
    replicas: int = 1
    routing: str = "round_robin"
    prefill_replicas: int = 0  # >0: disaggregated; `replicas` then means decode replicas
    transfer_ns: int = 0
    transfer_ns_per_token: float = 0.0
    token_times: bool = True  # keep every token's time (for ITL); off for huge runs


@dataclass
class LlmResult:
    first_token_ns: np.ndarray  # int64, -1 if none
    done_ns: np.ndarray  # int64, time of the answer (finish, rejection, timeout)
    http_status: np.ndarray  # 200, 400, 429, 504
    replica: np.ndarray  # the engine that answered (decode engine when disaggregated)
    token_times: list[list[int] | None] | None  # per request, token emission instants (ns)
    steps: int  # engine steps simulated (all engines)


def _step_ns(cfg: EngineConfig, prefill_tokens: int, decoding: int) -> int:
    # The engine's own cost law, so the model cannot drift from the demo.
    return round(cfg.step_s(prefill_tokens, decoding) * 1e9)


class _Run:
    """Per-request inputs and outcomes as Python lists (indexing them is the hot path)."""

    def __init__(
        self,
        cfg: EngineConfig,
        prompt: list[int],
        max_tokens: list[int],
        arrival_ns: list[int],
        token_times: bool,
    ) -> None:
        n = len(prompt)
        timeout_ns = round(cfg.request_timeout_s * 1e9)
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.deadline = [a + timeout_ns for a in arrival_ns]
        self.first = [-1] * n
        self.done = [-1] * n
        self.status = [0] * n
        self.replica = [_NOT_ROUTED] * n
        self.state = [0] * n
        self.start = [0] * n  # the engine's decoding-step count when the sequence joined it
        self.prefilled = [0] * n
        self.xfer = [0] * n  # disaggregated: arrival at the decode pool
        self.tokens: list[list[int] | None] | None = [None] * n if token_times else None
        self.steps = 0
        self.max_context = min(cfg.max_model_len, cfg.kv_cache_tokens)


class _Engine:
    """One colocated engine, or (``decode_only``) one engine of the decode pool."""

    def __init__(self, run: _Run, cfg: EngineConfig, index: int, decode_only: bool, jump: bool):
        self.run = run
        self.cfg = cfg
        self.index = index
        self.decode_only = decode_only
        self.jump = jump
        self.max_seqs = cfg.max_num_seqs
        self.kv_cap = cfg.kv_cache_tokens
        self.chunk = 0 if decode_only else cfg.prefill_chunk_tokens
        self.max_waiting = 2**62 if decode_only else cfg.max_waiting
        self.decode_cost_ns = [_step_ns(cfg, 0, n) for n in range(cfg.max_num_seqs + 1)]
        self.waiting: deque[int] = deque()  # may hold expired entries (skipped at admission)
        self.n_waiting = 0
        self.running = 0
        self.kv_used = 0
        self.pending: list[int] = []  # admitted, prompt not done / not yet joined (FCFS)
        self.n_decoding = 0
        self.finish: list[tuple[int, int]] = []  # (decoding step of the last token, request)
        self.live: list[tuple[int, int]] = []  # (deadline, request); stale entries allowed
        self.decode_steps = 0
        self.decode_end_ns: list[int] | None = [] if run.tokens is not None else None
        self.next_ns = _IDLE_NS  # the next step start (idle: never) or end (in a step)
        self.in_step = False
        # The step in progress: `plan_steps` identical steps of `plan_step_ns` each.
        self.plan_prefill: list[tuple[int, int]] = []  # (request, prompt tokens)
        self.plan_decodes = False
        self.plan_steps = 1
        self.plan_step_ns = 0

    @property
    def outstanding(self) -> int:
        return self.n_waiting + self.running

    def submit(self, i: int, now_ns: int) -> None:
        run = self.run
        run.replica[i] = self.index
        if not self.decode_only and run.prompt[i] + run.max_tokens[i] > run.max_context:
            self._answer(i, now_ns, 400)
            return
        run.state[i] = _WAITING
        self.waiting.append(i)
        self.n_waiting += 1
        heapq.heappush(self.live, (run.deadline[i], i))
        self._admit()
        if self.n_waiting > self.max_waiting:  # FCFS: the newest one is refused
            self.waiting.pop()
            self.n_waiting -= 1
            self._answer(i, now_ns, 429)
            return
        if self.next_ns == _IDLE_NS:
            self.next_ns = now_ns  # the step starts after every arrival of this instant

    def _answer(self, i: int, now_ns: int, status: int) -> None:
        run = self.run
        run.state[i] = _DONE
        run.done[i] = now_ns
        run.status[i] = status

    def _admit(self) -> None:
        run = self.run
        state, prompt, max_tokens = run.state, run.prompt, run.max_tokens
        waiting = self.waiting
        while waiting and self.running < self.max_seqs:
            i = waiting[0]
            if state[i] != _WAITING:  # expired while waiting
                waiting.popleft()
                continue
            context = prompt[i] + max_tokens[i]
            if self.kv_used + context > self.kv_cap:
                return  # FCFS: the head waits for KV space, and so does everyone behind it
            waiting.popleft()
            self.n_waiting -= 1
            self.running += 1
            self.kv_used += context
            state[i] = _ADMITTED
            self.pending.append(i)

    def _tokens(self, i: int, last_step: int) -> None:
        """Record request i's token instants: its first, then decoding steps up to last_step."""
        tokens, ends = self.run.tokens, self.decode_end_ns
        if tokens is None or ends is None or self.run.first[i] < 0:
            return
        tokens[i] = [self.run.first[i], *ends[self.run.start[i] : last_step]]

    def _release(self, i: int) -> None:
        run = self.run
        self.running -= 1
        self.kv_used -= run.prompt[i] + run.max_tokens[i]

    def _expire(self, now_ns: int) -> None:
        run = self.run
        state, live = run.state, self.live
        while live and (state[live[0][1]] == _DONE or live[0][0] <= now_ns):
            i = heapq.heappop(live)[1]
            s = state[i]
            if s == _DONE:
                continue
            if s == _WAITING:
                self.n_waiting -= 1  # its deque entry is skipped at admission
            elif s == _ADMITTED:
                self.pending.remove(i)
                self._release(i)
            else:  # decoding; its finish-heap entry is skipped when reached
                self.n_decoding -= 1
                self._release(i)
                self._tokens(i, self.decode_steps)
            if s != _DECODING:
                self._tokens(i, run.start[i])
            self._answer(i, now_ns, 504)

    def advance(self, until_ns: int) -> None:
        """Run every step boundary before ``until_ns`` (arrivals at ``until_ns`` come first)."""
        run = self.run
        state, first, max_tokens, start = run.state, run.first, run.max_tokens, run.start
        while self.next_ns < until_ns:
            t = self.next_ns
            if self.in_step:
                # -- the step (or run of identical steps) ends at t
                if self.plan_decodes:
                    steps = self.plan_steps
                    if self.decode_end_ns is not None:
                        d = self.plan_step_ns
                        self.decode_end_ns.extend(range(t - (steps - 1) * d, t + 1, d))
                    self.decode_steps += steps
                    count = self.decode_steps
                    finish = self.finish
                    while finish and finish[0][0] <= count:
                        i = heapq.heappop(finish)[1]
                        if state[i] == _DECODING:  # else it expired meanwhile
                            self.n_decoding -= 1
                            self._release(i)
                            self._tokens(i, count)
                            self._answer(i, t, 200)
                if self.plan_prefill:
                    prefilled, prompt = run.prefilled, run.prompt
                    completed = 0
                    for i, chunk in self.plan_prefill:
                        prefilled[i] += chunk
                        if prefilled[i] < prompt[i]:
                            break  # only the last chunk of a step can leave a prompt unfinished
                        completed += 1
                        first[i] = t  # the step that ends a prompt samples the first token
                        if max_tokens[i] == 1:
                            self._release(i)
                            self._tokens(i, 0)
                            self._answer(i, t, 200)
                        else:
                            state[i] = _DECODING
                            start[i] = self.decode_steps
                            heapq.heappush(self.finish, (self.decode_steps + max_tokens[i] - 1, i))
                            self.n_decoding += 1
                    del self.pending[:completed]  # the planned prompts lead `pending`
                self.in_step = False
            # -- a step starts at t
            self._expire(t)
            self._admit()
            if not self.running:
                self.next_ns = _IDLE_NS
                return
            self._plan(t, until_ns)
            run.steps += self.plan_steps
            self.next_ns = t + self.plan_steps * self.plan_step_ns
            self.in_step = True

    def _plan(self, t: int, until_ns: int) -> None:
        run = self.run
        pending = self.pending
        prefill: list[tuple[int, int]] = []
        if self.decode_only:
            if pending:  # sequences admitted since the last start join now
                state, start, max_tokens = run.state, run.start, run.max_tokens
                count = self.decode_steps
                for i in pending:
                    state[i] = _DECODING
                    start[i] = count
                    heapq.heappush(self.finish, (count + max_tokens[i] - 1, i))
                self.n_decoding += len(pending)
                pending.clear()
            decodes = True
        elif self.chunk <= 0:
            decodes = not pending  # a prefill-only step (decodes wait) or a decode-only one
            prefill = [(i, run.prompt[i]) for i in pending]
        else:
            decodes = True
            budget = max(self.chunk - self.n_decoding, 0)
            prompt, prefilled = run.prompt, run.prefilled
            for i in pending:
                if budget <= 0:
                    break
                chunk = min(prompt[i] - prefilled[i], budget)
                prefill.append((i, chunk))
                budget -= chunk
        self.plan_prefill = prefill
        self.plan_decodes = decodes
        n = self.n_decoding if decodes else 0
        if prefill:
            self.plan_step_ns = _step_ns(self.cfg, sum(c for _, c in prefill), n)
            self.plan_steps = 1
            return
        step_ns = self.decode_cost_ns[n]
        self.plan_step_ns = step_ns
        self.plan_steps = self._run_length(t, step_ns, until_ns) if self.jump else 1

    def _run_length(self, t: int, step_ns: int, until_ns: int) -> int:
        """How many identical decode-only steps from t can be taken in one go.

        Up to and including the next finish; no later step may start at or after
        the next arrival (it could be admitted into that step) or a deadline (the
        start that expires it must be a real boundary).
        """
        state = self.run.state
        finish = self.finish
        while finish and state[finish[0][1]] != _DECODING:
            heapq.heappop(finish)  # expired sequences
        steps = finish[0][0] - self.decode_steps
        # Step s (1-based) starts at t + (s-1) step_ns: it must start before until_ns.
        steps = min(steps, (until_ns - t + step_ns - 1) // step_ns)
        live = self.live
        while live and state[live[0][1]] == _DONE:
            heapq.heappop(live)
        if live:  # land on the first start at or after the earliest deadline
            steps = min(steps, (live[0][0] - t + step_ns - 1) // step_ns)
        return max(steps, 1)


class _PrefillEngine:
    """One engine of a disaggregated prefill pool (see the module docstring)."""

    def __init__(self, run: _Run, spec: LlmSpec, index: int):
        cfg = spec.engine
        self.run = run
        self.cfg = cfg
        self.index = index
        self.max_seqs = cfg.max_num_seqs
        self.kv_cap = cfg.kv_cache_tokens
        self.max_waiting = cfg.max_waiting
        self.transfer_ns = spec.transfer_ns
        self.transfer_ns_per_token = spec.transfer_ns_per_token
        self.waiting: deque[int] = deque()
        self.n_waiting = 0
        self.batch: list[int] = []  # the next step's prompts (its slots)
        self.batch_tokens = 0
        self.live: list[tuple[int, int]] = []
        self.step: list[int] = []
        self.next_ns = _IDLE_NS
        self.in_step = False

    @property
    def outstanding(self) -> int:
        return self.n_waiting + len(self.batch) + len(self.step)

    def submit(self, i: int, now_ns: int) -> None:
        run = self.run
        if run.prompt[i] + run.max_tokens[i] > run.max_context:
            run.state[i] = _DONE
            run.done[i] = now_ns
            run.status[i] = 400
            return
        run.state[i] = _WAITING
        self.waiting.append(i)
        self.n_waiting += 1
        heapq.heappush(self.live, (run.deadline[i], i))
        self._admit()
        if self.n_waiting > self.max_waiting:
            self.waiting.pop()
            self.n_waiting -= 1
            run.state[i] = _DONE
            run.done[i] = now_ns
            run.status[i] = 429
            return
        if self.next_ns == _IDLE_NS:
            self.next_ns = now_ns

    def _admit(self) -> None:
        run = self.run
        state, prompt = run.state, run.prompt
        waiting = self.waiting
        while waiting and len(self.batch) < self.max_seqs:
            i = waiting[0]
            if state[i] != _WAITING:
                waiting.popleft()
                continue
            if self.batch_tokens + prompt[i] > self.kv_cap:
                return
            waiting.popleft()
            self.n_waiting -= 1
            self.batch.append(i)
            self.batch_tokens += prompt[i]
            state[i] = _ADMITTED

    def advance(self, until_ns: int) -> None:
        run = self.run
        state = run.state
        while self.next_ns < until_ns:
            t = self.next_ns
            if self.in_step:
                for i in self.step:
                    run.first[i] = t  # the prefill node samples the first token
                    if run.max_tokens[i] == 1:
                        state[i] = _DONE
                        run.done[i] = t
                        run.status[i] = 200
                        if run.tokens is not None:
                            run.tokens[i] = [t]
                    else:
                        state[i] = _TRANSFER
                        run.xfer[i] = (
                            t + self.transfer_ns + round(self.transfer_ns_per_token * run.prompt[i])
                        )
                self.step = []
                self.in_step = False
            live = self.live
            while live and (state[live[0][1]] not in (_WAITING, _ADMITTED) or live[0][0] <= t):
                i = heapq.heappop(live)[1]
                if state[i] == _WAITING:
                    self.n_waiting -= 1
                elif state[i] == _ADMITTED:
                    self.batch.remove(i)
                    self.batch_tokens -= run.prompt[i]
                else:
                    continue  # already in a step or answered
                state[i] = _DONE
                run.done[i] = t
                run.status[i] = 504
            self._admit()
            if not self.batch:
                self.next_ns = _IDLE_NS
                return
            self.step = self.batch
            tokens = self.batch_tokens
            for i in self.step:
                state[i] = _TRANSFER  # in the step: no longer expirable here
            self.batch, self.batch_tokens = [], 0
            self._admit()  # the slots of the following step refill from the queue
            run.steps += 1
            self.next_ns = t + _step_ns(self.cfg, tokens, 0)
            self.in_step = True


def _route(
    engines: Sequence[_Engine | _PrefillEngine],
    order: list[int],
    times: list[int],
    routing: str,
    rng: np.random.Generator | None,
) -> None:
    """Offer the requests in ``order`` at ``times`` to the engines, then run them dry."""
    n_eng = len(engines)
    if routing == "least_outstanding" and n_eng > 1:
        for i in order:
            t = times[i]
            best, best_load = 0, -1
            for k, eng in enumerate(engines):
                if eng.next_ns < t:
                    eng.advance(t)
                load = eng.outstanding
                if best_load < 0 or load < best_load:
                    best, best_load = k, load
            engines[best].submit(i, t)
    else:
        # Engines that do not look at each other can each run through their own share.
        if n_eng == 1:
            shares = [order]
        else:
            if routing == "random":
                assert rng is not None
                picks = rng.integers(0, n_eng, size=len(order)).tolist()
            else:
                picks = [k % n_eng for k in range(len(order))]
            shares = [[] for _ in range(n_eng)]
            for i, k in zip(order, picks, strict=True):
                shares[k].append(i)
        for eng, share in zip(engines, shares, strict=True):
            for i in share:
                t = times[i]
                if eng.next_ns < t:
                    eng.advance(t)
                eng.submit(i, t)
    for eng in engines:
        eng.advance(_IDLE_NS)


def _check(
    spec: LlmSpec, arrivals_ns: np.ndarray, prompt_tokens: np.ndarray, max_tokens: np.ndarray
) -> None:
    cfg = spec.engine
    if not len(arrivals_ns) == len(prompt_tokens) == len(max_tokens):
        raise BadInput(
            "prompt_tokens",
            f"{len(arrivals_ns)}, {len(prompt_tokens)}, {len(max_tokens)} values",
            "one prompt length and one max_tokens per arrival",
        )
    if spec.routing not in ROUTINGS:
        raise BadInput("routing", spec.routing, " | ".join(ROUTINGS))
    if spec.replicas < 1 or spec.prefill_replicas < 0:
        raise BadInput(
            "replicas", (spec.replicas, spec.prefill_replicas), "replicas >= 1, prefill >= 0"
        )
    if spec.transfer_ns < 0 or spec.transfer_ns_per_token < 0:
        raise BadInput("transfer", spec.transfer_ns, "a duration of at least 0")
    if min(cfg.max_num_seqs, cfg.kv_cache_tokens, cfg.max_model_len) < 1 or cfg.max_waiting < 0:
        raise BadInput("engine", cfg, "positive limits and max_waiting >= 0")
    if _step_ns(cfg, 0, 0) < 1 or min(cfg.prefill_s_per_token, cfg.decode_s_per_seq) < 0:
        raise BadInput("engine.base_s", cfg.base_s, "a step cost of at least 1 ns")
    if cfg.request_timeout_s <= 0:
        raise BadInput("engine.request_timeout_s", cfg.request_timeout_s, "a positive timeout")
    if len(prompt_tokens) and (prompt_tokens.min() < 1 or max_tokens.min() < 1):
        raise BadInput("prompt_tokens", "a count below 1", "at least 1 prompt and 1 output token")


def simulate_llm(
    spec: LlmSpec,
    arrivals_ns: np.ndarray,
    prompt_tokens: np.ndarray,
    max_tokens: np.ndarray,
    rng: np.random.Generator,
) -> LlmResult:
    """Every request's first-token and answer instants on the engines of ``spec``."""
    return _simulate(spec, arrivals_ns, prompt_tokens, max_tokens, rng)


def _simulate(
    spec: LlmSpec,
    arrivals_ns: np.ndarray,
    prompt_tokens: np.ndarray,
    max_tokens: np.ndarray,
    rng: np.random.Generator | None,
    jump: bool = True,
) -> LlmResult:
    """:func:`simulate_llm`; ``jump=False`` takes decode steps one by one (for checking)."""
    arrivals = np.asarray(arrivals_ns, dtype=np.int64)
    prompts = np.asarray(prompt_tokens, dtype=np.int64)
    outputs = np.asarray(max_tokens, dtype=np.int64)
    _check(spec, arrivals, prompts, outputs)
    cfg = spec.engine
    times = arrivals.tolist()
    run = _Run(cfg, prompts.tolist(), outputs.tolist(), times, spec.token_times)
    order = np.argsort(arrivals, kind="stable").tolist()
    if spec.prefill_replicas == 0:
        engines = [_Engine(run, cfg, k, False, jump) for k in range(spec.replicas)]
        _route(engines, order, times, spec.routing, rng)
    else:
        prefill = [_PrefillEngine(run, spec, k) for k in range(spec.prefill_replicas)]
        _route(prefill, order, times, spec.routing, rng)
        moving = [i for i, s in enumerate(run.state) if s == _TRANSFER]
        moving.sort(key=run.xfer.__getitem__)  # stable: same instant, request order
        decode = [_Engine(run, cfg, k, True, jump) for k in range(spec.replicas)]
        _route(decode, moving, run.xfer, "least_outstanding", None)
    return LlmResult(
        first_token_ns=np.array(run.first, dtype=np.int64),
        done_ns=np.array(run.done, dtype=np.int64),
        http_status=np.array(run.status, dtype=np.int64),
        replica=np.array(run.replica, dtype=np.int64),
        token_times=run.tokens,
        steps=run.steps,
    )


# -- the scenario file's `llm:` section ------------------------------------------------

TOKENS_FORM = "a token count such as 128, const:128 or uniform:64-256"


def _token_range(value: int | str, field: str) -> tuple[int, int]:
    """``128`` or ``"const:128"`` -> (128, 128); ``"uniform:64-256"`` -> (64, 256)."""
    if isinstance(value, int) and not isinstance(value, bool):
        lo = hi = value
    elif isinstance(value, str):
        kind, sep, rest = value.strip().partition(":")
        if not sep:
            kind, rest = "const", kind
        try:
            if kind == "const":
                lo = hi = int(rest)
            elif kind == "uniform":
                a, dash, b = rest.partition("-")
                if not dash:
                    raise ValueError(rest)
                lo, hi = int(a), int(b)
            else:
                raise ValueError(kind)
        except ValueError:
            raise BadInput(field, value, TOKENS_FORM) from None
    else:
        raise BadInput(field, value, TOKENS_FORM)
    if lo < 1 or hi < lo:
        raise BadInput(field, value, "counts of at least 1 token (uniform:lo-hi with lo <= hi)")
    return lo, hi


_DURATIONS = ("base", "prefill_per_token", "decode_per_seq", "timeout", "transfer")


class LlmModel(BaseModel):
    """``llm:`` in a scenario file: the demo engine's cost law, limits and workload.

    Durations use the CLI's forms (``4ms``, ``20us``). ``prompt_tokens`` and
    ``output_tokens`` (each request's max_tokens, all generated) take an int,
    ``const:N`` or ``uniform:A-B`` (integers A..B inclusive, drawn per request).
    ``transfer`` and ``transfer_per_token`` are the disaggregated KV transfer
    (a fixed part and one per prompt token). Defaults are the demo's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str = "4ms"
    prefill_per_token: str = "0.02ms"
    decode_per_seq: str = "0.3ms"
    max_num_seqs: int = Field(default=32, ge=1)
    kv_cache_tokens: int = Field(default=131_072, ge=1)
    prefill_chunk_tokens: int = Field(default=0, ge=0)
    max_waiting: int = Field(default=128, ge=0)
    max_model_len: int = Field(default=4096, ge=1)
    timeout: str = "60s"
    prompt_tokens: int | str = 128
    output_tokens: int | str = 64
    prefill_replicas: int = Field(default=0, ge=0)
    transfer: str = "0ms"
    transfer_per_token: str = "0ms"
    token_times: bool = True

    @field_validator(*_DURATIONS, "transfer_per_token")
    @classmethod
    def _duration(cls, v: str, info: ValidationInfo) -> str:
        name = f"scenario.llm.{info.field_name}"
        positive = info.field_name in ("base", "timeout")
        parse_duration_ns(v, name, allow_zero=not positive)
        return v

    @field_validator("prompt_tokens", "output_tokens")
    @classmethod
    def _tokens(cls, v: int | str, info: ValidationInfo) -> int | str:
        _token_range(v, f"scenario.llm.{info.field_name}")
        return v


def llm_spec(model: LlmModel, replicas: int, routing: str) -> LlmSpec:
    """The simulator's model of a validated ``llm:`` section (units parsed)."""
    if routing not in ROUTINGS:
        raise BadInput("scenario.routing", routing, f"{' | '.join(ROUTINGS)} for an llm scenario")
    if replicas < 1:
        raise BadInput("scenario.replicas", replicas, "at least 1")

    def ns(name: str) -> int:
        value: Any = getattr(model, name)
        return parse_duration_ns(value, f"scenario.llm.{name}")

    engine = EngineConfig(
        base_s=ns("base") / 1e9,
        prefill_s_per_token=ns("prefill_per_token") / 1e9,
        decode_s_per_seq=ns("decode_per_seq") / 1e9,
        max_num_seqs=model.max_num_seqs,
        kv_cache_tokens=model.kv_cache_tokens,
        prefill_chunk_tokens=model.prefill_chunk_tokens,
        max_waiting=model.max_waiting,
        max_model_len=model.max_model_len,
        request_timeout_s=ns("timeout") / 1e9,
    )
    return LlmSpec(
        engine=engine,
        replicas=replicas,
        routing=routing,
        prefill_replicas=model.prefill_replicas,
        transfer_ns=ns("transfer"),
        transfer_ns_per_token=float(ns("transfer_per_token")),
        token_times=model.token_times,
    )


def token_counts(
    model: LlmModel, rng: np.random.Generator, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` prompt lengths, then ``n`` output lengths (int64), drawn in that order."""

    def draw(value: int | str, name: str) -> np.ndarray:
        lo, hi = _token_range(value, f"scenario.llm.{name}")
        if lo == hi:
            return np.full(n, lo, dtype=np.int64)
        return rng.integers(lo, hi + 1, size=n, dtype=np.int64)

    return draw(model.prompt_tokens, "prompt_tokens"), draw(model.output_tokens, "output_tokens")
