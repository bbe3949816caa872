"""Acceptance gating (issue 41, item 4) through a real ADK Runner: one repair pass, then stop."""

from __future__ import annotations

import asyncio
import io

import pytest

from aether_context import ContextPackPlugin
from aether_context.cli import main
from aether_context.loop.acceptance import read_judge, unmet_items
from aether_context.profile import load_profile
from aether_context.testing import call

from conftest import make_runner, new_session, run_turn, scripted_agent

ITEMS = ["refund payment PAY-88", "confirm the new balance"]
STATE = {"aether:goal": "Handle the customer's refund", "aether:acceptance": ITEMS}


def gated(**acceptance):
    return load_profile().override(acceptance={"gate": True, **acceptance})


def lookup(query: str) -> dict:
    """Look up a payment."""
    return {"payment": "PAY-88", "amount": 40}


async def _run(turns, profile, url, *, messages=("Please refund payment PAY-88",)):
    agent, llm = scripted_agent(turns, tools=[lookup])
    plugin = ContextPackPlugin(store=url, window_tokens=32_000, profile=profile)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner, state=dict(STATE))
    events = [await run_turn(runner, sid, m) for m in messages]
    return plugin, llm, events


def _final(events) -> str:
    return "".join(p.text or "" for p in events[-1].content.parts)


def _flags(plugin) -> list[str]:
    return [f for r in plugin.packer.recent for f in r.manifest.flags if f.startswith("acceptance")]


def test_the_rule_needs_the_identifiers_and_half_the_words():
    assert unmet_items("I refunded payment PAY-88; the new balance is confirmed.", ITEMS) == []
    assert unmet_items("Refund done for payment PAY-87.", ITEMS) == ITEMS
    assert unmet_items("", ["", "  "]) == []  # an item with no terms is met
    assert read_judge("2", ITEMS) == ITEMS[1:] and read_judge("NONE", ITEMS) == []
    with pytest.raises(ValueError):
        read_judge("I think so", ITEMS)


@pytest.mark.asyncio
async def test_an_unmet_item_gets_one_repair_pass_then_the_gate_stops(memory_store_url):
    turns = [call("lookup", query="PAY-88"), "Refunded payment PAY-88.", "Still working on it.", "Later answer."]
    plugin, llm, events = await _run(turns, gated(), memory_store_url)
    assert len(llm.requests) == 3  # the tool call, the answer, the repair pass; no second repair
    repair = llm.requests[-1].contents
    assert repair[-2].role == "model" and repair[-2].parts[0].text == "Refunded payment PAY-88."
    note = repair[-1].parts[0].text
    assert note.startswith("ACCEPTANCE CHECK") and "- confirm the new balance" in note and "PAY-88" not in note
    assert _final(events[0]) == "Still working on it."  # the repair's answer replaced the first
    meta = events[0][-1].custom_metadata["aether_context"]["acceptance"]
    assert meta == {"items": 2, "unmet": ["confirm the new balance"], "by": "rules", "repair": True}
    flags = _flags(plugin)
    assert flags[0] == "acceptance: 1 of 2 met (rules); unmet: confirm the new balance"
    assert flags[1] == "acceptance_repair: 1 pass; 0 of 1 now met"
    plugin.packer.store.flush()
    stored = plugin.packer.store.load_manifest(plugin.packer.recent[-1].uri)
    assert stored.flags[-2:] == flags
    out = io.StringIO()
    assert main(["timeline", memory_store_url], out=out) == 0
    assert "1 of 2 met (rules), repaired" in out.getvalue()


@pytest.mark.asyncio
async def test_a_repair_that_calls_a_tool_runs_on_and_is_not_repaired_again(memory_store_url):
    turns = ["Refunded payment PAY-88.", call("lookup", query="balance"), "Done, nothing else."]
    plugin, llm, events = await _run(turns, gated(), memory_store_url)
    assert len(llm.requests) == 3  # answer, repair (a tool call), the final answer: checked, not repaired
    assert _final(events[0]) == "Done, nothing else."
    flags = _flags(plugin)
    assert "acceptance_repair: 1 pass; it called tools" in flags
    assert flags[-1] == "acceptance_repair: none (one per invocation, already used)"


@pytest.mark.asyncio
async def test_the_gate_is_off_by_default_and_a_met_answer_is_left_alone(memory_store_url):
    plugin, llm, events = await _run(["Refunded payment PAY-88.", "unused"], load_profile(), memory_store_url)
    assert len(llm.requests) == 1 and _final(events[0]) == "Refunded payment PAY-88."
    assert _flags(plugin) == [] and "acceptance" not in events[0][-1].custom_metadata["aether_context"]
    met = "Refunded payment PAY-88 and confirmed the new balance."
    plugin, llm, events = await _run([met, "unused"], gated(), memory_store_url)
    assert len(llm.requests) == 1 and _final(events[0]) == met
    assert _flags(plugin) == ["acceptance: 2 of 2 met (rules)"]


@pytest.mark.asyncio
async def test_a_new_invocation_may_repair_again(memory_store_url):
    turns = ["Refunded payment PAY-88.", "The balance is confirmed."]
    plugin, llm, _ = await _run(turns, gated(), memory_store_url, messages=("refund it", "and again"))
    assert len(llm.requests) == 4
    assert sum(f.startswith("acceptance_repair: 1 pass") for f in _flags(plugin)) == 2


@pytest.mark.asyncio
async def test_the_judge_decides_and_a_slow_judge_fails_open(memory_store_url):
    answer = "Refunded payment PAY-88 and confirmed the new balance."
    plugin, llm, events = await _run([answer, "1", "Refunded PAY-88 for certain."], gated(judge=True), memory_store_url)
    assert len(llm.requests) == 3 and "Reply with the numbers" in llm.requests[1].contents[0].parts[0].text
    assert _flags(plugin)[0] == "acceptance: 1 of 2 met (judge); unmet: refund payment PAY-88"

    async def slow(_request):
        await asyncio.sleep(5)
        return "2"
    plugin, llm, events = await _run(["Refunded payment PAY-88.", slow, "unused"],
                                     gated(judge=True, judge_timeout_seconds=0.2), memory_store_url)
    assert len(llm.requests) == 2 and _final(events[0]) == "Refunded payment PAY-88."
    assert _flags(plugin) == ["acceptance: 2 items, not checked (the judge failed)", "acceptance_judge_failed: TimeoutError: "]
