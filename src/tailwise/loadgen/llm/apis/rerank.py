"""``--api rerank``, ``tei-rerank`` and ``score``: one query against many documents.

A cross-encoder (a reranker) reads each (query, document) pair once and answers one
number per document; nothing is generated and nothing streams. The latency of a
request is the whole answer's (``done - scheduled``); TTFT, ITL and TPOT are not
defined and not reported. The server's ``usage`` gives the request's input tokens
(every pair's tokens: the query is counted once per document); there are no output
tokens.

Three wire shapes, each checked against the servers' own source:

* ``rerank``: ``POST /v1/rerank`` with ``{"model", "query", "documents": [...]}``, as
  vLLM (``vllm/entrypoints/openai/protocol.py``: ``RerankRequest``), Cohere and Jina
  serve it; the answer is ``{"results": [{"index", "relevance_score", ...}], "usage":
  {"prompt_tokens"?, "total_tokens"}}`` (older vLLM and Jina: ``total_tokens`` only;
  Cohere: no token usage at all). ``top_n`` goes in ``--extra-body``.
* ``tei-rerank``: ``POST /rerank`` with ``{"query", "texts": [...]}``, Hugging Face
  text-embeddings-inference (``router/src/http/types.rs``: ``RerankRequest``); the
  answer is a bare list ``[{"index", "score", "text"?}]`` with no usage (input tokens
  then come from ``--tokenizer``, or stay unknown).
* ``score``: ``POST /score`` with ``{"model", "text_1": query, "text_2": [...]}``, vLLM's
  score API (also served at ``/v1/score``, deprecated there); the answer is
  ``{"data": [{"index", "object": "score", "score"}], "usage": {"prompt_tokens",
  "total_tokens", ...}}``.

Every answer is read whole (the transport bounds it at 4 MiB) and checked: results
that are not objects with a whole ``index`` >= 0 and a numeric score, or a usage
count that is not a count, make the answer ``malformed``; an error object (OpenAI's
``{"error": ...}``, vLLM's ``{"object": "error"}``, TEI's ``{"error", "error_type"}``)
under a 2xx status is a stream error, as for every other kind.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from tailwise.loadgen.llm import stream as llm_stream
from tailwise.loadgen.llm.apis.kind import CalibrateModel, Prompt, prompt_text
from tailwise.loadgen.llm.stream import MALFORMED, Chunk


@runtime_checkable
class RanksDocuments(Protocol):
    """An API kind whose request pairs one query with documents: prepare draws the
    documents (``--documents``, ``--document-tokens``) and asks this for the body."""

    def ranking_body(self, model: str, query: str, documents: list[str]) -> dict[str, Any]: ...


class _Ranking:
    """What the three kinds share: no stream, no budget, no conversation, one whole answer."""

    streams = False  # nothing generated: no max_tokens, no ignore_eos, no nonce
    budget_field = ""
    preflight_budget = 0  # (nor this)
    sessions = False
    calibrate_as: CalibrateModel = "batching"  # pairs batched by the server, like embeddings
    classify_event = staticmethod(llm_stream.classify)  # never streamed; kept for the protocol

    def ranking_body(self, model: str, query: str, documents: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def body(self, model: str, prompt: Prompt, max_tokens: int, stream: bool) -> dict[str, Any]:
        """The prompt as the query and no documents: prepare builds real bodies with
        :meth:`ranking_body`; this serves callers that know no documents."""
        return self.ranking_body(model, prompt_text(prompt), [])

    def classify_answer(self, body: bytes) -> Chunk:
        return classify_ranking(body)


class Rerank(_Ranking):
    name = "rerank"
    path = "/v1/rerank"

    def ranking_body(self, model: str, query: str, documents: list[str]) -> dict[str, Any]:
        return {"model": model, "query": query, "documents": documents}


class TeiRerank(_Ranking):
    name = "tei-rerank"
    path = "/rerank"

    def ranking_body(self, model: str, query: str, documents: list[str]) -> dict[str, Any]:
        return {"query": query, "texts": documents}  # TEI serves one model: none is named


class Score(_Ranking):
    name = "score"
    path = "/score"

    def ranking_body(self, model: str, query: str, documents: list[str]) -> dict[str, Any]:
        return {"model": model, "text_1": query, "text_2": documents}


RERANK = Rerank()
TEI_RERANK = TeiRerank()
SCORE = Score()


class _Malformed(ValueError):
    pass


def classify_ranking(body: bytes) -> Chunk:
    """What a rerank or score answer says: its input tokens (None when it has no usage),
    or why it is not an answer."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return Chunk(error=MALFORMED)
    try:
        if isinstance(doc, list):  # TEI: a bare list of ranks, no usage
            _check_ranks(doc, "score")
            return Chunk(finish_reason="stop")
        if not isinstance(doc, dict):
            return Chunk(error=MALFORMED)
        if "error" in doc or doc.get("object") == "error":
            return llm_stream.classify_answer(body)  # the message, read as every kind does
        ranks, score = (doc.get("results"), "relevance_score")
        if ranks is None:
            ranks, score = (doc.get("data"), "score")
        if not isinstance(ranks, list):
            return Chunk(error=MALFORMED)
        _check_ranks(ranks, score)
        return Chunk(prompt_tokens=_input_tokens(doc.get("usage")), finish_reason="stop")
    except _Malformed:
        return Chunk(error=MALFORMED)


def _check_ranks(ranks: list[Any], score: str) -> None:
    """Every rank an object with a whole ``index`` >= 0 and a number under ``score``."""
    for rank in ranks:
        if not isinstance(rank, dict):
            raise _Malformed("a rank is not an object")
        index, value = rank.get("index"), rank.get(score)
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise _Malformed("index")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise _Malformed(score)


def _input_tokens(usage: object) -> int | None:
    """``usage.prompt_tokens``, else ``usage.total_tokens`` (nothing is generated)."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise _Malformed("usage")
    for field in ("prompt_tokens", "total_tokens"):
        value = usage.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Malformed(field)
        if not 0 <= value <= llm_stream.MAX_TOKEN_COUNT:
            raise _Malformed(field)
        return value
    return None
