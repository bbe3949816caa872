"""Recovery rebuilds the current call only; calibration and usage count what was really answered."""

from __future__ import annotations

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.genai import types

from aether_context import ContextPackPlugin, TokenCounter, load_profile
from aether_context.adk import request_from_llm
from aether_context.pipeline import request_tokens
from aether_context.testing import ScriptedLlm, call

from conftest import filler, lookup, make_runner, new_session, run_turn

COUNTER = TokenCounter()


def count_request(llm_request) -> int:
    return request_tokens(request_from_llm(llm_request), COUNTER)


def answer_for_latest_question(llm_request) -> str:
    """Answers the question whose marker is in the request (the latest one wins)."""
    text = " ".join(p.text or "" for c in llm_request.contents for p in c.parts or ())
    found = [q for q in ("QUESTION-ONE", "QUESTION-TWO") if q in text]
    return f"answer to {found[-1] if found else 'nothing'}"


async def _session(llm, *, window: int, messages, profile=None):
    agent = LlmAgent(name="agent", model=llm, instruction="Answer.", tools=[lookup])
    plugin = ContextPackPlugin(store="memory://recovery-current", window_tokens=window,
                               profile=profile or load_profile("default").override(offload={"enabled": False}))
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    finals = []
    for text in messages:
        events = await run_turn(runner, sid, text)
        finals.append(events[-1].content.parts[0].text)
    return plugin, finals


async def test_oversized_user_message_is_answered_for_itself():
    llm = ScriptedLlm(model="gemini-2.5-flash", turns=[answer_for_latest_question], max_input_tokens=3_000,
                      prompt_token_counter=count_request)
    huge = "QUESTION-TWO: please read all of this. " + filler(12_000, seed=3)
    plugin, finals = await _session(llm, window=4_000, messages=["QUESTION-ONE: hello?", huge])
    assert finals == ["answer to QUESTION-ONE", "answer to QUESTION-TWO"]
    recovered = [r.manifest for r in plugin.packer.recent if any(f.startswith("recovery_after") for f in r.manifest.flags)]
    assert recovered and recovered[-1].invocation_id != plugin.packer.recent[0].manifest.invocation_id


def read_page(n: int) -> dict:
    """Read page n of the manual."""
    return {"page": n, "text": filler(1_200, seed=n)}


async def test_calibration_is_not_moved_by_a_recovery():
    """The model counts like our counter; packs fit the plugin's window but not the model's limit, so
    recoveries happen: the correction must stay at ~1.0 (the retry's usage is the retry's)."""
    turns = [call("read_page", n=i) for i in range(4)] + ["done"]
    llm = ScriptedLlm(model="gemini-2.5-flash", turns=turns, max_input_tokens=2_500, prompt_token_counter=count_request)
    agent = LlmAgent(name="agent", model=llm, instruction="Answer.", tools=[read_page])
    plugin = ContextPackPlugin(store="memory://recovery-calibration", window_tokens=16_000,
                               profile=load_profile("default").override(offload={"enabled": False}))
    runner = make_runner(agent, plugins=[plugin])
    session_id = await new_session(runner)
    await run_turn(runner, session_id, "read the manual")
    packer = plugin.packer
    assert any(any(f.startswith("recovery_after") for f in r.manifest.flags) for r in packer.recent)
    assert not any(r.manifest.error for r in packer.recent)
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=session_id)
    calibration = session.state["aether:calibration"]  # kept per session (every replica reads it)
    assert 0.9 <= calibration["gemini-2.5-flash"] <= 1.1, calibration
    assert all(0.9 <= u["reported"] / u["estimate"] <= 1.1 for u in packer.usage), list(packer.usage)


async def test_streaming_records_usage_once_per_response():
    llm = ScriptedLlm(model="gemini-2.5-flash", turns=[call("lookup", key="a"), "a long streamed answer " * 5, "second answer"])
    agent = LlmAgent(name="agent", model=llm, instruction="Answer.", tools=[lookup])
    plugin = ContextPackPlugin(store="memory://streaming-usage")
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    partials = 0
    for text in ("first", "second"):
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for event in runner.run_async(user_id="u", session_id=sid, new_message=message,
                                            run_config=RunConfig(streaming_mode=StreamingMode.SSE)):
            partials += bool(event.partial)
    assert partials > 0, "the model did not stream"
    assert len(llm.requests) == 3
    assert len(plugin.packer.usage) == 3
    assert [u["pack_id"] for u in plugin.packer.usage] == [r.manifest.pack_id for r in plugin.packer.recent]


async def test_a_recovery_after_a_failed_pack_assembles_its_inputs_as_a_pack_does(memory_store_url):
    """Packing the oversized message fails open; the recovery repack reads this call's inputs the way a
    pack does, so its manifest carries the edge's flags (here the guessed Ollama window) and its
    response shows the repack."""
    from aether_context.windows import window_flag

    llm = ScriptedLlm(model="ollama/scripted", turns=[answer_for_latest_question], max_input_tokens=3_000,
                      prompt_token_counter=count_request)
    agent = LlmAgent(name="agent", model=llm, instruction="Answer.", tools=[lookup])
    plugin = ContextPackPlugin(store=memory_store_url, profile=load_profile("default").override(offload={"enabled": False}))
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "QUESTION-ONE: hello?")
    events = await run_turn(runner, sid, "QUESTION-TWO: please read all of this. " + filler(12_000, seed=3))
    assert events[-1].content.parts[0].text == "answer to QUESTION-TWO"
    flag = window_flag("ollama/scripted")
    records = list(plugin.packer.recent)
    assert flag and flag in records[0].manifest.flags  # a normal pack of this model is flagged
    failed = [r.manifest for r in records if r.manifest.error]
    recovered = [r.manifest for r in records if any(f.startswith("recovery_after") for f in r.manifest.flags)]
    assert failed and recovered, [r.manifest.flags for r in records]
    assert flag in recovered[-1].flags
    shown = [ev.custom_metadata["aether_context"]["pack_id"] for ev in events
             if ev.custom_metadata and "aether_context" in ev.custom_metadata]
    assert shown[-1] == recovered[-1].pack_id
