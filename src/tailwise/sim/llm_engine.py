"""One engine of the LLM model: colocated, or one of a disaggregated decode pool.

A colocated engine (:class:`LlmEngine`, not ``decode_only``) does exactly what
the demo engine does:

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

An engine of the decode pool (``decode_only``) takes the sequences a prefill
engine (:mod:`tailwise.sim.llm_prefill`) has prefilled and admits them as a
colocated engine does (``max_num_seqs``, prompt + max_tokens of KV, FCFS, no
``max_waiting``: a stream already started is never refused); each joins at the
next step start. Steps are decode-only, ``step_s(0, n)`` for its n sequences;
it emits the remaining ``max_tokens - 1`` tokens and is done with the last.
Deadlines still count from the arrival; expiry at a decode step start answers
504.

Every engine writes its requests' outcomes into one shared
:class:`RequestTable`, indexed like the inputs.

Speed: every decoding sequence emits one token in each step that decodes, so
an engine counts its decoding steps and a sequence's last token is a step
number fixed when it starts decoding (a heap holds them); steps cost O(1) and
sequences are touched only when they start, finish or expire. A run of
decode-only steps with no arrival, finish or expiry inside is jumped in one go
(``k`` steps of equal cost, token instants an arithmetic sequence; with a context
term each step's cost is still computed on its own, as the step-by-step path does, but
without the admission, expiry and planning around it); an engine made with
``jump=False`` takes every step on its own, and gives the same numbers.
"""

from __future__ import annotations

import heapq
from collections import deque

from tailwise.laws.llm import EngineConfig

# Per-request states (the same list serves the prefill and the decode side).
WAITING = 1  # in an engine's waiting queue
ADMITTED = 2  # holds a slot; prompt not done (colocated) or not yet joined (decode pool)
DECODING = 3  # emits one token per decoding step
TRANSFER = 4  # in a prefill engine's step, or prefilled and on its way to the decode pool
DONE = 5
SWAPPED = 6  # paged KV, swap mode: preempted, its blocks in CPU memory (llm_paged)

IDLE_NS = 2**63 - 1  # an idle engine's next event: never
NOT_ROUTED = -1


class RequestTable:
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
        self.replica = [NOT_ROUTED] * n
        self.state = [0] * n
        self.start = [0] * n  # the engine's decoding-step count when the sequence joined it
        self.prefilled = [0] * n
        self.xfer = [0] * n  # disaggregated: arrival at the decode pool
        self.tokens: list[list[int] | None] | None = [None] * n if token_times else None
        # Preemption (paged KV, llm_paged): what the next prefill computes (the prompt, then
        # prompt + tokens made before a preemption), tokens made up to the latest prefill's,
        # the decoding step of the last token as pushed (older heap entries are stale), the
        # token instants before the current decoding stint, and preemptions per request.
        self.fill = list(prompt)
        self.made = [0] * n
        self.fin = [-1] * n
        self.earlier: list[list[int] | None] = [None] * n
        self.preempted = [0] * n
        self.group = [-1] * n  # shared-prefix group (prefix caching), -1: none
        # A decoding sequence attends to kv0 + (its engine's decoding steps) KV tokens.
        self.kv0 = [0] * n
        self.steps = 0
        self.max_context = cfg.max_context_tokens


