"""The ADK edge, end to end: real Runner, App, LlmAgent(ScriptedLlm) and in-memory services."""

from __future__ import annotations

import logging

import pytest
from google.adk.agents.context_cache_config import ContextCacheConfig
from google.adk.memory import InMemoryMemoryService
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.agent_tool import AgentTool

from aether_context.profile import load_profile
from aether_context import ContextPackPlugin, PackStore, context_pack_callback, replay, set_task
from aether_context.adk import request_from_llm
from aether_context.adk.collect import INSTRUCTION_MARKER
from aether_context.content import TextPart
from aether_context.pipeline.render import quote
from aether_context.pipeline import request_tokens
from aether_context.testing import ScriptedLlm, call

from conftest import (fetch_page, filler, lookup, make_runner, new_session, orphan_responses, run_turn,
                      save_report, scripted_agent, strip_continue)

WINDOW = 6_000
HEADER = "CONTEXT PACK"


def session_script(n: int) -> list:
    """Per user turn: one or two tool calls with large results, then a text answer."""
    turns: list = []
    for i in range(n):
        if i % 3 == 2:  # a parallel call: two calls in one model message
            turns.append([call("fetch_page", url=f"https://example.com/{i}"), call("grep_logs", pattern=f"err{i}")])
        elif i % 3 == 1:
            turns.append(call("grep_logs", pattern=f"timeout {i}"))
            turns.append(call("fetch_page", url=f"https://example.com/{i}/more"))
        else:
            turns.append(call("fetch_page", url=f"https://example.com/{i}"))
        turns.append(f"Answer {i}: the page says revenue is up.")
    return turns


def user_texts(n: int) -> list[str]:
    return [f"Question {i}: what does page {i} say about revenue? (be brief)" for i in range(n)]


REQUEST_HEADER = "USER REQUEST (VERBATIM; answer it):"


def payload(request) -> str:
    """The pack payload, or the user's own message when the pack had nothing to add (it is then sent as is).

    Only the message's first part: a closing STATUS may ride on the same message as a further part. Earlier
    invocations' payloads stay in the history as they were sent: this call's is the last one."""
    found = [m.parts[0].text for m in request.messages if m.role == "user" and m.text.startswith(HEADER)]
    if found:
        return found[-1]
    users = [m.parts[0].text for m in request.messages if m.role == "user" and m.text and not m.responses
             and not m.text.startswith(("CONVERSATION SO FAR", "For context:")) and INSTRUCTION_MARKER not in m.text]
    assert users, [m.text[:40] for m in request.messages]
    return users[-1]


def check_requests(llm: ScriptedLlm, packer, window: int, expected_users: list[str] | None = None) -> list:
    """Every request the model received fits, has at most one payload, the user's request verbatim (in the
    payload, or as the message itself when the pack had nothing to add), no orphans. Returns the core requests."""
    limit = window - int(window * packer.profile.floors.slack)
    requests = [request_from_llm(strip_continue(r)) for r in llm.requests]
    for i, r in enumerate(requests):
        assert request_tokens(r, packer.counter) <= limit, (i, request_tokens(r, packer.counter), limit)
        assert orphan_responses(r.messages) == [], i
        text = payload(r)
        if expected_users is not None:
            assert text == expected_users[i] or text.endswith(f"{REQUEST_HEADER}\n{expected_users[i]}"), \
                (i, text[-200:])
    return requests


async def run_session(n: int, store_url: "str | PackStore", window: int = WINDOW, extra_plugins=(), **plugin_kwargs):
    agent, llm = scripted_agent(session_script(n))
    plugin = ContextPackPlugin(store=store_url, window_tokens=window, **plugin_kwargs)
    runner = make_runner(agent, plugins=[plugin, *extra_plugins])
    sid = await new_session(runner)
    expected = []
    for text in user_texts(n):
        before = len(llm.requests)
        await run_turn(runner, sid, text)
        expected += [text] * (len(llm.requests) - before)
    plugin.packer.store.flush()
    return llm, plugin, runner, sid, expected


# ------------------------------------------------------------------------------------------------
# the main session
# ------------------------------------------------------------------------------------------------


