"""``--api openai-embeddings``: ``/v1/embeddings``, one whole answer, prompt tokens only."""

from __future__ import annotations

from typing import Any

from tailwise.loadgen.llm import stream as llm_stream
from tailwise.loadgen.llm.apis.kind import CalibrateModel, Prompt, prompt_text


class Embeddings:
    name = "openai-embeddings"
    path = "/v1/embeddings"
    streams = False  # no tokens generated: no max_tokens, no ignore_eos, no nonce
    budget_field = ""  # no budget: never set
    preflight_budget = 0  # (nor this)
    sessions = False
    calibrate_as: CalibrateModel = "batching"
    classify_event = staticmethod(llm_stream.classify)  # never streamed; kept for the protocol
    classify_answer = staticmethod(llm_stream.classify_answer)

    def body(self, model: str, prompt: Prompt, max_tokens: int, stream: bool) -> dict[str, Any]:
        return {"model": model, "input": prompt_text(prompt)}


KIND = Embeddings()
