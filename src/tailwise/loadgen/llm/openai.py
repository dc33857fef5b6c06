"""Requests for OpenAI-compatible servers: the API's URL, bodies, prompts and credentials.

What differs between APIs (``--api openai-chat``, ``openai-completions``,
``openai-embeddings``: their paths, body shapes and answers) lives in their kind's
module under :mod:`tailwise.loadgen.llm.apis`; this module does what they share. A URL
given as the server's base (``http://host:8000``) gets the kind's standard path;
a URL with a path is used as it is. Chat and completions stream by default and
ask for the server's token usage (``stream_options.include_usage``), which the
metrics prefer over counting chunks.

Prompts are synthetic (``--input-tokens``: N words from a word list shipped
here; a word is about one token for English text in common tokenizers, an
approximation) or read from a dataset file (``--prompts``: JSONL rows with a
``prompt`` or ``messages``, or ShareGPT ``conversations``, each with an optional
output length). Lengths may be distributions: ``uniform:64-256``,
``normal:128,32``, ``lognormal:128,0.5`` (median and sigma). ``--shared-prefix N``
starts every prompt with the same N words, to exercise prefix caching. All of
it is deterministic for a seed, but for one thing: every request's prompt starts
with its own nonce (10 hex digits, a per-run salt; see :func:`new_nonce`), so that
a server's prefix cache cannot serve one request's prompt from another's, in this
run or an earlier one, unless the run asks for reuse (``--shared-prefix``: the
nonce follows the shared words; ``--no-unique-prompts``: no nonce). Nothing is
downloaded, ever.

The API key (``--api-key`` or ``OPENAI_API_KEY``) becomes an ``Authorization``
header, and header values are never written anywhere.
"""

from __future__ import annotations

import json
import math
import os
import random
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tailwise import credentials
from tailwise.errors import BadInput
from tailwise.files import read_bounded_utf8
from tailwise.loadgen.llm import apis
from tailwise.loadgen.llm.apis import Prompt, prompt_text

N_PROMPTS = 256  # distinct request bodies, used in turn
MAX_DATASET_ROWS = 100_000
LENGTH_FORM = "N, uniform:A-B, normal:MEAN,SD or lognormal:MEDIAN,SIGMA (positive numbers)"
MAX_LENGTH = 10_000_000  # tokens: far beyond any context window, and a bound on every draw

_WORDS = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy process music market sense nation plan college interest "
    "death experience effect use class control care field development role effort rate heart "
    "drug show leader light voice wife police mind price report decision son view "
    "relationship town road arm difference value building action model season society tax "
    "director position"
).split()


def api_url(url: str, api: str) -> str:
    """The URL to send to: the API's standard path appended to a bare base URL."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path in ("", "/v1"):
        path = apis.get(api).path
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def sample_lengths(text: str, field: str, n: int, rng: random.Random) -> list[int]:
    """``n`` lengths (>= 1) from a length spec: a number or a distribution."""
    kind, _, arg = str(text).strip().partition(":")
    try:
        if not arg:
            value = float(kind)
            if value != int(value) or not 1 <= value <= MAX_LENGTH:
                raise ValueError
            return [int(value)] * n
        a, _, b = (
            arg.replace("-", ",", 1).partition(",") if kind == "uniform" else arg.partition(",")
        )
        x, y = float(a), float(b)
    except (ValueError, OverflowError):  # OverflowError: int(inf)
        raise BadInput(field, text, LENGTH_FORM) from None
    draw = {
        "uniform": lambda: rng.uniform(x, y),
        "normal": lambda: rng.gauss(x, y),
        "lognormal": lambda: x * math.exp(min(rng.gauss(0.0, y), 50.0)),
    }.get(kind)
    if draw is None or not 0 < x <= MAX_LENGTH or not 0 <= y <= MAX_LENGTH:
        raise BadInput(field, text, LENGTH_FORM)
    if kind == "uniform" and y < x:
        raise BadInput(field, text, LENGTH_FORM)
    return [max(1, min(MAX_LENGTH, round(draw()))) for _ in range(n)]


def synthetic_prompts(
    lengths: list[int], seed: int, shared_prefix: int = 0, nonce: str = ""
) -> list[str]:
    """Prompts of ``lengths`` words: the shared prefix, then the nonce (if any), then words."""
    rng = random.Random(seed)
    prefix = " ".join(rng.choice(_WORDS) for _ in range(shared_prefix))
    out = []
    for n in lengths:
        words = " ".join(rng.choice(_WORDS) for _ in range(max(n - shared_prefix, 1)))
        out.append(" ".join(part for part in (prefix, nonce, words) if part))
    return out


def new_nonce() -> str:
    """The run's nonce placeholder: 10 random hex digits, replaced per request on the wire."""
    return secrets.token_hex(5)


