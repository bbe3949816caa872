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

__all__ = ["tool_loop", "chat", "dialogue_episodes", "seed", "APP_NAME", "USER_ID"]

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


def dialogue_episodes(conversations: Sequence[Any]) -> list[Trajectory]:
    """LoCoMo conversations (`context_eval.locomo.Conversation`) as tool-free episodes for `chat`: each line of
    the first speaker a user turn, the other speaker's lines after it the model's reply. A held-out shape: no
    mechanism was tuned on a chat without tools."""
    out = []
    for conv in conversations:
        lines = [t for _, turns in conv.sessions for t in turns]
        invocations: list[Invocation] = []
        for k, turn in enumerate(lines):
            if turn.speaker != conv.speaker_a:
                continue
            replies = []
            for later in lines[k + 1:]:
                if later.speaker == conv.speaker_a:
                    break
                replies.append(later.message())
            invocations.append(Invocation(turn.message(), (ModelTurn("\n".join(replies) or "I see."),)))
        out.append(Trajectory(id=f"locomo-{conv.id}", source="locomo", tools=(), invocations=tuple(invocations),
                              system=f"You are {conv.speaker_b}, talking with your friend {conv.speaker_a}."))
    return out


async def seed(history: Sequence[Event], *, ident: str) -> tuple[ClockedSessionService, str]:
    """A session service holding one session with `history` appended (stamped by its fixed clock)."""
    service = ClockedSessionService(ident)
    session = await service.create_session(app_name=APP_NAME, user_id=USER_ID)
    for event in history:
        await service.append_event(session, event)
    return service, session.id


# --------------------------------------------------------------------------- the benchmark (pack_overhead --long)
import dataclasses  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from aether_context import ContextPacker, ContextPackPlugin, PackStore  # noqa: E402
from measure import PackCpuClock  # noqa: E402
from report_sections import pct  # noqa: E402

SIZES = (1_000, 5_000, 10_000)


