"""The API kinds ``--api`` names: one module each, one line each in :data:`BUILTIN`.

Options, prepare, preflight, the transport and calibrate ask this registry, never an
API's name: :func:`get` (the kind, or a one-line :class:`BadInput` listing the known
ones), :func:`find` (the kind or None, for a run.json written by another version) and
:func:`names`. :func:`register` adds a kind at run time (a plugin, a test).
"""

from __future__ import annotations

from tailwise.errors import BadInput
from tailwise.loadgen.llm.apis import chat, completions, embeddings, rerank, responses
from tailwise.loadgen.llm.apis.kind import ApiKind, Prompt, prompt_text

__all__ = ["ApiKind", "Prompt", "find", "get", "names", "prompt_text", "register", "unregister"]

BUILTIN: tuple[ApiKind, ...] = (
    chat.KIND,
    completions.KIND,
    embeddings.KIND,
    responses.KIND,
    rerank.RERANK,
    rerank.TEI_RERANK,
    rerank.SCORE,
)
_KINDS: dict[str, ApiKind] = {kind.name: kind for kind in BUILTIN}


def register(kind: ApiKind) -> ApiKind:
    """Make ``kind`` known to ``--api``; a name already taken is a bug, raised."""
    if kind.name in _KINDS:
        raise ValueError(f"API kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Forget a kind :func:`register` added (a built-in one stays)."""
    if name not in {kind.name for kind in BUILTIN}:
        _KINDS.pop(name, None)


def names() -> list[str]:
    """The registered kinds' names, sorted."""
    return sorted(_KINDS)


def find(name: str | None) -> ApiKind | None:
    return _KINDS.get(name) if name else None


def get(name: str | None, field: str = "--api") -> ApiKind:
    """The kind called ``name``; anything else is bad input naming the known kinds."""
    kind = find(name)
    if kind is None:
        raise BadInput(field, name, f"one of {', '.join(names())}")
    return kind
