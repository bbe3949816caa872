"""The agent-loop sections of a pack: failures so far (in the payload) and the closing note: the
goal recitation block (the STATUS) and the failure warnings that arose after the payload was frozen.

Where the note goes is `recitation.placement` (`place_status`). By default it rides as an extra
text part on the last message when that message is user text or the payload this call rebuilt;
inside a tool loop (frozen payload) it rides after ADK's function response. Either way it stays
on that message, as sent, for the later calls of the invocation: notes are only ever appended,
so each request extends the previous one and the cached prefix stays warm.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..content import Message, ModelRequest, TextPart
from ..loop.failures import FailureLog, FailureRecord, render_failures
from ..profile import BudgetProfile
from ..loop.recitation import build_recitation, drift_score, should_recite
from ..tokens import MESSAGE_OVERHEAD, TokenCounting
from ..loop.variation import StructuralVariation
from .inputs import PackInputs, Turn
from .render import masked_here

__all__ = ["failure_count", "FailureView", "failure_view", "recitation_reserve", "recitation_message", "PlacedStatus",
           "place_status", "new_warnings", "pressure_share"]

RECITED_ERRORS = 3  # latest distinct error messages in the status block
STALE_FAILURES_ERRORS = 5  # ... while the frozen payload's failures section is out of date


def _records(inputs: PackInputs) -> list[FailureRecord]:
    return [FailureRecord.from_json(r) for r in inputs.failures.get("records", ())]


def _log(inputs: PackInputs, profile: BudgetProfile, records: "list[FailureRecord]") -> FailureLog | None:
    """The session's failure log of `records` (`_records`), analysed under the profile's thresholds."""
    if not profile.failures.enabled or not inputs.failures:
        return None
    return FailureLog(profile.failures.log, records, int(inputs.failures.get("evicted", 0)))


def failure_count(inputs: PackInputs) -> int:
    """Failures the session has logged so far (evicted ones included): grows by one per failure."""
    return len(inputs.failures.get("records", ())) + int(inputs.failures.get("evicted", 0))


@dataclass(frozen=True)
class FailureView:
    """The session's failure log, analysed once per call (a call may need it for two verbatim zones)."""

    section: str = ""  # FAILURES SO FAR ("" without failures)
    quiet: bool = True  # the log says nothing beyond its failures: no warning, no record evicted
    lines: tuple[str, ...] = ()  # every logged failure's message and causes
    warnings: "tuple[tuple[str, str], ...]" = ()  # (kind, message) of each live warning


def failure_view(inputs: PackInputs, profile: BudgetProfile, counter: TokenCounting) -> FailureView:
    """FAILURES SO FAR (warnings: repeats, clusters, cascades; then the latest distinct failures), from
    one analysis of the log, with what a verbatim turn must show for the section to add nothing."""
    records = _records(inputs)  # parsed once: the log and the lines a verbatim turn must show
    log = _log(inputs, profile, records)
    if log is None or not len(log):
        return FailureView()
    analysis = log.analyze(int(inputs.failures.get("current_turn", 0)))
    section = render_failures(analysis, log.records, max_tokens=profile.failures.max_tokens, counter=counter)
    return FailureView(section, not analysis.warnings and not int(inputs.failures.get("evicted", 0)),
                       tuple(line for r in records for line in (r.message, *r.causes)),
                       tuple((w.kind, w.message) for w in analysis.warnings))


def _warning_key(kind: str, message: str) -> str:
    """What must already be in the request for a warning to be old news: a repeat with its count (3x,
    then 4x, is news each time), a cascade by its root (it grows, but starts once)."""
    return message.split(" related failures", 1)[-1] if kind == "cascade" else message


def new_warnings(view: FailureView, sent: "tuple[str, ...]") -> tuple[str, ...]:
    """The repeat and cascade warnings of the call's failure analysis (`failure_view`) that no text in
    `sent` (the request's texts, the notes kept as sent) shows yet: what a frozen payload's FAILURES
    SO FAR cannot say."""
    return tuple("! " + " ".join(ln.strip() for ln in message.splitlines() if ln.strip()) for kind, message in view.warnings
                 if kind in ("repeat", "cascade") and not any(_warning_key(kind, message) in t for t in sent))


