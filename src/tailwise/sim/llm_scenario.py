"""The scenario file's ``llm:`` section: the demo engine's law, limits and workload.

:class:`LlmModel` validates the section; :func:`llm_spec` turns it into the
simulator's :class:`~tailwise.sim.llm.LlmSpec` (units parsed) and
:func:`token_counts` draws each request's prompt and output lengths.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tailwise.errors import BadInput
from tailwise.laws.llm import EngineConfig
from tailwise.sim.llm import ROUTINGS, LlmSpec
from tailwise.units import parse_duration_ns

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
