"""Collect the pack's inputs from what ADK already has: request, session, state, memory, artifacts."""

from __future__ import annotations

import asyncio
import inspect
import re
import logging
from dataclasses import replace
from datetime import datetime
from itertools import compress
from typing import Any, Sequence

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.genai import types

from google.adk.tools.base_tool import BaseTool

from ..pipeline.cache import current_memo
from ..content import Message, ModelRequest, ToolSpec, sha256_hex
from ..pipeline.inputs import EvidenceItem, MemoryItem, PackInputs, PackState
from ..pipeline.incremental import extended
from ..providers import EvidenceProvider, EvidenceRequest
from ..retrieval.facets import MAX_CHARS, content_words, facets, word_forms
from .task import StateKeys, evidence_from_state, notes_from_state, task_from_state

logger = logging.getLogger(__name__)

__all__ = ["collect_inputs", "with_earlier_hits", "with_tools", "framework_tools", "FRAMEWORK_TOOL_NAMES", "find_request_index", "opening_request", "INSTRUCTION_MARKER", "artifact_uri"]

INSTRUCTION_MARKER = "<<<BEGIN_SYSTEM_INSTRUCTION>>>"
MEMORY_SERVICE = "memory_service"  # a MemoryItem's source when ADK's memory service found it
_OTHER_AGENT_PREFIX = "For context:"
OFFLOAD_PREFIX = "tool-output/"
OFFLOAD_PREFIXES = (OFFLOAD_PREFIX, "attachment/")


# Tools ADK itself declares (agent transfer, structured output, loop exit, memory and artifact loading,
# confirmations): a step's tool scope restricts the app's tools, never these.
FRAMEWORK_TOOL_NAMES = frozenset({
    "transfer_to_agent", "set_model_response", "exit_loop", "get_user_choice", "load_memory", "preload_memory",
    "load_artifacts", "adk_request_credential", "adk_request_confirmation", "adk_request_input",
})


def framework_tools(llm_request: LlmRequest) -> list[str]:
    """Names of the request's tools that belong to ADK rather than to the app: the known names, and any
    tool whose class or wrapped function lives in ADK's agents or flows (e.g. the transfer tool)."""
    names = []
    for name, tool in (llm_request.tools_dict or {}).items():
        module = getattr(getattr(tool, "func", None), "__module__", "") or ""
        owner = type(tool).__module__
        if name in FRAMEWORK_TOOL_NAMES or owner.startswith(("google.adk.flows", "google.adk.agents")) \
                or module.startswith(("google.adk.flows", "google.adk.agents", "google.adk.tools.exit_loop",
                                      "google.adk.tools.transfer_to_agent")):
            names.append(name)
    return sorted(names)


def artifact_uri(app: str, user: str, session: str, filename: str, version: int | None = None) -> str:
    """`artifact://<app>/<user>/<session>/<filename>[#v<version>]`: where ADK's artifact service keeps it."""
    base = f"artifact://{app}/{user}/{session}/{filename}"
    return base if version is None else f"{base}#v{version}"


def find_request_index(request: ModelRequest, user_content: types.Content | None) -> int | None:
    """Index of the user message that started this invocation (the last one equal to `user_content`).
    Looked for among the newest messages first; past them, carried from the last call when the messages
    only grew (the call's memo): only the new ones are read, as a tool loop's request can sit at the start of a
    long history that a walk from the end would cross on every call."""
    msgs = request.messages
    if user_content is not None and user_content.parts:
        from .convert import to_message
        target = to_message(user_content).digest

        def last(more: tuple, start: int, found: int) -> int:  # the last index of `target` in `more`, else `found`
            return next((start + i for i in range(len(more) - 1, -1, -1) if more[i].digest == target), found)

        near = max(0, len(msgs) - _NEAR)
        found = last(msgs[near:], near, -1)
        if found < 0 and near:
            found = extended(("request_index", target), msgs, lambda: -1,
                             lambda old, more: last(more, len(msgs) - len(more), old))
        if found >= 0:
            return found
    for i in range(len(msgs) - 1, -1, -1):  # fallback: the last real user text
        m = msgs[i]
        text = m.text
        if m.role == "user" and text and not m.responses and INSTRUCTION_MARKER not in text and not text.startswith(_OTHER_AGENT_PREFIX):
            return i
    return None


_NEAR = 64  # newest messages where an invocation's request usually is: read before any carried search


