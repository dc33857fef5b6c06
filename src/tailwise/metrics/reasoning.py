"""Reasoning models: time to the first reasoning token beside the first answer token.

A reasoning model (DeepSeek-R1, Qwen3, gpt-oss behind vLLM, SGLang or
llama.cpp) streams its thinking as ``reasoning_content`` (or ``reasoning``)
before the answer's ``content``. Then ``ttft_ms`` (the first *answer* token)
holds the whole thinking time, and a user who sees the thinking streamed waits
only for the first reasoning token. The ``reasoning`` section of the summary
keeps the two apart, over the window's successful requests that reasoned:

* ``ttft_reasoning_ms``: first reasoning chunk - intended send;
* ``ttft_answer_ms``: first content chunk - intended send (the same rows);
* ``reasoning_ms``: first content - first reasoning chunk (the thinking span);
* token counts: reasoning tokens per request (the server's
  ``completion_tokens_details.reasoning_tokens`` when reported, else the
  tokenizer's count of the reasoning text, else one per reasoning chunk) and
  answer tokens (output tokens, which count both, minus the reasoning ones).

TPOT is the answer's pace (``metrics.derive.tpot_ns``): the span from the first
answer token over the answer tokens.

Absent (None) when no request in the window streamed reasoning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tailwise.metrics.derive import answer_tokens
from tailwise.metrics.percentiles import distribution_ms
from tailwise.records import Records


def reasoning_section(r: Records, window_ok: np.ndarray) -> dict[str, Any] | None:
    rows = window_ok & (r.first_reasoning_ns >= 0)
    if not rows.any():
        return None
    answered = rows & (r.first_token_ns >= 0)
    reasoning = np.maximum(r.reasoning_tokens[rows], 0)
    answer = np.maximum(answer_tokens(r)[rows], 0)
    return {
        "requests": int(rows.sum()),
        "answered": int(answered.sum()),  # a reasoning stream can end before any answer
        "ttft_reasoning_ms": distribution_ms(r.first_reasoning_ns[rows] - r.scheduled_ns[rows]),
        "ttft_answer_ms": distribution_ms(r.first_token_ns[answered] - r.scheduled_ns[answered]),
        "reasoning_ms": distribution_ms(
            r.first_token_ns[answered] - r.first_reasoning_ns[answered]
        ),
        "reasoning_tokens_total": int(reasoning.sum()),
        "answer_tokens_total": int(answer.sum()),
        "reasoning_tokens_mean": float(reasoning.mean()),
        "answer_tokens_mean": float(answer.mean()),
    }


def text_lines(tokens: Mapping[str, Any] | None, sec: Mapping[str, Any] | None) -> list[str]:
    """The terminal's lines for the token rates (a summary's ``tokens``) and, when
    present, its ``reasoning`` section."""
    lines = []
    if tokens is not None and "input_tps" in tokens:
        per_user = tokens.get("output_tps_per_user")
        user = f", output per user {per_user:.1f} tok/s" if per_user else ""
        lines.append(
            f"tokens    input {tokens['input_tps']:.0f} tok/s, output {tokens['output_tps']:.0f}"
            f" tok/s, total {tokens['total_tps']:.0f} tok/s{user}"
        )
        over = tokens.get("template_overhead")
        if over:
            lines.append(
                f"          prompts {over['prompt_tokens_mean']:.0f} tokens (tokenizer) + "
                f"{over['p50']:g} the server added (chat template, p50)"
            )
    if sec:
        first, answer = sec["ttft_reasoning_ms"], sec["ttft_answer_ms"]
        lines.append(
            f"reasoning {sec['requests']} requests: first reasoning token p50 "
            f"{first['p50']:.1f}ms, first answer token p50 "
            + (f"{answer['p50']:.1f}ms" if answer.get("p50") is not None else "-")
        )
        lines.append(
            f"          tokens: reasoning {sec['reasoning_tokens_mean']:.1f}, answer "
            f"{sec['answer_tokens_mean']:.1f} per request (mean)"
        )
    return lines
