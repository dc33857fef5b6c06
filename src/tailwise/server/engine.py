"""The demo LLM engine: iteration-level (continuous) batching on a cost model, in real time.

One loop runs steps back to back while there is work. A step's duration is
the law of :mod:`tailwise.laws.llm` (shared with the simulator and calibrate),

    step_s = base_s + prefill_s_per_token * prefill_tokens_in_step
                    + decode_s_per_seq * decoding_sequences_in_step
                    + kv_s_per_token * KV tokens of the decoding sequences

and the loop really sleeps that long, so queueing in front of the engine is
real queueing. Scheduling follows vLLM's shape:

* **admission** is FCFS from a bounded waiting queue while fewer than
  ``max_num_seqs`` run and the KV cache has room for the sequence; a head
  that does not fit blocks the ones behind it. With ``kv_allocation``
  ``reserve`` (the default) room means the whole context (prompt +
  max_tokens, reserved at admission, so nothing is ever preempted);
* with ``kv_allocation`` ``paged`` (vLLM's PagedAttention, recompute mode)
  the rules are the simulator's (:mod:`tailwise.sim.llm_paged`), step for
  step: blocks of ``kv_block_tokens`` are taken as the KV grows (the prompt's
  at admission, which must leave ``kv_watermark`` of the blocks free; one
  more when a decoding sequence crosses into a new block), and when a
  decoding sequence needs a block and none is free the most recently
  admitted running sequence is preempted: its blocks are freed, it goes back
  to the front of the waiting queue and, re-admitted, prefills prompt +
  tokens made so far (its KV recomputed) before it samples its next token.
  Growth is checked oldest first, before the step is planned;
* **without chunked prefill** a step either prefills every admitted prompt
  (decodes pause: the ITL spike real engines show) or decodes every running
  sequence; the step that finishes a prompt also yields its first token;
* **with chunked prefill** (``prefill_chunk_tokens`` > 0) each step first gives
  every decoding sequence one token of that budget, then fills the rest with
  prompt chunks FCFS, so prefills and decodes share steps.

Sequences always generate exactly ``max_tokens`` tokens (the synthetic model
never stops early), which keeps capacity computable in closed form
(docs/demo-server.md). Times are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field

from tailwise.laws.llm import EngineConfig, blocks_for, prefill_chunks
from tailwise.server import Background

FINISHED = -1  # event pushed after the last token
ABORTED = -2  # event pushed when the sequence was dropped (timeout, shutdown)


class QueueFull(Exception):
    """The waiting queue is at ``max_waiting``: answer 429."""


@dataclass(eq=False)
class Sequence:
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    deadline_s: float
    prefilled: int = 0
    generated: int = 0
    first_token_s: float = 0.0
    done: bool = False
    abort_reason: str = ""
    # Each event is the number of new tokens (>= 1), FINISHED or ABORTED.
    events: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    fill: int = 0  # what the next prefill computes: the prompt, after a preemption + tokens made
    blocks: int = 0  # paged: KV blocks held
    preempted: int = 0  # times preempted (paged)

    def __post_init__(self) -> None:
        self.fill = self.fill or self.prompt_tokens

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens


# vLLM's TTFT buckets, so the demo's histograms read like a real server's
LATENCY_BUCKETS_S: tuple[float, ...] = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0),
    *(2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
)


@dataclass
class Histogram:
    """Counts per bucket ``(bounds[i-1], bounds[i]]`` (the rest above), sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: int = 0
    sum_s: float = 0.0

    def observe(self, value_s: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.bounds)
        self.total += 1
        self.sum_s += value_s
        for i, bound in enumerate(self.bounds):
            if value_s <= bound:
                self.counts[i] += 1
                return


@dataclass
class EngineStats:
    """Server-side truth, exported on /metrics (counters only grow)."""

    admitted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    finished: int = 0
    aborted: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    generated_tokens: int = 0
    steps: int = 0
    preemptions: int = 0  # paged KV: running sequences sent back to wait (recompute)
    step_seconds_sum: float = 0.0
    lag_s: float = 0.0  # time the engine fell behind its cost model (CPU shortage)
    step_seconds_buckets: list[int] = field(default_factory=list)
    recent_tokens: deque[tuple[float, int]] = field(default_factory=deque)
    # Per request, as vLLM exports them: arrival to admission, and arrival to first token.
    queue_time: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    ttft: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))

    def count(self, table: dict[str, int], reason: str) -> None:
        table[reason] = table.get(reason, 0) + 1


