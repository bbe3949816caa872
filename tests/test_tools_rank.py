"""Tools ranked per step (issue 41): many tools, the refund ones declared, a left-out one still callable."""

from __future__ import annotations

import pytest
from google.adk.tools import FunctionTool

from aether_context import ContextPackPlugin
from aether_context.content import ToolSpec
from aether_context.pipeline.tools_rank import rank_tools, tool_text
from aether_context.testing import call

from conftest import make_runner, new_session, run_turn, scripted_agent

DOMAINS = ("payment", "order", "customer", "invoice", "shipment", "product", "coupon", "ticket", "subscription",
           "warehouse", "supplier", "employee")


def _tool(verb: str, domain: str) -> FunctionTool:
    def fn(ident: str) -> dict:
        return {"ok": True, "verb": verb, "domain": domain, "id": ident}
    fn.__name__ = f"{verb}_{domain}"
    fn.__doc__ = f"{verb.capitalize()} the {domain} with the given id.\n\nArgs:\n    ident: The {domain} id."
    return FunctionTool(fn)


def catalogue() -> list[FunctionTool]:
    return [_tool(verb, d) for d in DOMAINS for verb in ("get", "list", "update", "refund")]


def declared(llm_request) -> list[str]:
    return [f.name for t in llm_request.config.tools or [] for f in (getattr(t, "function_declarations", None) or [])]


async def refund_loop(store_url: str):
    """One invocation over the 48-tool catalogue: refund a payment, call a tool ranking left out, answer."""
    agent, llm = scripted_agent([call("refund_payment", ident="PAY-88"), call("get_warehouse", ident="W1"), "done"],
                                tools=catalogue())
    plugin = ContextPackPlugin(store=store_url, window_tokens=32_000)
    runner = make_runner(agent, plugins=[plugin])
    events = await run_turn(runner, await new_session(runner), "Please refund payment PAY-88 on order 5512")
    plugin.packer.store.flush()
    return plugin, llm, events


@pytest.mark.asyncio
async def test_many_tools_declare_the_step_s_and_a_left_out_call_still_runs(memory_store_url):
    plugin, llm, events = await refund_loop(memory_store_url)
    first = declared(llm.requests[0])
    assert "refund_payment" in first and "refund_order" in first
    assert len(first) <= 12 + 2 and len(first) < 48
    assert first == sorted(first)  # the pipeline declares tools by name: a stable order
    manifest = plugin.packer.recent[0].manifest
    assert "get_warehouse" in manifest.tools_left_out and "below the best 12" in manifest.tools_left_out["get_warehouse"]
    assert len(manifest.tools_left_out) == 48 - len(first)
    # the left-out tool was called and ran; it is declared from then on, the rest of the set held
    responses = [p.function_response for e in events for p in (e.content.parts if e.content else []) if p.function_response]
    assert [r.name for r in responses] == ["refund_payment", "get_warehouse"]
    assert responses[1].response == {"ok": True, "verb": "get", "domain": "warehouse", "id": "W1"}
    third = declared(llm.requests[2])
    assert "get_warehouse" in third and set(first) <= set(third)
    assert declared(llm.requests[1]) == first  # the set held: no tool change inside the invocation
    assert plugin.packer.recent[1].manifest.cache_break is None


@pytest.mark.asyncio
async def test_a_step_list_or_a_small_agent_is_not_ranked(memory_store_url):
    agent, llm = scripted_agent(["done"], tools=catalogue()[:20])
    runner = make_runner(agent, plugins=[ContextPackPlugin(store=memory_store_url, window_tokens=32_000)])
    await run_turn(runner, await new_session(runner), "Please refund payment PAY-88")
    assert len(declared(llm.requests[0])) == 20
    agent, llm = scripted_agent(["done"], tools=catalogue())
    runner = make_runner(agent, plugins=[ContextPackPlugin(store=memory_store_url, window_tokens=32_000)])
    await run_turn(runner, await new_session(runner, state={"aether:tools": ["get_order", "list_order"]}), "refund it")
    assert declared(llm.requests[0]) == ["get_order", "list_order"]


def test_ranking_is_deterministic_and_keeps_what_must_stay():
    specs = [ToolSpec(t.name, t._get_declaration().model_dump(mode="json", exclude_none=True)) for t in catalogue()]
    assert "refund" in tool_text(specs[3].declaration) and "ident" in tool_text(specs[3].declaration)
    a = rank_tools(specs, "refund payment PAY-88", keep=4, always=["get_employee"])
    assert a == rank_tools(specs, "refund payment PAY-88", keep=4, always=["get_employee"])
    assert "refund_payment" in a.kept and "get_employee" in a.kept and len(a.kept) == 5
    held = rank_tools(specs, "list the suppliers", keep=4, previous=a.kept, hold=True)
    assert held.kept == a.kept and held.held
    fresh = rank_tools(specs, "list the suppliers", keep=4, previous=a.kept)
    assert "list_supplier" in fresh.kept and not fresh.held