async def test_ten_turn_session_fits_and_replays(memory_store_url):
    # offload off: the raw session must outgrow the window, so packing alone has to keep it in
    no_offload = load_profile("default").override(offload={"enabled": False})
    llm, plugin, runner, sid, expected = await run_session(10, memory_store_url, profile=no_offload)
    packer = plugin.packer
    assert len(llm.requests) == len(expected) >= 20
    requests = check_requests(llm, packer, WINDOW, expected)

    # the session outgrew the window: without packing the later requests would not fit
    records = list(packer.recent)
    assert len(records) == len(llm.requests)
    assert max(r.manifest.tokens_before for r in records) > 2 * WINDOW
    assert all(r.manifest.error is None for r in records)

    # one manifest per call; replay gives exactly what the model received
    uris = packer.store.list_manifests("testapp", "u", sid)
    assert len(uris) == len(llm.requests)
    assert sorted(uris) == sorted(r.uri for r in records)
    for record, sent in zip(records, requests):
        assert record.manifest.checksum == sent.checksum
        assert replay(record.uri).checksum == sent.checksum
        assert replay(record.uri) == sent

    # the packer times its own stages beside each record (benchmarks read them; nothing is patched in)
    pipeline = {"collect", "select", "allocate", "fit", "fit_window", "recite", "record"}
    assert all({"inputs", "apply", "total"} | pipeline <= set(r.timings) for r in records)
    assert all(r.timings["total"] >= r.timings["inputs"] + r.timings["apply"] for r in records)


async def test_every_hook_fails_open(memory_store_url):
    """Nothing a hook raises reaches the agent run: each answers None (ADK goes on as without the
    plugin) and logs the failure. A context the hooks cannot read makes each of them raise inside."""
    from aether_context import ContextPacker

    packer = ContextPacker(store=memory_store_url)
    broken = object()  # no session, no state: every hook fails on its first read
    tool = type("T", (), {"name": "lookup"})()
    assert await packer.after_model(broken, None) is None
    assert await packer.recover(broken, None, RuntimeError("input token count exceeds the maximum")) is None
    assert await packer.after_tool(tool, {}, broken, {"ok": True}) is None
    assert await packer.on_tool_error(tool, {}, broken, RuntimeError("boom")) is None


async def test_every_request_keeps_tools_and_system(memory_store_url):
    llm, plugin, *_ = await run_session(4, memory_store_url)
    base = ["fetch_page", "grep_logs", "lookup"]
    recall_from = None
    for i, req in enumerate(llm.requests):
        r = request_from_llm(req)
        names = [t.name for t in r.tools]
        # the recall tool is declared once the session has an offloaded original, and then stays
        if recall_from is None and "read_artifact" in names:
            recall_from = i
        assert names == (base + ["read_artifact"] if recall_from is not None else base), (i, names)
        assert set(req.tools_dict) == set(names)
        assert r.system_instruction.startswith("You are a careful research assistant.")
        assert "CONTEXT PACK" not in r.system_instruction
    assert recall_from is not None and recall_from > 0  # not from the first call: nothing was offloaded yet
    assert plugin.packer.recent[recall_from].manifest.cache_break["cause"] == "tool declarations changed"
    # the system instruction is ADK's own, byte for byte: the same as a run without the plugin
    baseline = await _baseline_requests(1)
    assert {request_from_llm(r).system_instruction for r in llm.requests} == {baseline[0].system_instruction}


async def test_calls_within_an_invocation_extend_the_previous_request(memory_store_url):
    llm, plugin, *_ = await run_session(3, memory_store_url, window=32_000)
    records = list(plugin.packer.recent)
    requests = [request_from_llm(r) for r in llm.requests]
    pairs = 0
    for i in range(1, len(records)):
        m, prev = records[i].manifest, records[i - 1].manifest
        if m.invocation_id != prev.invocation_id:
            assert not m.reused_payload
            continue
        pairs += 1
        assert m.reused_payload
        n = len(requests[i - 1].messages)
        assert requests[i].messages[:n] == requests[i - 1].messages
        if m.cache_break is not None:  # once: the recall tool is declared at the first offloaded result
            assert m.cache_break["cause"] == "tool declarations changed" and "read_artifact" not in prev.tools
            continue
        assert m.prefix_tokens == m.previous_tokens == prev.tokens_after
    assert pairs >= 3


