"""Query facets (each clause, quoted phrase and entity searched alone, fused) and Memory by its information."""

from __future__ import annotations

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.events.event import Event
from google.adk.memory import InMemoryMemoryService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_context import ContextPackPlugin, load_profile
from aether_context.adk import request_from_llm
from aether_context.adk.collect import memory_queries
from aether_context.pipeline.retrieve import Retriever
from aether_context.retrieval import Document, HashingEmbedder, HybridIndex, RetrievalSettings
from aether_context.retrieval.facets import MAX_CHARS, MAX_FACETS, facets, word_forms
from aether_context.testing import ScriptedLlm

COMPOUND = "What did Ana research about adoption agencies, and when did Ben move from Sweden?"
ANA = [f"Ana: I spent {d} researching adoption agencies and adoption agency rules." for d in
       ("Monday", "Tuesday", "the weekend", "all week", "the evening", "a month")]
BEN = "Ben: we relocated in 2019 from Sweden; I grew up in Sweden."
GREETINGS = ["Ana: Wow, Ben, that's great!", "Ben: Wow! Great, Ana!", "Ana: That's so great, Ben!",
             "Ben: Thanks, Ana! Great!", "Ana: Thanks, Ben! Wow!", "Ben: Wow, thanks!", "Ana: Great, thanks, Ben!",
             "Ben: So great! Wow!"]
OTHER = [f"{who}: {what}" for who in ("Ana", "Ben") for what in (
    "the pottery class meets on Thursdays near the harbour museum", "my sister plays cello in Sweden",
    "we painted the kitchen a pale green colour last spring", "the marathon training plan starts in February",
    "our dog learned to open the garden gate in Sweden", "I finished a novel about lighthouse keepers in Maine")]


def test_a_compound_question_has_a_facet_per_clause_and_per_entity():
    got = facets(COMPOUND)
    assert got[:2] == ["What did Ana research about adoption agencies", "when did Ben move from Sweden"]
    assert facets(COMPOUND) == got and len(got) <= MAX_FACETS  # deterministic, bounded
    assert facets("Please refund payment PAY-88 on order 5512") == ["Please refund payment PAY-88 on order",
                                                                   "Please refund payment on order 5512"]
    assert facets('Who wrote "Charlotte\'s Web"?')[0] == "Charlotte's Web"
    assert facets("What did Caroline research?") == []  # one clause, one entity: the query alone
    assert facets("fix the parser", ["Goal: ship 2.0", "tests pass"]) == ["Goal: ship 2.0", "tests pass"]


def test_a_compound_question_retrieves_both_facets_items():
    docs = [Document(f"ana-{i}", t, "memory") for i, t in enumerate(ANA)] + [Document("ben", BEN, "memory")] + \
        [Document(f"o{i}", t, "memory") for i, t in enumerate(OTHER)]
    on = Retriever(RetrievalSettings(), embedder=HashingEmbedder())
    plain = on.rank("ns", "memory", COMPOUND, docs, k=3, count_tokens=None, now=None, dense=False)
    faceted = on.rank("ns", "memory", COMPOUND, docs, k=3, count_tokens=None, now=None, dense=False,
                      facets=facets(COMPOUND))
    assert "ben" not in plain.ids  # one query: the clause with more matching words crowds the other out
    assert "ben" in faceted.ids and any(i.startswith("ana-") for i in faceted.ids)
    again = on.rank("ns", "memory", COMPOUND, docs, k=3, count_tokens=None, now=None, dense=False,
                    facets=facets(COMPOUND))
    assert again.ids == faceted.ids and [i.score for i in again.items] == [i.score for i in faceted.items]


def test_low_information_items_fall_by_their_content():
    index = HybridIndex(RetrievalSettings(), embedder=HashingEmbedder())
    facts = ["Ana: the adoption agency in Lisbon approved our application last spring"] + OTHER
    index.add([Document(f"c{i}", t, "memory") for i, t in enumerate(GREETINGS)] +
              [Document(f"f{i}", t, "memory") for i, t in enumerate(facts)])
    # a small collection: its greetings' words are rarer than a long chat's, so the floor is set higher here
    kept = index.search("Ana Ben adoption", k=40, dense=False, settings=RetrievalSettings(information_floor=0.5)).ids
    assert set(kept) == {f"f{i}" for i in range(len(facts))}
    everything = index.search("Ana Ben adoption", k=40, dense=False,
                              settings=RetrievalSettings(information_floor=0.0)).ids
    assert any(i.startswith("c") for i in everything)


def test_memory_queries_are_bounded_and_inflected():
    assert word_forms("camped") == ["camp", "camped", "camping", "camps"]
    queries = memory_queries(COMPOUND)
    assert queries[0] == COMPOUND and any("researching" in q and "agencies" in q for q in queries)
    assert not any("anas" in q.split() for q in queries)  # names are not inflected
    huge = " ".join(f"word{i} Name{i} and when did thing{i} happen?" for i in range(20_000))
    many = memory_queries(huge, ["goal " * 10_000])
    assert len(many) <= 1 + 1 + MAX_FACETS + 8 + 6 and all(len(q) <= MAX_CHARS * 2 for q in many)


