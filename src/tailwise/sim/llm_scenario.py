"""The scenario file's ``llm:`` section: the demo engine's law, limits and workload.

:class:`LlmModel` validates the section; :func:`llm_spec` turns it into the
simulator's :class:`~tailwise.sim.llm.LlmSpec` (units parsed) and
:func:`token_counts` draws each request's prompt and output lengths.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tailwise.errors import BadInput
from tailwise.laws.llm import EngineConfig
from tailwise.sim.llm import ROUTINGS, LlmSpec
from tailwise.units import parse_duration_ns

TOKENS_FORM = "a token count such as 128, const:128 or uniform:64-256"


def token_range(value: int | str, field: str) -> tuple[int, int]:
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


_DURATIONS = ("base", "prefill_per_token", "decode_per_seq", "kv_per_token", "timeout", "transfer")


class LlmModel(BaseModel):
    """``llm:`` in a scenario file: the demo engine's cost law, limits and workload.

    Durations use the CLI's forms (``4ms``, ``20us``). ``prompt_tokens`` and
    ``output_tokens`` (each request's max_tokens, all generated) take an int,
    ``const:N`` or ``uniform:A-B`` (integers A..B inclusive, drawn per request).
    ``transfer`` and ``transfer_per_token`` are the disaggregated KV transfer
    (a fixed part and one per prompt token). Defaults are the demo's.
    ``kv_allocation``: ``reserve`` (the demo's: prompt + max_tokens held from
    admission) or ``paged`` (vLLM's: blocks of ``kv_block_tokens`` on demand,
    ``kv_watermark`` of them kept free at admission, preemption by recompute;
    colocated engines only, see :mod:`tailwise.sim.llm_paged`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str = "4ms"
    prefill_per_token: str = "0.02ms"
    decode_per_seq: str = "0.3ms"
    kv_per_token: str = "0ms"  # attention: per KV token of the decoding sequences (0: none)
    max_num_seqs: int = Field(default=32, ge=1, le=1_000_000)
    kv_cache_tokens: int = Field(default=131_072, ge=1)
    prefill_chunk_tokens: int = Field(default=0, ge=0)
    max_waiting: int = Field(default=128, ge=0)
    max_model_len: int = Field(default=4096, ge=1)
    timeout: str = "60s"
    prompt_tokens: int | str = 128
    output_tokens: int | str = 64
    prefill_replicas: int = Field(default=0, ge=0, le=10_000)
    transfer: str = "0ms"
    transfer_per_token: str = "0ms"
    token_times: bool = True
    kv_allocation: Literal["reserve", "paged"] = "reserve"
    kv_block_tokens: int = Field(default=16, ge=1)
    kv_watermark: float = Field(default=0.01, ge=0.0, lt=1.0)
    kv_preemption: Literal["recompute", "swap"] = "recompute"
    kv_swap_per_block: str | None = None  # swap: a step's extra time per block moved
    # Every prompt starts with one of prefix_groups shared prefixes (drawn uniformly per
    # request) of prefix_tokens tokens; prefix_caching (paged) keeps their blocks.
    prefix_tokens: int = Field(default=0, ge=0)
    prefix_groups: int = Field(default=1, ge=1)
    prefix_caching: bool = False

    @field_validator("kv_swap_per_block")
    @classmethod
    def _swap_cost(cls, v: str | None) -> str | None:
        if v is not None:
            parse_duration_ns(v, "scenario.llm.kv_swap_per_block")
        return v

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
        token_range(v, f"scenario.llm.{info.field_name}")
        return v


def llm_spec(model: LlmModel, replicas: int, routing: str) -> LlmSpec:
    """The simulator's model of a validated ``llm:`` section (units parsed)."""
    if routing not in ROUTINGS:
        raise BadInput("scenario.routing", routing, f"{' | '.join(ROUTINGS)} for an llm scenario")
    if replicas < 1:
        raise BadInput("scenario.replicas", replicas, "at least 1")

    if model.kv_allocation == "paged" and model.prefill_replicas:
        raise BadInput(
            "scenario.llm.kv_allocation", "paged", "reserve with prefill_replicas (disaggregated)"
        )
    _check_swap(model)
    _check_prefix(model)
    if model.kv_block_tokens > model.kv_cache_tokens:
        raise BadInput(
            "scenario.llm.kv_block_tokens", model.kv_block_tokens, "at most kv_cache_tokens"
        )

    def ns(name: str) -> int:
        value: Any = getattr(model, name)
        return parse_duration_ns(value, f"scenario.llm.{name}")

    engine = EngineConfig(
        base_s=ns("base") / 1e9,
        prefill_s_per_token=ns("prefill_per_token") / 1e9,
        decode_s_per_seq=ns("decode_per_seq") / 1e9,
        kv_s_per_token=ns("kv_per_token") / 1e9,
        max_num_seqs=model.max_num_seqs,
        kv_cache_tokens=model.kv_cache_tokens,
        prefill_chunk_tokens=model.prefill_chunk_tokens,
        max_waiting=model.max_waiting,
        max_model_len=model.max_model_len,
        request_timeout_s=ns("timeout") / 1e9,
        kv_allocation=model.kv_allocation,
        kv_block_tokens=model.kv_block_tokens,
        kv_watermark=model.kv_watermark,
        kv_preemption=model.kv_preemption,
        kv_swap_s_per_block=ns("kv_swap_per_block") / 1e9 if model.kv_swap_per_block else 0.0,
        prefix_caching=model.prefix_caching,
    )
    return LlmSpec(
        engine=engine,
        replicas=replicas,
        routing=routing,
        prefill_replicas=model.prefill_replicas,
        transfer_ns=ns("transfer"),
        transfer_ns_per_token=float(ns("transfer_per_token")),
        token_times=model.token_times,
        prefix_groups=model.prefix_groups if model.prefix_tokens else 0,
        prefix_tokens=model.prefix_tokens,
    )


def _check_swap(model: LlmModel) -> None:
    if model.kv_preemption != "swap":
        return
    if model.kv_allocation != "paged":
        raise BadInput("scenario.llm.kv_preemption", "swap", "recompute (swap needs paged KV)")
    if model.kv_swap_per_block is None:
        raise BadInput(
            "scenario.llm.kv_swap_per_block",
            None,
            "a duration per block moved to or from CPU memory with swap (e.g. 0.3ms: a 16-token "
            "block of a 7B fp16 model, 8 MB, over 25 GB/s)",
        )


def _check_prefix(model: LlmModel) -> None:
    if model.prefix_caching and model.kv_allocation != "paged":
        raise BadInput("scenario.llm.prefix_caching", True, "paged KV (kv_allocation: paged)")
    if model.prefix_caching and model.kv_preemption == "swap":
        raise BadInput("scenario.llm.prefix_caching", True, "kv_preemption: recompute")
    shortest = token_range(model.prompt_tokens, "scenario.llm.prompt_tokens")[0]
    if model.prefix_tokens >= shortest:
        raise BadInput(
            "scenario.llm.prefix_tokens",
            model.prefix_tokens,
            f"fewer tokens than the shortest prompt ({shortest})",
        )


def prefix_groups(model: LlmModel, rng: np.random.Generator, n: int) -> np.ndarray | None:
    """Each request's shared-prefix group, drawn after the token counts (None: no prefix,
    or one group, and no draw, so scenarios without prefixes keep their numbers)."""
    if not model.prefix_tokens:
        return None
    if model.prefix_groups == 1:
        return np.zeros(n, dtype=np.int64)
    return rng.integers(0, model.prefix_groups, size=n, dtype=np.int64)


def token_counts(
    model: LlmModel, rng: np.random.Generator, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` prompt lengths, then ``n`` output lengths (int64), drawn in that order."""

    def draw(value: int | str, name: str) -> np.ndarray:
        lo, hi = token_range(value, f"scenario.llm.{name}")
        if lo == hi:
            return np.full(n, lo, dtype=np.int64)
        return rng.integers(lo, hi + 1, size=n, dtype=np.int64)

    return draw(model.prompt_tokens, "prompt_tokens"), draw(model.output_tokens, "output_tokens")
