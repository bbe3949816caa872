"""Cache discipline (cache-break events, hit share) and calibrated token counts, through a real Runner."""

from __future__ import annotations

import io

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.memory import InMemoryMemoryService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from aether_context import ContextPackPlugin, TokenCounter, load_profile
from aether_context.adk import request_from_llm
from aether_context.cli import main as cli_main
from aether_context.pipeline import request_tokens
from aether_context.testing import ScriptedLlm, call

COUNTER = TokenCounter()


def read_chunk(n: int) -> str:
    """Return chunk n of a long document."""
    return f"chunk {n}: " + " ".join(f"w{n}_{i}" for i in range(500))


def switch_mode(tool_context: ToolContext) -> dict:
    """Switch the agent to v2."""
    tool_context.state["v2"] = True
    return {"ok": True}


def _instruction(ctx) -> str:
    return "You are the v2 agent." if ctx.state.get("v2") else "You are the v1 agent."


async def _run(llm, tools, *, window, profile, instruction="Read.", store="memory://cache-test", texts=("go",),
               state=None):
    agent = LlmAgent(name="agent", model=llm, instruction=instruction, tools=tools)
    plugin = ContextPackPlugin(store=store, window_tokens=window, profile=profile)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    artifact_service=InMemoryArtifactService(), memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u", state=state)
    for text in texts:
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            pass
    plugin.packer.store.flush()
    return plugin, session


async def test_changed_system_instruction_is_a_named_cache_break_and_unchanged_calls_are_not():
    llm = ScriptedLlm(turns=[call("read_chunk", n=1), call("switch_mode"), call("read_chunk", n=2), "done"])
    plugin, _ = await _run(llm, [read_chunk, switch_mode], window=32_000, profile="default", instruction=_instruction)
    manifests = [r.manifest for r in plugin.packer.recent]
    assert len(manifests) == 4
    breaks = [m.cache_break for m in manifests]
    # call 2 follows the first offloaded result: the recall tool is declared from then on (a named break, once);
    # call 3 follows switch_mode: its system instruction changed; the others only appended
    assert breaks[0] is None and breaks[3] is None
    assert breaks[1]["block"] == "tools" and breaks[1]["cause"] == "tool declarations changed"
    assert "read_artifact" not in manifests[0].tools and "read_artifact" in manifests[1].tools
    assert breaks[2]["cause"] == "system instruction changed"
    assert breaks[2]["block"] == "system_instruction" and breaks[2]["tokens"] > 0
    assert manifests[2].block_hashes["system"] != manifests[1].block_hashes["system"]
    assert manifests[2].block_hashes["tools"] == manifests[1].block_hashes["tools"]


async def test_a_new_invocation_without_payload_appends():
    """No task, nothing to add: the first turn went out as ADK built it, so the second one just appends."""
    llm = ScriptedLlm(turns=["first answer", "second answer"])
    plugin, _ = await _run(llm, [read_chunk], window=32_000, profile="default", texts=("one", "two"))
    first, second = (request_from_llm(r) for r in llm.requests)
    m = plugin.packer.recent[1].manifest
    assert second.messages[:len(first.messages)] == first.messages
    assert [x.text for x in second.messages] == ["one", "first answer", "two"]
    assert m.cache_break is None and m.prefix_tokens == m.previous_tokens > 0


async def test_a_new_invocation_keeps_the_previous_payload_as_sent():
    """Issue 11: with a task the first turn's user message went out inside the payload (with the closing
    status on it); the next invocation sends that payload again as it was sent, so its request appends
    to the last one (no break, the whole previous request is the cached prefix)."""
    from aether_context import set_task

    state: dict = {}
    set_task(state, goal="Answer the user's questions")
    llm = ScriptedLlm(turns=["first answer", "second answer", "third answer"])
    plugin, _ = await _run(llm, [read_chunk], window=32_000, profile="default", texts=("one", "two", "three"),
                           state=state)
    first, second, third = (request_from_llm(r) for r in llm.requests)
    assert first.messages[0].text.startswith("CONTEXT PACK")
    assert second.messages[:len(first.messages)] == first.messages
    assert third.messages[:len(second.messages)] == second.messages
    assert second.messages[-1].text.startswith("CONTEXT PACK") and "two" in second.messages[-1].text
    for r in list(plugin.packer.recent)[1:]:
        m = r.manifest
        assert m.cache_break is None and m.prefix_tokens == m.previous_tokens > 0


