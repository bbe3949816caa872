"""Goal recitation: a short status block that restates the goal, progress and next step.

Why: in long sessions the original task sinks under hundreds of tool outputs ("lost in the middle").
Re-stating it near the end of the context, where attention is strongest, keeps the agent on course.
Reciting costs tokens and cache stability, so it happens periodically: more often when the recent
turns drift away from the goal's vocabulary or the context is large, less often when on track.

Usage::

    settings = RecitationSettings()
    drift = drift_score(goal, recent_texts)
    if should_recite(call_index, last_recited, drift, context_tokens, settings):
        block = build_recitation(goal, 3, 5, "run the tests", open_items, errors,
                                 max_tokens=settings.max_tokens, counter=counter)
"""

from __future__ import annotations

import logging
import re

from ..retrieval.analyzer import STOP_WORDS, stem
from typing import Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..tokens import TokenCounting
from .variation import StructuralVariation, format_progress

__all__ = ["RecitationSettings", "StatusPlacement", "build_recitation", "drift_score", "recitation_interval", "should_recite",
           "content_words"]

logger = logging.getLogger(__name__)

ITEM_MAX_CHARS = 300  # any single goal/step/item/error is clipped to this before token capping

StatusPlacement = Literal["after_user_text", "sticky_part", "last_part", "trailing_message"]