async def test_one_info_line_per_call(memory_store_url, caplog):
    caplog.set_level(logging.INFO, logger="aether_context")
    llm, plugin, *_ = await run_session(3, memory_store_url)
    lines = [r for r in caplog.records if r.name == "aether_context" and r.levelno == logging.INFO]
    assert len(lines) == len(llm.requests)
    for record, line in zip(plugin.packer.recent, lines):
        message = line.getMessage()
        assert record.manifest.pack_id in message
        m = record.manifest
        assert f"sent {m.tokens_after} tokens, ADK alone {m.tokens_without_plugin or m.tokens_before} " in message
    assert not [r for r in caplog.records if r.name.startswith("aether_context") and r.levelno >= logging.WARNING]


async def test_store_grows_by_new_content_only(memory_store_url):
    class ByteCounter(BasePlugin):
        """After the pack plugin: waits for the pack's write and notes the bytes the store wrote."""

        def __init__(self, store: PackStore):
            super().__init__(name="byte_counter")
            self.store = store
            self.seen: list[tuple[int, int, int]] = []  # events, their content bytes, store bytes

        async def before_model_callback(self, *, callback_context, llm_request):
            self.store.flush()
            events = callback_context.session.events
            content = sum(len(ev.content.model_dump_json()) for ev in events if ev.content)
            self.seen.append((len(events), content, self.store.stats().get("bytes", 0)))

    store = PackStore(memory_store_url)
    counter_plugin = ByteCounter(store)
    llm, plugin, *_ = await run_session(8, store, extra_plugins=[counter_plugin])
    seen = counter_plugin.seen
    assert len(seen) == len(llm.requests)
    for (_, content_prev, bytes_prev), (_, content, written) in zip(seen, seen[1:]):
        # what a call writes: its new content (compressed, or less) and a bounded record (issue 17's target)
        assert written - bytes_prev <= (content - content_prev) + 16_000, (content - content_prev, written - bytes_prev)
    # in all: the session's content once plus a bounded record per call, not history x calls
    assert seen[-1][2] <= seen[-1][1] + 16_000 * len(seen)


async def test_runner_close_flushes_background_writes(memory_store_url):
    agent, llm = scripted_agent(session_script(2))
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    for text in user_texts(2):
        await run_turn(runner, sid, text)
    await runner.close()  # calls the plugin's close(), which waits for the store
    store = PackStore(memory_store_url, background=False)
    uris = store.list_manifests()
    assert len(uris) == len(llm.requests)
    assert {replay(u).checksum for u in uris} == {request_from_llm(r).checksum for r in llm.requests}


async def test_runner_close_returns_within_adks_timeout_while_writes_go_on(memory_store_url, caplog):
    """ADK fails `Runner.close` when a plugin's close takes over 5 s: a slow store must not make it fail. What is
    still queued is written later, and the log says so."""
    import threading

    agent, _ = scripted_agent(session_script(1))
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin])
    await run_turn(runner, await new_session(runner), user_texts(1)[0])
    release, written = threading.Event(), []
    plugin.packer.store._writer.submit("a slow write", lambda: (release.wait(30), written.append(True)))
    with caplog.at_level(logging.ERROR, logger="aether_context"):
        await runner.close()  # raises RuntimeError("Failed to close plugins") past ADK's timeout
    assert not written and "still pending" in caplog.text
    release.set()
    assert plugin.packer.store.flush(30) and written


# ------------------------------------------------------------------------------------------------
# agent-level callback
# ------------------------------------------------------------------------------------------------


