"""Rerank and score for the demo LLM target, on its engine: the wire shapes and the cost law.

Routes (served by ``serve-demo --kind llm`` beside chat and completions):

* ``POST /v1/rerank``: ``{"model", "query", "documents": [...], "top_n"?}`` as vLLM,
  Cohere and Jina take it; answers ``{"id", "model", "usage": {"prompt_tokens",
  "total_tokens"}, "results": [{"index", "relevance_score"}]}``, best first, cut to
  ``top_n`` when it is above 0;
* ``POST /rerank``: the same, or text-embeddings-inference's shape when the body has
  ``texts`` instead of ``documents`` (``{"query", "texts"}``, answered with a bare list
  ``[{"index", "score"}]``, best first, no usage);
* ``POST /score`` and ``/v1/score``: vLLM's ``{"model", "text_1", "text_2": [...]}``,
  answered ``{"id", "object": "list", "created", "model", "data": [{"index", "object":
  "score", "score"}], "usage": {...}}`` in the documents' order.

**Cost law.** A cross-encoder reads each (query, document) pair once. Each pair is one
sequence in the engine with ``q + d_i`` prompt tokens (words) and one token to sample,
so pairs queue, batch and share steps with chat requests under the engine's law. A
request of ``n`` pairs on an idle engine, with ``n <= max_num_seqs`` and the KV cache
room for them, is answered after one prefill step:

    latency_s = base_s + prefill_s_per_token * sum_i (q + d_i)

(4 ms + 20 us x tokens with ``serve-demo``'s defaults); more pairs than batch slots
take more steps. A request whose pairs could never all be queued at once
(``n > max_num_seqs + max_waiting``) is refused with 400, a pair longer than the
model's context with 400, a full queue with 429 (its pairs already queued are dropped).

Scores are the share of the query's distinct words that the document holds: the same
texts always score the same.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

from tailwise.server.engine import ABORTED, FINISHED, Engine, QueueFull, Sequence
from tailwise.server.llm_app import WireError, parse_json

SHAPES = ("rerank", "tei", "score")
_ids = itertools.count(1)
_ABORT_STATUS = {"timeout": 504, "shutdown": 503}


@dataclass(frozen=True)
class RankRequest:
    shape: str  # one of SHAPES
    model: str
    query: str
    documents: list[str]
    top_n: int  # 0: every result


def parse_rank(raw: bytes, route: str, served_model: str) -> RankRequest:
    """A request to ``route`` (``rerank``: /v1/rerank and /rerank; ``score``), or WireError."""
    body = parse_json(raw)
    model = body.get("model", served_model)
    if model != served_model:
        raise WireError(404, f"The model `{model}` does not exist.", "NotFoundError")
    if route == "score":
        query = _one_text(body.get("text_1"), "text_1")
        return RankRequest("score", model, query, _texts(body.get("text_2"), "text_2"), 0)
    shape, field = (
        ("tei", "texts") if route == "rerank" and "texts" in body else ("rerank", "documents")
    )
    query = _one_text(body.get("query"), "query")
    top_n = body.get("top_n", 0)
    if not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 0:
        raise WireError(400, f"top_n: expected a whole number >= 0, got {top_n!r}")
    return RankRequest(shape, model, query, _texts(body.get(field), field), top_n)


def _one_text(value: object, field: str) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise WireError(400, f"{field}: expected a string")
    return value


def _texts(value: object, field: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise WireError(400, f"{field}: expected a non-empty list of strings")
    return value


def pair_tokens(req: RankRequest) -> list[int]:
    """Each (query, document) pair's prompt tokens, in words (at least 1 each side)."""
    query = max(len(req.query.split()), 1)
    return [query + max(len(d.split()), 1) for d in req.documents]


async def rank(engine: Engine, req: RankRequest) -> tuple[int, Any]:
    """Run the request's pairs through the engine; (status, JSON answer)."""
    tokens = pair_tokens(req)
    _check_fits(engine, tokens)
    seqs = _submit(engine, tokens)
    if seqs is None:
        message = f"waiting queue full ({engine.config.max_waiting}); retry later"
        return 429, {"error": {"message": message, "type": "rate_limit_error", "code": 429}}
    reason = await _finish(engine, seqs)
    if reason:
        status = _ABORT_STATUS.get(reason, 500)
        message = f"request {reason.replace('_', ' ')}"
        return status, {"error": {"message": message, "type": "server_error", "code": status}}
    return 200, answer(req, sum(tokens))


def _check_fits(engine: Engine, tokens: list[int]) -> None:
    cfg = engine.config
    most = cfg.max_num_seqs + cfg.max_waiting
    if len(tokens) > most:  # a retry could never fit: not a 429
        raise WireError(400, f"{len(tokens)} documents; the engine queues at most {most} pairs")
    why = engine.check(max(tokens), 1)
    if why:
        raise WireError(400, why)


def _submit(engine: Engine, tokens: list[int]) -> list[Sequence] | None:
    """Every pair queued, or none (None: the queue filled; those queued are dropped)."""
    seqs: list[Sequence] = []
    try:
        for n in tokens:
            seqs.append(engine.submit(n, 1))
    except QueueFull:
        for seq in seqs:
            engine.abort(seq, "queue_full")  # refused with the rest: not a disconnect
        return None
    return seqs


async def _finish(engine: Engine, seqs: list[Sequence]) -> str:
    """Wait for every pair; the first abort's reason ('' when all finished)."""
    reason = ""
    try:
        for seq in seqs:
            while (ev := await seq.events.get()) not in (FINISHED, ABORTED):
                pass
            if ev == ABORTED:
                reason = seq.abort_reason
                return reason
        return ""
    finally:
        for seq in seqs:  # a no-op for those finished; the rest are dropped with it
            engine.abort(seq, reason or "client_disconnected")


def score(query: str, document: str) -> float:
    """The share of the query's distinct words found in the document, 0 to 1."""
    words = set(query.split())
    return round(len(words & set(document.split())) / len(words), 6) if words else 0.0


def answer(req: RankRequest, tokens: int) -> Any:
    """The server's answer in the request's shape (``tokens``: every pair's, summed)."""
    scores = [score(req.query, d) for d in req.documents]
    best = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if req.top_n:
        best = best[: req.top_n]
    if req.shape == "tei":
        return [{"index": i, "score": scores[i]} for i in best]
    if req.shape == "rerank":
        return {
            "id": f"rerank-{next(_ids)}",
            "model": req.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "results": [{"index": i, "relevance_score": scores[i]} for i in best],
        }
    data = [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)]
    return {
        "id": f"score-{next(_ids)}",
        "object": "list",
        "created": int(time.time()),
        "model": req.model,
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
    }
