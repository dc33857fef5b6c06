"""``--api openai-completions``: ``/v1/completions``, streamed, one prompt per request."""

from __future__ import annotations

from typing import Any

from tailwise.loadgen.llm import stream as llm_stream
from tailwise.loadgen.llm.apis.kind import CalibrateModel, Prompt, generation_body, prompt_text


class Completions:
    name = "openai-completions"
    path = "/v1/completions"
    streams = True
    budget_field = "max_tokens"
    preflight_budget = 1
    sessions = False
    calibrate_as: CalibrateModel = "llm"
    classify_event = staticmethod(llm_stream.classify)
    classify_answer = staticmethod(llm_stream.classify_answer)

    def body(self, model: str, prompt: Prompt, max_tokens: int, stream: bool) -> dict[str, Any]:
        return generation_body(model, max_tokens, stream, "prompt", prompt_text(prompt))


KIND = Completions()
