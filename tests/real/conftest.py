"""llama.cpp's llama-server on loopback, built by ``scripts/real_llm.py`` (``make real-llm``).

The tier is deselected by default (``-m 'not real'`` in pyproject). Selected
(``pytest -m real``) without a built server, its tests skip and say how to build
one; with ``TAILWISE_REAL=1`` (what ``make real-llm`` and CI set) they fail instead,
so a CI run cannot pass by skipping.
"""

from __future__ import annotations

import importlib.util
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "real_llm.py"
SLOTS = 8


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("real_llm", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


real_llm = _script()


def _require_built() -> None:
    if real_llm.server_binary().exists() and real_llm.model_path().exists():
        return
    why = f"no llama-server at {real_llm.server_binary()}: run `make real-llm`"
    if os.environ.get("TAILWISE_REAL") == "1":
        pytest.fail(why)
    pytest.skip(why)


def _serving(tmp: Path, name: str, *extra: str) -> Iterator[str]:
    _require_built()
    proc, url = real_llm.start(*extra, log=tmp / f"{name}.log")
    try:
        yield url
    finally:
        real_llm.stop(proc)


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A chat/completions llama-server: 8 slots, 8k context, one thread, /metrics on."""
    tmp = tmp_path_factory.mktemp("llama")
    yield from _serving(tmp, "chat", "-np", str(SLOTS), "-c", "8192")


@pytest.fixture(scope="session")
def llama_embed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second instance serving embeddings (mean pooling: /v1 refuses pooling "none")."""
    tmp = tmp_path_factory.mktemp("llama-embed")
    yield from _serving(tmp, "embed", "--embeddings", "--pooling", "mean", "-np", "2", "-c", "2048")


def server_metrics(url: str) -> dict[str, float]:
    """llama-server's Prometheus counters (``llamacpp:...``), names without the prefix."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            name, _, value = line.partition(" ")
            out[name.removeprefix("llamacpp:")] = float(value)
    return out
