"""Token-limit recovery, the decay zones and the running summary, through a real ADK Runner."""

from __future__ import annotations

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.memory import InMemoryMemoryService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_context import ContextPackPlugin, TokenCounter, load_profile
from aether_context.adk import request_from_llm
from aether_context.content import FunctionCall, FunctionResponse, Message, ModelRequest, TextPart, ToolSpec, user_text
from aether_context.pipeline import PackInputs, build_pack, request_tokens
from aether_context.pipeline.render import quote
from aether_context.testing import ScriptedLlm, call

from conftest import orphan_responses

COUNTER = TokenCounter()


def read_chunk(n: int) -> str:
    """Return chunk n of a long document."""
    return f"chunk {n}: " + " ".join(f"word{n}_{i}" for i in range(700))


def count_request(llm_request) -> int:
    return request_tokens(request_from_llm(llm_request), COUNTER)


async def _run(llm, *, window, profile="default", messages=("read the document",)):
    agent = LlmAgent(name="reader", model=llm, instruction="Read.", tools=[read_chunk])
    plugin = ContextPackPlugin(store="memory://recovery-test", window_tokens=window, profile=profile)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    artifact_service=InMemoryArtifactService(), memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events = []
    for text in messages:
        async for ev in runner.run_async(user_id="u", session_id=session.id,
                                         new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            events.append(ev)
    plugin.packer.store.flush()
    return plugin, runner, session, events


def _no_offload():
    return load_profile("default").override(offload={"enabled": False})


async def test_token_limit_error_is_recovered_by_one_aggressive_retry():
    turns = [call("read_chunk", n=i) for i in range(6)] + ["done reading"]
    llm = ScriptedLlm(turns=turns, max_input_tokens=3000, prompt_token_counter=count_request)
    plugin, runner, session, events = await _run(llm, window=32_000, profile=_no_offload())
    assert events[-1].content.parts[0].text == "done reading"
    recovered = [r for r in plugin.packer.recent if any(f.startswith("recovery_after") for f in r.manifest.flags)]
    assert recovered, "no recovery was recorded"
    for r in recovered:
        assert r.manifest.tokens_after <= int(3000 * 0.7)
        assert "exceeds the maximum" in " ".join(r.manifest.flags)
    # every request the model accepted was under its limit
    accepted = [count_request(r) for r in llm.requests]
    assert max(accepted) > 3000 and any(a <= 3000 for a in accepted)


async def test_the_reported_limit_is_remembered_so_later_calls_do_not_fail_first():
    turns = [call("read_chunk", n=i) for i in range(8)] + ["done reading"]
    llm = ScriptedLlm(turns=turns, max_input_tokens=3000, prompt_token_counter=count_request)
    plugin, runner, session, events = await _run(llm, window=32_000, profile=_no_offload())
    assert events[-1].content.parts[0].text == "done reading"
    recovered = [i for i, r in enumerate(plugin.packer.recent)
                 if any(f.startswith("recovery_after") for f in r.manifest.flags)]
    assert len(recovered) == 1  # once: every later call packs under the limit the model reported
    later = list(plugin.packer.recent)[recovered[0] + 1:]
    assert later and all(r.manifest.tokens_after <= 3000 and r.manifest.window <= 3000 for r in later)


async def test_recovery_that_fails_again_lets_the_original_error_surface():
    llm = ScriptedLlm(turns=[call("read_chunk", n=1), "done"], max_input_tokens=20, prompt_token_counter=count_request)
    with pytest.raises(Exception, match="exceeds the maximum"):
        await _run(llm, window=32_000, profile=_no_offload())


def _tool_session(n_steps: int, size: int = 400) -> PackInputs:
    msgs = [user_text("Fix the failing test in src/app.py")]
    for i in range(n_steps):
        msgs.append(Message("model", (TextPart(f"Step {i}: inspect file_{i}.py"), FunctionCall("bash", {"command": f"cat src/file_{i}.py"}))))
        body = ("x = 1\n" * size + f'Traceback (most recent call last):\n  File "src/file_{i}.py", line {i}, in run\n'
                f"ValueError: invalid literal for int() with base 10: 'v{i}'\n") if i % 3 == 0 else "ok\n" * size
        msgs.append(Message("user", (FunctionResponse("bash", {"output": body}),)))
    req = ModelRequest("gpt-4o", "You fix bugs.", tuple(msgs), (ToolSpec("bash", {"name": "bash", "description": "run"}),))
    return PackInputs(request=req, request_index=0, invocation_id="inv", agent="a", now=1.8e9)


def test_decay_zones_keep_pairs_valid_and_cap_the_summary():
    profile = load_profile("coding_agent")
    inputs = _tool_session(60)
    pack = build_pack(inputs, profile, counter=COUNTER, window=8000)
    msgs = pack.request.messages
    assert request_tokens(pack.request, COUNTER) <= 8000 - int(8000 * profile.floors.slack)
    assert orphan_responses(msgs) == []
    block = msgs[1].text  # the compaction block follows the payload: it holds this invocation's tool turns
    assert msgs[0].text.startswith("CONTEXT PACK") and "USER REQUEST" in msgs[0].text
    assert block.startswith("CONVERSATION SO FAR") and "\nTURNS:\n  - [turn " in block
    summary = pack.state.summary
    assert summary["text"].startswith("Goal:") and summary["covered_until"] >= 0
    assert COUNTER.count_text(summary["text"]) <= profile.decay.summary_max_tokens
    assert "\nSUMMARY:\n" + quote(summary["text"]) in block  # the running summary, quoted, in the block
    fold = [e for e in pack.manifest.truncation_events if e["action"] == "fold"]
    assert fold and fold[0]["ids"] and pack.manifest.compaction["folded_turns"] == len(fold[0]["ids"])
    assert pack.state.merged_lines  # the fold lines this pack merged into the running summary
    # the errors of folded turns survive in the summary
    assert "ValueError" in summary["text"]


def test_running_summary_is_incremental_across_calls():
    profile = load_profile("coding_agent")
    first = build_pack(_tool_session(40), profile, counter=COUNTER, window=8000)
    covered = first.state.summary["covered_until"]
    later_inputs = _tool_session(60)
    from dataclasses import replace
    second = build_pack(replace(later_inputs, summary=first.state.summary), profile, counter=COUNTER, window=8000)
    assert second.state.summary["covered_until"] >= covered
    # lines of the first summary that are still relevant are carried, not recomputed from scratch
    assert second.state.summary["text"].startswith("Goal:")


async def test_running_summary_lands_in_session_state():
    turns = [call("read_chunk", n=i) for i in range(14)] + ["done"]
    llm = ScriptedLlm(turns=turns, prompt_token_counter=count_request)  # counts as we do: no calibration drift
    profile = _no_offload().override(decay={"fold_max_tokens": 100})
    plugin, runner, session, events = await _run(llm, window=8000, profile=profile)
    stored = await runner.session_service.get_session(app_name="app", user_id="u", session_id=session.id)
    summary = (await plugin.packer.records.get(stored.state, "aether:summary", {})).get("reader")
    assert summary and summary["text"] and summary["covered_until"] >= 0


async def _run_with_summarizer(summarizer):
    turns = [call("read_chunk", n=i) for i in range(14)] + ["done"]
    llm = ScriptedLlm(turns=turns, prompt_token_counter=count_request)  # counts as we do: no calibration drift
    profile = _no_offload().override(decay={"fold_max_tokens": 100, "summarizer": "llm"})
    agent = LlmAgent(name="reader", model=llm, instruction="Read.", tools=[read_chunk])
    plugin = ContextPackPlugin(store="memory://summ-test", window_tokens=8000, profile=profile, summarizer=summarizer)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    artifact_service=InMemoryArtifactService(), memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id,
                                    new_message=types.Content(role="user", parts=[types.Part(text="read the document")])):
        pass
    stored = await runner.session_service.get_session(app_name="app", user_id="u", session_id=session.id)
    return plugin, llm, stored