def pressure_share(tokens: int, window: int, profile: BudgetProfile) -> float | None:
    """The share of the window `tokens` fill once it reaches `pressure.warn_share`, else None."""
    warn = profile.pressure.warn_share
    return tokens / window if warn is not None and window > 0 and tokens >= warn * window else None


def _pressure_line(share: float | None) -> str:
    return f"CONTEXT PRESSURE: {share:.0%} of the window used: save notes or wrap up." if share is not None else ""


def _first_line(text: str) -> str:
    """The opening request's first non-empty line stands in for a goal (the block clips it)."""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def recitation_reserve(profile: BudgetProfile) -> int:
    """Tokens kept free for the recitation block, so reciting never pushes the pack over."""
    return profile.recitation.max_tokens + MESSAGE_OVERHEAD if profile.recitation.enabled else 0


def recitation_message(inputs: PackInputs, profile: BudgetProfile, recent: "tuple[Turn, ...]", context_tokens: int,
                       counter: TokenCounting, *, failures_stale: bool = False, compacted: bool = False,
                       warnings: "tuple[str, ...]" = (), window: int = 0,
                       frozen: bool = False) -> tuple[Message | None, int, int]:
    """The closing note, if one is due (`place_status` puts it); with the new call index and last recital.

    The note is the status block when a recital is due, and `warnings` (`new_warnings`: a repeat or
    cascade the frozen payload does not show) whenever there are any, warnings first, all within
    `recitation.max_tokens`. Without a goal the opening request stands in, but only once history was
    compacted (`compacted`): before that the model still reads it verbatim, and a status would only
    cost tokens. `failures_stale`: the payload this call sends is frozen and its FAILURES SO FAR
    predates the latest failures; a status then lists more recent errors.
    Once `context_tokens` reach `pressure.warn_share` of `window` and there is a goal, a due block ends with a
    warning, and the warning makes the block due when this call builds the payload anew. Under a `frozen`
    payload (a tool loop) it waits for a block due anyway: a block every call would pile up kept notes the room does not reserve,
    until they no longer fit and go (a cache break).
    """
    prev = inputs.previous
    call_index = prev.call_index + 1 if prev is not None else 0
    last = prev.last_recited if prev is not None and prev.last_recited >= 0 else None
    last_out = last if last is not None else -1
    settings = profile.recitation
    task = inputs.task
    goal = task.goal or task.step
    if not goal and compacted and inputs.request_index != len(inputs.request.messages) - 1:
        # No goal was set: the opening request stands in, once the user's message is no longer the last word.
        goal = _first_line(task.opening_request)
    pressure = _pressure_line(pressure_share(context_tokens, window, profile))
    if pressure and (not goal or frozen and not settings.enabled):
        # Only a task has notes to save or work to wrap up: a goal, or the opening request standing in once history
        # was compacted. A chat that fits would pay a block at every question past the share for nothing.
        pressure = ""
    if not (settings.enabled or pressure):
        return None, call_index, last_out
    note = _warnings_note(warnings, settings.max_tokens, counter)
    due = bool(pressure) and not frozen
    if goal and not due:
        recent_texts = [m.text or " ".join(c.name for c in m.calls) for t in recent[-4:] for m in t.messages]
        due = should_recite(call_index, last, drift_score(goal, recent_texts), context_tokens, settings)
    if not due:
        return (Message("user", (TextPart(note),)) if note else None), call_index, last_out
    log = _log(inputs, profile, _records(inputs))
    shown = STALE_FAILURES_ERRORS if failures_stale else RECITED_ERRORS
    last_errors = list(dict.fromkeys(r.message for r in reversed(log.records)))[:shown][::-1] if log is not None else []
    done = sum(1 for _, d in task.plan if d)
    next_step = next((s for s, d in task.plan if not d), task.step or None)
    open_items = [a for a in task.acceptance if a not in task.done]
    variation = StructuralVariation(seed=profile.variation.seed, enabled=profile.variation.enabled)
    room = settings.max_tokens - (counter.count_text(note) + 1 if note else 0)
    goal, next_step = masked_here(goal), next_step and masked_here(next_step)  # as the store will keep them
    open_items = [masked_here(a) for a in open_items]
    block = build_recitation(goal, done, len(task.plan), next_step, open_items, last_errors,
                             max_tokens=room, counter=counter, variation=variation, call_index=call_index)
    if not block:
        return (Message("user", (TextPart(note),)) if note else None), call_index, last_out
    text = f"{block}\n{note}" if note else block
    text = f"{text}\n{pressure}" if pressure else text
    return Message("user", (TextPart(text),)), call_index, call_index


