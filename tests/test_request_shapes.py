"""Request shapes real apps send (Gemini thinking, every part kind) go through the pack intact."""

from __future__ import annotations

import pytest
from google.genai import types

from aether_context import ContextPackPlugin
from aether_context.adk.convert import _from_part, _to_part, request_from_llm
from aether_context.content import FunctionCall, FunctionResponse, Message, TextPart
from aether_context.pipeline.inputs import group_turns
from aether_context.testing import ScriptedLlm

from conftest import lookup, make_runner, new_session, run_turn, strip_continue


def _kinds(content: types.Content) -> list[str]:
    out = []
    for p in content.parts or ():
        kind = ("call" if p.function_call else "response" if p.function_response else "text" if p.text is not None
                else "other")
        out.append(kind + ("+sig" if p.thought_signature else ""))
    return out


async def test_thought_signed_call_keeps_its_response(memory_store_url):
    """The issue's repro: a Gemini thinking model's signed call still has its response after it."""
    from google.adk.agents import LlmAgent

    first = types.Part(function_call=types.FunctionCall(name="lookup", args={"key": "k"}), thought_signature=b"sig")
    llm = ScriptedLlm(model="gemini-2.5-flash", turns=[first, "done"])
    agent = LlmAgent(name="agent", model=llm, instruction="Look things up.", tools=[lookup])
    plugin = ContextPackPlugin(store=memory_store_url)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "what is k?")
    plugin.packer.store.flush()
    assert len(llm.requests) == 2
    contents = strip_continue(llm.requests[1]).contents
    i = next(k for k, c in enumerate(contents) if any(p.function_call for p in c.parts or ()))
    assert contents[i].role == "model" and _kinds(contents[i]) == ["call+sig"]
    assert contents[i].parts[0].thought_signature == b"sig"
    assert contents[i + 1].role == "user" and _kinds(contents[i + 1]) == ["response"]
    assert contents[i + 1].parts[0].function_response.name == "lookup"
    assert not any("no longer in the history" in (p.text or "") for c in contents for p in c.parts or ())
    assert not plugin.packer.recent[-1].manifest.error


PARTS = [
    types.Part(function_call=types.FunctionCall(name="f", args={"b": 1, "a": [1, 2]}, id="c1"), thought_signature=b"\x00s\xff"),
    types.Part(function_call=types.FunctionCall(name="f", args={}, id=None)),
    types.Part(function_response=types.FunctionResponse(name="f", response={"ok": True}, id="c1")),
    types.Part(function_response=types.FunctionResponse(
        name="shot", response={"ok": 1},
        parts=[types.FunctionResponsePart(inline_data=types.FunctionResponseBlob(mime_type="image/png", data=b"\x89P"))])),
    types.Part(text="plain"),
    types.Part(text="signed text", thought_signature=b"t"),
    types.Part(text="a thought", thought=True),
    types.Part(text="a signed thought", thought=True, thought_signature=b"u"),
    types.Part(file_data=types.FileData(file_uri="gs://b/v.mp4", mime_type="video/mp4"),
               video_metadata=types.VideoMetadata(start_offset="1s", end_offset="5s", fps=1.0)),
    types.Part(executable_code=types.ExecutableCode(code="print(1)", language=types.Language.PYTHON)),
    types.Part(code_execution_result=types.CodeExecutionResult(outcome=types.Outcome.OUTCOME_OK, output="1\n")),
    types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG\r\n")),
    types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG", display_name="shot.png")),
]


@pytest.mark.parametrize("part", PARTS, ids=lambda p: ",".join(sorted(p.model_dump(exclude_none=True))))
def test_every_part_kind_round_trips(part):
    core = _to_part(part)
    assert _from_part(core) == part
    again = Message.from_json(Message("model", (core,)).to_json()).parts[0]
    assert again == core and _from_part(again) == part


def test_signed_call_is_a_call():
    core = _to_part(PARTS[0])
    assert isinstance(core, FunctionCall) and core.name == "f" and core.id == "c1"
    assert isinstance(_to_part(PARTS[5]), TextPart)