class RecitationSettings(BaseModel):
    """When and how large the goal recitation is.

    The interval rule (see `recitation_interval`): start from `base_every_n_calls`; halve it when drift
    ≥ `drift_threshold`; subtract one when the context holds ≥ `large_context_tokens`; double it when
    drift ≤ `on_track_threshold` and the context is small. Never below 1.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Off: never recite.")
    max_tokens: int = Field(500, ge=1, description="Hard cap on the recitation block.")
    base_every_n_calls: int = Field(3, ge=1, description="Recite every N model calls at moderate drift.")
    drift_threshold: float = Field(0.6, ge=0.0, le=1.0, description="Drift at or above this halves the interval.")
    on_track_threshold: float = Field(0.2, ge=0.0, le=1.0,
                                      description="Drift at or below this (small context) doubles the interval.")
    large_context_tokens: int = Field(30_000, ge=1, description="Contexts this large recite one call sooner.")
    placement: StatusPlacement = Field(
        "after_user_text",
        description="Where the closing note (status, in-loop failure warnings) goes. 'after_user_text': as an "
                    "extra text part of the last message when that message is user text, else of the payload "
                    "this call rebuilt, else (a tool loop under a frozen payload) after ADK's function response; "
                    "kept on that message while the payload is frozen so later calls re-send it unchanged "
                    "(append-only). 'sticky_part': always on the last message, kept. 'last_part': an extra part of the last message for one call only (the next call's copy "
                    "of that message loses it: a cache break). 'trailing_message': a separate user message after "
                    "ADK's last content (what a callback reads as contents[-1] changes). docs/benchmarks.md "
                    "(status_placement) compares them.")

    @model_validator(mode="after")
    def _thresholds_ordered(self) -> "RecitationSettings":
        if self.on_track_threshold >= self.drift_threshold:
            raise ValueError(
                f"on_track_threshold ({self.on_track_threshold}) must be below drift_threshold "
                f"({self.drift_threshold}); lower on_track_threshold or raise drift_threshold")
        return self


# --- drift --------------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> frozenset[str]:
    """Lower-cased words of 3+ characters minus the shared stop words, stemmed (failing, fails → fail)."""
    return frozenset(stem(w) for w in _WORD.findall(text.lower())
                     if len(w) >= 3 and w not in STOP_WORDS and not w.isdigit())


def drift_score(goal_text: str, recent_texts: Sequence[str]) -> float:
    """1 − the share of the goal's content words that appear in the recent texts (0 on track, 1 drifted).

    With no goal words or no recent text there is nothing to drift from: 0.0.
    """
    goal = content_words(goal_text)
    recent_words = content_words("\n".join(recent_texts))
    if not goal or not recent_words:
        return 0.0
    return round(1.0 - len(goal & recent_words) / len(goal), 6)


def recitation_interval(drift: float, context_tokens: int, settings: RecitationSettings) -> int:
    """How many calls apart recitations should be, by the rule documented on `RecitationSettings`."""
    interval = settings.base_every_n_calls
    large = context_tokens >= settings.large_context_tokens
    if drift >= settings.drift_threshold:
        interval = max(1, interval // 2)
    elif drift <= settings.on_track_threshold and not large:
        interval *= 2
    if large:
        interval -= 1
    return max(1, interval)


def should_recite(call_index: int, last_recited_call: int | None, drift: float, context_tokens: int,
                  settings: RecitationSettings) -> bool:
    """Recite on the first call (call 0, or never recited), then whenever the interval has elapsed."""
    if not settings.enabled:
        return False
    if call_index <= 0 or last_recited_call is None:
        return True
    return call_index - last_recited_call >= recitation_interval(drift, context_tokens, settings)


# --- the block ------------------------------------------------------------------------------------------

def _clip(text: str, max_chars: int = ITEM_MAX_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _longest(make: Callable[[int], str], n: int, max_tokens: int, counter: TokenCounting) -> str | None:
    """make(k) for the largest k ≤ n that fits `max_tokens` (binary search; counts grow with k), or None."""
    if counter.count_text(make(0)) > max_tokens:
        return None
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter.count_text(make(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return make(lo)


def _cut(text: str, k: int) -> str:
    return text if k >= len(text) else text[:k].rstrip() + "…"


def _render(goal: str, progress: str, next_step: str | None, open_items: Sequence[str],
            errors: Sequence[str], variation: StructuralVariation | None, call_index: int) -> str:
    if variation is None or not variation.enabled:
        step = "; ".join(x for x in (f"progress {progress}" if progress else "", f"next: {next_step}" if next_step else "") if x)
        lines = [f"STATUS — goal: {goal}"] + ([step] if step else [])
        if open_items:
            lines.append("open: " + "; ".join(open_items))
        if errors:
            lines.append("last errors: " + "; ".join(errors))
        return "\n".join(lines)
    style = variation.style(call_index)
    lines = [f"{style.status_label} {goal}"] + ([f"progress: {progress}"] if progress else [])
    if next_step:
        lines.append(f"next: {next_step}")
    for title, items in (("open", open_items), ("last errors", errors)):
        if items:
            lines += [f"{title}:", variation.format_list(items, call_index)]
    if style.separator:
        lines = [style.separator, *lines, style.separator]
    return "\n".join(lines)


def build_recitation(goal: str, steps_done: int, steps_total: int, next_step: str | None,
                     open_items: Sequence[str], last_errors: Sequence[str], *, max_tokens: int,
                     counter: TokenCounting, variation: StructuralVariation | None = None,
                     call_index: int = 0) -> str:
    """A status block within `max_tokens`.

    When it does not fit, open items go first (last ones first), then errors (oldest first), then the
    next step, and finally the goal is cut; the result never exceeds `max_tokens` ("" if nothing fits).
    """
    if max_tokens <= 0:
        return ""
    goal_c = _clip(goal)
    # no plan, no progress figure (a bare "0/0" would read as "nothing done of nothing")
    progress = "" if steps_total <= 0 else (
        variation.format_progress(steps_done, steps_total, call_index) if variation
        else format_progress(steps_done, steps_total))
    nxt = _clip(next_step) if next_step else None
    items = [_clip(i) for i in open_items if i and i.strip()]
    # whole, as printed, on one line each (no line of a quoted error can pass for a section); dropped whole if too long
    errors = [" ".join(ln.strip() for ln in e.splitlines() if ln.strip()) for e in last_errors if e and e.strip()]

    def render() -> str:
        return _render(goal_c, progress, nxt, items, errors, variation, call_index)

    text = render()
    while counter.count_text(text) > max_tokens and (items or errors or nxt):
        if items:
            items.pop()
        elif errors:
            errors.pop(0)
        else:
            nxt = None
        text = render()
    if counter.count_text(text) > max_tokens:
        logger.debug("recitation: goal cut to fit %d tokens", max_tokens)
        text = _longest(lambda k: _render(_cut(goal_c, k), progress, None, [], [], variation, call_index),
                        len(goal_c), max_tokens, counter)
        if text is None:  # not even the frame fits: a plain prefix of the goal-less block
            bare = _render("…", progress, None, [], [], variation, call_index)
            text = _longest(lambda k: _cut(bare, k), len(bare), max_tokens, counter) or ""
    return text
