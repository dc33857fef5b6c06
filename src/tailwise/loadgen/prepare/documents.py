"""Documents for the kinds that rank them (``--api rerank``, ``tei-rerank``, ``score``).

Each request is one query (the prompt generator's: ``--input-tokens``, ``--prompts``)
and its own documents: how many is ``--documents`` and how long each is, in words
(~tokens, as prompts), ``--document-tokens``; both take a number or a distribution
(``uniform:A-B``, ``normal:M,SD``, ``lognormal:MEDIAN,SIGMA``) and are drawn per
request, seeded. Documents are synthetic words from the prompt word list.

Bounds: at most :data:`MAX_DOCUMENTS` documents in a request and
:data:`MAX_DOCUMENT_TOKENS` words in a document (a draw beyond is cut to it; a
fixed value or a distribution's centre beyond is refused), and at most
:data:`~tailwise.limits.MAX_PROMPT_WORDS` words over all distinct bodies: the
bodies are drawn one after another until the next would pass it, so very long
requests cycle over fewer distinct bodies (at least one; one alone over the bound
is refused, naming ``--documents``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tailwise.errors import BadInput
from tailwise.limits import MAX_PROMPT_WORDS
from tailwise.loadgen.llm import openai
from tailwise.loadgen.llm.apis import Prompt, prompt_text

MAX_DOCUMENTS = 10_000  # per request: far above a reranker's usual 10 to 1,000 candidates
MAX_DOCUMENT_TOKENS = 100_000  # per document: beyond any cross-encoder's context
DEFAULT_DOCUMENTS = "10"
DEFAULT_DOCUMENT_TOKENS = "128"


@dataclass(frozen=True)
class Ranking:
    """One request's query and documents."""

    query: str
    documents: list[str]

    @property
    def words(self) -> int:
        """Every pair's words: a cross-encoder reads the query once per document."""
        query = len(self.query.split())
        return sum(query + len(d.split()) for d in self.documents)

    def text(self) -> str:
        """Query and documents as one text, for a ``--tokenizer`` to count."""
        return "\n".join([self.query, *self.documents])


def sample_bounded(spec: str, field: str, n: int, most: int, rng: random.Random) -> list[int]:
    """``n`` draws from ``spec`` (a number or a distribution), each cut to ``most``; a
    spec whose value, upper end (uniform) or centre (normal, lognormal) is above ``most``
    is refused."""
    drawn = openai.sample_lengths(spec, field, n, rng)  # validates the form first
    if _largest_asked(spec) > most:
        raise BadInput(field, spec, f"at most {most:,} ({openai.LENGTH_FORM})")
    return [min(k, most) for k in drawn]


def _largest_asked(spec: str) -> float:
    """What a valid length spec asks for at most: N, B of uniform:A-B, else the centre."""
    kind, _, arg = spec.strip().partition(":")
    if not arg:
        return float(kind)
    if kind == "uniform":
        return float(arg.partition("-")[2])
    return float(arg.partition(",")[0])


def rankings(
    queries: list[Prompt], documents: str | None, document_tokens: str | None, seed: int
) -> list[Ranking]:
    """One ranking per query, drawn for ``seed``, within the words bound (see the module)."""
    rng = random.Random(seed)
    count_spec = str(documents) if documents is not None else DEFAULT_DOCUMENTS
    length_spec = str(document_tokens) if document_tokens is not None else DEFAULT_DOCUMENT_TOKENS
    counts = sample_bounded(count_spec, "--documents", len(queries), MAX_DOCUMENTS, rng)
    out: list[Ranking] = []
    total_words = 0
    for i, (query, count) in enumerate(zip(queries, counts, strict=True)):
        lengths = sample_bounded(length_spec, "--document-tokens", count, MAX_DOCUMENT_TOKENS, rng)
        text = prompt_text(query)
        words = count * len(text.split()) + sum(lengths)
        if total_words + words > MAX_PROMPT_WORDS:
            if not out:
                raise BadInput(
                    "--documents",
                    count_spec,
                    f"fewer or shorter documents: one request of {words:,} words "
                    f"(query and documents) is over {MAX_PROMPT_WORDS:,}",
                )
            break
        total_words += words
        docs = openai.synthetic_prompts(lengths, seed + 1 + i) if lengths else []
        out.append(Ranking(text, docs))
    return out