def test_parts_without_extras_keep_their_digest():
    """Unsigned parts serialise as before, so recorded checksums still replay."""
    assert FunctionCall("f", {"a": 1}).to_json() == {"function_call": {"name": "f", "args": {"a": 1}, "id": None}}
    assert TextPart("x").to_json() == {"text": "x"}


def test_pairing_by_id_then_name():
    calls = Message("model", (FunctionCall("f", {"i": 1}, "a"), FunctionCall("f", {"i": 2}, "b")))
    # responses out of order, by id: both answered, one turn
    resp = Message("user", (FunctionResponse("f", {"r": 2}, "b"), FunctionResponse("f", {"r": 1}, "a")))
    assert [len(t.messages) for t in group_turns([calls, resp])] == [2]
    # responses without ids (as in a request): by name and position
    bare = Message("model", (FunctionCall("f"), FunctionCall("g")))
    r1, r2 = Message("user", (FunctionResponse("g"),)), Message("user", (FunctionResponse("f"),))
    assert [len(t.messages) for t in group_turns([bare, r1, r2])] == [3]


def test_request_with_parallel_signed_calls_converts_losslessly():
    from google.adk.models.llm_request import LlmRequest

    from aether_context.adk.convert import to_content

    contents = [
        types.Content(role="user", parts=[types.Part(text="go")]),
        types.Content(role="model", parts=[PARTS[6], PARTS[0],
                                           types.Part(function_call=types.FunctionCall(name="g", args={"x": 1}))]),
        types.Content(role="user", parts=[PARTS[2], types.Part(function_response=types.FunctionResponse(name="g", response={}))]),
    ]
    request = request_from_llm(LlmRequest(model="gemini-2.5-pro", contents=contents))
    assert [to_content(m) for m in request.messages] == contents
    turns = group_turns(request.messages)
    assert [len(t.messages) for t in turns] == [1, 2] and not turns[1].is_orphan_response


async def test_sub_agent_reachable_under_a_step_tool_scope(memory_store_url):
    """A step's tool list restricts the app's tools; ADK's transfer tool and the recall tool stay."""
    from google.adk.agents import LlmAgent

    from aether_context import set_task
    from aether_context.testing import call

    helper_llm = ScriptedLlm(turns=["helper here: done"])
    helper = LlmAgent(name="helper", model=helper_llm, instruction="Help.", description="Handles refunds.")
    root_llm = ScriptedLlm(turns=[call("transfer_to_agent", agent_name="helper"), "back"])
    root = LlmAgent(name="root", model=root_llm, instruction="Route.", tools=[lookup], sub_agents=[helper])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=32_000)
    runner = make_runner(root, plugins=[plugin])
    state: dict = {}
    set_task(state, goal="Refund order 7", step="Route the request", tools=["lookup"])
    sid = await new_session(runner, state=state)
    events = await run_turn(runner, sid, "I want a refund for order 7")
    plugin.packer.store.flush()
    declared = {fd.name for t in root_llm.requests[0].config.tools or () for fd in (t.function_declarations or ())}
    assert {"lookup", "transfer_to_agent"} <= declared
    assert "transfer_to_agent" in root_llm.requests[0].tools_dict
    assert len(helper_llm.requests) == 1
    assert any(e.author == "helper" and e.content and "helper here" in (e.content.parts[0].text or "") for e in events)
    assert not any(m.manifest.error for m in plugin.packer.recent)


def test_framework_tools_named():
    from google.adk.models.llm_request import LlmRequest
    from google.adk.tools import FunctionTool, exit_loop
    from google.adk.tools.transfer_to_agent_tool import TransferToAgentTool

    from aether_context.adk.collect import framework_tools

    request = LlmRequest(model="m")
    request.tools_dict = {"lookup": FunctionTool(lookup), "exit_loop": FunctionTool(exit_loop),
                          "transfer_to_agent": TransferToAgentTool(agent_names=["a"])}
    assert framework_tools(request) == ["exit_loop", "transfer_to_agent"]


