"""What the server said of its own work, beside what the client measured.

Summary sections added to an LLM run's ``summary.json`` (single-process runs):

* ``reconnects``: requests sent once more because a reused keep-alive connection
  died before any response byte (see :mod:`~tailwise.loadgen.transport.http_conn`);
* ``stray_answers`` (only when some came): connections closed because an answer
  followed the one its request was given (a server answering one request twice);
* ``prompt_cache``: prompt tokens the server took from its prefix cache
  (``usage.prompt_tokens_details.cached_tokens``, llama.cpp's ``tokens_cached`` or
  ``timings.cache_n``), with a warning when most of them were cached although the
  run asked for no reuse: then TTFT measures the cache, not the prefill;
* ``server_timings``: llama.cpp's own prompt and per-token decode times, with the
  client's service TTFT minus (prompt time + one decode step) per request;
* ``tokens`` for answers that were not streamed (a streamed run has its own).

Populations are the window's ok requests, as for every other distribution. The
per-request values go to ``server.jsonl`` in the run directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tailwise.loadgen.llm.stream import Timings
from tailwise.metrics import derive
from tailwise.metrics.percentiles import nearest_rank
from tailwise.records import Records

CACHE_WARN_SHARE = 0.5  # above this share of cached prompt tokens, unasked reuse is flagged
SERVER_FILE = "server.jsonl"
Notes = dict[int, tuple[int | None, Timings | None]]


def _stats_ms(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    v = np.sort(np.asarray(values, dtype=float))
    out = {f"p{q}": nearest_rank(v, float(q)) for q in (50, 90, 99)}
    out["mean"] = float(v.mean())
    return out


def prompt_cache(r: Records, rows: np.ndarray, notes: Notes, reuse_asked: bool) -> dict[str, Any]:
    """Cached share of the prompt tokens of the requests whose server reported a cache count."""
    seqs = r.seq[rows].tolist()
    inputs = r.input_tokens[rows].tolist()
    prompt = cached = reporting = 0
    for seq, n_in in zip(seqs, inputs, strict=True):
        c, t = notes.get(seq, (None, None))
        if c is None:
            continue
        reporting += 1
        cached += c
        prompt += n_in if n_in >= 0 else c + (t.prompt_n if t else 0)
    share = cached / prompt if prompt else None
    out: dict[str, Any] = {
        "requests_reporting": reporting,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": share,
        "reuse_asked": reuse_asked,
        "warning": None,
    }
    if share is not None and share > CACHE_WARN_SHARE and not reuse_asked:
        out["warning"] = (
            f"{100 * share:.0f}% of prompt tokens came from the server's prefix cache, "
            "no reuse asked: TTFT measures the cache, not the prefill"
        )
    return out


def server_timings(r: Records, rows: np.ndarray, notes: Notes) -> dict[str, Any] | None:
    """llama.cpp's per-request times beside the client's service TTFT and TPOT."""
    ttft = derive.service_ttft_ns(r)
    tpot = derive.tpot_ns(r)
    prompt_ms, step_ms, gap_ms, tpot_gap_ms = [], [], [], []
    prompt_n = predicted_n = 0
    for i in np.flatnonzero(rows).tolist():
        t = notes.get(int(r.seq[i]), (None, None))[1]
        if t is None:
            continue
        prompt_ms.append(t.prompt_ms)
        step_ms.append(t.predicted_per_token_ms)
        prompt_n += t.prompt_n
        predicted_n += t.predicted_n
        if ttft[i] >= 0:
            gap_ms.append(ttft[i] / 1e6 - (t.prompt_ms + t.predicted_per_token_ms))
        if tpot[i] > 0:
            tpot_gap_ms.append(tpot[i] / 1e6 - t.predicted_per_token_ms)
    if not prompt_ms:
        return None
    return {
        "requests": len(prompt_ms),
        "prompt_ms": _stats_ms(prompt_ms),
        "decode_per_token_ms": _stats_ms(step_ms),
        "prompt_tokens_processed": prompt_n,
        "tokens_predicted": predicted_n,
        # client service TTFT minus (server prompt time + one decode step), per request
        "ttft_gap_ms": _stats_ms(gap_ms),
        "tpot_gap_ms": _stats_ms(tpot_gap_ms),
    }


def answer_tokens(
    r: Records, ok_rows: np.ndarray, done_in: np.ndarray, t_s: float
) -> dict[str, Any]:
    """Token totals of whole (not streamed) answers, from the server's usage."""
    out_tok = r.output_tokens[ok_rows & (r.output_tokens >= 0)]
    in_tok = r.input_tokens[ok_rows & (r.input_tokens >= 0)]
    done_out = r.output_tokens[done_in & (r.output_tokens > 0)]
    return {
        "output_tps": float(done_out.sum()) / t_s if t_s else 0.0,
        "input_total": int(in_tok.sum()),
        "output_total": int(out_tok.sum()),
        "requests_with_usage": int((ok_rows & (r.input_tokens >= 0)).sum()),
    }


