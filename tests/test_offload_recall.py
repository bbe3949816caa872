"""Tool-result offload at tool return and the recall tool, through a real ADK Runner."""

from __future__ import annotations

import json

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.memory import InMemoryMemoryService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.artifacts import InMemoryArtifactService
from google.genai import types

from aether_context import ContextPackPlugin, ContextPacker
from aether_context.adk.session_state import SAVED_STATE_KEY
from aether_context.profile import load_profile
from aether_context.adk import request_from_llm
from aether_context.testing import ScriptedLlm, call

from conftest import in_memo, make_runner, offloaded_uri, run_turn, scripted_agent

BIG = "\n".join(f"line {i}: value={i * 7} status={'ERROR disk full' if i == 777 else 'ok'}" for i in range(1, 3001))


def big_log() -> str:
    """Return a long log."""
    return BIG



async def _run(turns, *, artifact_service=True, store="memory://offload-test"):
    llm = ScriptedLlm(turns=turns)
    agent = LlmAgent(name="agent", model=llm, instruction="Work.", tools=[big_log])
    plugin = ContextPackPlugin(store=store, window_tokens=16_000)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    artifact_service=InMemoryArtifactService() if artifact_service else None,
                    memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events = []
    async for ev in runner.run_async(user_id="u", session_id=session.id,
                                     new_message=types.Content(role="user", parts=[types.Part(text="check the log")])):
        events.append(ev)
    plugin.packer.store.flush()
    return llm, plugin, runner, session, events


def _recall_response(events) -> dict:
    for ev in events:
        for r in ev.get_function_responses():
            if r.name == "read_artifact":
                return r.response
    raise AssertionError("read_artifact was not executed")


async def test_large_result_is_offloaded_and_read_back_byte_identical():
    turns = [call("big_log"), lambda req: call("read_artifact", uri=offloaded_uri(req), max_lines=400), "done"]
    llm, plugin, runner, session, events = await _run(turns)
    # what the model saw of the tool result is small and names the URI
    second = request_from_llm(llm.requests[1])
    sent = [p for m in second.messages for p in m.responses if p.name == "big_log"][0].response
    assert "artifact://app/u/" in sent["artifact_uri"] and len(json.dumps(sent)) < len(BIG) / 10
    # the session itself holds the compact form, not the original
    stored = [r for ev in events for r in ev.get_function_responses() if r.name == "big_log"][0].response
    assert stored == sent
    # the original is in ADK's artifact service, byte for byte
    name = sent["artifact_uri"].split(f"/{session.id}/", 1)[1].split("#v")[0]
    part = await runner.artifact_service.load_artifact(app_name="app", user_id="u", session_id=session.id, filename=name)
    assert part.inline_data.data == BIG.encode("utf-8")  # exactly what the tool returned
    # the recall tool returned the lines (ADK ran it from the pack's tools_dict)
    got = _recall_response(events)
    assert got["total_lines"] == 3000 and got["start_line"] == 1 and got["next_start_line"] == 401


async def test_recall_search_finds_the_error_line():
    turns = [call("big_log"), lambda req: call("read_artifact", uri=offloaded_uri(req), search="disk full"), "done"]
    llm, plugin, runner, session, events = await _run(turns)
    got = _recall_response(events)
    assert got["matches"] == 1 and "line 777" in got["lines"]


async def test_the_recall_tool_is_declared_once_an_original_is_offloaded():
    turns = [call("big_log"), "done"]
    llm, plugin, runner, session, events = await _run(turns)
    tools = [[t.name for t in request_from_llm(r).tools] for r in llm.requests]
    assert tools == [["big_log"], ["big_log", "read_artifact"]]
    assert "read_artifact" in llm.requests[1].tools_dict  # ADK can run it
    assert plugin.packer.recent[1].manifest.cache_break["cause"] == "tool declarations changed"


MEDIUM = "\n".join(f"row {i}: value={i * 3}" for i in range(1, 101))


def medium_log() -> str:
    """Return a log that is saved but kept inline."""
    return MEDIUM


async def test_the_recall_tool_is_declared_when_a_later_result_is_offloaded():
    """Whether a tool result cites its original is carried from call to call (only new messages are read):
    results saved but kept inline leave the tool undeclared; the first replaced one declares it."""
    agent, llm = scripted_agent([call("medium_log"), call("medium_log"), call("big_log"), "done"],
                                tools=[medium_log, big_log], instruction="Work.")
    runner = make_runner(agent, plugins=[ContextPackPlugin(store="memory://offload-later", window_tokens=16_000)])
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    await run_turn(runner, session.id, "check the logs")
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=session.id)
    assert session.state.get("aether:uris")  # the medium results were saved before the big one
    tools = [[t.name for t in request_from_llm(r).tools] for r in llm.requests]
    assert tools == [["big_log", "medium_log"]] * 3 + [["big_log", "medium_log", "read_artifact"]]