async def test_agent_callback_works_like_the_plugin(memory_store_url):
    callback = context_pack_callback(store=memory_store_url, window_tokens=WINDOW)
    agent, llm = scripted_agent(session_script(5), before_model_callback=callback)
    runner = make_runner(agent)
    sid = await new_session(runner)
    expected = []
    for text in user_texts(5):
        before = len(llm.requests)
        await run_turn(runner, sid, text)
        expected += [text] * (len(llm.requests) - before)
    packer = callback.packer
    packer.store.flush()
    requests = check_requests(llm, packer, WINDOW, expected)
    records = list(packer.recent)
    assert len(records) == len(requests)
    for record, sent in zip(records, requests):
        assert replay(record.uri).checksum == sent.checksum == record.manifest.checksum
    assert len(packer.store.list_manifests()) == len(requests)


# ------------------------------------------------------------------------------------------------
# fail open
# ------------------------------------------------------------------------------------------------


async def _baseline_requests(n: int) -> list:
    agent, llm = scripted_agent(session_script(n))
    runner = make_runner(agent)
    sid = await new_session(runner)
    for text in user_texts(n):
        await run_turn(runner, sid, text)
    return [request_from_llm(r) for r in llm.requests]


@pytest.mark.parametrize("window, error", [(150, "BudgetError")])  # 150: not even ADK's own first request fits
async def test_fail_open_sends_the_original_request(memory_store_url, caplog, window, error):
    caplog.set_level(logging.INFO, logger="aether_context")
    agent, llm = scripted_agent(session_script(2))
    # offload (a tool hook) is off so the comparison isolates what packing sends
    no_offload = load_profile("default").override(offload={"enabled": False})
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=window, profile=no_offload)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    final = []
    for text in user_texts(2):
        events = await run_turn(runner, sid, text)
        final.append(events[-1].content.parts[0].text)
    assert final == ["Answer 0: the page says revenue is up.", "Answer 1: the page says revenue is up."]

    received = [request_from_llm(r) for r in llm.requests]
    baseline = await _baseline_requests(2)
    assert [r.checksum for r in received] == [r.checksum for r in baseline]
    assert not any(m.text.startswith(HEADER) for r in received for m in r.messages)

    packer = plugin.packer
    packer.store.flush()
    records = list(packer.recent)
    assert len(records) == len(received)
    for record, sent in zip(records, received):
        assert record.manifest.error and record.manifest.error.startswith(error)
        assert record.manifest.checksum == sent.checksum
        assert record.manifest.pack_id.startswith("err_")
        stored = packer.store.load_manifest(record.uri)
        assert stored.error == record.manifest.error
    assert len(packer.store.list_manifests()) == len(received)
    errors = [r for r in caplog.records if r.name == "aether_context" and r.levelno == logging.ERROR]
    assert len(errors) == len(received) and all(r.exc_info for r in errors)


# ------------------------------------------------------------------------------------------------
# multi-agent apps
# ------------------------------------------------------------------------------------------------


async def test_transfer_to_sub_agent(memory_store_url):
    helper, hllm = scripted_agent(session_script(3), name="helper", instruction="You dig into pages.")
    root, rllm = scripted_agent([call("transfer_to_agent", agent_name="helper"), "root answer"], name="root",
                                instruction="You route work.", tools=[lookup], sub_agents=[helper])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(root, plugins=[plugin])
    sid = await new_session(runner)
    texts = user_texts(3)
    for text in texts:
        await run_turn(runner, sid, text)
    packer = plugin.packer
    packer.store.flush()

    assert len(rllm.requests) == 1 and len(hllm.requests) >= 6
    for llm in (rllm, hllm):
        requests = check_requests(llm, packer, WINDOW)
        for r in requests:
            text = payload(r)
            ask = text.split(f"{REQUEST_HEADER}\n", 1)[1] if text.startswith(HEADER) else text
            assert ask in texts  # the user's message, never another agent's quoted turn
    # the root agent's turns reach the helper as quoted context, kept in order
    first_helper = request_from_llm(hllm.requests[0])
    assert any(m.text.startswith("For context:") for m in first_helper.messages)
    records = list(packer.recent)
    assert {r.manifest.agent for r in records} == {"root", "helper"}
    assert all(r.manifest.error is None for r in records)
    sent = {request_from_llm(r).checksum for r in [*rllm.requests, *hllm.requests]}
    assert {replay(r.uri).checksum for r in records} == sent


