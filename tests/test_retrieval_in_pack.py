"""Hybrid retrieval inside the pack: old facts come back, layers do not repeat each other, scores are recorded."""

from __future__ import annotations

import re

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.memory import InMemoryMemoryService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_context import ContextPackPlugin, EvidenceItem, MemoryItem, TokenCounter, build_pack, load_profile
from aether_context.adk import request_from_llm
from aether_context.pipeline.allocate import LAYER_OVERHEAD
from aether_context.pipeline.build import request_tokens
from aether_context.replay import repack
from aether_context.testing import ScriptedLlm

from conftest import filler, make_inputs, text_msg

COUNTER = TokenCounter()
TOPICS = ["the weather in Lisbon", "a pasta recipe", "the football results", "a birthday gift idea", "train times to Porto",
          "how to repot a cactus", "a good sci-fi novel", "the price of olive oil", "a jazz album", "stretching exercises"]


async def test_an_old_fact_outside_the_tail_is_pulled_back_by_a_later_question():
    # long answers in a small window: the early turns are compacted (they leave the verbatim history)
    answers = [f"Here is something about {t}. " + filler(150, i) for i, t in enumerate(TOPICS)]
    llm = ScriptedLlm(turns=["Hello!", "Noted."] + answers + ["It is 4817."])
    agent = LlmAgent(name="assistant", model=llm, instruction="Help the user.")
    plugin = ContextPackPlugin(store="memory://retrieval-pack", window_tokens=2_200)  # ScriptedLlm reports our count
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    fact = "Please remember this: my gym locker code is 4817."
    texts = ["Hi, I have a few questions today.", fact] + [f"Tell me about {t}." for t in TOPICS] + \
            ["What is my gym locker code again?"]
    for text in texts:
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            pass
    last = request_from_llm(llm.requests[-1])
    assert last.messages[0].text.startswith("CONVERSATION SO FAR")  # history was compacted
    payload = [m.parts[0].text for m in last.messages if m.text.startswith("CONTEXT PACK")][-1]  # this call's
    memory = payload.split("MEMORY (", 1)[1].split("\nUSER REQUEST", 1)[0]
    # the old turn is back, via retrieval, as a dated Memory item
    assert re.search(r"\n  - \(\d{4}-\d\d-\d\d \d\d:\d\d\) user: " + re.escape(fact), memory), memory
    verbatim = [m.text for m in last.messages[1:] if not m.text.startswith("CONTEXT PACK")]
    assert not any("4817" in v for v in verbatim)  # it is not in the verbatim history: it left with a compaction
    picked = {s["id"]: s for s in plugin.packer.recent[-1].manifest.selected["memory"]}
    item = picked["turn-2"]  # the fact's turn (0: hello, 1: hello!, 2: the fact)
    assert set(item["source"].split("+")) == {"history"}  # (near-duplicate turns collapse into one item)
    assert {"bm25", "dense", "fused", "mmr"} <= set(item) and item["bm25"] > 0


def test_items_in_the_conversation_or_evidence_are_not_repeated_in_memory():
    history = [text_msg("user", "The deploy failed with error E42 on node seven."), text_msg("model", "Looking into it.")]
    # the question shares words with every item: only the layers, not relevance, decide what Memory repeats
    inputs = make_inputs(history, "what failed on node seven?",
                         evidence=[EvidenceItem("ev-1", "Runbook: restart node seven after E42.", uri="artifact://a/u/s/runbook")],
                         memory=[MemoryItem("m-dup-conv", "The deploy failed with error E42 on node seven."),
                                 MemoryItem("m-dup-ev", "Runbook: restart node seven after E42."),
                                 MemoryItem("m-new", "Node seven had a disk replaced last week.")])
    pack = build_pack(inputs, load_profile(), counter=COUNTER, window=16_000)
    kept = [s["id"] for s in pack.manifest.selected["memory"]]
    assert kept == ["m-new"]
    dropped = [i for e in pack.manifest.truncation_events if e["layer"] == "memory" for i in e["ids"]]
    assert set(dropped) == {"m-dup-conv", "m-dup-ev"}


