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


async def _run(llm, tools, *, window, profile, instruction="Read.", store="memory://cache-test", texts=("go",)):
    agent = LlmAgent(name="agent", model=llm, instruction=instruction, tools=tools)
    plugin = ContextPackPlugin(store=store, window_tokens=window, profile=profile)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    artifact_service=InMemoryArtifactService(), memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
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
    # call 3 follows switch_mode: its system instruction changed; the others only appended
    assert breaks[0] is None and breaks[1] is None and breaks[3] is None
    assert breaks[2]["block"] == "system_instruction" and breaks[2]["tokens"] > 0
    assert manifests[2].block_hashes["system"] != manifests[1].block_hashes["system"]
    assert manifests[2].block_hashes["tools"] == manifests[1].block_hashes["tools"]


async def test_new_invocation_breaks_at_the_payload_and_names_it():
    llm = ScriptedLlm(turns=["first answer", "second answer"])
    plugin, _ = await _run(llm, [read_chunk], window=32_000, profile="default", texts=("one", "two"))
    second = plugin.packer.recent[1].manifest
    assert second.cache_break["block"] == "messages[0]" and "new invocation" in second.cache_break["kind"]


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
    assert 1.15 <= plugin.packer.calibration["scripted-model"] <= 1.25
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


async def test_cache_discipline_switch_rebuilds_every_call_when_off():
    """`cache.stable_prefix: false` packs every call from scratch (the comparison the benchmark makes)."""
    turns = [call("read_chunk", n=i) for i in range(6)] + ["done"]
    results = {}
    for stable in (True, False):
        profile = load_profile("default").override(cache={"stable_prefix": stable})
        plugin, _ = await _run(ScriptedLlm(turns=list(turns)), [read_chunk], window=6_000, profile=profile,
                               store=f"memory://cache-switch-{stable}")
        results[stable] = [r.manifest for r in plugin.packer.recent]
    assert any(m.reused_payload for m in results[True][1:])
    assert not any(m.reused_payload for m in results[False])
    # with the discipline on, later calls keep the earlier request as their prefix more often
    def kept(ms):
        return sum(m.prefix_tokens for m in ms[1:]) / max(1, sum(m.previous_tokens for m in ms[1:]))
    assert kept(results[True]) >= kept(results[False])
