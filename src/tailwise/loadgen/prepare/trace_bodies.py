"""LLM prompts for a replayed trace: each row's input length, and shared prefixes.

A trace with lengths (``tailwise.traces``) gives each request its own prompt
length and output length; request ``i`` gets row ``i``'s. Mooncake's rows also
carry ``hash_ids``: one id per block of :data:`BLOCK_WORDS` prompt tokens, the
same id where two requests share that block of their prompt. Block ``k`` is
always the same text (synthetic words seeded by the run's seed and ``k``), so
requests that shared a prefix in the trace share it here, and the server's
prefix cache sees what it saw then. Lengths are in words, as for
``--input-tokens`` (docs/llm.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from tailwise.errors import BadInput
from tailwise.loadgen.llm.openai import synthetic_prompts
from tailwise.traces import Trace, parse_speed, read_trace

BLOCK_WORDS = 512  # Mooncake's block size, in tokens
MAX_TOTAL_WORDS = 50_000_000  # the prompts of one run, held in memory as request bodies


@dataclass(frozen=True)
class Replay:
    """``--arrival trace:FILE`` as read once (sped up), and how many of its rows are sent."""

    trace: Trace
    rows: int


def read_replay(
    arrival: str, speed: str | None, horizon_ns: int | None, max_count: int | None
) -> Replay | None:
    """The trace of ``--arrival trace:FILE`` with ``--trace-speed``; None for other arrivals."""
    kind, _, path = arrival.strip().partition(":")
    if kind != "trace":
        if speed is not None:
            raise BadInput("--trace-speed", speed, "--arrival trace:FILE to speed up")
        return None
    if not path:
        raise BadInput("--arrival", arrival, "trace:<file>")
    trace = read_trace(path).sped_up(parse_speed(speed))
    return Replay(trace, max(1, rows_used(trace, horizon_ns, max_count)))


def rows_used(trace: Trace, horizon_ns: int | None, max_count: int | None) -> int:
    """How many of the (sped-up) trace's rows the run will send."""
    n = len(trace.offsets_ns)
    if horizon_ns is not None:
        n = sum(1 for t in trace.offsets_ns if t < horizon_ns)
    return min(n, max_count) if max_count is not None else n


def trace_prompts(trace: Trace, n: int, seed: int) -> list[str]:
    """The first ``n`` rows' prompts, each exactly its input length in words (at least 1)."""
    assert trace.input_lengths is not None
    lengths = [max(1, k) for k in trace.input_lengths[:n]]
    total = sum(lengths)
    if total > MAX_TOTAL_WORDS:
        raise BadInput(
            "--arrival trace",
            f"{total:,} prompt words in {n:,} rows",
            f"at most {MAX_TOTAL_WORDS:,} (cut the run with --duration or --requests)",
        )
    if trace.hash_ids is None:
        return synthetic_prompts(lengths, seed)
    blocks: dict[int, list[str]] = {}
    out: list[str] = []
    for length, ids in zip(lengths, trace.hash_ids[:n], strict=True):
        words: list[str] = []
        for k in ids:
            if len(words) >= length:
                break
            if k not in blocks:
                blocks[k] = synthetic_prompts([BLOCK_WORDS], seed * 1_000_003 + k)[0].split()
            words.extend(blocks[k])
        if len(words) < length:  # fewer blocks than the length: the rest is the row's own
            words.extend(synthetic_prompts([length - len(words)], seed + len(out))[0].split())
        out.append(" ".join(words[:length]))
    return out
