"""Stage 6 — recite: the closing STATUS part, after everything that may be cached.

A due status (goal recitation, new failures under a frozen payload) rides on the last message, so
the cached prefix is untouched; when the window has no room for it this call, the next one recites.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..content import Message, ModelRequest
from ..profile import BudgetProfile
from ..tokens import TokenCounting
from .collect import PackInputs
from .fit import Fit
from .render import request_tokens
from .status import failure_count, recitation_message

__all__ = ["Recital", "recite"]


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