def opening_request(events: Sequence[Any]) -> str:
    """The text of the session's first user message: the task, for apps that never set a goal."""
    from .convert import to_message
    for event in events:
        if event.author == "user" and event.content is not None and event.content.parts:
            text = to_message(event.content).text
            if text.strip() and INSTRUCTION_MARKER not in text:
                return text
    return ""


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


MAX_MEMORY_WORDS = 8  # content words of the request asked for one by one
MAX_PAIRS = 6  # pairs of its first content words asked for together
_NAME = re.compile(r"\b[A-Z][A-Za-z]*\b")


def memory_queries(request: str, items: "Sequence[str]" = ()) -> list[str]:
    """What the memory service is asked: the request; its content words, and each facet's (`facets`), together;
    each content word alone; pairs of the first ones. Words go with their inflections (`word_forms`).

    A memory service answers with its own top few (ADK's in-memory one: the 10 sharing most words); asking
    per facet, word and pair gathers the pool the pack then ranks itself, so the service's cut-off does not
    decide. At most 1 + 1 + `MAX_FACETS` + `MAX_MEMORY_WORDS` + `MAX_PAIRS` queries, each read from the start
    of a text cut at `MAX_CHARS`: the cost is bounded whatever the message's size."""
    words = content_words(request, MAX_MEMORY_WORDS)
    if not words:
        return [request[:MAX_CHARS]] if request.strip() else []
    names = set(content_words(" ".join(_NAME.findall(request[:MAX_CHARS])), MAX_CHARS))  # never inflected
    forms = {w: w if w in names else " ".join(word_forms(w)) for w in words}
    together = [" ".join(forms.get(w) or " ".join(word_forms(w)) for w in content_words(f, MAX_MEMORY_WORDS))
                for f in (request, *facets(request, items))]
    first = words[:5]
    pairs = [f"{forms[a]} {forms[b]}" for i, a in enumerate(first) for b in first[i + 1:]][:MAX_PAIRS]
    return list(dict.fromkeys([request[:MAX_CHARS], *together, *forms.values(), *pairs]))


async def _memory_hits(ctx: CallbackContext, request: str, items: "Sequence[str]", limit: int,
                       cache: dict | None = None) -> list[MemoryItem]:
    """The memory service's answers to the request, its facets, words and pairs (`memory_queries`), de-duplicated.
    `cache` (the session slot's) keeps the last answer: the calls of one invocation ask the same questions, and a
    tool loop must not send a remote memory service twenty searches per model call."""
    key = (ctx.invocation_id, request, tuple(items), limit)
    if cache is not None and cache.get("key") == key:
        return list(cache["hits"])
    hits = await _search_memory(ctx, request, items, limit)
    if cache is not None:
        cache.update(key=key, hits=tuple(hits))
    return hits


def with_earlier_hits(memory: "Sequence[MemoryItem]", earlier: "Sequence[MemoryItem]",
                      limit: int) -> "tuple[tuple[MemoryItem, ...], tuple[MemoryItem, ...]]":
    """`memory` with the session's earlier memory-service hits as candidates too, and the hits to keep.

    A memory service answers each question with its own top few (ADK's in-memory one: the 10 sharing most
    words), so what an earlier question found is often what a later one needs and is not given again. Kept
    hits stay candidates: ranking, not the service's cut, decides what Memory shows. New hits join at the
    end and a hit found again keeps its place, so a call's record shares all but a chunk or two with the one
    before. Past `limit`, the oldest hits this search did not find leave first: every hit of this search is
    kept, and merging the result again changes nothing (every call of an invocation ranks the same set)."""
    if limit <= 0:
        return tuple(memory), ()
    fresh = [m for m in memory if m.source == MEMORY_SERVICE]
    found, known = {m.id for m in fresh}, {m.id for m in earlier}
    kept = [*earlier, *(m for m in fresh if m.id not in known)]
    over = len(kept) - limit
    if over > 0:
        leaving = {m.id for m in [k for k in kept if k.id not in found][:over]}
        kept = [m for m in kept if m.id not in leaving]
    return (*(m for m in memory if m.source != MEMORY_SERVICE), *kept), tuple(kept)