async def test_agent_tool(memory_store_url):
    helper, hllm = scripted_agent([call("fetch_page", url="https://example.com/x"), "helper done"], name="helper",
                                  instruction="You fetch pages.")
    root, rllm = scripted_agent([call("helper", request="fetch example.com/x"), "root done"], name="root",
                                tools=[AgentTool(agent=helper)])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(root, plugins=[plugin])
    sid = await new_session(runner)
    events = await run_turn(runner, sid, "please get example.com/x")
    assert events[-1].content.parts[0].text == "root done"
    packer = plugin.packer
    packer.store.flush()
    check_requests(rllm, packer, WINDOW, ["please get example.com/x"] * 2)
    check_requests(hllm, packer, WINDOW, ["fetch example.com/x"] * 2)
    assert [r.manifest.agent for r in packer.recent] == ["root", "helper", "helper", "root"]
    assert all(replay(r.uri).checksum == r.manifest.checksum for r in packer.recent)


# ------------------------------------------------------------------------------------------------
# static instruction and context caching
# ------------------------------------------------------------------------------------------------


async def test_static_instruction_with_context_cache(memory_store_url):
    agent, llm = scripted_agent(session_script(3), static_instruction="You are a STATIC research assistant.",
                                instruction="Dynamic instruction for {user_name}.")
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin],
                         context_cache_config=ContextCacheConfig(cache_intervals=5, ttl_seconds=600, min_tokens=0))
    sid = await new_session(runner, state={"user_name": "Ada"})
    for text in user_texts(3):
        await run_turn(runner, sid, text)
    plugin.packer.store.flush()
    requests = check_requests(llm, plugin.packer, WINDOW)
    for r in requests:
        instr = [m for m in r.messages if INSTRUCTION_MARKER in m.text]
        assert len(instr) == 1
        assert "Dynamic instruction for Ada." in instr[0].text
        assert INSTRUCTION_MARKER not in payload(r)
        assert r.system_instruction.startswith("You are a STATIC research assistant.")
    for a, b in zip(requests, requests[1:]):
        assert a.system_instruction == b.system_instruction
        # the tools change once, when the recall tool joins (the first offloaded result), and are stable otherwise
        assert a.tools == b.tools or (b.tools == a.tools + tuple(t for t in b.tools if t.name == "read_artifact")
                                      and "read_artifact" not in [t.name for t in a.tools])
    assert [t.name for t in requests[-1].tools][-1] == "read_artifact"
    configs = [(r.config.system_instruction, [t.model_dump(exclude_none=True) for t in r.config.tools or []])
               for r in llm.requests]
    assert all(c[0] == configs[0][0] for c in configs)
    assert len({repr(c) for c in configs}) == 2  # before and after the recall tool joined
    assert all(r.manifest.error is None for r in plugin.packer.recent)


# ------------------------------------------------------------------------------------------------
# task, step tools, memory, artifacts
# ------------------------------------------------------------------------------------------------


async def test_task_from_initial_state(memory_store_url):
    agent, llm = scripted_agent(["Here is the plan."])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin])
    state: dict = {}
    set_task(state, goal="Ship the Q3 report", step="Draft the outline",
             acceptance=["has three sections", "cites revenue"], constraints="no jargon")
    assert state["aether:goal"] == "Ship the Q3 report" and state["aether:constraints"] == "no jargon"
    sid = await new_session(runner, state=state)
    await run_turn(runner, sid, "Start please.")
    text = payload(request_from_llm(llm.requests[0]))
    for piece in ("GOAL: Ship the Q3 report", "STEP: Draft the outline", "CONSTRAINTS:\n- no jargon",
                  "ACCEPTANCE:\n- [ ] has three sections\n- [ ] cites revenue"):
        assert piece in text
    flags = plugin.packer.recent[0].manifest.flags
    assert "task_missing_goal" not in flags and "task_missing_acceptance" not in flags


