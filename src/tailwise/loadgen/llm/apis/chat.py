"""``--api openai-chat``: ``/v1/chat/completions``, streamed, a conversation."""

from __future__ import annotations

from typing import Any

from tailwise.loadgen.llm import stream as llm_stream
from tailwise.loadgen.llm.apis.kind import CalibrateModel, Prompt, generation_body


class Chat:
    name = "openai-chat"
    path = "/v1/chat/completions"
    streams = True
    budget_field = "max_tokens"
    preflight_budget = 1
    sessions = True
    calibrate_as: CalibrateModel = "llm"
    classify_event = staticmethod(llm_stream.classify)
    classify_answer = staticmethod(llm_stream.classify_answer)

    def body(self, model: str, prompt: Prompt, max_tokens: int, stream: bool) -> dict[str, Any]:
        messages = prompt if isinstance(prompt, list) else None
        value = messages or [{"role": "user", "content": prompt}]
        return generation_body(model, max_tokens, stream, "messages", value)


KIND = Chat()