def with_nonce(prompt: Prompt, nonce: str) -> Prompt:
    """``prompt`` starting with ``nonce``: the first message's content for a chat prompt."""
    if isinstance(prompt, str):
        return f"{nonce} {prompt}"
    out = [dict(m) for m in prompt]
    for m in out:
        if isinstance(m.get("content"), str):
            m["content"] = f"{nonce} {m['content']}"
            break
    return out


def read_dataset(path: str) -> list[tuple[Prompt, int | None]]:
    """``(prompt or messages, output length or None)`` per JSONL row."""
    try:
        lines = read_bounded_utf8(path, "--prompts").splitlines()
    except BadInput as exc:
        raise BadInput(
            "--prompts", path, exc.expected.replace("file", "UTF-8 JSONL file", 1)
        ) from None
    rows = []
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            rows.append(_dataset_row(line, f"{path}:{lineno}"))
        if len(rows) >= MAX_DATASET_ROWS:
            break
    if not rows:
        raise BadInput("--prompts", path, "a JSONL file with at least one prompt")
    return rows


_ROW_FORM = (
    'a JSON object with "prompt" (text), "messages" (chat) or "conversations" (ShareGPT), '
    'and optionally "max_tokens" or "output_len"'
)


def _dataset_row(line: str, where: str) -> tuple[Prompt, int | None]:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        raise BadInput(where, line[:40], _ROW_FORM) from None
    if not isinstance(row, dict):
        raise BadInput(where, line[:40], _ROW_FORM)
    out = row.get("max_tokens", row.get("output_len"))
    if out is not None and (not isinstance(out, int) or isinstance(out, bool) or out < 1):
        raise BadInput(where, out, "a positive whole number of output tokens")
    if isinstance(row.get("prompt"), str):
        return row["prompt"], out
    messages = row.get("messages")
    if isinstance(messages, list) and messages:
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise BadInput(where, line[:40], 'chat "messages": objects each with a "role"')
        return messages, out
    turns = row.get("conversations")
    if isinstance(turns, list) and turns and all(isinstance(t, dict) for t in turns):
        human = next((t.get("value") for t in turns if t.get("from") in ("human", "user")), None)
        reply = next((t.get("value") for t in turns if t.get("from") in ("gpt", "assistant")), None)
        if isinstance(human, str):
            if out is None and isinstance(reply, str):
                out = max(1, len(reply.split()))  # the recorded answer's length, in words
            return human, out
    raise BadInput(where, line[:40], _ROW_FORM)


def parse_extra_body(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise BadInput(
            "--extra-body", text, "a JSON object such as '{\"ignore_eos\": true}'"
        ) from None
    if not isinstance(value, dict):
        raise BadInput("--extra-body", text, "a JSON object such as '{\"ignore_eos\": true}'")
    return value


def bodies(
    api: str,
    model: str,
    max_tokens: list[int],
    prompts: list[Prompt],
    stream: bool,
    extra: dict[str, Any],
) -> list[bytes]:
    """One request body per prompt; ``max_tokens[i]`` goes with ``prompts[i]``."""
    kind = apis.get(api)
    out = []
    for prompt, n_out in zip(prompts, max_tokens, strict=True):
        body = kind.body(model, prompt, n_out, stream)
        body.update(extra)
        out.append(json.dumps(body, separators=(",", ":")).encode())
    return out


def auth_header(api_key: str | None) -> list[tuple[str, str]]:
    key = api_key or os.environ.get("OPENAI_API_KEY")
    credentials.remember(key)  # scrubbed from every output, whatever a server echoes
    return [("Authorization", f"Bearer {key}")] if key else []


class TokenCounter:
    """Counts tokens with a local ``tokenizer.json`` (the ``tokenizers`` package, an extra)."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            from tailwise.errors import MissingExtra

            raise MissingExtra("--tokenizer", "tokenizers", "tokenizers") from None
        try:
            self._tok = Tokenizer.from_file(path)
        except Exception as exc:  # the library raises its own exception types
            raise BadInput("--tokenizer", path, f"a tokenizer.json file ({exc})") from None
        self.name = Path(path).name

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_prompt(self, prompt: Prompt) -> int:
        return self.count(prompt_text(prompt))

    def truncate(self, text: str, n: int) -> str:
        """The text of ``text``'s first ``n`` tokens (may re-encode to another count)."""
        ids = self._tok.encode(text, add_special_tokens=False).ids[:n]
        decoded: str = self._tok.decode(ids, skip_special_tokens=True)
        return decoded