def sections(
    r: Records,
    window_ns: tuple[int, int],
    notes: Notes,
    *,
    reconnects: int,
    streamed: bool,
    reuse_asked: bool,
) -> dict[str, Any]:
    """The summary sections above, for an LLM run (``reconnects`` for any HTTP run)."""
    ok_rows = r.in_window & (r.error == 0)
    start, end = window_ns
    out: dict[str, Any] = {"reconnects": reconnects}
    if not streamed:
        done_in = (r.error == 0) & (r.done_ns >= start) & (r.done_ns < end)
        out["tokens"] = answer_tokens(r, ok_rows, done_in, (end - start) / 1e9)
    out["prompt_cache"] = prompt_cache(r, ok_rows, notes, reuse_asked)
    out["server_timings"] = server_timings(r, ok_rows, notes)
    return out


def write_notes(directory: Path, notes: Notes) -> None:
    """One row per request the server described: ``server.jsonl`` beside the records."""
    if not notes:
        return
    with open(directory / SERVER_FILE, "w", encoding="utf-8") as f:
        for seq in sorted(notes):
            cached, t = notes[seq]
            row: dict[str, Any] = {"seq": seq, "cached_tokens": cached}
            if t is not None:
                row.update(t._asdict())
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def server_lines(s: Mapping[str, Any]) -> list[str]:
    """Terminal lines for the sections above (a summary's sections; none if absent)."""
    lines = []
    if s.get("reconnects"):
        lines.append(
            f"reconnect {s['reconnects']} requests resent on a fresh connection: the server had "
            "closed a reused one"
        )
    if s.get("stray_answers"):
        lines.append(
            f"stray     {s['stray_answers']} answers nobody asked for (the server answered a "
            "request twice): their connections were closed, no request was credited with them"
        )
    cache = s.get("prompt_cache") or {}
    if cache.get("hit_rate") is not None:
        lines.append(
            f"cache     {100 * cache['hit_rate']:.1f}% of {cache['prompt_tokens']} prompt tokens "
            f"from the server's prefix cache ({cache['requests_reporting']} requests; "
            f"{'reuse asked' if cache['reuse_asked'] else 'no reuse asked'})"
        )
    if cache.get("warning"):
        lines.append(f"WARNING   {cache['warning']}")
    t = s.get("server_timings")
    if t:
        line = (
            f"server    llama.cpp timings, {t['requests']} requests: prompt p50 "
            f"{t['prompt_ms']['p50']:.2f} ms, decode p50 {t['decode_per_token_ms']['p50']:.2f} "
            "ms/token"
        )
        if t.get("ttft_gap_ms"):
            gap = t["ttft_gap_ms"]["p50"]
            line += f"\n          per request: client TTFT - (prompt + 1 step) p50 {gap:.2f} ms"
        if t.get("tpot_gap_ms"):
            line += f", TPOT - step p50 {t['tpot_gap_ms']['p50']:.3f} ms"
        lines.append(line)
    return lines
