"""One engine of a disaggregated prefill pool, modelled as disaggregated vLLM runs it.

With ``prefill_replicas`` > 0, :mod:`tailwise.sim.llm` routes each request to
a prefill engine (as it routes to colocated ones); once prefilled, the request
moves on to the decode pool (:class:`tailwise.sim.llm_engine.LlmEngine`, made
``decode_only``).

* **steps**: a prefill engine runs prefill-only steps costing
  ``step_s(prompt tokens in the step, 0)``. Each engine has ``max_num_seqs``
  slots for its *next* step, filled FCFS from its queue at arrival and at each
  step start while the prompts of that next step fit in ``kv_cache_tokens``
  (the KV of a step is not held past it, so a step's prompts are the only
  budget); at a step start the next batch becomes the step and the slots
  refill from the queue. More than ``max_waiting`` queued beyond the slots:
  the newest gets 429. Too long (prompt + max_tokens over ``max_model_len``
  or ``kv_cache_tokens``): 400. Expiry (504) happens at step starts, for
  requests not yet in a step; ``prefill_chunk_tokens`` is not used.
* **first token** = the end of the prompt's prefill step (the prefill node
  samples it). A request with ``max_tokens == 1`` is then done (200).
* **KV transfer**: the sequence reaches the decode pool at step end +
  ``transfer_ns`` + ``transfer_ns_per_token`` x prompt tokens (rounded to the
  ns); it is left in state ``TRANSFER``, that instant in the table's ``xfer``.
"""

from __future__ import annotations

import heapq
from collections import deque

from tailwise.laws.llm import EngineConfig
from tailwise.sim.llm_engine import ADMITTED, DONE, IDLE_NS, TRANSFER, WAITING, RequestTable


class PrefillEngine:
    """One engine of a disaggregated prefill pool (see the module docstring)."""

    def __init__(
        self,
        run: RequestTable,
        cfg: EngineConfig,
        index: int,
        transfer_ns: int,
        transfer_ns_per_token: float,
    ):
        self.run = run
        self.cfg = cfg
        self.index = index
        self.max_seqs = cfg.max_num_seqs
        self.kv_cap = cfg.kv_cache_tokens
        self.max_waiting = cfg.max_waiting
        self.transfer_ns = transfer_ns
        self.transfer_ns_per_token = transfer_ns_per_token
        self.waiting: deque[int] = deque()
        self.n_waiting = 0
        self.batch: list[int] = []  # the next step's prompts (its slots)
        self.batch_tokens = 0
        self.live: list[tuple[int, int]] = []
        self.step: list[int] = []
        self.next_ns = IDLE_NS
        self.in_step = False

    @property
    def outstanding(self) -> int:
        return self.n_waiting + len(self.batch) + len(self.step)

    def submit(self, i: int, now_ns: int) -> None:
        run = self.run
        if run.prompt[i] + run.max_tokens[i] > run.max_context:
            run.state[i] = DONE
            run.done[i] = now_ns
            run.status[i] = 400
            return
        run.state[i] = WAITING
        self.waiting.append(i)
        self.n_waiting += 1
        heapq.heappush(self.live, (run.deadline[i], i))
        self._admit()
        if self.n_waiting > self.max_waiting:
            self.waiting.pop()
            self.n_waiting -= 1
            run.state[i] = DONE
            run.done[i] = now_ns
            run.status[i] = 429
            return
        if self.next_ns == IDLE_NS:
            self.next_ns = now_ns

    def _admit(self) -> None:
        run = self.run
        state, prompt = run.state, run.prompt
        waiting = self.waiting
        while waiting and len(self.batch) < self.max_seqs:
            i = waiting[0]
            if state[i] != WAITING:
                waiting.popleft()
                continue
            if self.batch_tokens + prompt[i] > self.kv_cap:
                return
            waiting.popleft()
            self.n_waiting -= 1
            self.batch.append(i)
            self.batch_tokens += prompt[i]
            state[i] = ADMITTED

    def advance(self, until_ns: int) -> None:
        """Run every step boundary before ``until_ns`` (arrivals at ``until_ns`` come first)."""
        run = self.run
        state = run.state
        while self.next_ns < until_ns:
            t = self.next_ns
            if self.in_step:
                self._end_step(t)
            self._expire(t)
            self._admit()
            if not self.batch:
                self.next_ns = IDLE_NS
                return
            self.step = self.batch
            tokens = self.batch_tokens
            for i in self.step:
                state[i] = TRANSFER  # in the step: no longer expirable here
            self.batch, self.batch_tokens = [], 0
            self._admit()  # the slots of the following step refill from the queue
            run.steps += 1
            self.next_ns = t + self.cfg.step_ns(tokens, 0)
            self.in_step = True

    def _end_step(self, t: int) -> None:
        """The step's prompts are done at t: first tokens out, KV on its way to decode."""
        run = self.run
        state = run.state
        for i in self.step:
            run.first[i] = t  # the prefill node samples the first token
            if run.max_tokens[i] == 1:
                state[i] = DONE
                run.done[i] = t
                run.status[i] = 200
                if run.tokens is not None:
                    run.tokens[i] = [t]
            else:
                state[i] = TRANSFER
                run.xfer[i] = (
                    t + self.transfer_ns + round(self.transfer_ns_per_token * run.prompt[i])
                )
        self.step = []
        self.in_step = False

    def _expire(self, t: int) -> None:
        """Answer 504 to every request not yet in a step whose deadline is at or before t."""
        run = self.run
        state, live = run.state, self.live
        while live and (state[live[0][1]] not in (WAITING, ADMITTED) or live[0][0] <= t):
            i = heapq.heappop(live)[1]
            if state[i] == WAITING:
                self.n_waiting -= 1
            elif state[i] == ADMITTED:
                self.batch.remove(i)
                self.batch_tokens -= run.prompt[i]
            else:
                continue  # already in a step or answered
            state[i] = DONE
            run.done[i] = t
            run.status[i] = 504