CATCH_UP_S = 0.002
STEP_BUCKETS_S = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class Engine(Background):
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order, oldest first
        if config.kv_preemption != "recompute" or config.prefix_caching:
            raise ValueError("the demo engine preempts by recompute, without prefix caching")
        self.paged = config.kv_allocation == "paged"
        self.free_blocks = config.kv_blocks  # paged
        self.keep_blocks = config.watermark_blocks  # paged: admission leaves these free
        self.reserved_tokens = 0  # reserve: prompt + max_tokens of the running sequences
        self.stats = EngineStats(step_seconds_buckets=[0] * len(STEP_BUCKETS_S))
        self._wake = asyncio.Event()

    # -- the request side -------------------------------------------------

    def check(self, prompt_tokens: int, max_tokens: int) -> str:
        """Why this request can never run ('' when it can): answered with 400."""
        return self.config.refusal(prompt_tokens, max_tokens)

    def submit(self, prompt_tokens: int, max_tokens: int) -> Sequence:
        cfg = self.config
        now = time.monotonic()
        seq = Sequence(prompt_tokens, max_tokens, now, now + cfg.request_timeout_s)
        self.waiting.append(seq)
        # A free slot (with KV room) takes it now, so max_waiting bounds only the
        # requests that really wait: with max_waiting 0 an idle engine still serves.
        # It joins the batch's work at the next step, as before.
        self._admit()
        if len(self.waiting) > cfg.max_waiting:
            self.waiting.pop()  # FCFS: if anyone still waits, the newest one does
            self.stats.count(self.stats.rejected, "queue_full")
            raise QueueFull
        self._wake.set()
        return seq

    def abort(self, seq: Sequence, reason: str) -> None:
        """Drop a sequence now (client gone, timeout): its slot and KV are free at once."""
        if seq.done:
            return
        seq.done = True
        seq.abort_reason = reason
        self.stats.count(self.stats.aborted, reason)
        if seq in self.running:
            self.running.remove(seq)
            self._release(seq)
            self._wake.set()  # a waiting sequence may fit now
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(seq)
        seq.events.put_nowait(ABORTED)

    # -- the engine loop -------------------------------------------------

    async def stop(self) -> None:
        await super().stop()
        for seq in [*self.running, *self.waiting]:
            self.abort(seq, "shutdown")

    async def _loop(self) -> None:
        next_start = time.monotonic()
        while True:
            self._expire(time.monotonic())
            self._admit()
            if not self.running:
                self._wake.clear()
                await self._wake.wait()
                next_start = time.monotonic()
                continue
            prefill, decoding = self._plan()
            step_s = self.step_s(prefill, decoding)
            # Steps run on an absolute timeline: a wake-up that came a little late
            # (uvloop timers tick in milliseconds) is made up by the next sleep,
            # so the modelled step times do not drift. Only a real shortage of
            # CPU (behind by more than CATCH_UP_S) pushes the timeline back.
            now = time.monotonic()
            behind_s = now - next_start
            if behind_s > CATCH_UP_S:
                self.stats.lag_s += behind_s
                next_start = now
            next_start += step_s
            await asyncio.sleep(max(next_start - time.monotonic(), 0.0))
            self._apply(prefill, decoding, time.monotonic())
            self._record_step(step_s)

    def _expire(self, now: float) -> None:
        for seq in [s for s in (*self.waiting, *self.running) if s.deadline_s <= now]:
            self.abort(seq, "timeout")

    @property
    def kv_used_tokens(self) -> int:
        """KV tokens held: reserved (prompt + max_tokens each) or, paged, blocks in use."""
        if self.paged:
            cfg = self.config
            return (cfg.kv_blocks - self.free_blocks) * cfg.kv_block_tokens
        return self.reserved_tokens

    def _admit(self) -> None:
        cfg = self.config
        while self.waiting and len(self.running) < cfg.max_num_seqs:
            head = self.waiting[0]
            if not self._allocate(head):
                return  # FCFS: the head waits for KV space, and so does everyone behind it
            self.waiting.popleft()
            self.running.append(head)
            if not head.preempted:  # counted once, at the first admission
                self.stats.admitted += 1
                self.stats.queue_time.observe(time.monotonic() - head.arrival_s)

    def _allocate(self, seq: Sequence) -> bool:
        """Take ``seq``'s KV at admission if there is room."""
        if not self.paged:
            if self.reserved_tokens + seq.context_tokens > self.config.kv_cache_tokens:
                return False
            self.reserved_tokens += seq.context_tokens
            return True
        need = blocks_for(seq.fill, self.config.kv_block_tokens)
        if self.free_blocks - need < self.keep_blocks:
            return False
        self.free_blocks -= need
        seq.blocks = need
        return True

    def _release(self, seq: Sequence) -> None:
        """Free a sequence's KV (it has left the running batch)."""
        if self.paged:
            self.free_blocks += seq.blocks
            seq.blocks = 0
        else:
            self.reserved_tokens -= seq.context_tokens

    def _grow_or_preempt(self, decoding: list[Sequence]) -> None:
        """Paged: each decoding sequence's block for this step, oldest first; when none is
        free the most recently admitted running sequence is preempted (itself, if it is)."""
        block = self.config.kv_block_tokens
        for seq in decoding:
            if seq not in self.running:  # preempted to make room for an older one
                continue
            need = blocks_for(seq.prompt_tokens + seq.generated, block) - seq.blocks
            while need > self.free_blocks:
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq in self.running:
                self.free_blocks -= need
                seq.blocks += need

    def _preempt(self, seq: Sequence) -> None:
        """Back to the front of the waiting queue; re-admitted, it prefills prompt + the
        tokens made so far (recompute) and that prefill samples its next token."""
        self.running.remove(seq)
        self._release(seq)
        seq.fill = seq.prompt_tokens + seq.generated
        seq.prefilled = 0
        seq.preempted += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(seq)

    def _plan(self) -> tuple[list[tuple[Sequence, int]], list[Sequence]]:
        """This step's work: (sequence, prompt tokens) to prefill, sequences to decode
        (paged: after the decoding sequences' blocks are taken, preempting if needed)."""
        budget = self.config.prefill_chunk_tokens
        pending = [s for s in self.running if s.prefilled < s.fill]
        decoding = [s for s in self.running if s.prefilled >= s.fill]
        if self.paged and decoding and (budget > 0 or not pending):
            self._grow_or_preempt(decoding)
            pending = [s for s in self.running if s.prefilled < s.fill]
            decoding = [s for s in self.running if s.prefilled >= s.fill]
        left = [s.fill - s.prefilled for s in pending]
        if budget <= 0:
            if pending:  # a prefill-only step: decodes wait
                return list(zip(pending, left, strict=True)), []
            return [], decoding
        chunks = prefill_chunks(budget, len(decoding), left)
        return list(zip(pending, chunks, strict=False)), decoding  # the first len(chunks)

    def step_s(self, prefill: list[tuple[Sequence, int]], decoding: list[Sequence]) -> float:
        """The step law on a planned step; a decoding sequence attends to the KV of its
        prompt and of the tokens it has made."""
        kv = (
            sum(s.prompt_tokens + s.generated for s in decoding)
            if self.config.kv_s_per_token
            else 0
        )
        return self.config.step_s(sum(n for _, n in prefill), len(decoding), kv)

    def _apply(
        self, prefill: list[tuple[Sequence, int]], decoding: list[Sequence], now: float
    ) -> None:
        emitted = 0
        for seq, chunk in prefill:
            if seq.done:
                continue
            seq.prefilled += chunk
            self.stats.prompt_tokens += chunk
            if seq.prefilled >= seq.fill:  # the step that ends a prompt samples a token
                if not seq.generated:  # (after a recompute: the next one)
                    seq.first_token_s = now
                    self.stats.ttft.observe(now - seq.arrival_s)
                emitted += self._emit(seq)
        for seq in decoding:
            if not seq.done:
                emitted += self._emit(seq)
        self.stats.generated_tokens += emitted
        self.stats.recent_tokens.append((now, emitted))
        self._trim(now)

    def _emit(self, seq: Sequence) -> int:
        seq.generated += 1
        seq.events.put_nowait(1)
        if seq.generated >= seq.max_tokens:
            seq.done = True
            self.running.remove(seq)
            self._release(seq)
            self.stats.finished += 1
            seq.events.put_nowait(FINISHED)
        return 1

    def _record_step(self, step_s: float) -> None:
        st = self.stats
        st.steps += 1
        st.step_seconds_sum += step_s
        for i, bound in enumerate(STEP_BUCKETS_S):
            if step_s <= bound:
                st.step_seconds_buckets[i] += 1
                break

    def tokens_per_s(self, window_s: float = 5.0) -> float:
        """Output tokens per second over the last ``window_s`` (a gauge for /metrics)."""
        self._trim(time.monotonic(), window_s)
        return sum(n for _, n in self.stats.recent_tokens) / window_s

    def _trim(self, now: float, window_s: float = 5.0) -> None:
        recent = self.stats.recent_tokens
        while recent and recent[0][0] < now - window_s:
            recent.popleft()
