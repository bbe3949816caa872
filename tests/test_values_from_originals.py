"""Values from originals: a large JSON result's identifiers survive its offload and its fold.

The compact form that replaces a large result is built from the original and lists every list
item's ids (within a budget); KNOWN VALUES reads them from it, so after the turn was offloaded
and then folded into CONVERSATION SO FAR a later request still carries all 40 order ids.
"""

from __future__ import annotations

import json

from aether_context import ContextPackPlugin
from aether_context.adk import request_from_llm
from aether_context.compress import compress_tool_output
from aether_context.testing import call
from aether_context.tokens import TokenCounter

from conftest import filler, make_runner, new_session, run_turn, scripted_agent

COUNTER = TokenCounter()
ORDER_IDS = [f"#W{1000 + 37 * i}" for i in range(40)]


def list_orders(user_id: str) -> dict:
    """List a user's orders."""
    return {"user_id": user_id, "orders": [
        {"order_id": oid, "status": "delivered", "address": f"{i} Main St, Springfield",
         "items": [{"name": "desk lamp", "price": 12.5 + i}], "total": 120 + i} for i, oid in enumerate(ORDER_IDS)]}


def read_notes(topic: str) -> dict:
    """Read notes on a topic."""
    return {"topic": topic, "notes": filler(900, seed=len(topic))}


def test_the_compact_form_lists_every_items_ids_from_the_original():
    result = list_orders("mia_li_3668")
    compact = compress_tool_output("list_orders", result, max_tokens=400, counter=COUNTER, uri="artifact://a/b")
    assert compact.compressed and COUNTER.count_text(compact.text) <= 400
    assert f"orders.order_id={json.dumps(ORDER_IDS, separators=(',', ':'))}" in compact.text
    tight = compress_tool_output("list_orders", result, max_tokens=120, counter=COUNTER, uri="artifact://a/b")
    assert COUNTER.count_text(tight.text) <= 120 and ORDER_IDS[0] in tight.text and "more)" in tight.text


async def test_forty_ids_of_an_offloaded_and_folded_result_reach_a_later_request(memory_store_url):
    script = [call("list_orders", user_id="mia_li_3668"), "You have 40 orders."]
    for i in range(8):
        script += [call("read_notes", topic=f"topic {i}"), f"Noted topic {i}."]
    agent, llm = scripted_agent(script, tools=(list_orders, read_notes))
    # ScriptedLlm reports our own token count, so the window is the one packed for: at 2.5K the notes fold the orders
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=2_500)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "List my orders, I am mia_li_3668.")
    for i in range(8):
        await run_turn(runner, sid, f"Now read the notes on topic {i}.")
    sent = [request_from_llm(r) for r in llm.requests]
    offloaded = [r.response for r in sent[1].messages[-1].responses]
    assert "artifact_uri" in json.dumps(offloaded)  # the result was replaced by its compact form
    manifests = [r.manifest for r in plugin.packer.recent]
    folded = [i for i, m in enumerate(manifests) if m.compaction]
    assert folded, "the orders turn was never folded"
    last = sent[-1]
    assert not any("list_orders" in str(r.response)[:40] or r.name == "list_orders"
                   for m in last.messages for r in m.responses)  # the turn itself is no longer sent
    text = "\n".join(m.text for m in last.messages)
    assert "KNOWN VALUES" in text
    missing = [oid for oid in ORDER_IDS if oid not in text]
    assert not missing, missing