async def test_llm_summarizer_refines_the_running_summary():
    calls = []

    async def summarize(previous, items, *, goal, max_tokens):
        calls.append(list(items))
        return "Goal: read the document\nProgress:\n- read chunks " + ", ".join(i.split("]")[0].lstrip("[") for i in items)

    plugin, llm, stored = await _run_with_summarizer(summarize)
    assert calls and all(calls)
    text = (await plugin.packer.records.get(stored.state, "aether:summary"))["reader"]["text"]
    assert text.startswith("Goal: read the document\nProgress:\n- read chunks turn")
    # the next requests carried the LLM's summary
    assert any("- read chunks turn" in m.text for r in llm.requests for m in request_from_llm(r).messages)


@pytest.mark.parametrize("failure", ["raise", "empty"])
async def test_failing_llm_summarizer_keeps_history_and_is_recorded(failure):
    async def summarize(previous, items, *, goal, max_tokens):
        if failure == "raise":
            raise RuntimeError("model unavailable")
        return ""

    plugin, llm, stored = await _run_with_summarizer(summarize)
    summary = (await plugin.packer.records.get(stored.state, "aether:summary"))["reader"]
    assert summary["text"].startswith("Goal:") or summary["text"].startswith("Progress:")  # the extractive one stayed
    flags = [f for r in plugin.packer.recent for f in r.manifest.flags]
    assert any(f.startswith("summary_failed") for f in flags)
    assert all(r.manifest.error is None for r in plugin.packer.recent)
    # every request still fits and carries the fold zone
    assert all(count_request(r) <= 8000 for r in llm.requests)


