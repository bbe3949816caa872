"""The context-pressure warning and the cost/quality presets (issue 41)."""

from __future__ import annotations

import pytest

from aether_context import ContextPackPlugin
from aether_context.errors import ProfileError
from aether_context.profile import builtin_profiles, load_profile
from aether_context.testing import call

from conftest import make_runner, new_session, run_turn, scripted_agent


def sent_text(llm_request) -> str:
    return "\n".join(p.text or "" for c in llm_request.contents for p in c.parts or [])


def report(part: int) -> str:
    return f"Part {part} of the report: " + " ".join(f"Line {i}: pump {part}-{i} reported {i * 3} bar." for i in range(60))


@pytest.mark.asyncio
async def test_status_warns_once_the_request_reaches_the_pressure_share(memory_store_url):
    # The pack compacts the conversation at its room, so a warning share below that room shows it here.
    agent, llm = scripted_agent(["noted"])
    profile = load_profile().override(pressure={"warn_share": 0.40})
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=3000, profile=profile)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner, state={"aether:goal": "Summarise the incident report"})
    warned = []
    for part in range(3):
        await run_turn(runner, sid, report(part))
        manifest = plugin.packer.recent[-1].manifest
        flags = [f for f in manifest.flags if f.startswith("context_pressure")]
        text = sent_text(llm.requests[-1])
        assert bool(flags) == (manifest.tokens_after >= 0.40 * manifest.window) == ("CONTEXT PRESSURE:" in text)
        warned.append(bool(flags))
        if flags:
            assert "of the window used: save notes or wrap up." in text
            assert float(flags[0].split(": ")[1]) >= 0.40
    assert warned[0] is False and warned[-1] is True


@pytest.mark.asyncio
async def test_no_pressure_warning_when_switched_off(memory_store_url):
    agent, llm = scripted_agent(["done"])
    profile = load_profile().override(pressure={"warn_share": None})
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=3000, profile=profile)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner, state={"aether:goal": "Summarise"})
    for part in range(3):
        await run_turn(runner, sid, report(part))
    assert not any("CONTEXT PRESSURE" in sent_text(r) for r in llm.requests)
    assert not any(f.startswith("context_pressure") for r in plugin.packer.recent for f in r.manifest.flags)


def read_log(part: int) -> dict:
    """Read one part of the pump log."""
    return {"text": " ".join(f"pump {part}-{i} reported {i * 3} bar." for i in range(90))}


async def _tool_loops(url: str, profile) -> tuple[list, list]:
    turns = [t for k in range(3) for t in [*(call("read_log", part=10 * k + i) for i in range(6)), f"summary {k}"]]
    agent, llm = scripted_agent(turns, tools=[read_log])
    plugin = ContextPackPlugin(store=url, window_tokens=6000, profile=profile)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner, state={"aether:goal": "Summarise the pump logs"})
    for k in range(3):
        await run_turn(runner, sid, f"Read the next parts of the log ({k})")
    return [r.manifest for r in plugin.packer.recent], [sent_text(r) for r in llm.requests]


@pytest.mark.asyncio
async def test_the_warning_is_on_by_default_and_breaks_no_cache(memory_store_url):
    # Three tool loops filling a 6K window: compactions break the cache, the warning adds none of its own.
    assert load_profile().pressure.warn_share == 0.70
    on, on_texts = await _tool_loops(memory_store_url, load_profile())
    off, _ = await _tool_loops(memory_store_url + "-off", load_profile().override(pressure={"warn_share": None}))
    assert sum(any(f.startswith("context_pressure") for f in m.flags) for m in on) >= 3
    breaks = [[(m.cache_break or {}).get(k) for k in ("block", "cause")] for m in on]
    assert breaks == [[(m.cache_break or {}).get(k) for k in ("block", "cause")] for m in off]
    assert [m.prefix_tokens for m in on] == [m.prefix_tokens for m in off]
    assert sum(m.tokens_after for m in on) <= 1.01 * sum(m.tokens_after for m in off)
    assert max(t.count("CONTEXT PRESSURE") for t in on_texts) == 1  # appended once, never piled up