async def test_set_task_in_before_agent_callback_and_step_tools(memory_store_url):
    def plan(callback_context):
        set_task(callback_context.state, goal="Find the outage cause", step="Read the status page",
                 acceptance=["names the failing service"], tools=["fetch_page", "not_a_tool"], risk=0.5)

    agent, llm = scripted_agent([call("fetch_page", url="https://status.example.com"), "It was the cache."],
                                before_agent_callback=plan)
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    events = await run_turn(runner, sid, "Why did the site go down?")
    assert events[-1].content.parts[0].text == "It was the cache."
    assert len(llm.requests) == 2
    # the recall tool joins once the page was offloaded, and the step filter never removes it
    expected_tools = [["fetch_page"], ["fetch_page", "read_artifact"]]
    for req, expected in zip(llm.requests, expected_tools):
        r = request_from_llm(req)
        text = payload(r)
        assert "GOAL: Find the outage cause" in text and "- [ ] names the failing service" in text
        assert [t.name for t in r.tools] == expected
        assert set(req.tools_dict) == set(expected)
        decls = [fd.name for t in req.config.tools for fd in (t.function_declarations or [])]
        assert decls == expected
    # the tool was really executed with the filtered tools_dict
    responses = [p.function_response for c in llm.requests[1].contents for p in c.parts or [] if p.function_response]
    assert responses and responses[-1].name == "fetch_page"
    m = plugin.packer.recent[0].manifest
    assert "unknown_step_tool:not_a_tool" in m.flags
    assert m.tools == ["fetch_page"] and m.layer_budgets["tools"].dropped == 2
    assert m.allocation["signals"]["risk_weight"] == 0.5
    m = plugin.packer.recent[1].manifest
    assert m.tools == ["fetch_page", "read_artifact"] and m.layer_budgets["tools"].dropped == 2


CODENAME = "The launch codename is BLUEBIRD and it ships in May."


async def remembered(fact: str) -> InMemoryMemoryService:
    """A memory service holding one earlier session in which the agent said `fact`."""
    memory = InMemoryMemoryService()
    earlier, _ = scripted_agent([fact])
    first = make_runner(earlier, memory_service=memory)
    old_sid = await new_session(first)
    await run_turn(first, old_sid, "Remind me of the rocket launch codename.")
    await memory.add_session_to_memory(
        await first.session_service.get_session(app_name="testapp", user_id="u", session_id=old_sid))
    return memory


async def test_memory_service_hits_appear_in_memory(memory_store_url):
    memory = await remembered(CODENAME)
    agent, llm = scripted_agent(["It is BLUEBIRD."])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin], memory_service=memory)
    sid = await new_session(runner)
    await run_turn(runner, sid, "What is the launch codename?")
    text = payload(request_from_llm(llm.requests[0]))
    memory_section = text[text.index("MEMORY ("):text.index("USER REQUEST")]
    assert CODENAME in memory_section
    manifest = plugin.packer.recent[0].manifest
    assert manifest.selected["memory"] and all(s["source"] == "memory_service" for s in manifest.selected["memory"])


async def test_memory_can_be_switched_off(memory_store_url):
    """The same memory and question as test_memory_service_hits_appear_in_memory, with memory off."""
    memory = await remembered(CODENAME)
    agent, llm = scripted_agent(["ok"])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW, use_memory=False)
    runner = make_runner(agent, plugins=[plugin], memory_service=memory)
    await run_turn(runner, await new_session(runner), "What is the launch codename?")
    assert "MEMORY (" not in payload(request_from_llm(llm.requests[0]))


async def test_saved_artifacts_become_evidence(memory_store_url):
    agent, llm = scripted_agent([call("save_report", title="Q3"), "Saved.", "The report says revenue grew."],
                                tools=[save_report, lookup])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "Write the Q3 report.")
    await run_turn(runner, sid, "What does the report say about revenue?")
    plugin.packer.store.flush()
    uri = f"artifact://testapp/u/{sid}/report.txt#v0"
    last = request_from_llm(llm.requests[-1])
    text = payload(last)
    evidence = text[text.index("EVIDENCE ("):text.index("USER REQUEST")]
    assert uri in evidence
    assert "report.txt: Q3: quarterly revenue grew 12 percent" in evidence
    manifest = plugin.packer.recent[-1].manifest
    assert manifest.artifact_uris == [uri]
    assert any(s["id"] == "artifact:report.txt" and s["source"] == "artifact" for s in manifest.selected["evidence"])
    stored = plugin.packer.store.load_manifest(plugin.packer.recent[-1].uri)
    assert stored.artifact_uris == [uri]


