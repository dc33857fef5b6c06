"""Synthetic prompts of an exact token length, with the user's own tokenizer.

Without a tokenizer, ``--input-tokens N`` asks for N *words* (about N tokens:
a 32-word prompt was 62-63 tokens on a llama.cpp model). With ``--tokenizer
tokenizer.json`` each prompt is built to exactly N tokens of that tokenizer,
as vLLM's and GuideLLM's synthetic datasets are: the fewest of a seeded word
sequence whose text reaches N tokens, cut at the N-th token when the last word
overshoots, and accepted only when the result re-encodes to N. The chat
template the server wraps around a message adds tokens of its own; those are
not in N, and a run reports them apart (``tokens.template_overhead``).

Counts exclude special tokens (``add_special_tokens=False``), as the server's
BOS belongs to the template.
"""

from __future__ import annotations

import random

from tailwise.errors import BadInput
from tailwise.loadgen.llm.openai import TokenCounter, synthetic_prompts

TRIES = 8  # other word draws for a length the first draw cannot hit exactly


def exact_prompts(
    counter: TokenCounter,
    lengths: list[int],
    seed: int,
    shared_prefix_words: int = 0,
    nonce: str = "",
) -> list[str]:
    """One prompt per length, each exactly that many tokens; the same for the same seed.

    A ``nonce`` (the unique-prompts placeholder) starts each prompt and counts in the
    length (the words after it are fitted to the rest); each request's own nonce is
    other hex digits of the same length, which a BPE tokenizer may split one token
    differently. Without a shared prefix only: a shared prefix keeps the nonce after it,
    and the words are fitted to the whole."""
    if nonce and not shared_prefix_words:
        spent = counter.count(nonce)
        if min(lengths, default=spent + 1) <= spent:
            raise BadInput(
                "--input-tokens", min(lengths), f"over {spent} tokens (the unique-prompt nonce)"
            )
        rest = exact_prompts(counter, [n - spent for n in lengths], seed, 0)
        return [f"{nonce} {text}" for text in rest]
    rng = random.Random(seed)
    prefix = synthetic_prompts([shared_prefix_words], seed)[0] if shared_prefix_words else ""
    prefix = " ".join(part for part in (prefix, nonce) if part)
    out = []
    for n in lengths:
        text = None
        for _ in range(TRIES):
            words = synthetic_prompts([n + 8], rng.randrange(2**32))[0]
            text = fit(counter, f"{prefix} {words}" if prefix else words, n)
            if text is not None:
                break
        if text is None:
            raise BadInput(
                "--tokenizer",
                counter.name,
                f"a tokenizer that can spell a {n}-token prompt from words",
            )
        out.append(text)
    return out


def fit(counter: TokenCounter, text: str, n: int) -> str | None:
    """The shortest word prefix of ``text`` with exactly ``n`` tokens, or None."""
    words = text.split(" ")
    if counter.count(text) < n:
        return None
    lo, hi = 1, len(words)
    while lo < hi:  # the fewest words reaching n tokens (counts grow with words)
        mid = (lo + hi) // 2
        if counter.count(" ".join(words[:mid])) >= n:
            hi = mid
        else:
            lo = mid + 1
    candidate = " ".join(words[:lo])
    if counter.count(candidate) == n:
        return candidate
    cut = counter.truncate(candidate, n)  # the last word overshot: cut inside it
    return cut if counter.count(cut) == n else None
