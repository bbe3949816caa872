"""select: turn the inputs into ranked candidates per layer, with demands and signals.

Nothing is cut here; this stage decides *what could go in* and in which priority order, so fit
only has to walk those orders when the budget is short.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import replace
from typing import Callable

from ..compress.values import result_values, structured_result
from ..content import ToolSpec, canonical_json
from ..profile import BudgetProfile
from ..retrieval import Document, RetrievalResult
from ..retrieval.items import ScoredItem
from ..retrieval.turns import TURNS_AFTER, TURNS_BEFORE, neighbours, turn_context
from .tools_rank import rank_tools
from .retrieve import Retriever, agent_namespace, retrieval_facets, retrieval_query
from ..tokens import TokenCounting
from .allocate import LAYER_OVERHEAD, Signals
from .inputs import MemoryItem, PackInputs, TaskSpec, Turn, turn_start
from .cache import counter_key, current_memo
from .incremental import grouped_turns, shared_prefix, turn_key
from .lines import RENDERS, date_label, line_of
from .types import Candidates, Conversation, Line

__all__ = ["Line", "Conversation", "Candidates", "select", "frame_candidates", "declared_tools", "widen_memory",
           "query_text", "split_conversation", "history_documents", "history_document"]


def query_text(inputs: PackInputs) -> str:
    """The retrieval query: the user request, the goal, the step and the acceptance checklist."""
    return retrieval_query(_request_text(inputs), inputs.task)


def _request_text(inputs: PackInputs) -> str:
    return inputs.request.messages[inputs.request_index].text if inputs.request_index is not None else ""


def _facets(inputs: PackInputs, profile: BudgetProfile) -> "list[str]":
    """The query's facets searched alone too (none when the profile's `retrieval.facets` is off), and the
    HyDE passage the edge asked the model for (`retrieval.hyde`)."""
    found = retrieval_facets(_request_text(inputs), inputs.task) if profile.retrieval.facets else []
    hyde = inputs.extra.get("hyde")
    return [*found, hyde] if isinstance(hyde, str) and hyde else found


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def split_conversation(inputs: PackInputs) -> Conversation:
    """History before the invocation's user request, the request, and this invocation's turns after it
    (the turns of an unchanged leading run are reused from the call's memo)."""
    msgs = inputs.request.messages
    skip = sorted(set(inputs.instruction_indices))
    r = inputs.request_index

    def turns(lo: int, hi: int) -> tuple[Turn, ...]:
        # messages lo..hi-1 are contiguous except for skipped instruction messages; group runs separately
        out: tuple[Turn, ...] = ()
        for cut in [k for k in skip if lo <= k < hi] + [hi]:
            if cut > lo:
                out += grouped_turns(msgs, 0, span=(lo, cut))
            lo = cut + 1
        return out

    n = len(msgs)
    return Conversation(
        history=turns(0, n if r is None else r), loop=turns(r + 1, n) if r is not None else (),
        request=msgs[r] if r is not None else None,
        instructions=tuple(msgs[i] for i in skip),
    )


RESULT_LINE_TOKENS = 150  # a structured result's values line (about the 600 characters a text result keeps)


def _turn_text(turn: Turn, count_tokens: Callable[[str], int]) -> str:
    """A turn in brief: its text, calls and results (what a reader needs to recognise it). A structured
    (JSON) result shows its values, identifiers first, rather than its opening characters: the ids a
    later call types back are often deep in it (a reservation's flights, a user's payment methods)."""
    bits = []
    calls = {c.id or c.name: c for m in turn.messages for c in m.calls}
    for m in turn.messages:
        if m.text:
            bits.append(f"{m.role}: {m.text}")
        for c in m.calls:
            bits.append(f"called {c.name}({_clip(canonical_json(c.args), 200)})")
        for r in m.responses:
            call = calls.get(r.id or r.name) or calls.get(r.name)
            if structured_result(r.response):
                values = result_values(r.name, call.args if call else {}, r.response, RESULT_LINE_TOKENS, count_tokens)
                bits.append(f"{r.name} returned {values or 'ok'}")
            else:
                bits.append(f"{r.name} returned {_clip(canonical_json(r.response), 600)}")
    return _clip(" | ".join(bits), 1500)


def _turn_time(turn: Turn, times: "tuple[float | None, ...]") -> float | None:
    return times[turn.start] if turn.start < len(times) else None


def history_documents(compacted: "tuple[Turn, ...]", times: "tuple[float | None, ...]",
                      count_tokens: Callable[[str], int]) -> tuple[Document, ...]:
    """Compacted turns as Memory candidates, indexed with the context a reader needs to place them: their
    date and the neighbouring turns (a reply is found by the question it answers); shown: the turn's own text, dated.

    With the call's memo, a turn's document is built once (keyed by the content of the turn and of the
    neighbours its context reads, and its time), and the last call's pool is carried: its leading turns
    that are the same objects, and start before the first message whose time changed, keep their
    documents, but for the last TURNS_AFTER (their context reads the next turn)."""
    cache = current_memo()
    if cache is None or not compacted:
        return tuple(_history_documents(compacted, times, count_tokens))
    dates = times[:compacted[-1].start + 1]  # every compacted turn's time (in order: the last start is the largest)
    run_key = ("history_run", id(compacted[0]), counter_key(count_tokens))
    run = cache.lookup("history_run", run_key)
    same = 0
    if run is not None:  # times compared as one slice: a tuple of the turns' own times cost 10x more
        same = shared_prefix(run[0], compacted)
        same = bisect_left(compacted, shared_prefix(run[1], dates), hi=same, key=turn_start)
        same = max(0, same - TURNS_AFTER) if same < len(run[0]) or same < len(compacted) else same
    docs = run[2][:same] if run is not None else ()
    docs += tuple(history_document(compacted, i, times, count_tokens) for i in range(same, len(compacted)))
    cache.put("history_run", run_key, (compacted, dates, docs))  # holds the turns: their ids stay theirs
    return docs


def history_document(turns: "tuple[Turn, ...]", i: int, times: "tuple[float | None, ...]",
                     count_tokens: Callable[[str], int]) -> Document:
    """The Memory document of `turns[i]`, its context read from the turns around it. With the call's memo,
    built once per content of the turns it reads and its time."""
    cache = current_memo()
    lo, hi = max(0, i - TURNS_BEFORE), min(len(turns), i + 1 + TURNS_AFTER)
    if cache is None:
        return _history_document([_turn_text(t, count_tokens) for t in turns[lo:hi]], turns[i], i - lo, times,
                                 count_tokens)
    counted_by = counter_key(count_tokens)

    def build() -> Document:
        texts = [cache.get("turn_text", (turn_key(t), counted_by), lambda t=t: _turn_text(t, count_tokens))
                 for t in turns[lo:hi]]
        return _history_document(texts, turns[i], i - lo, times, count_tokens)

    key = (tuple(turn_key(t) for t in turns[lo:hi]), i - lo, _turn_time(turns[i], times), counted_by)
    return cache.get("history_document", key, build)


def _history_documents(compacted: "tuple[Turn, ...]", times: "tuple[float | None, ...]",
                       count_tokens: Callable[[str], int]) -> list[Document]:
    texts = [_turn_text(t, count_tokens) for t in compacted]
    return [_history_document(texts, turn, i, times, count_tokens) for i, turn in enumerate(compacted)]


def _history_document(texts: "list[str]", turn: Turn, i: int, times: "tuple[float | None, ...]",
                      count_tokens: Callable[[str], int]) -> Document:
    """The document of the turn whose brief is `texts[i]`, its context from the texts around it."""
    ts = _turn_time(turn, times)
    previous, following = neighbours(texts, i)
    context = turn_context(date=date_label(ts), previous=previous, next=following, count_tokens=count_tokens)
    return Document(f"turn-{turn.start}", texts[i], "history", ts, context=context)


def _lines(result: RetrievalResult, render: Callable[[Document], str], counter: TokenCounting) -> tuple[Line, ...]:
    """Ranked lines with every score that placed them (recorded in the manifest). A document's line
    and its tokens are kept by the document's content (the call's memo): the same memory ranks on many calls."""
    cache = current_memo()
    out, counted_by = [], counter_key(counter)
    for item in result.items:
        doc = item.document
        text, tokens = (render(doc), None) if cache is None else line_of(doc, render, counter, counted_by)
        sources = tuple(dict.fromkeys(item.sources)) if item.sources else (doc.source,)  # each source once
        out.append(Line(id=doc.id, text=text, tokens=counter.count_text(text) if tokens is None else tokens, source="+".join(sources),
                        uri=str(doc.metadata.get("uri", "")), score=round(item.score, 6), timestamp=doc.timestamp,
                        scores={"bm25": round(item.bm25, 4), "dense": round(item.dense, 4), "fused": round(item.fused, 4),
                                "freshness": round(item.freshness, 4), "mmr": round(item.mmr, 4)}))
    return tuple(out)


def _relevant(result: RetrievalResult, threshold: float) -> RetrievalResult:
    """Items worth sending: a lexical match, or a dense similarity at the hit threshold."""
    items = tuple(i for i in result.items if i.bm25 > 0 or i.dense >= threshold)
    return RetrievalResult(result.query, items, result.signals) if len(items) != len(result.items) else result


MAX_RANKED = 400  # most items one layer ranks per call; the budget then decides how many go in


def select(inputs: PackInputs, profile: BudgetProfile, *, counter: TokenCounting, retriever: Retriever,
           conversation: Conversation, compacted: "tuple[Turn, ...]", kept: "tuple[Turn, ...]",
           now: float | None = None) -> Candidates:
    """Rank the candidates of every layer (hybrid retrieval) and compute the allocator's signals.

    Memory candidates are remembered facts plus every compacted turn (the whole history stays
    searchable); what the model sees verbatim (`kept`) is never repeated in Memory or Evidence.
    Ranking keeps order only: the budget, not a count, decides how many items go in. `now`: the
    session clock freshness is measured at (None: `inputs.now`).
    """
    tools, flags, left_out = _step_tools(inputs, profile)
    query = query_text(inputs)
    namespace = _namespace(inputs)
    now = (now if now is not None else inputs.now) or None
    ev_docs = [Document(e.id, e.summary, e.source, e.timestamp, {"uri": e.uri} if e.uri else {}) for e in inputs.evidence]
    mem_docs = _memory_documents(inputs, compacted, counter)
    # only ranking reads the verbatim texts (a long tool loop has many messages)
    verbatim = _verbatim(conversation, kept) if ev_docs or mem_docs else []
    # Evidence is what the app chose to show: ranked, never filtered by relevance.
    ev_result = retriever.rank(namespace, "evidence", query, ev_docs, k=_k(profile.evidence.top_k, ev_docs),
                               count_tokens=None, now=now, exclude=verbatim,  # `_lines` counts what is shown
                               facets=_facets(inputs, profile))
    if ev_docs and ev_result.signals.get("empty_query"):  # nothing to rank by: the app's order
        ev_result = _in_given_order(ev_docs, query)
    evidence = _lines(ev_result, RENDERS["evidence"], counter)
    mem_result = _rank_memory(inputs, profile, retriever, mem_docs, verbatim, now=now)
    memory = _lines(mem_result, RENDERS["memory"], counter)
    flags.extend(_retrieval_flags(ev_result, mem_result))

    signals = _signals(inputs.task, conversation, kept, mem_result, bool(memory))
    shown_ev, shown_mem = {ln.id for ln in evidence}, {ln.id for ln in memory}  # once: the pool holds every compacted turn
    unselected = {
        "evidence": tuple(d.id for d in ev_docs if d.id not in shown_ev),
        "memory": _unselected_memory(inputs, mem_docs, shown_mem),
    }
    return Candidates(tools=tools, evidence=evidence, memory=memory, conversation=conversation, signals=signals,
                      flags=tuple(flags), unselected=unselected, tools_left_out=left_out)


def frame_candidates(inputs: PackInputs, profile: BudgetProfile, conversation: Conversation) -> Candidates:
    """The candidates before any ranking: the step's tools and the conversation, no Evidence or Memory.
    What the room of a frozen payload reads (its lines are inside the payload)."""
    tools, flags, left_out = _step_tools(inputs, profile)
    return Candidates(tools=tools, evidence=(), memory=(), conversation=conversation, signals=Signals(),
                      flags=tuple(flags), tools_left_out=left_out)


def _namespace(inputs: PackInputs) -> str:
    return agent_namespace(inputs.app_name, inputs.user_id, inputs.session_id, inputs.agent)


def _memory_documents(inputs: PackInputs, compacted: "tuple[Turn, ...]", counter: TokenCounting) -> tuple[Document, ...]:
    """Memory's pool: the remembered facts, then every compacted turn (the turns' documents carried from
    the last call are the same tuple: without facts, the pool is that tuple, not a copy of it). A fact's
    document is kept by its content: the retriever compares a pool with the last one, and finds a search it
    kept, by the identity of its documents."""
    cache = current_memo()
    def fact(m: MemoryItem) -> Document:
        key = (m.id, m.text, m.source, m.timestamp)
        build = lambda: Document(*key)  # noqa: E731
        return build() if cache is None else cache.get("fact_document", key, build)
    mem_docs = tuple(map(fact, inputs.memory))
    return mem_docs + history_documents(compacted, inputs.message_times, counter.count_text)


def _verbatim(conv: Conversation, kept: "tuple[Turn, ...]") -> list[str]:
    """The texts the model sees verbatim (the kept turns, the request): never repeated in a layer."""
    verbatim = [m.text for t in kept for m in t.messages if m.text]
    if conv.request is not None and conv.request.text:
        verbatim.append(conv.request.text)
    return verbatim


def _rank_memory(inputs: PackInputs, profile: BudgetProfile, retriever: Retriever, mem_docs: "tuple[Document, ...]",
                 verbatim: "list[str]", pool: int | None = None, *, now: float | None) -> RetrievalResult:
    """Memory ranked for the request, above the relevance floor; nothing that is verbatim or Evidence."""
    result = retriever.rank(_namespace(inputs), "memory", query_text(inputs), mem_docs,
                            k=_k(profile.memory.top_k, mem_docs), count_tokens=None,
                            now=now, exclude=verbatim + [e.summary for e in inputs.evidence], pool=pool,
                            facets=_facets(inputs, profile), floor=profile.retrieval.information_floor)
    return _relevant(result, profile.retrieval.hit_threshold)


def widen_memory(inputs: PackInputs, profile: BudgetProfile, cands: Candidates, room: int, *, counter: TokenCounting,
                 retriever: Retriever, compacted: "tuple[Turn, ...]", kept: "tuple[Turn, ...]") -> Candidates:
    """Memory ranked over a wider pool, its best lines taken while they fit `room` tokens.

    Fusion ranks only each retriever's best `candidate_pool` documents, so a long history gives Memory
    at most about twice that many lines however large its room: in a large window after a compaction,
    a folded turn outside that pool could not come back while the room sat unused. Ranked over
    `MAX_RANKED` per retriever instead, the budget, not the pool, decides how many go in; a line that
    does not fit is skipped and the next best tried, so none is shortened.
    """
    mem_docs = _memory_documents(inputs, compacted, counter)
    if (len(mem_docs) <= max(len(cands.memory), retriever.settings.candidate_pool)  # the pool left nothing out
            or len(cands.memory) >= _k(profile.memory.top_k, mem_docs)):
        return cands
    wide = _rank_memory(inputs, profile, retriever, mem_docs, _verbatim(cands.conversation, kept), MAX_RANKED,
                        now=inputs.now or None)
    free, memory = room - LAYER_OVERHEAD, []
    for line in _lines(wide, RENDERS["memory"], counter):
        if line.tokens + 1 <= free:
            memory.append(line)
            free -= line.tokens + 1
    if sum(ln.tokens for ln in memory) <= sum(ln.tokens for ln in cands.memory):
        return cands  # the wider pool adds nothing that fits
    shown = {ln.id for ln in memory}
    unselected = _unselected_memory(inputs, mem_docs, shown)
    return replace(cands, memory=tuple(memory), unselected={**cands.unselected, "memory": unselected})


def _unselected_memory(inputs: PackInputs, mem_docs: "tuple[Document, ...]", shown: "set[str]") -> "tuple[str, ...]":
    """The remembered facts Memory left out (the pool's compacted turns come after them: only these are read)."""
    return tuple(d.id for d in mem_docs[:len(inputs.memory)] if d.source != "history" and d.id not in shown)


def _step_tools(inputs: PackInputs, profile: BudgetProfile
                ) -> "tuple[tuple[ToolSpec, ...], list[str], dict[str, str]]":
    """The tools this step may call (sorted; a step's scope restricts the app's own tools), the task's flags
    for the manifest (no goal, no acceptance, a step tool that does not exist...), and the tools a ranking of
    many tools left out, with why (`_ranked_tools`)."""
    task = inputs.task
    no_step = not task.step and not any(not done for _, done in task.plan)  # nothing says what to do next
    flags = [f for f, missing in (("task_missing_goal", not task.goal), ("task_missing_acceptance", not task.acceptance),
                                  ("task_missing_step", no_step),
                                  ("user_request_not_found", inputs.request_index is None)) if missing]
    flags.extend(inputs.extra.get("edge_flags", ()))  # e.g. a failed LLM summary after the previous call
    wanted, left_out = task.tools, dict(inputs.extra.get("tools_left_out", {}))  # inputs recorded before 82cfb0e
    above = profile.tools.rank_above
    if wanted is None and above is not None and len(inputs.request.tools) > above:
        wanted, left_out = _ranked_tools(inputs, profile)
    tools = tuple(sorted(inputs.request.tools, key=lambda t: t.name))
    if wanted is not None:
        flags.extend(f"unknown_step_tool:{n}" for n in sorted(set(wanted) - {t.name for t in tools}))
        tools = tuple(t for t in tools if t.name in set(wanted))
    return tools, flags, left_out


def _ranked_tools(inputs: PackInputs, profile: BudgetProfile) -> "tuple[tuple[str, ...], dict[str, str]]":
    """The tools ranked best for the request, goal, step, acceptance and recent turns (`tools_rank`), with the
    agent's instruction as a domain prior, plus ADK's own, the recall tool and every tool already called; and
    the ones left out with why. A later call of the invocation keeps the last call's set (the cached prefix
    holds), a called tool that was left out joins it; so does a recovery re-pack (`extra["held_tools"]`, the
    failed call's set). In the pipeline, so a re-pack under another profile ranks again."""
    request, task, prev = inputs.request, inputs.task, inputs.previous
    called = list(dict.fromkeys(c.name for m in request.messages for c in m.calls))
    recent = [m.text for m in request.messages[-4:] if m.text]
    asked = request.messages[inputs.request_index].text if inputs.request_index is not None else ""
    step = "\n".join(x for x in (asked, task.goal, task.step, *task.acceptance, *recent) if x)
    held = inputs.extra.get("held_tools")
    previous = tuple(held) if held is not None else prev.tool_names if prev is not None and prev.tool_names else None
    ranking = rank_tools(request.tools, step, keep=profile.tools.keep,
                         always=[*inputs.extra.get("always_tools", ()), *called], previous=previous,
                         hold=held is not None or (prev is not None and prev.invocation_id == inputs.invocation_id),
                         context=request.system_instruction, share=profile.tools.share)
    return ranking.kept, ranking.left_out


def declared_tools(inputs: PackInputs, profile: BudgetProfile) -> "tuple[str, ...]":
    """The names of the tools a pack of `inputs` declares (the step's, or the ranked ones)."""
    return tuple(t.name for t in _step_tools(inputs, profile)[0])


def _signals(task: TaskSpec, conv: Conversation, kept: "tuple[Turn, ...]", mem_result: RetrievalResult,
             has_memory: bool) -> Signals:
    """The allocator's signals: what the task asks for and how well Memory matched the request. The dialogue's
    depth is the turns sent verbatim: compacted ones are Memory's, and counting them grew the conversation's
    room with the whole history, so Memory shrank between compactions while evidence was missing."""
    recent = (conv.history[-4:] + conv.loop[-4:])
    questions = sum(m.text.count("?") for t in recent for m in t.messages)  # the texts are not joined: no copy
    acceptance = max(1, len(task.acceptance))
    sig = mem_result.signals
    return Signals(
        checklist_evidence_ratio=min(1.0, len(task.evidence_needed) / acceptance) if task.acceptance else 0.0,
        expected_tool_calls=float(task.expected_tool_calls),
        risk_weight=float(task.risk),
        retrieval_hit_rate=float(sig.get("retrieval_hit_rate", 0.0)) if has_memory else 0.0,
        similarity=max(0.0, float(sig.get("similarity", 0.0))) if has_memory else 0.0,
        freshness=float(sig.get("freshness", 0.0)) if has_memory else 0.0,
        unresolved_questions=float(questions),
        dialogue_depth=float(len(kept)),
    )


def _retrieval_flags(*results: RetrievalResult) -> list[str]:
    """What the manifest should say about ranking: dense off, a query with no content word, bad timestamps."""
    sig = {k: max(float(r.signals.get(k, 0.0)) for r in results) for k in ("dense_off", "empty_query", "timestamps_ignored")}
    flags = []
    if sig["dense_off"]:
        flags.append("dense_ranking_off: lexical only (the embedding model is loading, its backlog embedding, or not installed)")
    if sig["empty_query"]:
        flags.append("empty_query: the request has no content word; nothing was retrieved")
    if sig["timestamps_ignored"]:
        flags.append(f"timestamps_ignored: {int(sig['timestamps_ignored'])} (not finite or in the future)")
    return flags


def _k(cap: "int | None", docs: list) -> int:
    """How many to rank: the optional profile cap, else as many as one call may rank."""
    return max(1, min(cap if cap else MAX_RANKED, MAX_RANKED, len(docs) or 1))


def _in_given_order(docs: "list[Document]", query: str) -> RetrievalResult:
    """No query to rank by (a turn without a user request): every item, in the order given."""
    items = tuple(ScoredItem(document=d, rank=i, bm25=0.0, dense=0.0, fused=0.0, freshness=1.0, score=0.0, mmr=0.0)
                  for i, d in enumerate(docs))
    return RetrievalResult(query, items, {})