async def test_the_recall_tool_declaration_is_small():
    """Issue 11: the recall tool's declaration is well under 100 tokens (it rides on every later call)."""
    from aether_context.content import canonical_json
    from aether_context.tokens import TokenCounter

    llm, plugin, runner, session, events = await _run([call("big_log"), "done"])
    declaration = [t for t in request_from_llm(llm.requests[1]).tools if t.name == "read_artifact"][0].declaration
    assert TokenCounter().count_text(canonical_json(declaration)) < 100


async def test_recall_refuses_a_uri_outside_the_store():
    # the recall tool exists once the session has an offloaded original
    turns = [call("big_log"), call("read_artifact", uri="artifact://other-app/u/s/secret.txt"),
             call("read_artifact", uri="file:///etc/passwd"), "done"]
    llm, plugin, runner, session, events = await _run(turns)
    responses = [r.response for ev in events for r in ev.get_function_responses() if r.name == "read_artifact"]
    assert len(responses) == 2
    assert "refused" in responses[0]["error"] and "not an artifact URI" in responses[1]["error"]


async def test_offload_without_an_artifact_service_uses_the_pack_store(tmp_path):
    turns = [call("big_log"), lambda req: call("read_artifact", uri=offloaded_uri(req), start_line=2999, max_lines=5), "done"]
    llm, plugin, runner, session, events = await _run(turns, artifact_service=False, store=str(tmp_path / "packs"))
    got = _recall_response(events)
    assert "line 3000" in got["lines"]
    assert any(p.name.startswith("v") for p in (tmp_path / "packs" / "artifacts").rglob("v*"))


async def test_a_result_whose_compact_form_is_no_smaller_is_sent_as_it_is():
    """Issue 11: under pressure the offload threshold tightens (down to `min_threshold_tokens`), below
    the compact form's own cap. A JSON result of a few hundred tokens would then be "compacted" into a
    summary quoting it, plus its URI and a note: more tokens than the result, and the recall tool
    declared for nothing. It is saved (folds can cite it) but sent as it is."""
    record = {"reservation_id": "MSJ4OA", "user_id": "amelia_davis_8890", "flights": [
        {"origin": "DFW", "destination": "SEA", "flight_number": f"HAT{n:03d}", "date": "2024-05-22", "price": 100 + n}
        for n in range(12)]}

    def get_reservation() -> dict:
        """Return a reservation."""
        return record

    llm = ScriptedLlm(turns=[call("get_reservation"), "done"])
    agent = LlmAgent(name="agent", model=llm, instruction="Work.", tools=[get_reservation])
    profile = load_profile("default").override(offload={"threshold_tokens": 100, "min_threshold_tokens": 100})
    plugin = ContextPackPlugin(store="memory://offload-small", window_tokens=16_000, profile=profile)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    artifact_service=InMemoryArtifactService(), memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events = [ev async for ev in runner.run_async(user_id="u", session_id=session.id, new_message=types.Content(
        role="user", parts=[types.Part(text="show my reservation")]))]
    sent = [p for m in request_from_llm(llm.requests[1]).messages for p in m.responses if p.name == "get_reservation"]
    assert sent[0].response == {"result": record} or sent[0].response == record
    assert [t.name for t in request_from_llm(llm.requests[1]).tools] == ["get_reservation"]
    assert events


async def test_the_threshold_tightens_only_once_the_recall_tool_is_declared():
    """Issue 11: declaring the recall tool changes the tools, so the whole request is re-processed. The
    first offload must pay for that: under pressure the threshold tightens (down to
    `min_threshold_tokens`) only once a result over the full threshold declared the tool."""
    medium = "\n".join(f"row {i}: order=A{i:05d} status=shipped carrier=ups weight={i % 9}kg" for i in range(60))

    def medium_report() -> str:
        """Return a medium report."""
        return medium

    turns = [call("medium_report"), call("big_log"), call("medium_report"), "done"]
    llm = ScriptedLlm(turns=turns)
    agent = LlmAgent(name="agent", model=llm, instruction="Work.", tools=[medium_report, big_log])
    plugin = ContextPackPlugin(store="memory://offload-tighten", window_tokens=3_000)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    artifact_service=InMemoryArtifactService(), memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events = [ev async for ev in runner.run_async(user_id="u", session_id=session.id, new_message=types.Content(
        role="user", parts=[types.Part(text="check the reports")]))]
    plugin.packer.store.flush()
    replies = [r.response for ev in events for r in ev.get_function_responses() if r.name == "medium_report"]
    tokens = plugin.packer.counter.count_text(medium)
    assert plugin.packer.profile.offload.min_threshold_tokens < tokens < plugin.packer.profile.offload.threshold_tokens
    assert "artifact_uri" not in replies[0]  # before the recall tool exists: sent as it is
    assert "artifact_uri" in replies[1]  # after the big log declared it: the tightened threshold applies


def numbered_log(n: int) -> str:
    """Return the n-th long log."""
    return "\n".join(f"run {n} line {i}: value={i * n} status=ok" for i in range(1, 1501))


class _FreshPacker(ContextPacker):
    """The production packer with its cache emptied before every call: each call computes afresh."""

    async def pack(self, callback_context, llm_request):  # type: ignore[no-untyped-def]
        self.cache.clear()
        return await super().pack(callback_context, llm_request)