async def test_folded_turns_past_the_candidate_pool_come_back_while_memory_has_room():
    # Fusion ranks only each retriever's best `candidate_pool` documents (here 3, so at most 6 lines); a
    # later question needs more folded turns than that, and the window has room for all of them.
    things = ["a red scarf my aunt knitted in Oslo", "two tennis rackets with broken strings",
              "an amber lamp from a flea market", "the violin my grandfather played", "white sneakers for the marathon",
              "a grey toolbox with spare fuses", "pink wrapping paper for birthdays", "a teal umbrella from the airport",
              "navy curtains that never fit", "golden keys to the old cabin", "black chess pieces carved from ebony",
              "a brown leather diary from 1998"]
    notes = [f"Remember: the blue locker holds {thing}." for thing in things]
    topics = TOPICS[:8]  # long answers: the question's call compacts, the notes leave the verbatim zone
    answers = [f"Here is something about {t}. " + filler(600, i) for i, t in enumerate(topics)]
    llm = ScriptedLlm(turns=["Noted."] * len(notes) + answers + ["Twelve things."],
                      prompt_token_counter=lambda r: request_tokens(request_from_llm(r), COUNTER))  # no calibration
    agent = LlmAgent(name="assistant", model=llm, instruction="Help the user.")
    profile = load_profile().override(name="pool-3", retrieval={"candidate_pool": 3})
    plugin = ContextPackPlugin(store="memory://retrieval-wide", window_tokens=8_000, profile=profile)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    for text in notes + [f"Tell me about {t}." for t in topics] + ["What does the blue locker hold?"]:
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            pass
    manifest = plugin.packer.recent[-1].manifest
    last = request_from_llm(llm.requests[-1])
    assert last.messages[0].text.startswith("CONVERSATION SO FAR")
    verbatim = " ".join(m.text for m in last.messages[1:] if not m.text.startswith("CONTEXT PACK"))
    assert not any(n in verbatim for n in notes)  # every note left the verbatim zone with a compaction
    payload = [m.parts[0].text for m in last.messages if m.text.startswith("CONTEXT PACK")][-1]  # this call's
    missing = [n for n in notes if n not in payload]
    assert not missing, (missing, manifest.layer_budgets["memory"])  # all back as Memory, none shortened
    memory = manifest.layer_budgets["memory"]
    assert memory.used <= memory.budget and manifest.tokens_after <= 8_000 * 0.88
    plugin.packer.store.flush()
    again = repack(plugin.packer.recent[-1].uri, profile, store=plugin.packer.store)  # a fresh cache: the same request
    assert again.pack.request.checksum == manifest.checksum



async def _manifest_after_folding(tools: list) -> Any:
    colours = ["red", "amber", "teal", "violet", "golden", "grey", "navy", "pink"]
    things = ["scarf knitted in Oslo", "tennis racket with broken strings", "lamp from a flea market",
              "violin my grandfather played", "toolbox with spare fuses"]
    places = ["the airport", "a market in Lyon", "my aunt's attic", "the cabin by the lake", "a shop in Kyoto",
              "the old school", "a train in Peru", "the harbour"]
    notes = [f"Remember: the blue locker holds the {c} {t}, bought at {places[(i + j) % 8]} in "
             f"{1990 + 3 * i + j}; it sits wrapped in paper under label {i * 5 + j}."
             for i, c in enumerate(colours) for j, t in enumerate(things)]
    llm = ScriptedLlm(turns=["Noted."] * len(notes) + ["Many boxes."],
                      prompt_token_counter=lambda r: request_tokens(request_from_llm(r), COUNTER))
    agent = LlmAgent(name="assistant", model=llm, instruction="Help the user.", tools=tools)
    plugin = ContextPackPlugin(store=f"memory://growth-{len(tools)}", window_tokens=2_000)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    for text in notes + ["What does the blue locker hold?"]:
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            pass
    return plugin.packer.recent[-1].manifest


def _room_left(manifest: Any) -> int:
    """The flexible room the conversation left to Evidence and Memory at this call."""
    budgets = manifest.allocation["budgets"]
    return sum(budgets[k] for k in ("evidence", "memory", "conversation")) - manifest.layer_budgets["conversation"].used


async def test_a_chat_without_tools_gives_memory_the_room_kept_for_growth():
    # An agent with no tools: its answer ends the invocation, so no room is held back for turns it
    # would append, and Memory (folded notes that all match the question) gets that room.
    def open_locker(number: int) -> str:
        """Open a locker."""
        return "opened"

    without, with_tool = await _manifest_after_folding([]), await _manifest_after_folding([open_locker])
    for m in (without, with_tool):
        memory = m.layer_budgets["memory"]
        assert memory.demand > memory.budget >= memory.used  # more folded notes match than fit: the budget decides
    # no tools: Memory and Evidence get all the room the conversation left; with a tool, a quarter
    # of the flexible room (growth_share) stays free for the turns the invocation may append
    assert without.layer_budgets["memory"].budget >= _room_left(without) - LAYER_OVERHEAD
    assert with_tool.layer_budgets["memory"].budget <= _room_left(with_tool) - 100
    assert without.tokens_after <= 2_000 * 0.88


async def test_a_note_leaves_memory_at_the_call_whose_request_says_it():
    """Memory never repeats what the model sees verbatim. Each index keeps the excluded texts' keys from one
    search to the next (`HybridIndex._excluded_rows`): a text that becomes verbatim is excluded at that call,
    at the same search index that ranked it the call before."""
    codename, window = "The launch codename is BLUEBIRD.", "The launch window opens in May."
    llm = ScriptedLlm(turns=["Noted.", "Noted.", "Noted."])
    agent = LlmAgent(name="assistant", model=llm, instruction="Help the user.")
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[ContextPackPlugin(store="memory://exclude-memo")]),
                    session_service=InMemorySessionService(), memory_service=InMemoryMemoryService())
    session = await runner.session_service.create_session(app_name="app", user_id="u",
                                                          state={"aether:notes": [codename, window]})
    for text in ["What is the launch codename and window?", codename, "And the launch window?"]:
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            pass

    def memory(request) -> str:
        payload = [m.parts[0].text for m in request_from_llm(request).messages if m.text.startswith("CONTEXT PACK")][-1]
        return payload.split("MEMORY (", 1)[1].split("\nUSER REQUEST", 1)[0] if "MEMORY (" in payload else ""

    first, second, third = (memory(r) for r in llm.requests)
    assert codename in first and window in first
    assert codename not in second and window in second  # the request says it: not repeated
    assert window in third