async def _search_memory(ctx: CallbackContext, request: str, items: "Sequence[str]", limit: int) -> list[MemoryItem]:
    queries = memory_queries(request, items) if limit > 0 else []
    if not queries:
        return []
    try:
        responses = await asyncio.gather(*(ctx.search_memory(q) for q in queries))
    except ValueError:  # no memory service on the runner
        return []
    items: list[MemoryItem] = []
    seen: set[str] = set()
    entries = [e for response in responses for e in response.memories]
    for entry in entries:
        text = "\n".join(p.text for p in (entry.content.parts or []) if p.text) if entry.content else ""
        if not text:
            continue
        who = f"{entry.author}: " if entry.author else ""
        key = entry.id or "mem-" + sha256_hex(f"{entry.timestamp}|{who}{text}")[:16]
        if key in seen:  # the same memory found by two queries (or twice by one) is one item
            continue
        seen.add(key)
        items.append(MemoryItem(id=key, text=who + text, timestamp=_timestamp(entry.timestamp),
                                source=MEMORY_SERVICE, rank=len(items)))
        if len(items) >= limit:
            break
    return items


async def _artifact_evidence(ctx: CallbackContext, cache: dict, summary_chars: int) -> list[EvidenceItem]:
    """One evidence line per saved artifact, describing its latest version.

    The description is cached per session and file *and version*: a new version is described (and
    cited as `#v<n>`) in the very next pack. Versions come from the session's `artifact_delta`s (free),
    else from the artifact service; with no version known the artifact is read afresh every time.
    """
    try:
        names = await ctx.list_artifacts()
    except ValueError:  # no artifact service on the runner
        return []
    session = ctx.session
    names = [n for n in sorted(names) if not n.startswith(OFFLOAD_PREFIXES)]  # offloads are cited where their turn is
    saved = _saved_versions(session.events) if names else {}  # a read of every event: only when needed
    out = []
    for name in names:
        version = saved.get(name)
        if version is None:
            version = await _latest_version(ctx, name)
        key = (session.id, name)
        hit = cache.get(key)
        if hit is None or hit[1] != version or version is None:
            part = await ctx.load_artifact(name, version=version)
            hit = cache[key] = (_describe(part, summary_chars), version)
        summary = hit[0]
        out.append(EvidenceItem(id=f"artifact:{name}", summary=f"{name}: {summary}",
                                uri=artifact_uri(session.app_name, session.user_id, session.id, name, version),
                                source="artifact"))
    return out


def _saved_versions(events: list) -> dict[str, int]:
    """The latest version of each artifact saved in the session, from the events' `artifact_delta`."""
    versions: dict[str, int] = {}
    for event in events:
        delta = event.actions.artifact_delta if event.actions is not None else None
        if delta:
            versions.update(delta)
    return versions


async def _latest_version(ctx: CallbackContext, name: str) -> int | None:
    session = ctx.session
    try:
        versions = await ctx.get_invocation_context().artifact_service.list_versions(
            app_name=session.app_name, user_id=session.user_id, filename=name, session_id=session.id)
        return max(versions) if versions else None
    except Exception:  # versions are a nicety; the URI without one still resolves to the latest
        logger.debug("aether-context: could not list versions of %s", name, exc_info=True)
        return None


def _describe(part: types.Part | None, chars: int) -> str:
    if part is None:
        return "(empty)"
    if part.text:
        text = " ".join(part.text.split())
        return text if len(text) <= chars else text[:chars] + "…"
    if part.inline_data:
        data = part.inline_data.data or b""
        if (part.inline_data.mime_type or "").startswith("text/"):
            return _describe(types.Part(text=data.decode("utf-8", "replace")), chars)
        return f"{part.inline_data.mime_type}, {len(data)} bytes"
    return "(binary artifact)"


def _is_instruction(message: Message) -> bool:
    """ADK's dynamic-instruction message (static_instruction mode)."""
    return message.role == "user" and INSTRUCTION_MARKER in message.text


def with_tools(request: ModelRequest, tools: "tuple[BaseTool, ...]") -> ModelRequest:
    """`request` with `tools` declared after its own (those it already declares are left as they are). With the
    call's memo, a tool's declaration is read once per tool object (the packer's recall tool: a fixed one)."""
    cache = current_memo()
    def spec(t: BaseTool) -> ToolSpec:
        return ToolSpec(t.name, t._get_declaration().model_dump(mode="json", exclude_none=True))
    added = tuple(cache.get("tool_spec", t, lambda: spec(t)) if cache is not None else spec(t)
                  for t in tools if t.name not in {s.name for s in request.tools})
    return replace(request, tools=request.tools + added) if added else request