async def test_opening_request_is_pinned_once_it_leaves_the_verbatim_history(memory_store_url):
    """Without a goal in state, the session's first message is the task: it stays in every call."""
    opening = "Migrate the billing service to the new ledger API. Keep every invoice total identical.\n" + filler(1400, seed=3)
    n = 8
    agent, llm = scripted_agent(session_script(n))
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    for text in [opening] + user_texts(n)[1:]:
        await run_turn(runner, sid, text)
    plugin.packer.store.flush()
    requests = check_requests(llm, plugin.packer, WINDOW)
    head = opening[:200]
    cap = min(plugin.packer.profile.task.opening_max_tokens, int(WINDOW * plugin.packer.profile.task.opening_max_share))
    pinned = 0
    for r, record in zip(requests, plugin.packer.recent):
        full = "\n".join(m.text for m in r.messages)
        assert head in full or quote(head) in full  # the task statement is in every request (verbatim or quoted)
        # the block leads the messages, or follows the payload when it holds this invocation's own turns
        block = next((m.text for m in r.messages[:2] if m.text.startswith("CONVERSATION SO FAR")), "")
        assert "OPENING REQUEST:" not in payload(r)  # pinned in the compaction block, not in the payload
        if "\nOPENING REQUEST:\n" in block:
            pinned += 1
            assert "opening_request_pinned" in record.manifest.flags
            section = block.split("\nOPENING REQUEST:\n", 1)[1]
            for header in ("SUMMARY:", "TURNS:", "KNOWN VALUES:"):
                section = section.split(f"\n{header}", 1)[0]
            assert all(line.startswith("  ") for line in section.splitlines())  # quoted data
            section = "\n".join(line[2:] for line in section.splitlines())
            assert section.startswith(head) and "tokens omitted" in section  # cut middle-out, head kept
            assert plugin.packer.counter.count_text(section) <= cap < plugin.packer.counter.count_text(opening)
            # never twice: a pinned opening request is not also kept verbatim in the history
            assert sum(m.text == opening for m in r.messages) == 0
        else:
            assert "opening_request_pinned" not in record.manifest.flags
    assert pinned > 0  # the window is small: the first message left the verbatim history
    assert "OPENING REQUEST:\n" not in payload(requests[0])  # the first call's request is the opening itself
    # with no goal set, a status would recite the opening request's first line once history was compacted,
    # but never right after the user spoke: the status goes only on user text (never on a function
    # response), so a chat without tool loops gets none
    statuses = [p.text for r in requests for m in r.messages for p in m.parts
                if isinstance(p, TextPart) and p.text.startswith("STATUS")]
    assert all(s.startswith("STATUS — goal: Migrate the billing service") for s in statuses)
    for r, record in zip(requests, plugin.packer.recent):
        pressed = any(f.startswith("context_pressure") for f in record.manifest.flags)  # due whatever the history
        if record.manifest.recited and not pressed:
            assert any(m.text.startswith("CONVERSATION SO FAR") for m in r.messages[:2])  # compacted before any recital
    assert not any("STATUS" in m.text for m in requests[0].messages)


async def test_a_goal_in_state_replaces_the_opening_request(memory_store_url):
    agent, llm = scripted_agent(session_script(6))
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=WINDOW)
    runner = make_runner(agent, plugins=[plugin])
    state: dict = {}
    set_task(state, goal="Answer the revenue questions")
    sid = await new_session(runner, state=state)
    for text in user_texts(6):
        await run_turn(runner, sid, text)
    plugin.packer.store.flush()
    requests = check_requests(llm, plugin.packer, WINDOW)
    assert all("OPENING REQUEST:" not in payload(r) for r in requests)


