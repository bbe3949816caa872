"""Sessions of 1,000 to 10,000 events, seeded straight into ADK's session service, then run live.

No recorded run is that long, and replaying 5,000 model calls through a Runner costs ADK alone
about half a second per call at 10,000 events. So a long session is built in two parts:

1. The history: events appended to a real `ClockedSessionService` session (what ADK itself would
   have stored), from recorded turns — a *tool loop* (one user request, then the tool turns of
   consecutive mini-swe-agent runs) or a *chat* (the user turns of consecutive tau-bench airline
   episodes, each with its model and tool turns).
2. The continuation: a few more recorded turns run live through a real `Runner` on that session,
   with whatever plugins the caller passes. The plugin joins there, cold, as it would after a
   process restart: its first call rebuilds from the history (a compaction), the next ones are
   incremental.

Usage::

    history, more = tool_loop(load_mini_swe(data), events=5_000, live_calls=40)
    service, session_id = await seed(history, ident="loop-5000")
    result = await replay(more, plugins=[plugin], session_service=service, session_id=session_id)
"""

from __future__ import annotations

from typing import Any, Sequence

from google.adk.events.event import Event
from google.genai import types

from replay_adk import AGENT_NAME, ClockedSessionService
from trajectories import CLOSING_TEXT, Invocation, ModelTurn, Trajectory

__all__ = ["tool_loop", "chat", "seed", "APP_NAME", "USER_ID"]

APP_NAME, USER_ID = "replay", "bench"


def _model_event(turn: ModelTurn, inv: str, step: int) -> list[Event]:
    """A model event (text and calls) and, when it called tools, the tool-response event after it."""
    ids = [f"adk-{inv}-{step}-{k}" for k in range(len(turn.calls))]
    parts = ([types.Part(text=turn.text)] if turn.text else []) + [
        types.Part(function_call=types.FunctionCall(name=c.name, args=dict(c.args), id=i)) for c, i in zip(turn.calls, ids)]
    out = [Event(author=AGENT_NAME, invocation_id=inv, content=types.Content(role="model", parts=parts))]
    if turn.calls:
        out.append(Event(author=AGENT_NAME, invocation_id=inv, content=types.Content(role="user", parts=[
            types.Part(function_response=types.FunctionResponse(name=c.name, response=dict(c.output), id=i))
            for c, i in zip(turn.calls, ids)])))
    return out


def _user_event(text: str, inv: str) -> Event:
    return Event(author="user", invocation_id=inv, content=types.Content(role="user", parts=[types.Part(text=text)]))


def _cycle(items: Sequence[Any]):  # noqa: ANN202 — an endless generator over a non-empty sequence
    while True:
        yield from items


def tool_loop(runs: Sequence[Trajectory], *, events: int, live_calls: int) -> tuple[list[Event], Trajectory]:
    """One invocation's worth of history: a user request, then tool turns of consecutive runs (cycled),
    until `events`; the continuation is one more user message and `live_calls` - 1 tool turns."""
    first = runs[0]
    turns = (t for r in _cycle(runs) for t in r.turns if t.calls)
    history = [_user_event(first.invocations[0].user, "inv-0")]
    step = 0
    while len(history) < events:
        history += _model_event(next(turns), "inv-0", step)
        step += 1
    more = tuple(next(turns) for _ in range(live_calls - 1)) + (ModelTurn(CLOSING_TEXT, synthetic=True),)
    cont = Invocation("Continue with the task; check the remaining failures.", more)
    return history, Trajectory(id=f"loop-{events}", source=first.source, system=first.system, tools=first.tools,
                               invocations=(cont,), meta={"history_events": len(history)})


def chat(episodes: Sequence[Trajectory], *, events: int, live_calls: int) -> tuple[list[Event], Trajectory]:
    """Many short user turns: the invocations of consecutive tau-bench episodes (cycled) as history,
    then further invocations, live, until about `live_calls` model calls."""
    invocations = (inv for e in _cycle(episodes) for inv in e.invocations)
    history: list[Event] = []
    n = 0
    while len(history) < events:
        inv = next(invocations)
        history.append(_user_event(inv.user, f"inv-{n}"))
        for step, turn in enumerate(inv.turns):
            history += _model_event(turn, f"inv-{n}", step)
        n += 1
    live: list[Invocation] = []
    while sum(len(i.turns) for i in live) < live_calls:
        live.append(next(invocations))
    first = episodes[0]
    return history, Trajectory(id=f"chat-{events}", source=first.source, system=first.system, tools=first.tools,
                               invocations=tuple(live), meta={"history_events": len(history)})


async def seed(history: Sequence[Event], *, ident: str) -> tuple[ClockedSessionService, str]:
    """A session service holding one session with `history` appended (stamped by its fixed clock)."""
    service = ClockedSessionService(ident)
    session = await service.create_session(app_name=APP_NAME, user_id=USER_ID)
    for event in history:
        await service.append_event(session, event)
    return service, session.id
