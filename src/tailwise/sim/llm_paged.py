"""A colocated engine with a paged KV cache and preemption (``kv_allocation: paged``).

The facts follow vLLM's PagedAttention scheduler (v0, recompute mode):

* the cache is ``kv_blocks`` blocks of ``kv_block_tokens`` tokens (16 by
  default); a sequence holds ``ceil(tokens / block)`` blocks of the tokens
  whose KV it keeps, allocated as they are produced;
* **admission** (FCFS, at most ``max_num_seqs`` running) takes the blocks of
  what the prefill computes (the prompt) and needs ``free - needed >=
  watermark`` blocks (``int(kv_watermark x blocks)``, 1% by default), so a
  burst of admissions leaves room for the running sequences to grow; the
  output length is not known to it (``max_tokens`` only bounds the context,
  checked at arrival);
* **growth**: a step that makes a sequence's k-th token needs the KV of
  ``prompt + k - 1`` tokens; a decoding sequence that crosses into a new block
  takes one, without regard to the watermark;
* **preemption**: when one needs a block and none is free, the most recently
  admitted running sequence is preempted (itself, when it is that one): its
  blocks are freed, it goes back to the FRONT of the waiting queue and, once
  admitted again, prefills ``prompt + tokens made so far`` (recompute: its KV
  is rebuilt, at a prefill's cost) and that prefill samples its next token.
  Growth is checked in admission order, oldest first, before the step runs;
* **swap** (``kv_preemption: swap``): a decoding sequence preempted has its
  blocks moved to CPU memory instead, and waits in a swapped queue (FIFO);
  while any waits no new prompt is admitted, and at each step start the
  swapped are moved back, in order, when ``free - blocks >= watermark`` and a
  slot is free; they go on decoding where they stopped (no recompute). A step
  costs ``kv_swap_s_per_block`` more per block moved out or in at its start.
  A sequence preempted before its prompt was done is recomputed.

With ``prefix_caching`` shared prompt prefixes keep their blocks and skip
their prefill (:mod:`tailwise.sim.llm_prefix`); cached blocks nobody uses
count as free, and are evicted when a block is needed.

Not modelled: copy-on-write sharing (beam search, n > 1),
vLLM v1's token budget across decodes and prefills, a limit on CPU swap space.
Runs of identical decode steps are still jumped in one go, but only as many
as the free blocks can feed without a preemption (each decoding sequence
gets its blocks for the whole run at its start).
"""

from __future__ import annotations

import heapq
from collections import deque

from tailwise.laws.llm import EngineConfig, blocks_for
from tailwise.sim.llm_engine import (
    ADMITTED,
    DECODING,
    SWAPPED,
    WAITING,
    LlmEngine,
    RequestTable,
)
from tailwise.sim.llm_prefix import PrefixCache


