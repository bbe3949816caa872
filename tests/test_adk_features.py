"""The plugin beside ADK's own context features, through a real Runner (docs/adk-features.md).

Each test runs a combination a user may configure and checks what that user relies on: the model gets the pack
(fits the window, no orphaned tool result, the question verbatim), ADK's feature still does its job, and nothing
fails open or crashes. An agent on the interactions API (history on the server) is left alone.
"""

from __future__ import annotations

import logging

from google.adk.agents import LlmAgent
from google.adk.agents.context_cache_config import ContextCacheConfig
from google.adk.apps.app import EventsCompactionConfig
from google.adk.apps.llm_event_summarizer import LlmEventSummarizer
from google.adk.models.google_llm import Gemini
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.context_filter_plugin import ContextFilterPlugin
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types

from aether_context import ContextPackPlugin
from aether_context.adk import request_from_llm
from aether_context.pipeline import request_tokens
from aether_context.testing import ScriptedLlm, call

from conftest import fetch_page, grep_logs, lookup, make_runner, new_session, orphan_responses, run_turn, scripted_agent, strip_continue

WINDOW = 6_000
HEADER = "CONTEXT PACK"


def script(n: int) -> list:
    """Per user turn: a tool call with a large result, then an answer."""
    turns: list = []
    for i in range(n):
        turns += [call("fetch_page", url=f"https://example.com/{i}"), f"Answer {i}: revenue is up."]
    return turns


def questions(n: int) -> list[str]:
    return [f"Question {i}: what does page {i} say about revenue?" for i in range(n)]


def sent_texts(llm_request) -> str:
    """Every text the model received: system instruction and contents."""
    texts = [str(llm_request.config.system_instruction or "")]
    texts += [p.text for c in llm_request.contents for p in c.parts or [] if p.text]
    return "\n".join(texts)


def assert_packed(llm: ScriptedLlm, plugin: ContextPackPlugin, asked: list[str]) -> None:
    """What a user of the plugin relies on, for every call: a pack that fits, no orphan, the question verbatim."""
    packer = plugin.packer
    limit = WINDOW - int(WINDOW * packer.profile.floors.slack)
    assert llm.requests
    for i, raw in enumerate(llm.requests):
        request = request_from_llm(strip_continue(raw))
        assert request_tokens(request, packer.counter) <= limit, i
        assert orphan_responses(request.messages) == [], i
        assert HEADER in sent_texts(raw) or any(q == m.text for m in request.messages for q in asked), i
    last = sent_texts(llm.requests[-1])
    assert asked[-1] in last
    assert packer.recent and all(r.manifest.error is None for r in packer.recent)


async def test_events_compaction_and_the_plugin(memory_store_url):
    """ADK compacts the session's events; the plugin packs what ADK then sends. Both compact, in turn."""
    n = 4
    agent, llm = scripted_agent(script(n))
    summarizer_llm = ScriptedLlm(turns=["ADK-SUMMARY: pages 0 and 1 say revenue is up."])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    compaction = EventsCompactionConfig(summarizer=LlmEventSummarizer(llm=summarizer_llm),
                                        compaction_interval=2, overlap_size=0)
    runner = make_runner(agent, plugins=[plugin], events_compaction_config=compaction)
    sid = await new_session(runner)
    for text in questions(n):
        await run_turn(runner, sid, text)
    plugin.packer.store.flush()

    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=sid)
    compactions = [e for e in session.events if e.actions and e.actions.compaction]
    assert compactions, "ADK wrote no compaction event"
    # the summarizer's own model call bypasses plugins: it is ADK's prompt, not a pack
    assert summarizer_llm.requests and all(HEADER not in sent_texts(r) for r in summarizer_llm.requests)
    assert_packed(llm, plugin, questions(n))
    # after the compaction, ADK's summary is what the model sees of the compacted turns
    assert any("ADK-SUMMARY" in sent_texts(r) for r in llm.requests[2 * 2:])


async def test_context_cache_config_and_the_plugin(memory_store_url):
    """With ADK's context cache, the pack keeps the cache's key stable: the same system instruction and tools
    (the recall tool joins once) on every call, and the request's cache settings pass through untouched."""
    n = 3
    agent, llm = scripted_agent(script(n), static_instruction="You are a research assistant. " * 20)
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    cache = ContextCacheConfig(cache_intervals=5, ttl_seconds=600, min_tokens=0)
    runner = make_runner(agent, plugins=[plugin], context_cache_config=cache)
    sid = await new_session(runner)
    for text in questions(n):
        await run_turn(runner, sid, text)
    plugin.packer.store.flush()

    assert_packed(llm, plugin, questions(n))
    assert all(r.cache_config == cache for r in llm.requests)
    assert len({str(r.config.system_instruction) for r in llm.requests}) == 1
    tool_sets = [tuple(d.name for t in r.config.tools or [] for d in t.function_declarations or [])
                 for r in llm.requests]
    assert len(set(tool_sets)) <= 2  # before and after the recall tool joined, never back and forth
    assert sorted(set(tool_sets), key=len) == [t for i, t in enumerate(tool_sets) if t not in tool_sets[:i]]


