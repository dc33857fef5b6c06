"""The demo LLM engine's law: its limits and what one step of continuous batching costs.

A step's duration is

    step = base + prefill_per_token x (prompt tokens prefilled in the step)
                + decode_per_seq x (sequences decoding in the step)
                + kv_per_token x (KV tokens the decoding sequences attend to)

The last term is attention's cost growing with context: a sequence making
its k-th token attends to prompt + k - 1 tokens of KV. It is 0 by default
(``serve-demo --per-kv-token``); calibrate fits it from how TPOT grows
with the context (:mod:`tailwise.calibrate.context`).

The demo server (:mod:`tailwise.server.engine`) sleeps that long per step in
real time, the simulator (:mod:`tailwise.sim.llm`) replays the same steps in
integer nanoseconds (:meth:`EngineConfig.step_ns`), and calibrate
(:mod:`tailwise.calibrate.llm`) fits the three coefficients, in milliseconds,
through :func:`step_cost`. Both engines schedule by the same rules:

* a request whose context (prompt + max_tokens) exceeds ``max_model_len`` or
  ``kv_cache_tokens`` can never run (:meth:`EngineConfig.refusal`: a 400);
* with chunked prefill (``prefill_chunk_tokens`` Q > 0) every decoding
  sequence takes one token of Q and what is left goes to prompt chunks, FCFS
  (:func:`prefill_chunks`; the simulator inlines it in its per-step loop, and
  its tests check it step for step against the demo engine).

KV-cache allocation (``kv_allocation``): ``reserve`` (the demo server's rule)
holds prompt + max_tokens tokens from admission to the end, so a running
sequence never runs out; ``paged`` (vLLM's PagedAttention, both engines)
allocates blocks of ``kv_block_tokens`` as tokens are produced, admits while
``kv_watermark`` of the blocks stays free, and preempts a running sequence
when one needs a block and none is free (:mod:`tailwise.sim.llm_paged`), by
recompute or (``kv_preemption: swap``) by moving its blocks to CPU memory.

The closed forms that follow from this law (saturated throughput, idle TTFT)
are in :mod:`tailwise.capacity`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


def step_cost(
    base: float,
    prefill_per_token: float,
    decode_per_seq: float,
    prefill_tokens: float,
    decoding: float,
    kv_per_token: float = 0.0,
    kv_tokens: float = 0.0,
) -> float:
    """One step's duration, in the unit of the coefficients (s, ms, ...)."""
    cost = base + prefill_per_token * prefill_tokens + decode_per_seq * decoding
    return cost + kv_per_token * kv_tokens if kv_per_token else cost


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Paged KV: blocks that hold ``tokens`` tokens' KV."""
    return -(-tokens // block_tokens)


KV_ALLOCATIONS = ("reserve", "paged")
KV_PREEMPTIONS = ("recompute", "swap")


@dataclass(frozen=True)
class EngineConfig:
    """The engine's step law (seconds) and limits; the defaults are ``serve-demo``'s."""

    base_s: float = 0.004
    prefill_s_per_token: float = 0.00002
    decode_s_per_seq: float = 0.0003
    max_num_seqs: int = 32
    kv_cache_tokens: int = 131_072
    prefill_chunk_tokens: int = 0  # 0: whole-prompt prefill steps (no chunking)
    max_waiting: int = 128
    max_model_len: int = 4096
    request_timeout_s: float = 60.0
    kv_s_per_token: float = 0.0  # attention: per KV token of the decoding sequences
    kv_allocation: str = "reserve"  # one of KV_ALLOCATIONS (the demo server: no swap)
    kv_block_tokens: int = 16  # paged: tokens per block (vLLM's default block size)
    kv_watermark: float = 0.01  # paged: share of blocks admission leaves free (vLLM's 0.01)
    kv_preemption: str = "recompute"  # paged: "recompute" or "swap" (blocks to CPU memory)
    kv_swap_s_per_block: float = 0.0  # paged, swap: a step's extra time per block moved
    prefix_caching: bool = False  # paged: shared prompt prefixes keep their blocks

    @property
    def kv_blocks(self) -> int:
        """Paged: the blocks the cache holds (a partial block at the end is unusable)."""
        return self.kv_cache_tokens // self.kv_block_tokens

    @property
    def watermark_blocks(self) -> int:
        """Paged: blocks admission must leave free, ``int(watermark x blocks)`` as vLLM."""
        return int(self.kv_watermark * self.kv_blocks)

    def step_s(self, prefill_tokens: int, decoding: int, kv_tokens: int = 0) -> float:
        """``kv_tokens``: the KV the decoding sequences attend to (prompt + tokens made)."""
        return step_cost(
            self.base_s,
            self.prefill_s_per_token,
            self.decode_s_per_seq,
            prefill_tokens,
            decoding,
            self.kv_s_per_token,
            kv_tokens,
        )

    def step_ns(self, prefill_tokens: int, decoding: int, kv_tokens: int = 0) -> int:
        """:meth:`step_s` rounded to the nanosecond (the simulator's clock)."""
        return round(self.step_s(prefill_tokens, decoding, kv_tokens) * 1e9)

    def decode_run_ns(self, decoding: int, kv_tokens: int) -> Iterator[int]:
        """``step_ns(0, decoding, kv_tokens + decoding x k)`` for k = 0, 1, 2, ...: a run
        of decode-only steps, every sequence's context a token longer each step. The
        same floats as :meth:`step_ns` (its sums in its order), without its calls."""
        fixed = self.base_s + self.prefill_s_per_token * 0 + self.decode_s_per_seq * decoding
        per_kv, kv = self.kv_s_per_token, kv_tokens
        while True:
            yield round((fixed + per_kv * kv if per_kv else fixed) * 1e9)
            kv += decoding

    @property
    def max_context_tokens(self) -> int:
        """The largest prompt + max_tokens a request may have and still run (paged: in
        the blocks admission may use, beside the watermark)."""
        most = min(self.max_model_len, self.kv_cache_tokens)
        if self.kv_allocation == "paged":
            most = min(most, (self.kv_blocks - self.watermark_blocks) * self.kv_block_tokens)
        return most

    def refusal(self, prompt_tokens: int, max_tokens: int) -> str:
        """Why a request can never run ('' when it can): answered with 400."""
        context = prompt_tokens + max_tokens
        if context > self.max_model_len:
            return (
                f"This model's maximum context length is {self.max_model_len} tokens; "
                f"the request needs {context} ({prompt_tokens} in the prompt, "
                f"{max_tokens} to generate)"
            )
        if context > self.kv_cache_tokens:
            return (
                f"request needs {context} KV-cache tokens; the cache holds {self.kv_cache_tokens}"
            )
        if self.kv_allocation == "paged":
            blocks = -(-context // self.kv_block_tokens)
            room = self.kv_blocks - self.watermark_blocks
            if blocks > room:
                return (
                    f"request needs {blocks} KV blocks of {self.kv_block_tokens} tokens; "
                    f"admission may use {room} (the watermark keeps {self.watermark_blocks} free)"
                )
        return ""


def prefill_chunks(chunk_tokens: int, decoding: int, remaining: Iterable[int]) -> list[int]:
    """A chunked-prefill step's prompt chunks, FCFS, for prompts with ``remaining`` tokens.

    Each of the ``decoding`` sequences takes one token of the step's
    ``chunk_tokens`` budget first; the rest goes to the prompts in order, the
    last one taken possibly cut short. The list may be shorter than
    ``remaining`` (the prompts behind wait for a later step), and is read no
    further than needed.
    """
    budget = max(chunk_tokens - decoding, 0)
    chunks: list[int] = []
    for left in remaining:
        if budget <= 0:
            break
        chunk = min(left, budget)
        chunks.append(chunk)
        budget -= chunk
    return chunks
