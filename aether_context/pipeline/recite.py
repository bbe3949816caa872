"""Stage 6 — recite: the closing STATUS part, after everything that may be cached.

A due status (goal recitation, new failures under a frozen payload) rides on the last message, so
the cached prefix is untouched; when the window has no room for it this call, the next one recites.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..content import Message, ModelRequest, canonical_json
from ..failures import FailureLog, FailureRecord
from ..profile import BudgetProfile
from ..tokens import TokenCounting
from .collect import PackInputs, Turn
from .fit import Fit
from .render import request_tokens
from .status import failure_count, failures_section, recitation_message

__all__ = ["Recital", "recite", "failures_to_show"]


def failures_to_show(inputs: PackInputs, profile: BudgetProfile, verbatim: "tuple[Turn, ...]",
                     counter: TokenCounting) -> str:
    """FAILURES SO FAR, unless it would only repeat what the request already shows: every logged
    failure's message and causes are in a turn sent verbatim and the log has no warning (repeat, cluster,
    cascade) to add. Then the pack has nothing to say about failures and costs nothing for them."""
    section = failures_section(inputs, profile, int(inputs.failures.get("current_turn", 0)), counter)
    if not section or int(inputs.failures.get("evicted", 0)):
        return section
    records = [FailureRecord.from_json(r) for r in inputs.failures.get("records", ())]
    log = FailureLog(profile.failures.log, records, 0)
    if log.analyze(int(inputs.failures.get("current_turn", 0))).warnings:
        return section
    shown = [m.text + "".join(canonical_json(r.response) for r in m.responses) for t in verbatim for m in t.messages]
    visible = all(line and any(line in text for text in shown) for r in records for line in (r.message, *r.causes))
    return "" if visible else section


@dataclass(frozen=True)
class Recital:
    """The request as sent, the status it carries (if any), and the counters the next call reads."""

    request: ModelRequest
    status: Message | None
    call_index: int
    last_recited: int
    failures_shown: int  # failures logged when the payload this call sends was built


def recite(inputs: PackInputs, profile: BudgetProfile, request: ModelRequest, fit: Fit, *, reused: bool,
           limit: int, counter: TokenCounting) -> Recital:
    """Append the closing status when one is due and fits under `limit`."""
    prev = inputs.previous
    logged = failure_count(inputs)
    shown = prev.failures_shown if reused and prev is not None else logged
    status, call_index, last_recited = recitation_message(
        inputs, profile, fit.history + fit.loop, request_tokens(request, counter), counter,
        failures_stale=logged > shown, compacted=fit.zone.through > 0)
    if status is not None and request_tokens(_with_closing_status(request, status), counter) <= limit:
        request = _with_closing_status(request, status)
    elif status is not None:  # no room left for it this call: the next one recites
        status, last_recited = None, (prev.last_recited if prev is not None else -1)
    return Recital(request, status, call_index, last_recited, shown)


def _with_closing_status(request: ModelRequest, status: Message) -> ModelRequest:
    """The status rides on the last message as an extra text part, so the request still ends the
    way ADK ended it (a function response stays the last content) and the prefix stays intact."""
    last = request.messages[-1] if request.messages else None
    if last is None or last.role != "user":
        return replace(request, messages=request.messages + (status,))
    return replace(request, messages=request.messages[:-1] + (Message("user", last.parts + status.parts),))