async def test_a_runner_packs_both_facets_of_a_compound_question():
    memory = InMemoryMemoryService()
    seeder = InMemorySessionService()
    old = await seeder.create_session(app_name="app", user_id="u")
    for n, text in enumerate(GREETINGS + ANA + OTHER + [BEN]):
        await seeder.append_event(old, Event(author="user", invocation_id=f"i{n}", timestamp=1_700_000_000 + n,
                                             content=types.Content(role="user", parts=[types.Part(text=text)])))
    await memory.add_session_to_memory(old)
    llm = ScriptedLlm(turns=["Adoption agencies; four years ago."])
    agent = LlmAgent(name="assistant", model=llm, instruction="Answer from memory.")
    profile = load_profile("default").model_copy(update={"retrieval": RetrievalSettings(facets=True)})
    plugin = ContextPackPlugin(store="memory://facets-runner", profile=profile)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService(), memory_service=memory)
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id,
                                    new_message=types.Content(role="user", parts=[types.Part(text=COMPOUND)])):
        pass
    payload = [m.text for m in request_from_llm(llm.requests[-1]).messages if m.text.startswith("CONTEXT PACK")][-1]
    assert BEN in payload and any(a in payload for a in ANA)


async def test_hyde_asks_the_model_once_per_invocation_and_searches_with_its_passage():
    """`retrieval.hyde`: the agent's model writes a passage for the request once per invocation; every call of
    the invocation searches with that passage (kept as a session record), and a timeout fails open."""
    import asyncio

    from aether_context.testing import call

    passage = "Ana took up pottery at the Lisbon studio in May."

    def lookup(key: str) -> dict:
        """Look a key up."""
        return {"key": key, "value": "none"}

    llm = ScriptedLlm(turns=[passage, call("lookup", key="ana"), "Pottery."])
    agent = LlmAgent(name="assistant", model=llm, instruction="Answer.", tools=[lookup])
    profile = load_profile("default").model_copy(update={"retrieval": RetrievalSettings(hyde=True)})
    plugin = ContextPackPlugin(store="memory://hyde-runner", profile=profile)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=types.Content(
            role="user", parts=[types.Part(text="What hobby did Ana pick up?")])):
        pass
    assert len(llm.requests) == 3  # one HyDE call, then the two calls of the loop
    assert llm.requests[0].config.system_instruction.startswith("Write a short passage")
    stored = await runner.session_service.get_session(app_name="app", user_id="u", session_id=session.id)
    kept = await plugin.packer.records.get(stored.state, "aether:hyde:assistant")
    assert kept["passage"] == passage and kept["invocation"] == stored.events[-1].invocation_id
    assert len(plugin.packer.recent) == 2 and not any(r.manifest.error for r in plugin.packer.recent)

    async def slow_passage(request):
        await asyncio.sleep(2)
        return "too late"

    slow = load_profile("default").model_copy(update={"retrieval": RetrievalSettings(hyde=True, hyde_timeout_seconds=0.05)})
    plugin2 = ContextPackPlugin(store="memory://hyde-slow", profile=slow)
    agent2 = LlmAgent(name="assistant", model=ScriptedLlm(turns=[slow_passage, "ok"]), instruction="Answer.")
    runner2 = Runner(app=App(name="app", root_agent=agent2, plugins=[plugin2]), session_service=InMemorySessionService())
    session2 = await runner2.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner2.run_async(user_id="u", session_id=session2.id, new_message=types.Content(
            role="user", parts=[types.Part(text="What hobby did Ana pick up?")])):
        pass
    flags = [f for r in plugin2.packer.recent for f in r.manifest.flags]
    assert any(f.startswith("hyde_timeout") for f in flags) and not plugin2.packer.recent[0].manifest.error


async def test_the_memory_service_is_searched_once_per_invocation_not_per_model_call():
    """A tool loop asks the same questions at every model call; a remote memory service would get twenty
    searches per call. The answer is kept in the session slot for the calls of one invocation."""
    from aether_context.testing import call

    class CountingMemory(InMemoryMemoryService):
        searches = 0

        async def search_memory(self, **kwargs):
            CountingMemory.searches += 1
            return await super().search_memory(**kwargs)

    def lookup(key: str) -> dict:
        """Look a key up."""
        return {"key": key}

    llm = ScriptedLlm(turns=[call("lookup", key="a"), call("lookup", key="b"), "done", "again"])
    agent = LlmAgent(name="assistant", model=llm, instruction="Answer.", tools=[lookup])
    plugin = ContextPackPlugin(store="memory://memory-once")
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]),
                    session_service=InMemorySessionService(), memory_service=CountingMemory())
    session = await runner.session_service.create_session(app_name="app", user_id="u")

    async def turn(text):
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            pass

    question = "Where did Ana move after the adoption fair?"
    await turn(question)
    first = CountingMemory.searches
    assert len(llm.requests) == 3  # three model calls...
    assert first == len(memory_queries(question, ("", ""))) > 1  # ...and one round of searches
    await turn("And when did Ben start pottery?")
    assert CountingMemory.searches > first  # a new invocation asks again