class LlmEngine:
    """One colocated engine, or (``decode_only``) one engine of the decode pool."""

    def __init__(
        self, run: RequestTable, cfg: EngineConfig, index: int, decode_only: bool, jump: bool
    ):
        self.run = run
        self.cfg = cfg
        self.index = index
        self.decode_only = decode_only
        self.jump = jump
        self.max_seqs = cfg.max_num_seqs
        self.kv_cap = cfg.kv_cache_tokens
        self.chunk = 0 if decode_only else cfg.prefill_chunk_tokens
        self.max_waiting = 2**62 if decode_only else cfg.max_waiting
        self.decode_cost_ns = [cfg.step_ns(0, n) for n in range(cfg.max_num_seqs + 1)]
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
        self.next_ns = IDLE_NS  # the next step start (idle: never) or end (in a step)
        self.in_step = False
        # The step in progress: `plan_steps` identical steps of `plan_step_ns` each.
        self.plan_prefill: list[tuple[int, int]] = []  # (request, prompt tokens)
        self.plan_decodes = False
        self.plan_steps = 1
        self.plan_step_ns = 0
        # With a context term, a run's steps differ: their end instants (None: equal steps).
        self.plan_ends: list[int] | None = None
        self.peak_running = 0
        self.kv_cost = cfg.kv_s_per_token > 0  # steps' costs then grow with context
        self.kv_sum0 = 0  # sum of kv0 over the decoding sequences
        self.n_swapped = 0  # paged KV, swap mode: preempted sequences held in CPU memory

    @property
    def outstanding(self) -> int:
        return self.n_waiting + self.running

    def submit(self, i: int, now_ns: int) -> None:
        run = self.run
        run.replica[i] = self.index
        if not self.decode_only and run.prompt[i] + run.max_tokens[i] > run.max_context:
            self._answer(i, now_ns, 400)
            return
        run.state[i] = WAITING
        self.waiting.append(i)
        self.n_waiting += 1
        heapq.heappush(self.live, (run.deadline[i], i))
        self._admit()
        if self.n_waiting > self.max_waiting:  # FCFS: the newest one is refused
            self.waiting.pop()
            self.n_waiting -= 1
            self._answer(i, now_ns, 429)
            return
        if self.next_ns == IDLE_NS:
            self.next_ns = now_ns  # the step starts after every arrival of this instant

    def _answer(self, i: int, now_ns: int, status: int) -> None:
        run = self.run
        run.state[i] = DONE
        run.done[i] = now_ns
        run.status[i] = status

    def _admit(self) -> None:
        run = self.run
        state, prompt, max_tokens = run.state, run.prompt, run.max_tokens
        waiting = self.waiting
        while waiting and self.running < self.max_seqs:
            i = waiting[0]
            if state[i] != WAITING:  # expired while waiting
                waiting.popleft()
                continue
            context = prompt[i] + max_tokens[i]
            if self.kv_used + context > self.kv_cap:
                return  # FCFS: the head waits for KV space, and so does everyone behind it
            waiting.popleft()
            self.n_waiting -= 1
            self.running += 1
            self.kv_used += context
            state[i] = ADMITTED
            self.pending.append(i)
        self.peak_running = max(self.peak_running, self.running)

    def _tokens(self, i: int, last_step: int) -> None:
        """Record request i's token instants: its first, then decoding steps up to last_step."""
        tokens, ends = self.run.tokens, self.decode_end_ns
        if tokens is None or ends is None or self.run.first[i] < 0:
            return
        head = self.run.earlier[i] or [self.run.first[i]]
        tokens[i] = [*head, *ends[self.run.start[i] : last_step]]

    def _release(self, i: int) -> None:
        run = self.run
        self.running -= 1
        self.kv_used -= run.prompt[i] + run.max_tokens[i]

    def _expire(self, now_ns: int) -> None:
        run = self.run
        state, live = run.state, self.live
        while live and (state[live[0][1]] == DONE or live[0][0] <= now_ns):
            i = heapq.heappop(live)[1]
            s = state[i]
            if s == DONE:
                continue
            if s == WAITING:
                self.n_waiting -= 1  # its deque entry is skipped at admission
            elif s == ADMITTED:
                self.pending.remove(i)
                self._release(i)
            elif s == SWAPPED:
                self.n_swapped -= 1  # its swapped-queue entry is skipped at swap-in
            else:  # decoding; its finish-heap entry is skipped when reached
                self.n_decoding -= 1
                self.kv_sum0 -= run.kv0[i]
                self._release(i)
                self._tokens(i, self.decode_steps)
            if s != DECODING:
                self._tokens(i, run.start[i])
            self._answer(i, now_ns, 504)

    def advance(self, until_ns: int) -> None:
        """Run every step boundary before ``until_ns`` (arrivals at ``until_ns`` come first)."""
        run = self.run
        state = run.state
        while self.next_ns < until_ns:
            t = self.next_ns
            if self.in_step:
                # -- the step (or run of identical steps) ends at t
                if self.plan_decodes:
                    steps = self.plan_steps
                    if self.decode_end_ns is not None:
                        if self.plan_ends is not None:
                            self.decode_end_ns.extend(self.plan_ends)
                        else:
                            d = self.plan_step_ns
                            self.decode_end_ns.extend(range(t - (steps - 1) * d, t + 1, d))
                    self.decode_steps += steps
                    count = self.decode_steps
                    finish = self.finish
                    fin = run.fin
                    while finish and finish[0][0] <= count:
                        last, i = heapq.heappop(finish)
                        if state[i] == DECODING and fin[i] == last:  # else expired, preempted
                            self.n_decoding -= 1
                            self.kv_sum0 -= run.kv0[i]
                            self._release(i)
                            self._tokens(i, count)
                            self._answer(i, t, 200)
                if self.plan_prefill:
                    completed = self._prefilled(t)
                    del self.pending[:completed]  # the planned prompts lead `pending`
                self.in_step = False
            # -- a step starts at t
            self._expire(t)
            self._admit()
            if not self.running:
                self.next_ns = IDLE_NS
                return
            self.plan_ends = None
            self._plan(t, until_ns)
            run.steps += self.plan_steps
            ends = self.plan_ends
            self.next_ns = ends[-1] if ends is not None else t + self.plan_steps * self.plan_step_ns
            self.in_step = True

    def _prefilled(self, t: int) -> int:
        """The step ending at t ran the planned prompt chunks: each prompt it completes
        samples a token (the first; after a preemption, the next). Returns how many."""
        run = self.run
        state, first, start, made = run.state, run.first, run.start, run.made
        prefilled, fill = run.prefilled, run.fill
        completed = 0
        for i, chunk in self.plan_prefill:
            prefilled[i] += chunk
            if prefilled[i] < fill[i]:
                break  # only the last chunk of a step can leave a prompt unfinished
            completed += 1
            self._prompt_done(i)
            if made[i] == 0:
                first[i] = t  # the step that ends a prompt samples the first token
            else:
                earlier = run.earlier[i]
                if earlier is not None:
                    earlier.append(t)
            made[i] += 1
            left = run.max_tokens[i] - made[i]
            if left == 0:
                self._release(i)
                self._tokens(i, start[i])
                self._answer(i, t, 200)
            else:
                state[i] = DECODING
                start[i] = self.decode_steps
                run.fin[i] = self.decode_steps + left
                heapq.heappush(self.finish, (run.fin[i], i))
                self.n_decoding += 1
                run.kv0[i] = run.prompt[i] + made[i] - self.decode_steps
                self.kv_sum0 += run.kv0[i]
        return completed

    def _prompt_done(self, i: int) -> None:
        """A hook: ``i``'s prompt (or recompute) prefill just completed."""

    def _plan(self, t: int, until_ns: int) -> None:
        run = self.run
        pending = self.pending
        prefill: list[tuple[int, int]] = []
        if self.decode_only:
            if pending:  # sequences admitted since the last start join now
                state, start, max_tokens = run.state, run.start, run.max_tokens
                count = self.decode_steps
                fin = run.fin
                for i in pending:
                    state[i] = DECODING
                    start[i] = count
                    fin[i] = count + max_tokens[i] - 1
                    heapq.heappush(self.finish, (fin[i], i))
                    run.kv0[i] = run.prompt[i] + 1 - count  # its first token came from prefill
                    self.kv_sum0 += run.kv0[i]
                self.n_decoding += len(pending)
                pending.clear()
            decodes = True
        elif self.chunk <= 0:
            decodes = not pending  # a prefill-only step (decodes wait) or a decode-only one
            prefill = [(i, run.fill[i]) for i in pending]
        else:
            decodes = True
            # prefill_chunks of tailwise.laws.llm, inlined (this runs every step);
            # tests/sim/test_llm_model.py checks it against the demo engine, which calls it.
            budget = max(self.chunk - self.n_decoding, 0)
            fill, prefilled = run.fill, run.prefilled
            for i in pending:
                if budget <= 0:
                    break
                chunk = min(fill[i] - prefilled[i], budget)
                prefill.append((i, chunk))
                budget -= chunk
        self.plan_prefill = prefill
        self.plan_decodes = decodes
        n = self.n_decoding if decodes else 0
        kv = self.kv_sum0 + n * self.decode_steps if n and self.kv_cost else 0
        if n and kv and not prefill and self.jump:  # decode-only, each step its own cost
            self._plan_context_run(t, n, kv, until_ns)
            return
        if prefill or self.kv_cost:  # one step: a prefill, or a context term step by step
            self.plan_step_ns = self.cfg.step_ns(sum(c for _, c in prefill), n, kv)
            self.plan_steps = 1
            return
        step_ns = self.decode_cost_ns[n]
        self.plan_step_ns = step_ns
        self.plan_steps = self._run_length(t, step_ns, until_ns) if self.jump else 1

    def _run_limits(self) -> tuple[int, int]:
        """(decode-only steps up to and including the next finish, at most
        :meth:`_step_cap`; the earliest live deadline, IDLE_NS if none)."""
        state, fin = self.run.state, self.run.fin
        finish = self.finish
        while finish and (state[finish[0][1]] != DECODING or fin[finish[0][1]] != finish[0][0]):
            heapq.heappop(finish)  # expired or preempted sequences
        steps = min(finish[0][0] - self.decode_steps, self._step_cap())
        live = self.live
        while live and state[live[0][1]] == DONE:
            heapq.heappop(live)
        return steps, live[0][0] if live else IDLE_NS

    def _step_cap(self) -> int:
        """The most decode steps one run may take (paged KV: the blocks free now)."""
        return 2**62

    def _run_length(self, t: int, step_ns: int, until_ns: int) -> int:
        """How many identical decode-only steps from t can be taken in one go.

        Up to and including the next finish; no later step may start at or after
        the next arrival (it could be admitted into that step) or a deadline (the
        start that expires it must be a real boundary).
        """
        steps, deadline = self._run_limits()
        # Step s (1-based) starts at t + (s-1) step_ns: it must start before until_ns.
        steps = min(steps, (until_ns - t + step_ns - 1) // step_ns)
        if deadline != IDLE_NS:  # land on the first start at or after the earliest deadline
            steps = min(steps, (deadline - t + step_ns - 1) // step_ns)
        return max(steps, 1)

    def _plan_context_run(self, t: int, n: int, kv: int, until_ns: int) -> None:
        """Decode-only steps with a context term: step k attends to ``kv + n k`` tokens, so
        each costs its own (computed as the step-by-step path computes it); the run stops
        where :meth:`_run_length` would, at the first end at or after the next arrival or
        deadline. One step leaves ``plan_ends`` None (a paged swap adds to its cost)."""
        limit, deadline = self._run_limits()
        stop = min(until_ns, deadline)
        costs = self.cfg.decode_run_ns(n, kv)
        end = t + next(costs)
        if limit <= 1 or end >= stop:
            self.plan_step_ns, self.plan_steps = end - t, 1
            return
        ends = [end]
        for _, step_ns in zip(range(1, limit), costs, strict=False):
            end += step_ns
            ends.append(end)
            if end >= stop:
                break
        self.plan_ends = ends
        self.plan_steps = len(ends)
