"""A compaction call inside a tool loop first ranks the Memory pool it leaves: the same documents and
question as the call before, at a later clock. Only the clock-dependent ranking is redone (real Runner)."""

from __future__ import annotations

from conftest import filler, make_runner, new_session, run_turn, scripted_agent
from test_conversation_policy import DAY, T0, chat, plugin, seed_chat


def find_fares(route: str) -> dict:
    """Find fares."""
    return {"route": route, "fares": filler(900, seed=len(route))}


async def test_a_compaction_call_does_not_score_again_the_pool_the_call_before_scored(memory_store_url, monkeypatch):
    import aether_context.adk.packer as packer
    import aether_context.pipeline.build as build
    from aether_context.retrieval.lexical import LexicalIndex
    from aether_context.testing import call

    scored: list[tuple[int, int]] = []  # per BM25 scoring: the lexical index, its live documents
    calls: list[tuple[bool, list]] = []  # per call: compacted, its scorings
    scores, plan = LexicalIndex.scores, build._plan
    monkeypatch.setattr(LexicalIndex, "scores", lambda self, *a, **kw: scored.append((id(self), self.alive_count))
                        or scores(self, *a, **kw))

    def counted(c, *a, **kw):
        before = len(scored)
        out = plan(c, *a, **kw)
        calls.append((out.compaction is not None, scored[before:]))
        return out
    monkeypatch.setattr(build, "_plan", counted)
    clock = iter(range(10**6))  # the session's clock moves on at each call, as a model's answers take time
    monkeypatch.setattr(packer, "session_now", lambda events: T0 + DAY + 60 * next(clock))
    script = [call("find_fares", route=f"city{i}-town{i}") for i in range(6)] + ["done"]
    agent, llm = scripted_agent(script, tools=(find_fares,))
    # This loop's compactions were tuned with the count ScriptedLlm used to report, chars / 4 of the request's
    # JSON (calibration near 3, so a third of the 12K window). It tests the pool's scoring, not the calibration,
    # so it keeps that count on purpose: with ScriptedLlm's own count no window from 5K to 7K gives a compaction
    # right after a call that scored (checked=0). To retune when the scenario is next touched.
    llm.prompt_token_counter = lambda request: len(request.model_dump_json(exclude={"tools_dict",
                                                                                    "live_connect_config"})) // 4
    runner = make_runner(agent, plugins=[plugin(memory_store_url, 12_000)])
    sid = await new_session(runner)
    await seed_chat(runner, sid, chat(300, words=35))
    await run_turn(runner, sid, "Which fares did we look at for the trip to town 3?")
    checked = 0
    for (_, before), (compacted, now) in zip(calls[-7:], calls[-6:]):  # the loop's calls after its first
        if compacted and before:
            checked += 1
            assert now, calls  # it scored its new pool (a call that ranked nothing would pass the next line)
            assert before[-1] not in now, calls  # the pool it leaves was scored by the call before
    assert checked >= 1, calls