async def test_context_filter_plugin_and_the_plugin(memory_store_url):
    """ContextFilterPlugin (first) keeps the last invocations; the pack then packs what is left. Calls and
    responses stay paired and the current question arrives verbatim."""
    n = 5
    agent, llm = scripted_agent(script(n))
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[ContextFilterPlugin(num_invocations_to_keep=2), plugin])
    sid = await new_session(runner)
    for text in questions(n):
        await run_turn(runner, sid, text)
    plugin.packer.store.flush()

    assert_packed(llm, plugin, questions(n))
    # the filter ran first: the oldest answers are no longer sent as conversation turns
    last = llm.requests[-1]
    model_texts = [p.text for c in last.contents if c.role == "model" for p in c.parts or [] if p.text]
    assert not any(t.startswith("Answer 0:") for t in model_texts)


async def test_preload_memory_tool_and_the_plugin(memory_store_url):
    """PreloadMemoryTool adds past conversations as a user turn of its own; the pack keeps it, and its own
    Memory layer recalls the same turns from the same memory service."""
    from google.adk.memory import InMemoryMemoryService

    memory = InMemoryMemoryService()
    earlier, _ = scripted_agent(["The launch code name is BLUEHERON."], name="agent")
    runner = make_runner(earlier, memory_service=memory)
    old = await new_session(runner)
    await run_turn(runner, old, "What is the launch code name?")
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=old)
    await memory.add_session_to_memory(session)

    n = 2
    agent, llm = scripted_agent(script(n), tools=[fetch_page, grep_logs, lookup, PreloadMemoryTool()])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin], memory_service=memory, session_service=runner.session_service)
    sid = await new_session(runner)
    asked = ["Remind me of the launch code name.", "And what does page 1 say about revenue?"]
    for text in asked:
        await run_turn(runner, sid, text)
    plugin.packer.store.flush()

    assert_packed(llm, plugin, asked)
    first = sent_texts(llm.requests[0])
    # ADK's preload arrives as it wrote it, and the pack's Memory layer, which searches the same memory
    # service, recalls the same turns: the memory is sent twice (docs/adk-features.md: use one of them)
    assert "<PAST_CONVERSATIONS>" in first and "MEMORY" in first
    assert first.count("BLUEHERON") == 2


class InteractionsGemini(Gemini):
    """A real `Gemini(use_interactions_api=True)` whose transport is a script: answers like the interactions
    API (each response carries an `interaction_id`) and records the requests, offline."""

    requests_seen: list = []

    async def generate_content_async(self, llm_request, stream: bool = False):
        self.requests_seen.append(llm_request.model_copy(deep=True))
        n = len(self.requests_seen)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"Answer {n}.")]),
                          interaction_id=f"interaction-{n}", finish_reason=types.FinishReason.STOP)


async def test_interactions_api_history_is_left_to_the_server(memory_store_url, caplog):
    """With the history on the server, ADK sends only the new turn linked by `previous_interaction_id`. The
    plugin leaves that request as ADK built it: no pack, no manifest, one warning naming the agent."""
    model = InteractionsGemini(model="gemini-2.5-flash", use_interactions_api=True, requests_seen=[])
    agent = LlmAgent(name="chat", model=model, instruction="Be brief.")
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    with caplog.at_level(logging.WARNING, logger="aether_context"):
        for text in ["First question.", "Second question."]:
            await run_turn(runner, sid, text)
    plugin.packer.store.flush()

    first, second = model.requests_seen
    assert first.previous_interaction_id is None
    assert second.previous_interaction_id == "interaction-1"
    assert [p.text for c in second.contents for p in c.parts] == ["Second question."]  # ADK's, untouched
    assert all(HEADER not in sent_texts(r) for r in model.requests_seen)
    assert not plugin.packer.recent
    warnings = [r for r in caplog.records if "interactions API" in r.getMessage()]
    assert len(warnings) == 1 and "chat" in warnings[0].getMessage()


async def test_reflect_and_retry_after_the_plugin(memory_store_url):
    """ReflectAndRetryToolPlugin registered after the plugin: the pack records the failure (its on_tool_error
    returns None with `errors_as_results` off), then ADK's plugin answers the model with its reflection."""
    from google.adk.plugins.reflect_retry_tool_plugin import ReflectAndRetryToolPlugin

    attempts: list[str] = []

    def flaky_lookup(key: str) -> dict:
        """Look up a value; the first attempt fails."""
        attempts.append(key)
        if len(attempts) == 1:
            raise ConnectionError("lookup service unavailable")
        return {"key": key, "value": "42"}

    agent, llm = scripted_agent([call("flaky_lookup", key="a"), call("flaky_lookup", key="a"), "The value is 42."],
                                tools=[flaky_lookup])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin, ReflectAndRetryToolPlugin(max_retries=2)])
    sid = await new_session(runner)
    await run_turn(runner, sid, "What is the value of a?")
    plugin.packer.store.flush()

    assert attempts == ["a", "a"]
    responses = [p.function_response.response for c in llm.requests[1].contents for p in c.parts or []
                 if p.function_response]
    assert responses and responses[-1].get("response_type") == "ERROR_HANDLED_BY_REFLECT_AND_RETRY_PLUGIN"
    assert any(r.manifest.failures for r in plugin.packer.recent)
    assert_packed(llm, plugin, ["What is the value of a?"])