def test_the_presets_load_and_change_what_they_say():
    assert {"quality_first", "cost_first"} <= set(builtin_profiles())
    default, quality, cost = load_profile(), load_profile("quality_first"), load_profile("cost_first")
    assert cost.tools.keep < default.tools.keep < quality.tools.keep
    assert cost.floors.slack <= default.floors.slack
    assert cost.conversation.compact_to < default.conversation.compact_to
    assert quality.offload.threshold_tokens > default.offload.threshold_tokens
    assert quality.pressure.warn_share > cost.pressure.warn_share


def test_bad_tool_and_pressure_keys_are_refused_with_the_fix():
    with pytest.raises(ProfileError, match="tools.keep .* above tools.rank_above"):
        load_profile().override(tools={"rank_above": 8, "keep": 12})
    with pytest.raises(ProfileError, match="pressure.warn_share"):
        load_profile().override(pressure={"warn_share": 1.5})
    with pytest.raises(ProfileError, match="unknown key 'tools.kep'"):
        load_profile().override(tools={"kep": 3})


def test_the_warning_never_piles_notes_on_a_frozen_tool_loop():
    """Found by test_later_calls_of_an_invocation: in a tool loop whose payload is frozen, a request past the
    pressure share recited STATUS at every call; the notes kept as sent grew past the room no one reserved
    for them and were all dropped, rewriting what the previous call sent. Under a frozen payload the warning
    now waits for a status due anyway: each call extends the one before, as with the warning off."""
    from aether_context import TokenCounter
    from aether_context.pipeline.build import build_pack
    from conftest import call_msg, filler, history_turns, make_inputs, resp_msg

    counter, history = TokenCounter(), history_turns(4)
    loop = [call_msg("search", q="a"), resp_msg("search", result=filler(1490, 1))]
    pack = build_pack(make_inputs(history, "what does this chart show?", loop), load_profile(), counter=counter,
                      window=3647)
    for i in range(2):
        loop += [call_msg("search", q=f"m{i}"), resp_msg("search", result=filler(150, i + 5))]
        nxt = build_pack(make_inputs(history, "what does this chart show?", loop, previous=pack.state),
                         load_profile(), counter=counter, window=3647)
        assert nxt.manifest.reused_payload and not nxt.manifest.compaction
        assert any(f.startswith("context_pressure") for f in nxt.manifest.flags)
        assert nxt.request.messages[:len(pack.request.messages)] == pack.request.messages
        pack = nxt


def test_a_chat_without_a_goal_gets_no_pressure_block():
    """A chat with no goal that still fits (nothing compacted): past the share the manifest flags the pressure, but
    no STATUS is added for it: there is no task to save notes for, and every question would pay for the block
    (LoCoMo at 32K: 42.6 % of calls over no plugin's with the block, none without)."""
    from aether_context import TokenCounter
    from aether_context.pipeline.build import build_pack
    from conftest import history_turns, make_inputs

    counter, history = TokenCounter(), history_turns(6)
    inputs = make_inputs(history, "and what did she say about the trip?")
    plain = build_pack(inputs, load_profile(), counter=counter, window=100_000)
    packs = {w: build_pack(inputs, load_profile(), counter=counter, window=w)
             for w in (int(plain.manifest.tokens_after / share) for share in (0.72, 0.76, 0.8, 0.85, 0.9))}
    pack = next(p for p in packs.values()
                       if any(f.startswith("context_pressure") for f in p.manifest.flags) and not p.manifest.compaction)
    assert any(f.startswith("context_pressure") for f in pack.manifest.flags) and not pack.manifest.compaction
    assert "CONTEXT PRESSURE" not in " ".join(m.text for m in pack.request.messages)
    # with a goal the block comes: test_status_warns_once_the_request_reaches_the_pressure_share
