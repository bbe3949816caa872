"""Fakes for testing agents that use aether-context, offline and without mocking ADK.

`ScriptedLlm` is a real ADK `BaseLlm`: it answers each model call with the next scripted turn and
records every request it received, so a test can run a real `Runner` and inspect what was sent.

Usage::

    llm = ScriptedLlm(turns=[call("read_file", path="a.py"), "done"])
    agent = LlmAgent(name="a", model=llm, tools=[read_file])
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, AsyncGenerator, Callable, Literal, Union

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field, PrivateAttr

from .adk.convert import request_from_llm
from .pipeline.render import request_tokens
from .tokens import TokenCounter

__all__ = ["ScriptedLlm", "call", "counted_tokens", "TokenLimitError", "Turn"]

# A scripted turn: plain text, a function call Part, a list of Parts, or a callable that sees the
# request and returns one of those, or an awaitable of one (for models that must react to what they were sent).
Turn = Union[str, types.Part, list, Callable[[LlmRequest], Any], Exception]


def call(name: str, **args: Any) -> types.Part:
    """A function-call part, for scripting a tool call."""
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


class TokenLimitError(Exception):
    """Shaped like google.genai's 400 INVALID_ARGUMENT for an over-long prompt."""

    def __init__(self, count: int, maximum: int):
        super().__init__(
            f"400 INVALID_ARGUMENT. The input token count ({count}) exceeds the maximum number of tokens allowed ({maximum})."
        )
        self.code = 400
        self.status = "INVALID_ARGUMENT"


class ScriptedLlm(BaseLlm):
    """Replays scripted turns; the last turn repeats once the script runs out.

    Usage metadata: by default (`usage="counted"`) the model reports as `prompt_token_count` the
    tokens aether-context itself counts for the request (`TokenCounter` over the system instruction,
    the tool declarations and the contents). A real model's tokenizer differs from ours by a few
    per cent, so a packer's calibration stays near 1.0 and the window keeps its size, as it does
    with Gemini. `usage="none"` reports no usage metadata at all (no calibration, no usage records).
    `prompt_token_counter`, a callable taking the `LlmRequest`, replaces the count: e.g.
    `lambda r: int(1.2 * request_tokens(request_from_llm(r), counter))` for a model whose tokenizer
    counts 20 % more than ours. A count of the request's JSON characters would be wrong by a factor of
    about three (JSON keys and escapes are not prompt tokens) and teach the calibration that factor.

    `max_input_tokens` makes it reject longer prompts (by the same count) like Gemini does. Asked to
    stream (`RunConfig(streaming_mode=StreamingMode.SSE)`), it sends the text as partial chunks first.
    Scripted parts go out as given, so a turn may carry Gemini's `thought_signature` or thoughts.
    """

    model: str = "scripted-model"
    turns: list[Any] = Field(default_factory=list)
    max_input_tokens: int | None = None
    usage: Literal["counted", "none"] = "counted"
    prompt_token_counter: Any = None
    cached_tokens: int | None = None
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)
    _cursor: int = PrivateAttr(default=0)

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"scripted-.*"]

    @property
    def requests(self) -> list[LlmRequest]:
        """Deep copies of every request received, in order."""
        return self._requests

    def _next_turn(self, llm_request: LlmRequest) -> Any:
        if not self.turns:
            return "ok"
        turn = self.turns[min(self._cursor, len(self.turns) - 1)]
        self._cursor += 1
        if callable(turn) and not isinstance(turn, types.Part):
            turn = turn(llm_request)
        return turn

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self._requests.append(llm_request.model_copy(deep=True))
        if self.prompt_token_counter is not None:
            prompt_tokens = int(self.prompt_token_counter(llm_request))
        else:
            prompt_tokens = counted_tokens(llm_request)
        if self.max_input_tokens is not None and prompt_tokens > self.max_input_tokens:
            raise TokenLimitError(prompt_tokens, self.max_input_tokens)
        turn = self._next_turn(llm_request)
        if inspect.isawaitable(turn):  # an async callable turn (e.g. a slow model)
            turn = await turn
        if isinstance(turn, Exception):
            raise copy.copy(turn)
        if isinstance(turn, str):
            parts = [types.Part(text=turn)]
        elif isinstance(turn, types.Part):
            parts = [turn]
        else:
            parts = list(turn)
        usage = None if self.usage == "none" else types.GenerateContentResponseUsageMetadata(
            prompt_token_count=prompt_tokens,
            cached_content_token_count=self.cached_tokens,
            candidates_token_count=10,
            total_token_count=prompt_tokens + 10,
        )
        if stream:  # like Gemini over SSE: text in partial chunks (each with usage so far), then the whole turn
            for chunk in _chunks(parts):
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=chunk)]),
                                  usage_metadata=usage, partial=True)
        yield LlmResponse(
            content=types.Content(role="model", parts=parts),
            usage_metadata=usage,
            finish_reason=types.FinishReason.STOP,
        )


_COUNTER: TokenCounter | None = None


def counted_tokens(llm_request: LlmRequest) -> int:
    """The tokens aether-context counts for an ADK request: system instruction, tools and contents."""
    global _COUNTER
    if _COUNTER is None:
        _COUNTER = TokenCounter()
    return request_tokens(request_from_llm(llm_request), _COUNTER)


def _chunks(parts: list[types.Part], n: int = 3) -> list[str]:
    """The turn's plain text split into up to `n` pieces (none when the turn has no text)."""
    text = "".join(p.text for p in parts if p.text and not p.thought)
    if not text:
        return []
    size = max(1, -(-len(text) // n))
    return [text[i:i + size] for i in range(0, len(text), size)]