class PagedLlmEngine(LlmEngine):
    """:class:`LlmEngine` with block allocation on demand and recompute preemption."""

    def __init__(
        self,
        run: RequestTable,
        cfg: EngineConfig,
        index: int,
        jump: bool,
        prefix: tuple[int, int] = (0, 0),
    ) -> None:
        """``prefix``: (groups, tokens) of the shared prompt prefixes, cached when the
        config says ``prefix_caching`` (request i's group is ``run.group[i]``)."""
        super().__init__(run, cfg, index, False, jump)
        self.block = cfg.kv_block_tokens
        self.free = cfg.kv_blocks
        self.keep = cfg.watermark_blocks
        self.held: dict[int, int] = {}  # running request -> blocks it holds
        self.order: list[int] = []  # running requests, oldest admission first
        self.cap = 1  # the most decode steps the free blocks can feed in one run
        self.preemptions = 0
        self.swap = cfg.kv_preemption == "swap"
        self.swap_ns_per_block = cfg.kv_swap_s_per_block * 1e9
        self.swapped: deque[int] = deque()  # may hold expired entries (skipped)
        self.swapped_blocks: dict[int, int] = {}
        self.moved = 0  # blocks moved out or in since the last step was planned
        groups, tokens = prefix
        shared = tokens // cfg.kv_block_tokens
        on = cfg.prefix_caching and groups > 0 and shared > 0
        self.cache = PrefixCache(groups, shared) if on else None

    @property
    def room(self) -> int:
        """Blocks an allocation may take: the free ones and the cached ones nobody uses."""
        return self.free + (self.cache.evictable if self.cache is not None else 0)

    def _take(self, count: int) -> None:
        if count > self.free and self.cache is not None:
            self.free += self.cache.evict(count - self.free)
        self.free -= count
        assert self.free >= 0

    def _shared(self, i: int) -> int:
        """Blocks of ``i``'s context that belong to its group's cached prefix."""
        return self.cache.blocks if self.cache is not None else 0

    @property
    def outstanding(self) -> int:
        return self.n_waiting + self.running + self.n_swapped

    def _admit(self) -> None:
        if self.swap and self.swapped:
            if not self.in_step:  # swap in only at a step start (or on an idle engine)
                self._swap_in()
            if self.n_swapped:
                return  # as vLLM: no new prompt while a swapped sequence waits
        run = self.run
        state, fill, waiting = run.state, run.fill, self.waiting
        while waiting and self.running < self.max_seqs:
            i = waiting[0]
            if state[i] != WAITING:  # expired while waiting
                waiting.popleft()
                continue
            if self.cache is not None and not self._admit_cached(i):
                break
            if self.cache is None:
                need = blocks_for(fill[i], self.block)
                if self.free - need < self.keep:
                    break  # FCFS: the head waits for blocks, and so does everyone behind it
                self.free -= need
                self.held[i] = need
            waiting.popleft()
            self.n_waiting -= 1
            self.running += 1
            self.order.append(i)
            state[i] = ADMITTED
            self.pending.append(i)
        self.peak_running = max(self.peak_running, self.running)

    def _admit_cached(self, i: int) -> bool:
        """Admit ``i`` beside its group's prefix if the blocks allow: it takes its own
        blocks and any the prefix lacks, and skips prefilling the computed ones."""
        cache, run = self.cache, self.run
        assert cache is not None
        g = run.group[i]
        context = run.prompt[i] + run.made[i]
        own = blocks_for(context, self.block) - cache.blocks
        need = own + cache.missing(g)
        if self.room - cache.pinned_if_admitted(g) - need < self.keep:
            return False  # FCFS: the head waits for blocks, and so does everyone behind it
        skip = cache.pin(g)
        self._take(need)
        self.held[i] = own
        run.fill[i] = context - skip * self.block
        return True

    def _prompt_done(self, i: int) -> None:
        if self.cache is not None:
            self.cache.computed(self.run.group[i])

    def _release(self, i: int) -> None:
        self.running -= 1
        self.free += self.held.pop(i)
        self.order.remove(i)
        if self.cache is not None:
            self.cache.unpin(self.run.group[i])

    def _context(self, i: int) -> int:
        """Tokens whose KV the next decode step of ``i`` needs: prompt + tokens made."""
        run = self.run
        return run.prompt[i] + run.made[i] + self.decode_steps - run.start[i]

    def _plan(self, t: int, until_ns: int) -> None:
        decodes = self.n_decoding > 0 and (self.chunk > 0 or not self.pending)
        per_seq = self.room // self.n_decoding if decodes else 0
        # k steps need at most (k - 1) // block + 1 new blocks a sequence: with per_seq
        # free blocks each, up to (per_seq - 1) x block + 1 steps run without preemption.
        self.cap = max(1, (per_seq - 1) * self.block + 1)
        if decodes and per_seq == 0:
            self._grow_or_preempt()
        if self.moved:
            self.cap = 1  # the swap's cost is this step's alone
        super()._plan(t, until_ns)
        if decodes and per_seq > 0:
            self._grow(self.plan_steps)
        if self.moved:
            self.plan_step_ns += round(self.moved * self.swap_ns_per_block)
            self.moved = 0

    def _step_cap(self) -> int:
        return self.cap

    def _decoding(self) -> list[int]:
        state = self.run.state
        return [i for i in self.order if state[i] == DECODING]

    def _grow(self, steps: int) -> None:
        """Blocks for ``steps`` decode steps of every decoding sequence (they fit)."""
        for i in self._decoding():
            need = blocks_for(self._context(i) + steps - 1, self.block) - self._shared(i)
            self._take(need - self.held[i])
            self.held[i] = need

    def _grow_or_preempt(self) -> None:
        """One step's blocks, oldest first; the newest running sequence makes room."""
        state = self.run.state
        for i in self._decoding():
            if state[i] != DECODING:  # preempted to make room for an older one
                continue
            need = blocks_for(self._context(i), self.block) - self._shared(i) - self.held[i]
            while need > self.room:
                victim = self.order[-1]
                self._preempt(victim)
                if victim == i:
                    break
            if state[i] == DECODING:
                self._take(need)
                self.held[i] += need

    def _preempt(self, i: int) -> None:
        """Back to the front of the waiting queue; its KV is recomputed when re-admitted
        (or, swapping, a decoding sequence's blocks go to CPU memory)."""
        run = self.run
        swap_out = self.swap and run.state[i] == DECODING
        if run.state[i] == DECODING:
            self.n_decoding -= 1
            self.kv_sum0 -= run.kv0[i]
            made = run.made[i] + self.decode_steps - run.start[i]
            ends = self.decode_end_ns
            if run.tokens is not None and ends is not None:
                head = run.earlier[i] or [run.first[i]]
                run.earlier[i] = [*head, *ends[run.start[i] : self.decode_steps]]
            run.made[i] = made
        else:  # admitted, its prefill not done: what it had prefilled is lost
            self.pending.remove(i)
        self.preemptions += 1
        run.preempted[i] += 1
        if swap_out:
            blocks = self.held[i]
            self._release(i)
            self.moved += blocks
            self.swapped_blocks[i] = blocks
            self.swapped.append(i)
            self.n_swapped += 1
            run.state[i] = SWAPPED
            return
        run.fill[i] = run.prompt[i] + run.made[i]
        run.prefilled[i] = 0
        self._release(i)
        run.state[i] = WAITING
        self.waiting.appendleft(i)
        self.n_waiting += 1

    def _swap_in(self) -> None:
        """Swapped sequences back, FIFO, while a slot and the watermark allow; each goes
        on decoding from the next step."""
        run = self.run
        state, swapped = run.state, self.swapped
        while swapped and self.running < self.max_seqs:
            i = swapped[0]
            if state[i] != SWAPPED:  # expired meanwhile
                swapped.popleft()
                self.swapped_blocks.pop(i, None)
                continue
            blocks = self.swapped_blocks[i]
            if self.free - blocks < self.keep:
                return
            swapped.popleft()
            del self.swapped_blocks[i]
            self.n_swapped -= 1
            self.moved += blocks
            self.free -= blocks
            self.held[i] = blocks
            self.order.append(i)
            self.running += 1
            d = self.decode_steps
            state[i] = DECODING
            run.start[i] = d
            run.fin[i] = d + run.max_tokens[i] - run.made[i]
            heapq.heappush(self.finish, (run.fin[i], i))
            self.n_decoding += 1
            run.kv0[i] = run.prompt[i] + run.made[i] - d
            self.kv_sum0 += run.kv0[i]
        self.peak_running = max(self.peak_running, self.running)
