"""Stage 3 — select: turn the inputs into ranked candidates per layer, with demands and signals.

Nothing is cut here; this stage decides *what could go in* and in which priority order, so the
compress stage only has to walk those orders when the budget is short.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable
from datetime import datetime, timezone

from ..content import Message, ToolSpec, canonical_json
from ..profile import BudgetProfile
from ..retrieval import Document, RetrievalResult
from .retrieve import Retriever
from ..tokens import TokenCounting
from .allocate import Signals
from .collect import PackInputs, Turn
from .incremental import grouped_turns

__all__ = ["Line", "Conversation", "Candidates", "select", "query_text", "words"]

MAX_HISTORY_POOL = 200  # older turns offered to Memory (newest first past this)
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
    scores: dict[str, float] = field(default_factory=dict)  # bm25, dense, fused, freshness, mmr


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
    unselected: dict[str, tuple[str, ...]] = field(default_factory=dict)  # layer -> candidate ids retrieval left out


def query_text(inputs: PackInputs) -> str:
    """The retrieval query: the user request, the step and the acceptance checklist."""
    req = inputs.request.messages[inputs.request_index].text if inputs.request_index is not None else ""
    return "\n".join(x for x in (req, inputs.task.goal, inputs.task.step, *inputs.task.acceptance) if x)


def _date(ts: float | None) -> str:
    if ts is None:
        return "undated"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


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
    skip = sorted(set(inputs.instruction_indices))
    r = inputs.request_index

    def turns(lo: int, hi: int) -> tuple[Turn, ...]:
        # messages lo..hi-1 are contiguous except for skipped instruction messages; group runs separately
        out: tuple[Turn, ...] = ()
        for cut in [k for k in skip if lo <= k < hi] + [hi]:
            if cut > lo:
                out += grouped_turns(msgs[lo:cut], offset=lo)
            lo = cut + 1
        return out

    n = len(msgs)
    return Conversation(
        history=turns(0, n if r is None else r), loop=turns(r + 1, n) if r is not None else (),
        request=msgs[r] if r is not None else None,
        instructions=tuple(msgs[i] for i in skip),
    )


def _turn_text(turn: Turn) -> str:
    """A history turn as a memory candidate: its text, calls and results, in brief."""
    bits = []
    for m in turn.messages:
        if m.text:
            bits.append(f"{m.role}: {m.text}")
        for c in m.calls:
            bits.append(f"called {c.name}({_clip(canonical_json(c.args), 200)})")
        for r in m.responses:
            bits.append(f"{r.name} returned {_clip(canonical_json(r.response), 600)}")
    return _clip(" | ".join(bits), 1500)


def _lines(result: RetrievalResult, render: Callable[[Document], str], counter: TokenCounting) -> tuple[Line, ...]:
    """Ranked lines with every score that placed them (recorded in the manifest)."""
    out = []
    for item in result.items:
        doc = item.document
        text = render(doc)
        sources = tuple(item.sources) if item.sources else (doc.source,)
        out.append(Line(id=doc.id, text=text, tokens=counter.count_text(text), source="+".join(sources),
                        uri=str(doc.metadata.get("uri", "")), score=round(item.score, 6), timestamp=doc.timestamp,
                        scores={"bm25": round(item.bm25, 4), "dense": round(item.dense, 4), "fused": round(item.fused, 4),
                                "freshness": round(item.freshness, 4), "mmr": round(item.mmr, 4)}))
    return tuple(out)


def _render_evidence(doc: Document) -> str:
    uri = doc.metadata.get("uri", "")
    return f"- [{doc.id}] {_block(doc.text, 6000)}" + (f" ({uri})" if uri else "")


def _render_memory(doc: Document) -> str:
    if doc.source == "history":
        return f"- (earlier, {doc.id}) {doc.text}"
    return f"- ({_date(doc.timestamp)}) {_clip(doc.text, 2000)}"


def select(inputs: PackInputs, profile: BudgetProfile, *, counter: TokenCounting, retriever: Retriever) -> Candidates:
    """Rank the candidates of every layer (hybrid retrieval) and compute the allocator's signals."""
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

    conv = _split_conversation(inputs)
    tail = profile.conversation.tail_turns
    older = conv.history[:-tail] if len(conv.history) > tail else ()
    # What the model sees verbatim is not repeated in Memory or Evidence.
    query = query_text(inputs)
    namespace = f"{inputs.app_name}/{inputs.user_id}/{inputs.session_id}/{inputs.agent}"
    now = inputs.now or None
    ev_docs = [Document(e.id, e.summary, e.source, e.timestamp, {"uri": e.uri} if e.uri else {}) for e in inputs.evidence]
    mem_docs = [Document(m.id, m.text, m.source, m.timestamp) for m in inputs.memory]
    mem_docs += [Document(f"turn-{t.start}", _turn_text(t), "history") for t in older[-MAX_HISTORY_POOL:]]
    verbatim: list[str] = []
    if ev_docs or mem_docs:  # only ranking reads it (a long tool loop has many messages)
        verbatim = [m.text for t in conv.history[-tail:] + conv.loop for m in t.messages if m.text]
        if conv.request is not None and conv.request.text:
            verbatim.append(conv.request.text)
    ev_result = retriever.rank(namespace, "evidence", query, ev_docs, k=profile.evidence.top_k,
                               count_tokens=counter.count_text, now=now, exclude=verbatim)
    evidence = _lines(ev_result, _render_evidence, counter)
    # Memory: remembered facts plus the session's own older turns (mem_docs), which an old question can pull back.
    mem_result = retriever.rank(namespace, "memory", query, mem_docs, k=profile.memory.top_k,
                                count_tokens=counter.count_text, now=now,
                                exclude=verbatim + [e.summary for e in inputs.evidence])
    memory = _lines(mem_result, _render_memory, counter)

    recent_text = " ".join(m.text for t in (conv.history[-4:] + conv.loop[-4:]) for m in t.messages)
    acceptance = max(1, len(task.acceptance))
    sig = mem_result.signals
    signals = Signals(
        checklist_evidence_ratio=min(1.0, len(task.evidence_needed) / acceptance) if task.acceptance else 0.0,
        expected_tool_calls=float(task.expected_tool_calls),
        risk_weight=float(task.risk),
        retrieval_hit_rate=float(sig.get("retrieval_hit_rate", 0.0)) if memory else 0.0,
        similarity=max(0.0, float(sig.get("similarity", 0.0))) if memory else 0.0,
        freshness=float(sig.get("freshness", 0.0)) if memory else 0.0,
        unresolved_questions=float(recent_text.count("?")),
        dialogue_depth=float(len(conv.history) + len(conv.loop)),
    )
    unselected = {
        "evidence": tuple(d.id for d in ev_docs if d.id not in {ln.id for ln in evidence}),
        "memory": tuple(d.id for d in mem_docs if d.id not in {ln.id for ln in memory} and d.source != "history"),
    }
    return Candidates(tools=tools, evidence=evidence, memory=memory, conversation=conv, signals=signals,
                      flags=tuple(flags), unselected=unselected)