async def test_second_version_of_an_artifact_is_seen_in_the_next_pack(memory_store_url):
    from conftest import save_report, scripted_agent

    agent, llm = scripted_agent([call_part("save_report", title="Q3"), "Saved.", call_part("save_report", title="Q4"),
                                 "Saved again.", "Answer."], tools=[save_report, lookup])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=32_000)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "Write the Q3 report.")
    await run_turn(runner, sid, "Now write the Q4 report over it.")
    await run_turn(runner, sid, "What does the report say?")
    plugin.packer.store.flush()
    text = " ".join(p.text or "" for c in llm.requests[-1].contents for p in c.parts or ())
    assert "report.txt#v1" in text and "report.txt: Q4:" in text
    assert "#v0" not in text and "report.txt: Q3:" not in text
    # (within the invocation that saved it the pack payload stays frozen for the prompt cache)
    assert plugin.packer.recent[-1].manifest.artifact_uris == [f"artifact://testapp/u/{sid}/report.txt#v1"]


async def test_new_version_saved_mid_invocation_reaches_the_next_model_call(memory_store_url):
    """A tool saves report.txt v1 inside a tool loop: the very next call of that invocation cites v1
    (its text and #v1), not v0; the rebuild is one cache break naming the item, and the call after
    it extends the request again."""
    from conftest import save_report, scripted_agent

    agent, llm = scripted_agent([call_part("save_report", title="Q3"), "Saved.", call_part("save_report", title="Q4"),
                                 call_part("lookup", key="k"), "Done."], tools=[save_report, lookup])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=32_000)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "Write the Q3 report.")
    await run_turn(runner, sid, "Now write the Q4 report over it, then look up k.")
    plugin.packer.store.flush()
    assert len(llm.requests) == 5

    def text(i: int) -> str:
        return " ".join(p.text or "" for c in llm.requests[i].contents for p in c.parts or ())

    assert "report.txt#v0" in text(2) and "report.txt: Q3:" in text(2)  # the invocation's first call: v0
    assert "report.txt#v1" in text(3) and "report.txt: Q4:" in text(3)  # right after the save: v1
    assert "#v0" not in text(3) and "report.txt: Q3:" not in text(3)
    manifests = [r.manifest for r in plugin.packer.recent]
    assert manifests[3].artifact_uris == [f"artifact://testapp/u/{sid}/report.txt#v1"]
    assert manifests[3].cache_break["cause"] == "evidence changed: report.txt v1"
    assert manifests[4].cache_break is None and manifests[4].reused_payload  # unchanged evidence: no break
    assert "report.txt#v1" in text(4) and "#v0" not in text(4)


def call_part(name: str, **args):
    from aether_context.testing import call

    return call(name, **args)


def read_lines(path: str, start: int, count: int) -> dict:
    """Read `count` lines of a file from `start`."""
    from conftest import filler

    return {"path": path, "lines": filler(900, seed=start)}


async def test_repack_checksum_does_not_depend_on_argument_order(memory_store_url):
    """Fold lines render arguments; the store keeps them sorted: a re-pack must send the same bytes."""
    from aether_context import load_profile, repack
    from conftest import scripted_agent

    turns = [call_part("read_lines", path=f"src/m{i}.py", start=i * 10, count=5) for i in range(8)] + ["done"]
    agent, llm = scripted_agent(turns, tools=[read_lines])
    profile = load_profile("default").override(offload={"enabled": False})
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=6_000, profile=profile)
    runner = make_runner(agent, plugins=[plugin])
    await run_turn(runner, await new_session(runner), "read the modules")
    plugin.packer.store.flush()
    records = list(plugin.packer.recent)
    assert any(e["action"] == "fold" for r in records for e in r.manifest.truncation_events)
    for record in records:
        again = repack(record.uri, profile, store=plugin.packer.store)
        assert not again.diff["checksum_changed"], record.uri


def test_call_argument_order_survives_the_store_format():
    """The store writes canonical (key-sorted) JSON; the call's own argument order comes back."""
    import json

    from aether_context.content import canonical_json

    m = Message("model", (FunctionCall("f", {"path": "x", "count": 1, "b": {"z": 1, "a": 2}}),))
    back = Message.from_json(json.loads(canonical_json(m.to_json())))
    assert list(back.parts[0].args) == ["path", "count", "b"] and back == m and back.digest == m.digest
    plain = FunctionCall("f", {"a": 1, "b": 2})
    assert plain.to_json() == {"function_call": {"name": "f", "args": {"a": 1, "b": 2}, "id": None}}