def test_earlier_memory_hits_stay_candidates_within_the_pool():
    from aether_context.adk.collect import with_earlier_hits

    a, b, c = (MemoryItem(f"m{i}", f"text {i}", source="memory_service") for i in range(3))
    note = MemoryItem("note-1", "a note", source="note")
    memory, kept = with_earlier_hits((note, b), (a, b), limit=10)  # found again: keeps its place
    assert [m.id for m in memory] == ["note-1", "m0", "m1"] and [m.id for m in kept] == ["m0", "m1"]
    memory, kept = with_earlier_hits((c,), (a, b), limit=2)  # the oldest leaves first
    assert [m.id for m in memory] == ["m1", "m2"] and [m.id for m in kept] == ["m1", "m2"]
    memory, kept = with_earlier_hits((a, c), (a, b), limit=2)  # ... unless this search found it again
    assert [m.id for m in memory] == ["m0", "m2"] and [m.id for m in kept] == ["m0", "m2"]
    assert with_earlier_hits((a, c), kept, limit=2) == (memory, kept)  # settled: the next call ranks the same
    assert with_earlier_hits((), (), 10) == ((), ())
    assert with_earlier_hits((a,), (), 0) == ((a,), ())


async def test_a_later_question_keeps_what_the_memory_service_found_for_an_earlier_one(memory_store_url):
    """ADK's in-memory service answers each question with its own top few; what it found for the first question
    stays a Memory candidate of the second (a session record, so replicas rank the same ones)."""
    from conftest import make_runner, new_session, run_turn, scripted_agent

    memory = InMemoryMemoryService()
    earlier, _ = scripted_agent(["Noted."], name="agent")
    past = make_runner(earlier, memory_service=memory)
    for said in ("Alice adopted a grey kitten called Miso.", "Bob repaired the tandem on Saturday."):
        sid = await new_session(past)
        await run_turn(past, sid, said)
        await memory.add_session_to_memory(await past.session_service.get_session(
            app_name=past.app_name, user_id="u", session_id=sid))

    agent, llm = scripted_agent(["A kitten.", "On Saturday."], tools=[])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=16_000)
    runner = make_runner(agent, plugins=[plugin], memory_service=memory, session_service=past.session_service)
    sid = await new_session(runner)
    await run_turn(runner, sid, "What did Alice adopt?")
    await run_turn(runner, sid, "When was the tandem repaired?")
    plugin.packer.store.flush()

    store = plugin.packer.store
    first, second = (store.get_inputs(store.load_manifest(r.uri).inputs_ref) for r in plugin.packer.recent)
    kitten = [m.id for m in first.memory if "Miso" in m.text]
    assert kitten and all("tandem" not in m.text for m in first.memory)
    assert kitten[0] in {m.id for m in second.memory}  # not asked for again, still a candidate
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=sid)
    kept = await plugin.packer.records.get(session.state, "aether:memory_hits:agent")
    assert [d["id"] for d in kept][:1] == kitten and any("tandem" in d["text"] for d in kept)


async def test_a_memory_hits_record_that_cannot_be_kept_leaves_the_call_its_own_hits(memory_store_url):
    """A store that fails on the pool's record costs the call its earlier hits, never the pack: this call's own
    hits reach Memory, the manifest says why the others are missing, and the record stays as it was."""
    from conftest import make_runner, new_session, run_turn, scripted_agent

    memory = InMemoryMemoryService()
    past = make_runner(scripted_agent(["Noted."])[0], memory_service=memory)
    sid = await new_session(past)
    await run_turn(past, sid, "Alice adopted a grey kitten called Miso.")
    await memory.add_session_to_memory(await past.session_service.get_session(
        app_name=past.app_name, user_id="u", session_id=sid))

    agent, llm = scripted_agent(["A kitten."], tools=[])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=16_000)
    keep = plugin.packer.records.set

    async def failing(state, key, value, **small):
        if key.startswith("aether:memory_hits:"):
            raise OSError("bucket answered 503")
        return await keep(state, key, value, **small)

    plugin.packer.records.set = failing
    runner = make_runner(agent, plugins=[plugin], memory_service=memory, session_service=past.session_service)
    sid = await new_session(runner)
    await run_turn(runner, sid, "What did Alice adopt?")
    manifest = plugin.packer.recent[-1].manifest
    assert manifest.error is None and "Miso" in str(llm.requests[-1].contents)
    assert any(f.startswith("memory_hits_unavailable: OSError") for f in manifest.flags)
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=sid)
    assert "aether:memory_hits:agent" not in session.state
