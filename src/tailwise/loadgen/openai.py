"""Requests for OpenAI-compatible servers: the API's path, bodies, prompts and credentials.

``--api openai-chat`` (``/v1/chat/completions``), ``openai-completions``
(``/v1/completions``) and ``openai-embeddings`` (``/v1/embeddings``). A URL
given as the server's base (``http://host:8000``) gets the API's standard path;
a URL with a path is used as it is. Chat and completions stream by default and
ask for the server's token usage (``stream_options.include_usage``), which the
metrics prefer over counting chunks.

Prompts are synthetic for now: ``--input-tokens N`` builds prompts of N words
from a word list shipped here (a word is about one token for English text in
common tokenizers: an approximation, labelled as such), 64 distinct prompts,
the same for the same seed. Nothing is downloaded, ever.

The API key (``--api-key`` or ``OPENAI_API_KEY``) becomes an ``Authorization``
header, and header values are never written anywhere.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tailwise.errors import BadInput

PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-completions": "/v1/completions",
    "openai-embeddings": "/v1/embeddings",
}
STREAMING_APIS = frozenset({"openai-chat", "openai-completions"})
N_PROMPTS = 64

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
        path = PATHS[api]
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def synthetic_prompts(input_tokens: int, seed: int, n: int = N_PROMPTS) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(input_tokens)) for _ in range(n)]


def parse_extra_body(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise BadInput(
            "--extra-body", text, "a JSON object such as '{\"ignore_eos\": true}'"
        ) from None
    if not isinstance(value, dict):
        raise BadInput("--extra-body", text, "a JSON object such as '{\"ignore_eos\": true}'")
    return value


def bodies(
    api: str, model: str, max_tokens: int, prompts: list[str], stream: bool, extra: dict[str, Any]
) -> list[bytes]:
    out = []
    for prompt in prompts:
        body: dict[str, Any]
        if api == "openai-embeddings":
            body = {"model": model, "input": prompt}
        else:
            body = {"model": model, "max_tokens": max_tokens, "stream": stream}
            if api == "openai-chat":
                body["messages"] = [{"role": "user", "content": prompt}]
            else:
                body["prompt"] = prompt
            if stream:
                body["stream_options"] = {"include_usage": True}
        body.update(extra)
        out.append(json.dumps(body, separators=(",", ":")).encode())
    return out


def auth_header(api_key: str | None) -> list[tuple[str, str]]:
    key = api_key or os.environ.get("OPENAI_API_KEY")
    return [("Authorization", f"Bearer {key}")] if key else []


def check_api(api: str) -> str:
    if api not in PATHS:
        raise BadInput("--api", api, f"one of {', '.join(sorted(PATHS))}")
    return api