async def _without_plugin(packer: ContextPacker) -> list[int]:
    """Two invocations of a tool loop whose results are offloaded; between them the saving of the first result is
    changed (another replica's count, say). `tokens_without_plugin` of every call."""
    first = [call("numbered_log", n=k) for k in (1, 2, 3)] + ["done"]
    llm = ScriptedLlm(turns=first + [call("numbered_log", n=4), call("numbered_log", n=5), "done again"])
    agent = LlmAgent(name="agent", model=llm, instruction="Work.", tools=[numbered_log])
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[ContextPackPlugin(packer=packer)]),
                    session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService(),
                    memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id,
                                    new_message=types.Content(role="user", parts=[types.Part(text="read the logs")])):
        pass
    stored = await runner.session_service.get_session(app_name="app", user_id="u", session_id=session.id)
    saved = dict(await packer.records.get(stored.state, SAVED_STATE_KEY))
    assert len(saved) == 3  # each result was offloaded
    saved[next(iter(saved))] += 1000
    delta: dict = {}
    await packer.records.set(delta, SAVED_STATE_KEY, saved)  # a new record, and the pointer to it
    async for _ in runner.run_async(user_id="u", session_id=session.id, state_delta=delta,
                                    new_message=types.Content(role="user", parts=[types.Part(text="two more")])):
        pass
    packer.store.flush()
    return [r.manifest.tokens_without_plugin for r in packer.recent]


async def test_tokens_without_plugin_carried_from_the_last_call_equal_a_fresh_count():
    """A call looks up the savings of its new tool results only (the total is carried from the last call while
    the savings are the same dict): every call's figure equals the one a packer with an empty cache finds,
    through a new result, a new invocation and a changed saving."""
    carried = await _without_plugin(ContextPacker(store="memory://saved-carried", window_tokens=16_000))
    fresh = await _without_plugin(_FreshPacker(store="memory://saved-fresh", window_tokens=16_000))
    assert len(carried) == 7 and carried == fresh
    assert carried[3] > carried[1] > carried[0] and carried[4] >= carried[3] + 1000  # grew; then the change counted


def test_saved_tokens_read_the_new_keys_of_the_same_dict_and_every_key_of_another():
    from aether_context.adk.packer import _saved_tokens
    from aether_context.content import FunctionResponse, Message
    from aether_context.pipeline.cache import PackCache
    msgs = tuple(Message("user", (FunctionResponse("t", {"r": k}, f"id{k}"),)) for k in range(6))
    keys = [m.responses[0].key for m in msgs]
    saved = {keys[0]: 10, keys[4]: 40}
    cache = PackCache()
    assert in_memo(cache, lambda: _saved_tokens(saved, msgs[:3], "slot")) == 10
    assert in_memo(cache, lambda: _saved_tokens(saved, msgs, "slot")) == 50  # the same dict: the new messages' keys looked up
    assert in_memo(cache, lambda: _saved_tokens({**saved, keys[1]: 5}, msgs, "slot")) == 55  # another dict: every key again


def test_saved_tokens_grown_for_one_slot_leave_another_slots_keys_alone():
    """Two sessions may share their first message object: each slot's carried keys, grown in place, are
    its own (one shared list would take the other session's keys)."""
    from aether_context.adk.packer import _saved_tokens
    from aether_context.content import FunctionResponse, Message
    from aether_context.pipeline.cache import PackCache
    msgs = tuple(Message("user", (FunctionResponse("t", {"r": k}, f"id{k}"),)) for k in range(6))
    saved = {msgs[0].responses[0].key: 10, msgs[4].responses[0].key: 40}
    cache = PackCache()
    assert in_memo(cache, lambda: _saved_tokens(saved, msgs[:3], "slot a")) == in_memo(cache, lambda: _saved_tokens(saved, msgs[:3], "slot b")) == 10
    assert in_memo(cache, lambda: _saved_tokens(saved, msgs, "slot a")) == 50
    keys_of = lambda slot: cache.lookup("carried", (("saved_tokens", slot), id(msgs[0])))[1][1]  # noqa: E731
    assert len(keys_of("slot a")) == 6 and len(keys_of("slot b")) == 3


def test_saved_tokens_that_failed_to_sum_count_no_key_twice():
    """A state value that is not a number fails the sum: the carried keys stay as their items say, so the
    next call counts each key once."""
    import pytest

    from aether_context.adk.packer import _saved_tokens
    from aether_context.content import FunctionResponse, Message
    from aether_context.pipeline.cache import PackCache
    msgs = tuple(Message("user", (FunctionResponse("t", {"r": k}, f"id{k}"),)) for k in range(4))
    keys = [m.responses[0].key for m in msgs]
    cache = PackCache()
    assert in_memo(cache, lambda: _saved_tokens({keys[0]: 10}, msgs[:2], "slot")) == 10
    with pytest.raises(TypeError):
        in_memo(cache, lambda: _saved_tokens({keys[0]: 10, keys[3]: "many"}, msgs, "slot"))
    assert in_memo(cache, lambda: _saved_tokens({keys[0]: 10, keys[3]: 30}, msgs, "slot")) == 40
