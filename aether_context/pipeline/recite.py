"""recite: the closing note, where it costs the prompt cache nothing.

A due note (goal recitation; a repeat or cascade of failures the frozen payload does not show) goes
where `recitation.placement` says (`status.place_status`): by default on user text or a rebuilt
payload, inside a tool loop after ADK's last function response, and kept as sent while the payload
is frozen (append-only: earlier notes are never rewritten). When the window has no room for it this
call, a later call recites.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..content import Message, ModelRequest, canonical_json
from ..profile import BudgetProfile
from ..tokens import TokenCounting
from .inputs import PackInputs, Turn
from .fit import Fit
from .render import request_tokens
from .status import FailureView, Rider, failure_count, new_warnings, place_status, recitation_message

__all__ = ["Recital", "recite", "failures_to_show"]


def failures_to_show(view: FailureView, verbatim: "tuple[Turn, ...]") -> str:
    """FAILURES SO FAR, unless it would only repeat what the request already shows: every logged
    failure's message and causes are in a turn sent verbatim and the log has no warning (repeat, cluster,
    cascade) to add. Then the pack has nothing to say about failures and costs nothing for them.
    `view` is the call's one analysis of the log (`status.failure_view`), read here for each zone."""
    if not view.section or not view.quiet:
        return view.section
    shown = [m.text + "".join(canonical_json(r.response) for r in m.responses) for t in verbatim for m in t.messages]
    visible = all(line and any(line in text for text in shown) for line in view.lines)
    return "" if visible else view.section


@dataclass(frozen=True)
class Recital:
    """The request as sent, the status it carries (if any), and what the next call reads of it."""

    request: ModelRequest
    stable: ModelRequest  # the request as the next call of the payload re-sends it (digests, payload size)
    status: Message | None
    statuses: "tuple[Rider, ...]"  # statuses kept as sent: (message index, its digest, text)
    on_payload: bool  # the new status rides, kept, on the payload (counted in the payload's tokens)
    call_index: int
    last_recited: int
    failures_shown: int  # failures logged when the payload this call sends was built


def recite(inputs: PackInputs, profile: BudgetProfile, request: ModelRequest, fit: Fit, *, reused: bool,
           rebuilt_at: int | None, limit: int, counter: TokenCounting,
           failures: FailureView = FailureView(), window: int = 0) -> Recital:
    """Place the closing note when one is due and fits under `limit`; re-attach the notes the frozen
    payload's earlier calls sent. `rebuilt_at`: the payload's index when this call built it anew;
    `failures`: the call's one analysis of the failure log (`status.failure_view`); `window`: for the
    pressure warning."""
    prev = inputs.previous
    logged = failure_count(inputs)
    shown = prev.failures_shown if reused and prev is not None else logged
    # notes kept as sent: all of them while the payload is frozen; after it, those on a message of an earlier
    # loop (a function response), which ADK's history still holds unchanged (`place_status` checks the digest)
    carried = () if prev is None else prev.statuses if reused else tuple(
        r for r in prev.statuses if r[0] < len(request.messages) and request.messages[r[0]].responses)
    warnings = new_warnings(failures, tuple(m.text for m in request.messages) + tuple(r[2] for r in carried))
    status, call_index, last_recited = recitation_message(
        inputs, profile, fit.history + fit.loop, request_tokens(request, counter), counter,
        failures_stale=logged > shown, compacted=fit.zone.through > 0, warnings=warnings, window=window,
        frozen=reused)
    placed = place_status(request, status, profile, carried=carried,
                          rebuilt_at=rebuilt_at, fits=lambda r: request_tokens(r, counter) <= limit)
    if status is not None and not placed.recited:  # not here, or no room left: a later call recites
        status, last_recited = None, (prev.last_recited if prev is not None else -1)
    elif status is not None and placed.kept:  # kept as sent, it shows the failures it lists from now on
        shown = logged
    on_payload = placed.kept and rebuilt_at is not None and placed.host == rebuilt_at
    return Recital(placed.request, placed.stable, status, placed.statuses, on_payload, call_index, last_recited,
                   shown)