async def test_old_images_become_a_description_with_their_uri():
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    llm = ScriptedLlm(turns=["seen"])
    agent = LlmAgent(name="reader", model=llm, instruction="Look.")
    plugin = ContextPackPlugin(store="memory://image-test", window_tokens=16_000)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    artifact_service=InMemoryArtifactService(), memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    first = types.Content(role="user", parts=[types.Part(text="what is in this screenshot?"),
                                              types.Part(inline_data=types.Blob(mime_type="image/png", data=png))])
    for msg in [first] + [types.Content(role="user", parts=[types.Part(text=f"and now {i}?")]) for i in range(3)]:
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
            pass
    sent = [request_from_llm(r) for r in llm.requests]
    assert any(m.blobs for m in sent[0].messages)  # fresh: the image itself goes out
    last = sent[-1]
    assert not any(m.blobs for m in last.messages)
    described = [m.text for m in last.messages if "image/png attachment from turn" in m.text]
    assert described and "artifact://app/u/" in described[0]
    uri = described[0].split(": ", 1)[1].rstrip("]")
    data = await plugin.packer.gateway.load(
        type("Ctx", (), {"session": await runner.session_service.get_session(app_name="app", user_id="u", session_id=session.id),
                         "load_artifact": lambda self, f, v=None: runner.artifact_service.load_artifact(
                             app_name="app", user_id="u", session_id=session.id, filename=f, version=v)})(), uri)
    assert data == png


def test_pruning_clears_old_outputs_only_when_it_reclaims_the_minimum():
    from aether_context.pipeline.inputs import group_turns
    from aether_context.pipeline.decay import prune_tool_outputs

    inputs = _tool_session(12, size=300)
    turns = group_turns(inputs.request.messages[1:], offset=1)
    uris = {r.key: f"artifact://a/u/s/out-{i}" for i, t in enumerate(turns) for m in t.messages for r in m.responses}
    per_turn = min(sum(COUNTER.count_message(m) for m in t.messages if m.responses) for t in turns)
    # protect 3 turns' worth; the 9 older ones reclaim ~9 turns: above a minimum of 5 turns -> cleared
    out, cleared, fresh = prune_tool_outputs(turns, protect_tokens=3 * per_turn, minimum_tokens=5 * per_turn, uris=uris,
                                             already=frozenset(), counter=COUNTER)
    assert len(fresh) >= 6 and set(fresh) == cleared
    for t in out:
        for m in t.messages:
            for r in m.responses:
                if t.start in cleared:
                    assert r.response["artifact_uri"].startswith("artifact://") and "cleared" in r.response
                else:
                    assert "output" in r.response
    # a minimum above what the old outputs hold: nothing is cleared
    _, cleared2, fresh2 = prune_tool_outputs(turns, protect_tokens=3 * per_turn, minimum_tokens=50 * per_turn, uris=uris,
                                             already=frozenset(), counter=COUNTER)
    assert not cleared2 and not fresh2
    # outputs without a saved original are never cleared
    _, cleared3, _ = prune_tool_outputs(turns, protect_tokens=0, minimum_tokens=0, uris={}, already=frozenset(), counter=COUNTER)
    assert not cleared3


async def test_the_answer_to_a_recovered_call_shows_the_recovery_pack():
    """The response event of the retried request carries the metadata of the pack that was sent
    (the repack), not of the pack the model rejected."""
    turns = [call("read_chunk", n=i) for i in range(6)] + ["done reading"]
    llm = ScriptedLlm(turns=turns, max_input_tokens=3000, prompt_token_counter=count_request)
    plugin, runner, session, events = await _run(llm, window=32_000, profile=_no_offload())
    recovered = [r.manifest.pack_id for r in plugin.packer.recent if any(f.startswith("recovery_after")
                                                                          for f in r.manifest.flags)]
    shown = [ev.custom_metadata["aether_context"]["pack_id"] for ev in events
             if ev.custom_metadata and "aether_context" in ev.custom_metadata]
    assert recovered and set(recovered) <= set(shown)


async def test_an_llm_summarys_free_text_reaches_the_request():
    """A summary written as prose (no Goal/Progress sections) is kept, within a cap, when later
    compactions merge more turns into the running summary: it reaches later requests."""
    async def summarize(previous, items, *, goal, max_tokens):
        return ("The reader has gone through the opening chunks of the lease, one per call, and compared each "
                "with the summary of the chunks before it. Most of them restate the parties, the premises and "
                "the payment schedule in slightly different words, and nothing in them changes the picture. "
                "Chunk 3 holds the Zanzibar clause, which decides the renewal date: the lease renews only when "
                "notice is given ninety days before the end of the term, in writing, to the registered office.\n\n"
                "Nothing contradicts that clause so far; the later chunks may still amend it, so every amendment "
                "should be checked against it before the renewal date is stated.\n"
                "Next steps: read on to the termination terms.")

    plugin, llm, stored = await _run_with_summarizer(summarize)
    sent = [request_from_llm(r) for r in llm.requests]
    first = next(i for i, r in enumerate(sent) if any("Zanzibar clause" in m.text for m in r.messages))
    assert all(any("Chunk 3 holds the Zanzibar clause, which decides the renewal date" in m.text for m in r.messages)
               for r in sent[first:])
    assert first < len(sent) - 1
    merges = [i for i, r in enumerate(plugin.packer.recent) if r.manifest.compaction and i > first]
    assert merges  # a later compaction merged more turns and still kept it