def test_a_rewrite_that_fails_leaves_the_request_as_it_came():
    """apply_request builds everything before assigning anything, so fail-open really sends ADK's request."""
    from dataclasses import replace as dc_replace

    from google.adk.models.llm_request import LlmRequest
    from google.genai import types

    from aether_context.adk.convert import apply_request
    from aether_context.content import ToolSpec

    llm_request = LlmRequest(model="gemini-2.5-flash", contents=[
        types.Content(role="user", parts=[types.Part(text="hello")])])
    llm_request.config.system_instruction = "be brief"
    before = llm_request.model_dump(mode="json")
    core = request_from_llm(llm_request)
    broken = dc_replace(core, system_instruction="rewritten", tools=(ToolSpec("bad", {"name": {"not": "a name"}}),))
    with pytest.raises(Exception):
        apply_request(llm_request, broken, declared=set(), original=core)
    assert llm_request.model_dump(mode="json") == before


async def test_a_kept_payload_reports_its_memory_within_budget(memory_store_url):
    """Within an invocation the payload is kept as sent, Memory included: the receipt's Memory budget is
    what the kept lines use, not 0 with the lines over it."""
    memory = await remembered(CODENAME)
    agent, llm = scripted_agent([call("lookup", key=f"item number {i}") for i in range(6)] + ["It is BLUEBIRD."])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=1500)  # the loop's turns outgrow Memory's share
    runner = make_runner(agent, plugins=[plugin], memory_service=memory)
    await run_turn(runner, await new_session(runner), "What is the launch codename?")
    first, *kept = (r.manifest for r in plugin.packer.recent)
    assert first.layer_budgets["memory"].used > 0 and all(m.reused_payload for m in kept)
    for m in kept:
        assert m.layer_budgets["memory"].budget == m.layer_budgets["memory"].used == first.layer_budgets["memory"].used


async def test_a_pack_past_its_deadline_fails_open_without_waiting(memory_store_url):
    """A build slower than `pack_timeout` is not waited for: the model gets ADK's own request at once, the
    call's manifest records the timeout, and the next call packs as usual."""
    import time

    from google.adk.agents import LlmAgent

    from aether_context.tokens import TokenCounter

    class Slow(TokenCounter):
        slow = True

        def count_message(self, message):
            if self.slow:
                time.sleep(0.3)
            return super().count_message(message)

    counter = Slow()
    llm = ScriptedLlm(turns=["first", "second"])
    plugin = ContextPackPlugin(store=memory_store_url, counter=counter, pack_timeout=0.2)
    runner = make_runner(LlmAgent(name="a", model=llm, instruction="Answer."), plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "hello there")
    first = plugin.packer.recent[-1].manifest
    assert first.error and first.error.startswith("PackTimeout")
    assert request_from_llm(llm.requests[0]).messages[-1].text == "hello there"  # ADK's request, unchanged
    counter.slow = False
    plugin.packer.pack_timeout = 600  # the next call may queue behind the abandoned build on the pack thread
    await run_turn(runner, sid, "and again")
    assert plugin.packer.recent[-1].manifest.error is None


async def test_store_write_failures_show_in_the_next_manifest(tmp_path):
    """A store that cannot be written: the run goes on, results stay whole (no URI that was never saved), and
    the next call's manifest and event metadata say that writes failed."""
    from google.adk.agents import LlmAgent

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    llm = ScriptedLlm(turns=[call("fetch_page", url="https://x/1"), "read", "again"])
    plugin = ContextPackPlugin(store=str(blocker / "packs"), window_tokens=16_000)
    runner = make_runner(LlmAgent(name="a", model=llm, instruction="Answer.", tools=[fetch_page]), plugins=[plugin])
    sid = await new_session(runner)
    events = await run_turn(runner, sid, "fetch it")
    await run_turn(runner, sid, "and again")
    flags = [f for r in plugin.packer.recent for f in r.manifest.flags]
    assert any(f.startswith("store_write_failed") for f in flags)
    shown = [e.custom_metadata["aether_context"] for e in events if e.custom_metadata]
    assert shown  # the pack still shows on its event
    for req in llm.requests:  # no URI of an original that was never saved
        for m in request_from_llm(req).messages:
            assert "artifact://" not in m.text and all("artifact_uri" not in r.response for r in m.responses)