def rss_mb() -> float:
    """This process's resident memory now (VmRSS), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


class MeteredPacker(ContextPacker):
    """The production packer, with the CPU time of each `pack` (what before_model awaits: loop and pack thread)
    and the store bytes each call wrote (read after the background writer finished, untimed)."""

    def __init__(self, **settings: Any):
        super().__init__(**settings)
        self.cpu: list[float] = []
        self.bytes: list[int] = []
        self._written = 0
        self._clock = PackCpuClock()

    async def pack(self, callback_context, llm_request):  # type: ignore[no-untyped-def]
        c0 = self._clock.now()
        record = await super().pack(callback_context, llm_request)
        self.cpu.append(self._clock.now() - c0)
        return record

    def settle(self) -> None:
        """Wait for the writer (as a real model call's latency lets it finish) and note what this call wrote."""
        self.store.flush()
        now = int(self.store.stats().get("bytes", 0))
        self.bytes.append(now - self._written)
        self._written = now


@dataclasses.dataclass
class LongRun:
    kind: str
    events: int
    adk_cpu: list[float]  # ADK's own request build per call, no plugin
    compaction_cpu: list[float]  # ADK's request build per call with EventsCompaction on
    join_cpu: float  # the plugin's first (cold) call: everything before it is new to it
    pack_cpu: list[float]  # the plugin's later calls
    bytes_per_call: list[int]
    store_bytes: int  # the whole store of this session after the run
    events_bytes: int  # the session's own events (ADK's JSON of each), at the end of the run
    rss_mb: float
    cache: dict


def _events_bytes(session: Any) -> int:
    return sum(len(e.model_dump_json(exclude_none=True).encode()) for e in session.events)


async def run_long(kind: str, events: int, source: Sequence[Trajectory], *, live_calls: int, window: int,
                   profile: str, compaction_options: dict, tmp: Path, make: Any = None) -> LongRun:
    """One session size and kind: no plugin, ADK EventsCompaction and the plugin, each on a fresh copy.
    `make` builds the session from `source` (`tool_loop` or `chat`; by default as `kind` starts)."""
    from replay_adk import replay  # the Runner-based replay library

    make = make or (tool_loop if kind.startswith("tool loop") else chat)
    history, more = make(source, events=events, live_calls=live_calls)
    service, sid = await seed(history, ident=f"{kind}-{events}")
    base = await replay(more, session_service=service, session_id=sid, keep_requests="none")
    service, sid = await seed(history, ident=f"{kind}-{events}")
    compacted = await replay(more, session_service=service, session_id=sid, keep_requests="none",
                             app_options=compaction_options)
    service, sid = await seed(history, ident=f"{kind}-{events}")
    root = tmp / (re.sub(r"\W+", "_", kind) + f"-{events}")
    packer = MeteredPacker(profile=profile, store=PackStore(str(root), background=True), window_tokens=window)
    packer.retriever.wait_ready()  # a process that has run a while has its embedding model loaded

    def during_model(call: Any, llm_request: Any) -> None:  # untimed: inside the model call
        packer.settle()

    await replay(more, plugins=[ContextPackPlugin(packer=packer)], session_service=service, session_id=sid,
                          keep_requests="none", on_request=during_model)
    packer.store.flush()
    rss = rss_mb()
    last = await service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    return LongRun(kind, events, [c.adk_build_cpu_s for c in base.calls if c.adk_build_cpu_s is not None],
                   [c.adk_build_cpu_s for c in compacted.calls if c.adk_build_cpu_s is not None],
                   packer.cpu[0], packer.cpu[1:], packer.bytes[1:],
                   sum(f.stat().st_size for f in root.rglob("*") if f.is_file()), _events_bytes(last), rss,
                   packer.cache.stats())


def fmt_ms(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1000:.1f}"


def long_report(runs: Sequence[LongRun], *, live_calls: int, window: int, profile: str) -> tuple[str, list[str]]:
    """The table of the long sessions and the target checks."""
    rows = ["| session | events | ADK request build, no plugin: CPU p50 ms | with ADK EventsCompaction: CPU p50 ms "
            "| plugin joins (first call, cold): CPU ms | pack CPU p50 / p95 ms (n) "
            "| store bytes per call p50 / max | whole store ÷ the session's events | RSS MB |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    checks: list[str] = []
    for r in runs:
        p50, p95 = pct(r.pack_cpu, 50), pct(r.pack_cpu, 95)
        rows.append(f"| {r.kind} | {r.events:,} | {fmt_ms(pct(r.adk_cpu, 50))} | {fmt_ms(pct(r.compaction_cpu, 50))} "
                    f"| {fmt_ms(r.join_cpu)} | {fmt_ms(p50)} / {fmt_ms(p95)} ({len(r.pack_cpu)}) "
                    f"| {pct(r.bytes_per_call, 50) / 1024:.1f} KB / {max(r.bytes_per_call, default=0) / 1024:.1f} KB "
                    f"| {r.store_bytes / max(1, r.events_bytes):.2f}× ({r.store_bytes / 2**20:.1f} / "
                    f"{r.events_bytes / 2**20:.1f} MB) | {r.rss_mb:.0f} |")
    for kind in dict.fromkeys(r.kind for r in runs):
        mine = {r.events: r for r in runs if r.kind == kind}
        if 1_000 in mine and 10_000 in mine:
            a, b = pct(mine[1_000].pack_cpu, 50), pct(mine[10_000].pack_cpu, 50)
            checks.append(f"- {'PASS' if b <= 1.5 * a else 'FAIL'} {kind}: pack CPU p50 at 10,000 events ÷ at 1,000 = "
                          f"{b / a:.2f}× (target ≤ 1.5×; {fmt_ms(b)} vs {fmt_ms(a)} ms)")
            checks.append(f"- {'PASS' if b <= 0.015 else 'FAIL'} {kind}: pack CPU p50 at 10,000 events = {fmt_ms(b)} ms "
                          "(target ≤ 15 ms)")
        if 10_000 in mine:
            r = mine[10_000]
            p95 = pct(r.pack_cpu, 95)
            checks.append(f"- {'PASS' if p95 <= 0.05 else 'FAIL'} {kind}: pack CPU p95 at 10,000 events = "
                          f"{fmt_ms(p95)} ms (target ≤ 50 ms, issue 37)")
            over = pct(r.bytes_per_call, 50) / 1024
            checks.append(f"- {'PASS' if over <= 16 else 'FAIL'} {kind} at 10,000 events: store bytes per call p50 "
                          f"{over:.1f} KB, the call's new content included (target ≤ new content + 16 KB)")
    return "\n".join(rows), checks