def _warnings_note(warnings: "tuple[str, ...]", max_tokens: int, counter: TokenCounting) -> str:
    """The warnings under a header, as many as fit `max_tokens` in order ("" for none)."""
    lines = ["FAILURES SINCE THE PACK:"]
    for line in warnings:
        if counter.count_text("\n".join([*lines, line])) > max_tokens:
            break
        lines.append(line)
    return "\n".join(lines) if len(lines) > 1 else ""


@dataclass(frozen=True)
class PlacedStatus:
    """The request with the closing status placed, and what the next call must know about it."""

    request: ModelRequest  # what goes out
    stable: ModelRequest  # the request as the next call of the invocation will re-send it (digests, payload size)
    statuses: "tuple[Rider, ...]"  # the statuses kept as sent: (message index, its digest, text)
    recited: bool  # this call's new status went out
    host: int | None = None  # index of the message the new status rides on (None: its own message, or none)

    @property
    def kept(self) -> bool:
        """The new status stays on its message for the later calls of this payload."""
        return self.recited and self.stable is self.request


def _host(request: ModelRequest, placement: str, rebuilt_at: int | None) -> int | None:
    """Index of the message the new status rides on; None: a separate trailing message (or none, see below).

    'after_user_text': the status rides on the last message when it is user text, else on the
    invocation's request message when this call rebuilt it (the payload is new here, so the status
    costs no cache), else (a tool loop under a frozen payload) after the last function response.
    """
    last = request.messages[-1]
    if placement == "trailing_message" or last.role != "user":
        return None
    if placement != "after_user_text" or not last.responses:
        return len(request.messages) - 1
    host = request.messages[rebuilt_at] if rebuilt_at is not None and rebuilt_at < len(request.messages) else None
    return rebuilt_at if host is not None and host.role == "user" and not host.responses else len(request.messages) - 1


Rider = tuple[int, str, str]  # (index of the message, its digest as ADK sent it, the status text)


def _with_parts(request: ModelRequest, riders: "tuple[Rider, ...]") -> ModelRequest:
    """Each rider's text appended as a text part to the message at its index, if that is still the
    same message (a message that repeats elsewhere in the request does not get it)."""
    if not riders:
        return request
    messages = list(request.messages)
    for index, digest, text in riders:
        if index < len(messages) and request.messages[index].digest == digest:
            messages[index] = Message(messages[index].role, messages[index].parts + (TextPart(text),))
    return replace(request, messages=tuple(messages))


def place_status(request: ModelRequest, status: Message | None, profile: BudgetProfile, *,
                 carried: "tuple[Rider, ...]", rebuilt_at: int | None,
                 fits: Callable[[ModelRequest], bool]) -> PlacedStatus:
    """Put the closing status where `recitation.placement` says; re-attach the statuses kept from
    earlier calls of this payload (`carried`), or drop them all if they no longer fit.

    `rebuilt_at`: the index of the invocation's request message (payload) when this call built it anew.
    """
    placement = profile.recitation.placement
    sticky = placement in ("after_user_text", "sticky_part")
    kept = tuple(r for r in carried if sticky and r[0] < len(request.messages)
                 and request.messages[r[0]].digest == r[1])
    if kept and not fits(_with_parts(request, kept)):
        kept = ()  # the window comes first: the kept statuses go (a cache break), the pack still fits
    base = _with_parts(request, kept)
    host = _host(request, placement, rebuilt_at) if status is not None and request.messages else -1
    if host == -1:
        return PlacedStatus(base, base, kept, False)
    if host is None:
        placed, riders = replace(base, messages=base.messages + (status,)), kept
    else:
        riders = kept + ((host, request.messages[host].digest, status.text),)
        placed = _with_parts(request, riders)
    if not fits(placed):  # no room left for it this call: the next one recites
        return PlacedStatus(base, base, kept, False)
    if sticky and host is not None:
        return PlacedStatus(placed, placed, riders, True, host)
    return PlacedStatus(placed, base, kept, True, host)