def test_a_reranker_reorders_the_head_and_keeps_the_rest():
    from aether_context.retrieval import Document, HashingEmbedder, HybridIndex, RetrievalSettings, Reranker, rerank

    index = HybridIndex(RetrievalSettings(), embedder=HashingEmbedder())
    index.add([Document(f"d{i}", f"refund payment number {i}", "notes") for i in range(5)])
    items = index.search("refund payment", k=5).items

    class ByNumber:
        def __call__(self, query, texts):
            return [float(t.split()[-1]) for t in texts]

    assert isinstance(ByNumber(), Reranker)
    out = rerank(items, "refund payment", ByNumber(), top_n=3)
    head = sorted(items[:3], key=lambda i: -float(i.document.text.split()[-1]))
    assert [i.document.id for i in out[:3]] == [i.document.id for i in head]
    assert [i.document.id for i in out[3:]] == [i.document.id for i in items[3:]] and [i.rank for i in out] == list(range(5))
    with pytest.raises(ValueError, match="one per text"):
        rerank(items, "q", lambda q, texts: [1.0])


def test_a_toolset_s_siblings_follow_its_best_tool_and_the_share_adds_more():
    specs = [ToolSpec(t.name, t._get_declaration().model_dump(mode="json", exclude_none=True)) for t in catalogue()]
    think = ToolSpec("think", {"name": "think", "description": "Write down a thought before acting."})
    assert "think" in rank_tools(specs[:2] + [think] + specs[2:], "refund payment PAY-88", keep=4).kept
    assert "think" not in rank_tools(specs + [think], "refund payment PAY-88", keep=4).kept  # declared far away
    wide = rank_tools(specs, "refund payment PAY-88", keep=4, share=0.25)
    size = {t.name: len(t.declaration_json) for t in specs}
    assert len(wide.kept) > 4 and sum(size[n] for n in wide.kept) <= 0.25 * sum(size.values())
    assert set(rank_tools(specs, "refund payment PAY-88", keep=4).kept) < set(wide.kept)


@pytest.mark.asyncio
async def test_a_repack_under_another_profile_ranks_the_tools_again(memory_store_url):
    from aether_context import load_profile, repack

    agent, llm = scripted_agent(["done"], tools=catalogue())
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=32_000)
    runner = make_runner(agent, plugins=[plugin])
    await run_turn(runner, await new_session(runner), "Please refund payment PAY-88 on order 5512")
    recorded = plugin.packer.recent[0]
    plugin.packer.store.flush()
    before = declared(llm.requests[0])
    wide = load_profile("default").override(tools={"keep": 24, "share": None})
    result = repack(recorded.uri, wide, store=plugin.packer.store)
    after = [t.name for t in result.pack.request.tools]
    assert set(before) < set(after) and "refund_payment" in after
    assert result.diff["tools"]["added"] == sorted(set(after) - set(before)) and not result.diff["tools"]["removed"]
    assert len(result.pack.manifest.tools_left_out) == 48 - len(after)
    off = load_profile("default").override(tools={"rank_above": None})  # off: every tool declared
    every = repack(recorded.uri, off, store=plugin.packer.store)
    assert len(every.pack.request.tools) == 48 and not every.pack.manifest.tools_left_out
    # the recorded profile gives the recorded request back
    assert repack(recorded.uri, "default", store=plugin.packer.store).pack.request.checksum == recorded.manifest.checksum


@pytest.mark.asyncio
async def test_a_recovery_repack_declares_the_tools_of_the_call_that_failed(memory_store_url):
    from aether_context import load_profile
    from aether_context.adk.recovery import recovery_pack
    from aether_context.tokens import TokenCounter

    plugin, _, _ = await refund_loop(memory_store_url)
    for record in plugin.packer.recent:  # each call of the tool loop, as if the model had rejected it as too long
        store = plugin.packer.store
        inputs = store.get_inputs(store.load_manifest(record.uri).inputs_ref)
        error = RuntimeError("400 The input token count (40000) exceeds the maximum number of tokens allowed (9000).")
        pack = recovery_pack(inputs, load_profile("default"), 32_000, error, counter=TokenCounter())
        assert [t.name for t in pack.request.tools] == record.manifest.tools
        assert pack.manifest.tools_left_out.keys() == record.manifest.tools_left_out.keys()
