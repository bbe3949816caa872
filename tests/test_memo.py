"""The one memo: reached from the call's context, every kind registered, and a pack the same without it."""

from __future__ import annotations

import pytest

from aether_context import ContextPackPlugin
from aether_context.adk import request_from_llm
from aether_context.pipeline.cache import KINDS, PackCache, current_memo, memo_scope
from aether_context.pipeline.inputs import group_turns
from aether_context.pipeline.incremental import grouped_turns
from aether_context.retrieval import HashingEmbedder
from aether_context.testing import call

from conftest import filler, make_runner, run_turn, scripted_agent


def lookup(ref: str) -> dict:
    """Look up a record by its reference."""
    return {"id": f"REC{ref}", "owner": f"user_{ref}_9", "notes": filler(200, seed=len(ref))}


async def _requests(store: str, *, clear: bool) -> tuple[list, PackCache]:
    """A tool loop and a second user turn at a 4K window; with `clear` the memo is emptied before every call."""
    holder: dict = {}

    def step(i: int):
        def answer(req):  # type: ignore[no-untyped-def]
            if clear:
                holder["plugin"].packer.cache.clear()
            return call("lookup", ref=str(i))
        return answer

    agent, llm = scripted_agent([step(i) for i in range(8)] + ["done", step(8), "done again"], tools=[lookup])
    p = holder["plugin"] = ContextPackPlugin(store=store, window_tokens=4_000, embedder=HashingEmbedder())
    runner = make_runner(agent, plugins=[p])
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="memo")
    await run_turn(runner, "memo", "Look up records 0 to 7 and tell me their owners.")
    await run_turn(runner, "memo", "And record 8?")
    return [request_from_llm(r).to_json() for r in llm.requests], p.packer.cache


async def test_a_memo_cleared_before_every_call_sends_the_same_bytes_and_every_kind_is_registered(memory_store_url):
    """The stages reach the packer's memo from the call's context (on the pack thread too): its entries are of
    registered kinds only, and emptying it before every call changes no request."""
    warm, memo = await _requests(f"{memory_store_url}/warm", clear=False)
    cold, _ = await _requests(f"{memory_store_url}/cold", clear=True)
    assert warm == cold
    used = memo.stats()["by_kind"]
    assert used and set(used) <= set(KINDS), set(used) - set(KINDS)
    assert sum(k["hits"] for k in used.values()) > 0
    assert current_memo() is None  # the packer's scope ended with its call


def test_an_unregistered_kind_is_refused_with_the_fix():
    with pytest.raises(KeyError, match="KINDS"):
        PackCache().get("guess", 1, lambda: 2)


def test_a_stage_outside_a_pack_computes_without_a_memo():
    from aether_context.content import Message, TextPart
    msgs = [Message("user" if i % 2 == 0 else "model", (TextPart(f"m{i}"),)) for i in range(6)]
    memo = PackCache()
    with memo_scope(memo):
        inside = grouped_turns(msgs)
    entries = memo.stats()["entries"]
    assert entries > 0 and current_memo() is None
    assert grouped_turns(msgs) == inside == tuple(group_turns(msgs))
    assert memo.stats()["entries"] == entries  # nothing added outside the scope


def test_every_kind_names_its_key_owner_bound_and_why():
    for kind in KINDS.values():
        assert kind.key and kind.owner and kind.bound and kind.why, kind
