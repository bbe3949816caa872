"""Recovery from "input token count exceeds the maximum": repack hard, retry once.

ADK has no built-in re-invoke, so `on_model_error_callback` calls the agent's own model with the
repacked request and returns its response; if that fails too, the original error surfaces.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..content import Message, TextPart
from ..pipeline.build import ContextPack, build_pack
from ..compress.middle_out import middle_out
from ..pipeline.inputs import PackInputs
from ..pipeline.select import declared_tools
from ..profile import BudgetProfile
from ..tokens import TokenCounting
from ..windows import context_window

__all__ = ["is_token_limit_error", "reported_limit", "recovery_pack", "ReportedLimits"]

_LIMIT = re.compile(r"input token count \(?(\d+)\)? exceeds the maximum number of tokens allowed \(?(\d+)\)?", re.I)
_MARKERS = ("exceeds the maximum number of tokens", "context_length_exceeded", "maximum context length",
            "prompt is too long", "too many tokens", "input token count")


def is_token_limit_error(error: BaseException) -> bool:
    text = str(error).lower()
    return any(m in text for m in _MARKERS)


def reported_limit(error: BaseException) -> int | None:
    """The maximum the model reported, when the message says it."""
    m = _LIMIT.search(str(error))
    return int(m.group(2)) if m else None


class ReportedLimits:
    """The input limit each model reported in a token-limit error, remembered for the process, so later
    calls pack under it instead of each failing once first."""

    def __init__(self) -> None:
        self._by_model: dict[str, int] = {}

    def remember(self, model: str | None, error: BaseException) -> int | None:
        """Keep the limit `error` reports for `model` (the lowest seen); returns it (None: not said)."""
        limit = reported_limit(error)
        if limit is not None and model:
            self._by_model[model] = min(limit, self._by_model.get(model, limit))
        return limit

    def window(self, model: str | None, window: int | None) -> int | None:
        """`window` (None: the model's own, `windows.context_window`) capped by the limit `model` reported."""
        limit = self._by_model.get(model or "")
        if limit is None:
            return window
        return min(context_window(model, window), limit)


def recovery_pack(inputs: PackInputs, profile: BudgetProfile, window: int, error: BaseException, *,
                  counter: TokenCounting) -> ContextPack:
    """An aggressive pack: a smaller window, few recent tool results, each cut to ~1K tokens."""
    settings = profile.recovery
    limit = reported_limit(error)
    target = int((limit or window) * settings.window_factor)
    aggressive = profile.override(
        name=f"{profile.name}+recovery",
        conversation={"max_turn_tokens": settings.max_result_tokens, "max_verbatim_turns": settings.keep_tool_results,
                      "tail_turns": min(profile.conversation.tail_turns, settings.keep_tool_results)},
    )
    # the failed call's tools stay declared: ranked on its own inputs, before the previous call is let go
    held = {"held_tools": list(declared_tools(inputs, profile))}
    inputs = _cut_request(replace(inputs, previous=None, extra={**inputs.extra, **held}), max(64, target // 4), counter)
    return build_pack(inputs, aggressive, counter=counter, window=min(window, target))


def _cut_request(inputs: PackInputs, max_tokens: int, counter: TokenCounting) -> PackInputs:
    """The user's own message cut middle-out to `max_tokens` when it alone would not fit: the pack
    keeps it verbatim in its Task layer, which is never cut, so a message larger than the window
    could not be packed at all (its head and tail still say what is asked)."""
    i = inputs.request_index
    if i is None:
        return inputs
    message = inputs.request.messages[i]
    if counter.count_text(message.text) <= max_tokens:
        return inputs
    texts = [p for p in message.parts if isinstance(p, TextPart)]
    share = max(16, max_tokens // max(1, len(texts)))
    parts = tuple(TextPart(middle_out(p.text, share, counter)) if isinstance(p, TextPart) else p
                  for p in message.parts)
    messages = inputs.request.messages[:i] + (Message(message.role, parts),) + inputs.request.messages[i + 1:]
    return replace(inputs, request=replace(inputs.request, messages=messages))