def _instruction_indices(messages: Sequence[Message]) -> tuple[int, ...]:
    """Where the instruction messages are, carried from the last call over the same history (a call reads its
    new messages only; the state is how many messages were read and the positions found)."""
    def feed(state: "tuple[int, tuple[int, ...]]", more: tuple) -> "tuple[int, tuple[int, ...]]":
        n, found = state
        return n + len(more), found + tuple(compress(range(n, n + len(more)), map(_is_instruction, more)))
    return extended("instruction_indices", tuple(messages), lambda: (0, ()), feed)[1]


async def _provided(provider: EvidenceProvider, ask: EvidenceRequest, timeout: float) -> "Sequence[EvidenceItem] | None":
    """What `provider` offers, asked on a worker thread (a provider may index a repository on its first call:
    never on the loop); None past `timeout`."""
    try:
        found = await asyncio.wait_for(asyncio.to_thread(provider, ask), timeout)
        return await asyncio.wait_for(found, timeout) if inspect.isawaitable(found) else found
    except asyncio.TimeoutError:
        logger.warning("aether-context: evidence provider %s took over %s s; this call goes without it",
                       _name(provider), timeout)
        return None


def _name(provider: Any) -> str:
    return getattr(provider, "__name__", type(provider).__name__)


async def collect_inputs(ctx: CallbackContext, llm_request: LlmRequest, request: ModelRequest, *, keys: StateKeys, previous: PackState | None,
                         memory_limit: int, artifact_cache: dict, now: float, use_memory: bool = True,
                         use_artifacts: bool = True, summary_chars: int = 400,
                         extra_tools: "tuple[BaseTool, ...]" = (), edge_flags: "tuple[str, ...]" = (),
                         providers: "Sequence[EvidenceProvider]" = (),
                         uris: "dict[str, str] | None" = None, summary: "dict | None" = None,
                         failures: "dict | None" = None, provider_timeout: float = 10.0,
                         memory_cache: dict | None = None) -> PackInputs:
    """`request` is `llm_request` converted (`convert.request_from_llm`: the caller decides from its messages
    whether to declare the recall tool); `extra_tools` (the recall tool) are declared in the pack and kept
    whatever the step allows; the call's memo (the packer's) carries the per-message work of the last call.
    `uris`, `summary` (this agent's) and `failures` are the session's records (`session_state.StateRecords`).
    `extra["always_tools"]` names the tools a ranking of many tools must keep (ADK's own, the recall tool). Evidence
    providers run off the event loop; one slower than `provider_timeout` seconds adds nothing to this call
    (flag `provider_timeout`) and finishes in the background."""
    request = with_tools(request, extra_tools)
    index = find_request_index(request, ctx.user_content)
    state = ctx.state
    session = ctx.session
    task = replace(task_from_state(state, keys), opening_request=opening_request(session.events))
    if task.tools is not None:
        always = [t.name for t in extra_tools] + framework_tools(llm_request)
        task = replace(task, tools=task.tools + tuple(dict.fromkeys(n for n in always if n not in task.tools)))
    asked = (request.messages[index].text if index is not None else "") or " ".join(x for x in (task.step, task.goal) if x)
    always = [t.name for t in extra_tools] + framework_tools(llm_request) if task.tools is None else []
    memory = notes_from_state(state, keys) + (await _memory_hits(ctx, asked, (task.step, task.goal, *task.acceptance), memory_limit,
                                                                    memory_cache)
                                             if use_memory else [])
    evidence = evidence_from_state(state, keys) + (await _artifact_evidence(ctx, artifact_cache, summary_chars) if use_artifacts else [])
    if providers:
        recent = tuple(m.text for m in request.messages[-8:] if m.text)
        ask = EvidenceRequest(task=task, user_request=request.messages[index].text if index is not None else "", recent_texts=recent)
        for provider in providers:
            found = await _provided(provider, ask, provider_timeout)
            if found is None:
                edge_flags = (*edge_flags, f"provider_timeout: {_name(provider)}")
            evidence += list(found or ())
    return PackInputs(
        request=request, request_index=index, task=task, evidence=tuple(evidence), memory=tuple(memory),
        instruction_indices=_instruction_indices(request.messages),
        app_name=session.app_name, user_id=session.user_id, session_id=session.id,
        invocation_id=ctx.invocation_id, agent=ctx.agent_name, now=now, previous=previous,
        uris=dict(uris or {}),
        summary=dict(summary or {}),
        failures={**failures, "current_turn": len(session.events)} if failures else {},
        extra={**({"edge_flags": list(edge_flags)} if edge_flags else {}),
               **({"always_tools": always} if always else {})},
    )

