"""The agent-loop sections of a pack: failures so far (in the payload) and the goal recitation
block (the very last message, never in the cached prefix).
"""

from __future__ import annotations

from ..content import Message, TextPart
from ..loop.failures import FailureLog, FailureRecord, render_failures
from ..profile import BudgetProfile
from ..loop.recitation import build_recitation, drift_score, should_recite
from ..tokens import MESSAGE_OVERHEAD, TokenCounting
from ..loop.variation import StructuralVariation
from .collect import PackInputs, Turn

__all__ = ["failure_count", "failures_section", "recitation_reserve", "recitation_message"]

RECITED_ERRORS = 3  # latest distinct error messages in the status block
STALE_FAILURES_ERRORS = 5  # ... while the frozen payload's failures section is out of date


def _log(inputs: PackInputs, profile: BudgetProfile) -> FailureLog | None:
    """The session's failure log, analysed under the profile's thresholds."""
    if not profile.failures.enabled or not inputs.failures:
        return None
    records = [FailureRecord.from_json(r) for r in inputs.failures.get("records", ())]
    return FailureLog(profile.failures.log, records, int(inputs.failures.get("evicted", 0)))


def failure_count(inputs: PackInputs) -> int:
    """Failures the session has logged so far (evicted ones included): grows by one per failure."""
    return len(inputs.failures.get("records", ())) + int(inputs.failures.get("evicted", 0))


def failures_section(inputs: PackInputs, profile: BudgetProfile, current_turn: int, counter: TokenCounting) -> str:
    """FAILURES SO FAR: warnings (repeats, clusters, cascades) then the latest distinct failures."""
    log = _log(inputs, profile)
    if log is None or not len(log):
        return ""
    return render_failures(log.analyze(current_turn), log.records, max_tokens=profile.failures.max_tokens, counter=counter)


def _first_line(text: str) -> str:
    """The opening request's first non-empty line stands in for a goal (the block clips it)."""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def recitation_reserve(profile: BudgetProfile) -> int:
    """Tokens kept free for the recitation block, so reciting never pushes the pack over."""
    return profile.recitation.max_tokens + MESSAGE_OVERHEAD if profile.recitation.enabled else 0


def recitation_message(inputs: PackInputs, profile: BudgetProfile, recent: "tuple[Turn, ...]", context_tokens: int,
                       counter: TokenCounting, *, failures_stale: bool = False,
                       compacted: bool = False) -> tuple[Message | None, int, int]:
    """The status block to append as the last message, if one is due; with the new call index and last recital.

    Without a goal the opening request stands in, but only once history was compacted (`compacted`):
    before that the model still reads it verbatim, and a status would only cost tokens.
    `failures_stale`: the payload this call sends is frozen (cache stability) and its FAILURES SO FAR
    section predates the latest failures. The block is then due on every call and lists more recent
    errors, so a new failure reaches the model at once without rewriting the cached prefix.
    """
    prev = inputs.previous
    call_index = prev.call_index + 1 if prev is not None else 0
    last = prev.last_recited if prev is not None and prev.last_recited >= 0 else None
    settings = profile.recitation
    task = inputs.task
    goal = task.goal or task.step
    if not goal and compacted and inputs.request_index != len(inputs.request.messages) - 1:
        # No goal was set: the opening request stands in, once the user's message is no longer the last word.
        goal = _first_line(task.opening_request)
    if failures_stale and not goal:
        goal = "not set"  # the new failures still need their block
    if not settings.enabled or not goal:
        return None, call_index, last if last is not None else -1
    recent_texts = [m.text or " ".join(c.name for c in m.calls) for t in recent[-4:] for m in t.messages]
    drift = drift_score(goal, recent_texts)
    if not failures_stale and not should_recite(call_index, last, drift, context_tokens, settings):
        return None, call_index, last if last is not None else -1
    log = _log(inputs, profile)
    shown = STALE_FAILURES_ERRORS if failures_stale else RECITED_ERRORS
    last_errors = list(dict.fromkeys(r.message for r in reversed(log.records)))[:shown][::-1] if log is not None else []
    done = sum(1 for _, d in task.plan if d)
    next_step = next((s for s, d in task.plan if not d), task.step or None)
    open_items = [a for a in task.acceptance if a not in task.done]
    variation = StructuralVariation(seed=profile.variation.seed, enabled=profile.variation.enabled)
    block = build_recitation(goal, done, len(task.plan), next_step, open_items, last_errors,
                             max_tokens=settings.max_tokens, counter=counter, variation=variation, call_index=call_index)
    return Message("user", (TextPart(block),)), call_index, call_index