async def test_calibration_converges_and_no_call_overflows(tmp_path):
    window = 8000

    def model_count(llm_request) -> int:  # the "model" counts 20 % more than our tokenizer
        return int(1.2 * request_tokens(request_from_llm(llm_request), COUNTER))

    turns = [call("read_chunk", n=i) for i in range(16)] + ["done"]
    llm = ScriptedLlm(turns=turns, prompt_token_counter=model_count, max_input_tokens=window)
    profile = load_profile("default").override(recovery={"enabled": False}, offload={"enabled": False})
    plugin, session = await _run(llm, [read_chunk], window=window, profile=profile, store=str(tmp_path / "packs"))
    usage = list(plugin.packer.usage)
    assert len(usage) == len(llm.requests) == 17
    assert all(u["reported"] <= window for u in usage)  # the model never rejected a request
    assert 1.15 <= usage[-1]["calibration"] <= 1.25  # kept in session state (aether:calibration)
    last = plugin.packer.recent[-1].manifest
    assert last.calibration > 1.1 and last.packed_for < window
    # the timeline reads manifests and usage back from the store
    out = io.StringIO()
    assert cli_main(["timeline", str(tmp_path / "packs"), "--session", session.id], out=out) == 0
    text = out.getvalue()
    assert text.count("pk_") == 17 and "cache hit share" in text


async def test_cached_tokens_give_the_cache_hit_share(tmp_path):
    llm = ScriptedLlm(turns=[call("read_chunk", n=1), "done"], prompt_token_counter=lambda r: 1000, cached_tokens=600)
    plugin, session = await _run(llm, [read_chunk], window=32_000, profile="default", store=str(tmp_path / "p"))
    out = io.StringIO()
    cli_main(["timeline", str(tmp_path / "p")], out=out)
    assert "cached 1200 (cache hit share 60.0%)" in out.getvalue()


def open_db(table: str) -> dict:
    """Open a table of the document's database."""
    return {"error": f"OperationalError: no such table: {table}"}


async def test_cache_discipline_switch_rebuilds_every_call_when_off():
    """`cache.stable_prefix: false` packs every call from scratch (the comparison the benchmark makes).

    With a task the payload has FAILURES SO FAR, which grows with each failing call: rebuilt, the
    payload changes under the later messages; kept as sent, the new failures ride in the closing status."""
    from aether_context import set_task

    turns = [c for i in range(6) for c in (call("read_chunk", n=i), call("open_db", table=f"t{i}"))] + ["done"]
    results = {}
    for stable in (True, False):
        state: dict = {}
        set_task(state, goal="Read the document and open its tables")
        profile = load_profile("default").override(cache={"stable_prefix": stable})
        plugin, _ = await _run(ScriptedLlm(turns=list(turns)), [read_chunk, open_db], window=6_000, profile=profile,
                               store=f"memory://cache-switch-{stable}", state=state)
        results[stable] = [r.manifest for r in plugin.packer.recent]
    assert any(m.reused_payload for m in results[True][1:])
    assert not any(m.reused_payload for m in results[False])
    # with the discipline on, the only breaks are the recall tool's arrival and compactions
    causes = {m.cache_break["cause"].split(" (")[0] for m in results[True] if m.cache_break}
    assert causes <= {"tool declarations changed", "compaction"}, causes
    rebuilt = [m.cache_break["cause"] for m in results[False] if m.cache_break]
    assert any(c != "tool declarations changed" and not c.startswith("compaction") for c in rebuilt), rebuilt

    # ... and later calls keep the earlier request as their prefix more often
    def kept(ms):
        return sum(m.prefix_tokens for m in ms[1:]) / max(1, sum(m.previous_tokens for m in ms[1:]))
    assert kept(results[True]) > kept(results[False])
