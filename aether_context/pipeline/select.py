"""Stage 3 — select: turn the inputs into ranked candidates per layer, with demands and signals.

Nothing is cut here; this stage decides *what could go in* and in which priority order, so the
compress stage only has to walk those orders when the budget is short.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from ..content import Message, ToolSpec
from ..tokens import TokenCounting
from .allocate import Signals
from .collect import PackInputs, Turn, group_turns

__all__ = ["Line", "Conversation", "Candidates", "select", "query_text", "words"]

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset("a an and are as at be by for from has have i in is it its of on or that the this to was were will with you your we".split())


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


@dataclass(frozen=True)
class Line:
    """One candidate line of a pack section (an evidence item, a memory hit)."""

    id: str
    text: str
    tokens: int
    source: str
    uri: str = ""
    score: float = 0.0
    timestamp: float | None = None
    compressed: bool = False


@dataclass(frozen=True)
class Conversation:
    """History split around the user request: `history` before it, `loop` (this invocation's tool turns) after."""

    history: tuple[Turn, ...]
    loop: tuple[Turn, ...]
    request: Message | None
    instructions: tuple[Message, ...]  # ADK's dynamic instruction (static_instruction mode), never cut


@dataclass(frozen=True)
class Candidates:
    tools: tuple[ToolSpec, ...]
    evidence: tuple[Line, ...]
    memory: tuple[Line, ...]
    conversation: Conversation
    signals: Signals
    flags: tuple[str, ...]


def query_text(inputs: PackInputs) -> str:
    """The retrieval query: the user request, the step and the acceptance checklist."""
    req = inputs.request.messages[inputs.request_index].text if inputs.request_index is not None else ""
    return "\n".join(x for x in (req, inputs.task.goal, inputs.task.step, *inputs.task.acceptance) if x)


def _overlap(query: set[str], text: str) -> float:
    if not query:
        return 0.0
    return len(query & words(text)) / math.sqrt(len(query))


def _date(ts: float | None) -> str:
    if ts is None:
        return "undated"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def _freshness(ts: float | None, now: float, half_life_days: float = 30.0) -> float:
    if ts is None or now <= 0:
        return 0.0
    age_days = max(0.0, now - ts) / 86400
    return 0.5 ** (age_days / half_life_days)


def _block(text: str, limit: int) -> str:
    """Multi-line text as a bullet's body: lines kept (code stays readable), continuation indented."""
    text = text.strip()
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return "\n  ".join(text.splitlines())


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _split_conversation(inputs: PackInputs) -> Conversation:
    msgs = inputs.request.messages
    skip = set(inputs.instruction_indices)
    r = inputs.request_index
    before = [i for i in range(len(msgs)) if i not in skip and (r is None or i < r)]
    after = [i for i in range(len(msgs)) if i not in skip and r is not None and i > r]

    def turns(idx: list[int]) -> tuple[Turn, ...]:
        # indices are contiguous except for skipped instruction messages; group runs separately
        out: list[Turn] = []
        run: list[int] = []
        for i in idx + [None]:  # type: ignore[list-item]
            if i is not None and (not run or i == run[-1] + 1):
                run.append(i)
                continue
            if run:
                out.extend(group_turns([msgs[k] for k in run], offset=run[0]))
            run = [i] if i is not None else []
        return tuple(out)

    return Conversation(
        history=turns(before), loop=turns(after),
        request=msgs[r] if r is not None else None,
        instructions=tuple(msgs[i] for i in sorted(skip)),
    )


def _ranked_lines(items: list[tuple[str, str, str, str, float | None, int]], query: set[str], now: float,
                  top_k: int, counter: TokenCounting) -> tuple[Line, ...]:
    """Rank by query overlap, then freshness, then source order; keep top_k."""
    scored = []
    for id_, text, source, uri, ts, rank in items:
        score = _overlap(query, text) + 0.1 * _freshness(ts, now)
        scored.append((-score, rank, id_, text, source, uri, ts))
    scored.sort(key=lambda x: (x[0], x[1], x[2]))
    return tuple(
        Line(id=i, text=t, tokens=counter.count_text(t), source=s, uri=u, score=round(-neg, 6), timestamp=ts)
        for neg, _, i, t, s, u, ts in scored[:top_k]
    )


def select(inputs: PackInputs, *, evidence_top_k: int, memory_top_k: int, counter: TokenCounting) -> Candidates:
    """Rank the candidates of every layer and compute the allocator's signals."""
    task = inputs.task
    flags: list[str] = []
    if not task.goal:
        flags.append("task_missing_goal")
    if not task.acceptance:
        flags.append("task_missing_acceptance")
    if inputs.request_index is None:
        flags.append("user_request_not_found")
    flags.extend(inputs.extra.get("edge_flags", ()))  # e.g. a failed LLM summary after the previous call

    tools = tuple(sorted(inputs.request.tools, key=lambda t: t.name))
    if task.tools is not None:
        wanted = set(task.tools)
        known = {t.name for t in tools}
        flags.extend(f"unknown_step_tool:{n}" for n in sorted(wanted - known))
        tools = tuple(t for t in tools if t.name in wanted)

    query = words(query_text(inputs))
    evidence = _ranked_lines(
        [(e.id, f"- [{e.id}] {_block(e.summary, 6000)}" + (f" ({e.uri})" if e.uri else ""), e.source, e.uri,
          e.timestamp, i) for i, e in enumerate(inputs.evidence)],
        query, inputs.now, evidence_top_k, counter)
    memory = _ranked_lines(
        [(m.id, f"- ({_date(m.timestamp)}) {_clip(m.text, 2000)}", m.source, "", m.timestamp, m.rank)
         for m in inputs.memory],
        query, inputs.now, memory_top_k, counter)

    conv = _split_conversation(inputs)
    recent_text = " ".join(m.text for t in (conv.history[-4:] + conv.loop[-4:]) for m in t.messages)
    hits = [ln for ln in memory if ln.score >= 0.5]
    acceptance = max(1, len(task.acceptance))
    signals = Signals(
        checklist_evidence_ratio=min(1.0, len(task.evidence_needed) / acceptance) if task.acceptance else 0.0,
        expected_tool_calls=float(task.expected_tool_calls),
        risk_weight=float(task.risk),
        retrieval_hit_rate=len(hits) / len(memory) if memory else 0.0,
        similarity=min(1.0, sum(ln.score for ln in memory[:3]) / (3 * max(1.0, math.sqrt(len(query)) or 1.0))) if memory else 0.0,
        freshness=sum(_freshness(ln.timestamp, inputs.now) for ln in memory) / len(memory) if memory else 0.0,
        unresolved_questions=float(recent_text.count("?")),
        dialogue_depth=float(len(conv.history) + len(conv.loop)),
    )
    return Candidates(tools=tools, evidence=evidence, memory=memory, conversation=conv, signals=signals, flags=tuple(flags))
