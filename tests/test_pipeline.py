"""The packing pipeline on core types only (no ADK): layout, layers, overflow, reuse, determinism."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from aether_context.content import Blob, FunctionCall, FunctionResponse, Message, TextPart, canonical_json
from aether_context.errors import BudgetError
from aether_context.pipeline import (EvidenceItem, MemoryItem, TaskSpec, build_pack, group_turns, request_tokens)
from aether_context.pipeline.render import PAYLOAD_HEADER
from aether_context.profile import load_profile
from aether_context.tokens import TokenCounter

from conftest import (call_msg, filler, history_turns, make_inputs, orphan_responses, resp_msg, text_msg,
                      tool_spec)

DEFAULT = load_profile("default")

TASK = TaskSpec(goal="Write the Q3 market report", step="Collect revenue figures",
                acceptance=("cites every figure", "under 500 words"), constraints=("no speculation", "EUR only"))


REQUEST_HEADER = "USER REQUEST (VERBATIM; answer it):"


def payload_of(pack) -> str:
    """The payload part of the one payload message (a closing STATUS may ride on it as a further part)."""
    msgs = [m for m in pack.request.messages if m.role == "user" and m.text.startswith(PAYLOAD_HEADER)]
    assert len(msgs) == 1, "exactly one pack payload"
    return msgs[0].parts[0].text


def evidence_items(n: int, words: int = 30):
    return [EvidenceItem(f"ev{i}", f"figure {i}: {filler(words, i)}", uri=f"artifact://app/u/s1/doc{i}.txt",
                         source="artifact", timestamp=1_600_000_000.0 + i) for i in range(n)]


def memory_items(n: int, words: int = 20):
    return [MemoryItem(f"m{i}", f"remembered {i}: {filler(words, 40 + i)}", timestamp=1_650_000_000.0 + i * 86_400,
                       rank=i) for i in range(n)]


# ------------------------------------------------------------------------------------------------
# layout
# ------------------------------------------------------------------------------------------------


def test_layer_order_and_verbatim_request(counter):
    request = "Summarise   the revenue\nfigures for Q3 (EUR) — keep it short.  "
    inputs = make_inputs(history_turns(10), request, task=TASK, evidence=evidence_items(2), memory=memory_items(2),
                         tools=[tool_spec("search")])
    pack = build_pack(inputs, DEFAULT, counter=counter, window=16_000)
    text = payload_of(pack)
    markers = [PAYLOAD_HEADER, "GOAL: Write the Q3 market report", "STEP: Collect revenue figures", "CONSTRAINTS:",
               "EVIDENCE (", "MEMORY (", "ACCEPTANCE:", REQUEST_HEADER]
    positions = [text.index(m) for m in markers]
    assert positions == sorted(positions), positions
    assert text.startswith(PAYLOAD_HEADER + "\n")
    assert text.endswith(REQUEST_HEADER + "\n" + request)
    assert text.count(request) == 1
    assert "- no speculation" in text and "- [ ] cites every figure" in text and "- [ ] under 500 words" in text
    # quoted data (evidence and memory items) is indented: only the pack's own headers start a line
    assert "\n  - [ev0] figure 0:" in text and "\n  - (2022-04-16 05:20) remembered 1:" in text
    assert "CONVERSATION SO FAR" not in text  # the history fits: it goes out verbatim, before the payload
    n = len(inputs.request.messages) - 1
    assert pack.request.messages[:n] == inputs.request.messages[:n]
    assert pack.request.messages[n].parts[0].text == text
    # the original request message is rewritten into the payload, never stacked next to it
    assert not any(m.text == request for m in pack.request.messages)


def test_empty_sections_are_left_out(counter):
    task = TaskSpec(goal="Say hello")
    pack = build_pack(make_inputs([], "hi", task=task), DEFAULT, counter=counter, window=8_000)
    assert payload_of(pack) == f"{PAYLOAD_HEADER}\nGOAL: Say hello\n{REQUEST_HEADER}\nhi"
    assert [m.role for m in pack.request.messages] == ["user"]


def test_a_pack_with_nothing_to_add_sends_the_request_as_adk_built_it(counter):
    """No task, evidence, memory or failures: the user's message goes out as it is (no payload)."""
    inputs = make_inputs(history_turns(4), "hi")
    pack = build_pack(inputs, DEFAULT, counter=counter, window=8_000)
    assert pack.request.messages == inputs.request.messages
    assert pack.request.system_instruction == inputs.request.system_instruction
    assert pack.request.checksum == inputs.request.checksum
    assert not any(m.text.startswith(PAYLOAD_HEADER) for m in pack.request.messages)
    assert pack.manifest.tokens_after == pack.manifest.tokens_before


def test_request_attachments_stay_in_the_payload(counter):
    inputs = make_inputs([], "what is in this picture?")
    image = Blob("image/png", b"\x89PNG....")
    msgs = inputs.request.messages[:-1] + (Message("user", (TextPart("what is in this picture?"), image)),)
    from dataclasses import replace

    inputs = replace(inputs, request=replace(inputs.request, messages=msgs))
    pack = build_pack(inputs, DEFAULT, counter=counter, window=8_000)
    payload = pack.request.messages[-1]
    assert payload.parts[-1] == image
    assert payload.text.endswith("what is in this picture?")


def test_images_age_at_a_new_invocation_not_within_one(counter):
    """The later calls of an invocation extend the prefix its first call sent (the prompt cache): an image
    that ages past `image_keep_turns` during the tool loop is described at the next invocation, like
    pruned tool outputs. Found by test_properties (an image in history, a growing loop)."""
    image = Blob("image/png", b"\x89PNG\r\n\x1a\n" + bytes(48))
    history = [Message("user", (TextPart("what does this chart show?"), image)), text_msg("model", "a rising line")]
    first = build_pack(make_inputs(history, "go on", task=TASK), DEFAULT, counter=counter, window=16_000)
    assert first.request.messages[0].blobs == (image,)
    loop: list = []
    state = first.state
    for i in range(3):
        loop += [call_msg("search", q=f"q{i}"), resp_msg("search", result=filler(30, i))]
        later = build_pack(make_inputs(history, "go on", loop, task=TASK, previous=state), DEFAULT, counter=counter,
                           window=16_000)
        assert later.manifest.reused_payload
        assert later.request.messages[:2] == first.request.messages[:2], i
        state = later.state
    next_invocation = build_pack(make_inputs(history + [text_msg("user", "go on"), *loop, text_msg("model", "done")],
                                             "and then?", task=TASK, invocation_id="inv-2", previous=state),
                                 DEFAULT, counter=counter, window=16_000)
    assert not any(m.blobs for m in next_invocation.request.messages)
    assert [e["action"] for e in next_invocation.manifest.truncation_events
            if e["reason"].startswith("old inline images")] == ["compress"]


def test_images_age_alike_in_every_call_of_an_invocation(counter):
    """Found by test_later_calls_of_an_invocation: a call with no state of its own in the invocation (the first
    one the plugin packs, after tool turns) counted the loop's turns in an image's age and described it; the next
    call kept it for the same invocation and sent the image again, rewriting the prefix just cached. An image's
    age counts the turns before the invocation's request only, whatever the call."""
    image = Blob("image/png", b"\x89PNG\r\n\x1a\n" + bytes(48))
    history = [Message("user", (TextPart("what does this chart show?"), image)), text_msg("user", "and this one?")]
    loop = [call_msg("fetch", q="l0"), resp_msg("fetch", result="alpha")]
    first = build_pack(make_inputs(history, "go on", loop, task=TASK), DEFAULT, counter=counter, window=16_000)
    assert first.request.messages[0].blobs == (image,)
    later = build_pack(make_inputs(history, "go on", loop + [call_msg("search", q="q1"), resp_msg("search", result="b")],
                                   task=TASK, previous=first.state), DEFAULT, counter=counter, window=16_000)
    n = len(first.request.messages)
    assert later.manifest.reused_payload
    assert later.request.messages[:n] == first.request.messages


def test_system_instruction_is_adks_unchanged_and_stable(counter):
    a = build_pack(make_inputs(history_turns(3), "one", task=TASK), DEFAULT, counter=counter, window=8_000)
    b = build_pack(make_inputs(history_turns(9), "two", evidence=evidence_items(3), invocation_id="inv-2"),
                   DEFAULT, counter=counter, window=8_000)
    c = build_pack(make_inputs([], "three", task=TASK, system=""), DEFAULT, counter=counter, window=8_000)
    assert payload_of(a) and payload_of(b) and payload_of(c)  # each call adds a payload ...
    # ... but the system instruction is ADK's, byte for byte (nothing appended: the cached prefix stays the app's)
    assert a.request.system_instruction == b.request.system_instruction == "You are a helpful analyst."
    assert c.request.system_instruction == ""


def test_model_name_is_kept(counter):
    pack = build_pack(make_inputs([], "hi", model="models/gemini-2.5-flash"), DEFAULT, counter=counter)
    assert pack.request.model == "models/gemini-2.5-flash"
    assert pack.manifest.window == 1_048_576


# ------------------------------------------------------------------------------------------------
# tools and task flags
# ------------------------------------------------------------------------------------------------


def test_tools_are_sorted(counter):
    tools = [tool_spec("zeta"), tool_spec("alpha"), tool_spec("mid")]
    pack = build_pack(make_inputs([], "hi", tools=tools), DEFAULT, counter=counter, window=8_000)
    assert [t.name for t in pack.request.tools] == ["alpha", "mid", "zeta"]
    assert pack.manifest.tools == ["alpha", "mid", "zeta"]


def test_step_tools_filter(counter):
    tools = [tool_spec("search"), tool_spec("write_file"), tool_spec("delete_all"), tool_spec("read_file")]
    task = TaskSpec(goal="g", acceptance=("a",), tools=("write_file", "read_file", "teleport"))
    pack = build_pack(make_inputs([], "hi", tools=tools, task=task), DEFAULT, counter=counter, window=8_000)
    assert [t.name for t in pack.request.tools] == ["read_file", "write_file"]
    assert pack.request.tools[0].declaration == tool_spec("read_file").declaration
    assert "unknown_step_tool:teleport" in pack.manifest.flags
    assert pack.manifest.tools == ["read_file", "write_file"]
    assert pack.manifest.layer_budgets["tools"].items == 2
    assert pack.manifest.layer_budgets["tools"].dropped == 2


def test_empty_step_tool_list_removes_all_tools(counter):
    task = TaskSpec(goal="g", acceptance=("a",), tools=())
    pack = build_pack(make_inputs([], "hi", tools=[tool_spec("search")], task=task), DEFAULT, counter=counter,
                      window=8_000)
    assert pack.request.tools == ()


@pytest.mark.parametrize("task, expected, absent", [
    (TaskSpec(), {"task_missing_goal", "task_missing_acceptance"}, set()),
    (TaskSpec(goal="g"), {"task_missing_acceptance"}, {"task_missing_goal"}),
    (TaskSpec(acceptance=("done",)), {"task_missing_goal"}, {"task_missing_acceptance"}),
    (TaskSpec(goal="g", acceptance=("done",)), {"task_missing_step"}, {"task_missing_goal", "task_missing_acceptance"}),
    (TaskSpec(goal="g", step="reproduce"), set(), {"task_missing_step"}),
    (TaskSpec(goal="g", plan=(("reproduce", True), ("fix", False))), set(), {"task_missing_step"}),
    (TaskSpec(goal="g", plan=(("reproduce", True),)), {"task_missing_step"}, set()),
])
def test_task_flags(counter, task, expected, absent):
    pack = build_pack(make_inputs([], "hi", task=task), DEFAULT, counter=counter, window=8_000)
    assert expected <= set(pack.manifest.flags)
    assert not (absent & set(pack.manifest.flags))


def test_missing_user_request_is_flagged(counter):
    from dataclasses import replace

    inputs = replace(make_inputs(history_turns(3), "hi"), request_index=None)
    pack = build_pack(inputs, DEFAULT, counter=counter, window=8_000)
    assert "user_request_not_found" in pack.manifest.flags
    assert pack.request.messages == inputs.request.messages  # nothing to add: sent as it is
    with_task = replace(make_inputs(history_turns(3), "hi", task=TASK), request_index=None)
    pack = build_pack(with_task, DEFAULT, counter=counter, window=8_000)
    assert "user_request_not_found" in pack.manifest.flags
    assert "GOAL: " + TASK.goal in payload_of(pack)
    assert "USER REQUEST" not in payload_of(pack)


# ------------------------------------------------------------------------------------------------
# evidence and memory
# ------------------------------------------------------------------------------------------------


def test_evidence_uris_are_listed(counter):
    ev = evidence_items(3) + [EvidenceItem("note", "a plain note without uri")]
    pack = build_pack(make_inputs([], "revenue figures", evidence=ev), DEFAULT, counter=counter, window=16_000)
    text = payload_of(pack)
    for i in range(3):
        assert f"(artifact://app/u/s1/doc{i}.txt)" in text
    assert "- [note] a plain note without uri" in text
    assert pack.manifest.artifact_uris == sorted(f"artifact://app/u/s1/doc{i}.txt" for i in range(3))
    assert {s["id"] for s in pack.manifest.selected["evidence"]} == {"ev0", "ev1", "ev2", "note"}


def test_evidence_is_ranked_by_relevance(counter):
    ev = [EvidenceItem("off", "weather in paris is mild"), EvidenceItem("on", "Q3 revenue figures grew 12 percent")]
    pack = build_pack(make_inputs([], "What were the Q3 revenue figures?", evidence=ev), DEFAULT, counter=counter,
                      window=16_000)
    text = payload_of(pack)
    assert text.index("[on]") < text.index("[off]")


def test_memory_top_k_with_dates(counter):
    profile = DEFAULT.override(memory={"top_k": 2})
    mem = [MemoryItem("old", "the budget owner is Alice", timestamp=1_600_000_000.0),
           MemoryItem("new", "the budget owner is now Bob", timestamp=1_700_000_000.0),
           MemoryItem("undated", "budget owner note without a date"),
           MemoryItem("noise", "lunch was pasta", timestamp=1_690_000_000.0)]
    pack = capped = build_pack(make_inputs([], "who is the budget owner?", memory=mem), profile, counter=counter,
                               window=16_000)
    text = payload_of(pack)
    lines = [ln[2:] for ln in text.split("\n") if ln.startswith("  - (")]
    assert len(lines) == 2
    assert len(pack.manifest.selected["memory"]) == 2
    assert "lunch" not in text
    assert all(re.match(r"- \((\d{4}-\d\d-\d\d \d\d:\d\d|undated)\) ", ln) for ln in lines)
    assert "(2023-11-14 22:13) the budget owner is now Bob" in text
    # without the optional cap the budget decides: every relevant item goes in, the irrelevant one does not
    pack = build_pack(make_inputs([], "who is the budget owner?", memory=mem), DEFAULT, counter=counter,
                      window=16_000)
    text = payload_of(pack)
    assert DEFAULT.memory.top_k is None
    assert {s["id"] for s in pack.manifest.selected["memory"]} == {"old", "new", "undated"}
    assert "(2020-09-13 12:26) the budget owner is Alice" in text and "lunch" not in text
    usage = pack.manifest.layer_budgets["memory"]
    assert usage.items == 3 and usage.demand >= usage.used > 0
    # the items the cap left out are accounted for in the manifest (nothing disappears silently)
    assert capped.manifest.layer_budgets["memory"].dropped == 2


def test_undated_memory_is_marked(counter):
    pack = build_pack(make_inputs([], "budget?", memory=[MemoryItem("x", "budget is 5k")]), DEFAULT,
                      counter=counter, window=8_000)
    assert "\n  - (undated) budget is 5k" in payload_of(pack)


# ------------------------------------------------------------------------------------------------
# conversation: tail, summary, turns
# ------------------------------------------------------------------------------------------------


def test_group_turns_keeps_calls_with_their_responses():
    msgs = [text_msg("user", "hi"),
            Message("model", (FunctionCall("a", {}), FunctionCall("b", {}))),
            resp_msg("a", r=1), resp_msg("b", r=2),
            text_msg("model", "done"),
            call_msg("c"), text_msg("user", "interrupted"),
            call_msg("d"), Message("user", (FunctionResponse("d", {}), FunctionResponse("x", {})))]
    turns = group_turns(msgs, offset=10)
    assert [len(t.messages) for t in turns] == [1, 3, 1, 1, 1, 2]
    assert [t.start for t in turns] == [10, 11, 14, 15, 16, 17]
    assert turns[1].is_tool_exchange and not turns[0].is_tool_exchange
    assert not any(t.is_orphan_response for t in turns)
    assert group_turns([resp_msg("a")])[0].is_orphan_response


def test_history_is_verbatim_while_it_fits(counter):
    history = history_turns(10)
    assert len(group_turns(history)) == 10
    inputs = make_inputs(history, "next?")
    pack = build_pack(inputs, DEFAULT, counter=counter, window=32_000)
    # more turns than tail_turns, but the request fits: nothing is folded, the request goes out as ADK built it
    assert len(group_turns(history)) > DEFAULT.conversation.tail_turns
    assert pack.request.messages == inputs.request.messages
    assert pack.manifest.compaction is None
    assert not [e for e in pack.manifest.truncation_events if e["action"] == "fold"]
    assert pack.manifest.layer_budgets["conversation"].items == 10
    assert pack.manifest.layer_budgets["conversation"].dropped == 0


def test_under_pressure_one_compaction_moves_the_oldest_turns_into_a_block(counter):
    history = history_turns(30, big=300)
    turns = group_turns(history)
    inputs = make_inputs(history, "next?")
    window = 4_000
    assert request_tokens(inputs.request, counter) > window  # it cannot go out verbatim
    pack = build_pack(inputs, DEFAULT, counter=counter, window=window)
    assert request_tokens(pack.request, counter) <= window - int(window * DEFAULT.floors.slack)
    m = pack.manifest
    assert m.compaction is not None and m.compaction["reason"] == "conversation over its room"
    through = m.compaction["through"]
    compacted = [t for t in turns if t.start < through]
    kept = [t for t in turns if t.start >= through]
    assert compacted and len(kept) >= DEFAULT.conversation.tail_turns
    assert m.compaction["folded_turns"] == len(compacted) and m.compaction["count"] == 1
    assert m.compaction["tokens_after"] < m.compaction["tokens_before"]
    # the block leads, then the newest turns verbatim (whole turns), then the user's message
    msgs = pack.request.messages
    block = msgs[0].text
    assert msgs[0].role == "user" and block.startswith("CONVERSATION SO FAR (earlier turns, compacted")
    verbatim = [msg for t in kept for msg in t.messages]
    assert list(msgs[1:1 + len(verbatim)]) == verbatim
    assert msgs[1 + len(verbatim):] == (text_msg("user", "next?"),)
    assert orphan_responses(msgs) == []
    # fold lines (indented under TURNS:) name the newest compacted turns; no kept turn is in the block
    turns_section = block.split("\nTURNS:\n", 1)[1]
    assert f"  - [turn {compacted[-1].start}]" in turns_section
    for t in kept:
        assert f"[turn {t.start}]" not in block
    fold = [e for e in m.truncation_events if e["action"] == "fold"]
    assert len(fold) == 1 and fold[0]["ids"] == [f"turn-{t.start}" for t in compacted]
    assert m.layer_budgets["conversation"].items == len(kept)
    assert m.layer_budgets["conversation"].dropped == len(compacted)
    assert pack.state.compacted_through == through and pack.state.block_text == block


@pytest.mark.parametrize("window, words", [(8_000, 100), (6_000, 300)])
def test_a_compaction_is_not_followed_by_another_at_the_next_invocation(counter, window, words):
    """A chat that outgrows its room, one invocation per question: a compaction brings the conversation
    down to `compact_to` of its room so the next invocations append (cache-stable) instead of compacting
    again. Two compactions in a row would break the prefix at every new user turn (issue 11)."""
    history: list = []
    previous = None
    compacted = []
    for i in range(30):
        question = f"question {i}: " + filler(words, i)
        pack = build_pack(make_inputs(history, question, invocation_id=f"inv-{i}", previous=previous), DEFAULT,
                          counter=counter, window=window)
        assert request_tokens(pack.request, counter) <= window - int(window * DEFAULT.floors.slack)
        if pack.manifest.compaction is not None:
            compacted.append(i)
        previous = pack.state
        history += [text_msg("user", question), text_msg("model", f"answer {i}: " + filler(words, 100 + i))]
    assert compacted, "the chat never outgrew its room: make it longer"
    assert not [i for i in compacted if i - 1 in compacted], compacted


@pytest.mark.parametrize("window, big", [(8_000, 700), (8_000, 1_000), (4_000, 400)])
def test_a_tool_loop_with_big_outputs_does_not_compact_at_every_call(counter, window, big):
    """One invocation of tool turns whose outputs are large against the room: the minimum verbatim
    tail may stay past the compaction target only while it leaves room for more turns. A tail that
    fills the room recompacts (a cache break, and work over the whole history) at every call."""
    history: list = []
    previous = None
    compacted = []
    for i in range(24):
        loop = history + [call_msg("run", cmd=f"step {i}"), resp_msg("run", output=filler(big, i))]
        pack = build_pack(make_inputs([], "fix the failing tests", loop, invocation_id="inv-1", previous=previous),
                          DEFAULT, counter=counter, window=window)
        assert request_tokens(pack.request, counter) <= window - int(window * DEFAULT.floors.slack)
        if pack.manifest.compaction is not None:
            compacted.append(i)
        previous = pack.state
        history = loop
    assert len(compacted) >= 2, "the loop never outgrew its room: make it longer"
    assert not [i for i in compacted if i - 1 in compacted], compacted


def test_tail_turns_is_the_minimum_verbatim_tail(counter):
    history = history_turns(60, big=300)
    turns = group_turns(history)
    inputs = make_inputs(history, "next?")
    # no pressure: a small tail_turns does not cap the verbatim history
    roomy = build_pack(make_inputs(history_turns(10), "next?"), DEFAULT.override(conversation={"tail_turns": 2}),
                       counter=counter, window=32_000)
    assert roomy.manifest.layer_budgets["conversation"].items == 10
    # under pressure with a tiny compaction target, exactly the minimum tail stays verbatim
    for tail in (2, 6, 10):  # (the minimum tail yields only when it alone would fill the room: not at 8K)
        profile = DEFAULT.override(conversation={"tail_turns": tail, "compact_to": 0.05})
        pack = build_pack(inputs, profile, counter=counter, window=8_000)
        assert pack.manifest.compaction is not None
        assert pack.manifest.layer_budgets["conversation"].items == tail
        kept = [m for t in turns[-tail:] for m in t.messages]
        assert list(pack.request.messages[1:1 + len(kept)]) == kept
        assert pack.request.messages[0].text.startswith("CONVERSATION SO FAR")


def test_folding_never_orphans_a_response(counter):
    # big tool exchanges force overflow folding; the tail boundary must fall between turns
    history = []
    for i in range(8):
        history.append(Message("model", (FunctionCall("search", {"q": str(i)}), FunctionCall("fetch", {"i": i}))))
        history.append(resp_msg("search", result=filler(400, i)))
        history.append(resp_msg("fetch", body=filler(300, 50 + i)))
        history.append(text_msg("model", f"noted {i}"))
    loop = [call_msg("search", q="x"), resp_msg("search", result=filler(500, 99))]
    for window in (4_000, 6_000, 9_000, 20_000):
        pack = build_pack(make_inputs(history, "go on", loop, task=TASK), DEFAULT, counter=counter, window=window)
        assert orphan_responses(pack.request.messages) == [], window
        assert request_tokens(pack.request, counter) <= window - int(window * DEFAULT.floors.slack)


def test_orphan_response_in_incoming_history_is_not_sent(counter):
    """A history that already lost a call (e.g. ADK compaction cut it, adk-python #4740) must not
    reach the model as an orphaned function_response: Gemini rejects it."""
    history = [resp_msg("search", result="left over from a compacted exchange"), text_msg("model", "ok"),
               text_msg("user", "thanks")]
    pack = build_pack(make_inputs(history, "next?"), DEFAULT, counter=counter, window=8_000)
    assert orphan_responses(pack.request.messages) == []


def test_oversized_turn_is_cut_middle_out(counter):
    profile = DEFAULT.override(conversation={"max_turn_tokens": 300})
    loop = [call_msg("fetch", url="x"), resp_msg("fetch", body=filler(2_000))]
    pack = build_pack(make_inputs([], "read it", loop), profile, counter=counter, window=32_000)
    cut = [e for e in pack.manifest.truncation_events if e["action"] == "cut"]
    assert cut and cut[0]["tokens_after"] < cut[0]["tokens_before"]
    resp = pack.request.messages[-1].responses[0]
    assert "tokens omitted" in canonical_json(resp.response)
    assert pack.request.messages[-2].calls[0].name == "fetch"


# ------------------------------------------------------------------------------------------------
# overflow
# ------------------------------------------------------------------------------------------------


def _overflow_inputs():
    ev = [EvidenceItem(f"ev{i}", filler(150, i), uri=f"artifact://app/u/s1/doc{i}.txt", timestamp=1000.0 + i)
          for i in range(8)]
    mem = [MemoryItem(f"m{i}", filler(150, 50 + i), timestamp=1_600_000_000.0 + i * 86_400, rank=i) for i in range(8)]
    return make_inputs(history_turns(6, big=700), "report the findings", task=TASK, evidence=ev, memory=mem,
                       tools=[tool_spec("search"), tool_spec("fetch")])


def test_a_compaction_with_nothing_to_move_sends_no_empty_block(counter):
    """Six turns (= tail_turns, the minimum verbatim tail) over their room: nothing can leave the verbatim
    zone, so no CONVERSATION SO FAR block may be sent (a header with no turns costs tokens and breaks the
    cache prefix at the next call, which starts again from an uncompacted zone)."""
    inputs = _overflow_inputs()
    for window in (3_500, 3_000, 2_500):
        pack = build_pack(inputs, DEFAULT, counter=counter, window=window)
        first = pack.request.messages[0].text
        if first.startswith("CONVERSATION SO FAR"):
            assert any(f"\n{h}:\n" in first for h in ("OPENING REQUEST", "SUMMARY", "TURNS")), (window, first)
        if pack.manifest.compaction is not None:
            assert pack.manifest.compaction["folded_turns"] > 0 or pack.state.compacted_through > 0, \
                (window, pack.manifest.compaction)


def test_overflow_never_touches_system_task_tools(counter):
    inputs = _overflow_inputs()
    for window in (12_000, 5_000, 3_000, 2_500):
        pack = build_pack(inputs, DEFAULT, counter=counter, window=window)
        text = payload_of(pack)
        assert pack.request.system_instruction == inputs.request.system_instruction
        assert [t.name for t in pack.request.tools] == ["fetch", "search"]
        for piece in ("GOAL: " + TASK.goal, "STEP: " + TASK.step, "- no speculation", "- EUR only",
                      "- [ ] cites every figure", "- [ ] under 500 words",
                      REQUEST_HEADER + "\nreport the findings"):
            assert piece in text
        assert not any(e["layer"] in {"system", "task", "tools"} for e in pack.manifest.truncation_events)


def _ranked_inputs(loop=()):
    """Six evidence items and six memories, all relevant to the request, each with its own words (so none
    is a near-duplicate and a dropped one can be looked for in the payload). Evidence gets older as its
    index grows; memory ranks by how often it repeats the request's words."""
    def words(tag, n):
        return " ".join(f"{tag}{j}" for j in range(n))

    ev = [EvidenceItem(f"ev{i}", f"Q3 revenue figures, region {i}: " + words(f"e{i}x", 250),
                       uri=f"artifact://app/u/s1/doc{i}.txt", source="artifact", timestamp=1000.0 + (5 - i))
          for i in range(6)]
    mem = [MemoryItem(f"m{i}", "Q3 revenue figures " * (6 - i) + words(f"m{i}y", 180), timestamp=1_600_000_000.0,
                      rank=i) for i in range(6)]
    return make_inputs(history_turns(4), "report the Q3 revenue figures", loop, task=TASK, evidence=ev, memory=mem,
                       tools=[tool_spec("search"), tool_spec("fetch")])


def _first_word(item_id: str) -> str:
    """The first of an item's own words in `_ranked_inputs` (ev3 -> "e3x0 ", m2 -> "m2y0 ")."""
    return f"e{item_id[2:]}x0 " if item_id.startswith("ev") else f"m{item_id[1:]}y0 "


def _overflow(events, layer):
    """The budget fit's and the final fit's actions on one layer, in the order the manifest recorded them
    (retrieval's own "not selected" drops are not overflow)."""
    return [e for e in events if e["layer"] == layer and not e["reason"].startswith("not selected")]


def test_evidence_and_memory_overflow_compress_then_drop_in_recorded_order(counter):
    """Both layers really overflow: each is shortened to item_max_tokens, then to half, and only then are
    items dropped (memory lowest-ranked first, evidence oldest first); each step frees tokens, and every
    candidate is either sent or named by a drop event."""
    inputs = _ranked_inputs()
    roomy = build_pack(inputs, DEFAULT, counter=counter, window=32_000)
    assert not any(e["action"] == "drop" for e in roomy.manifest.truncation_events)
    ranking = [s["id"] for s in roomy.manifest.selected["memory"]]
    assert sorted(ranking) == [f"m{i}" for i in range(6)]

    pack = build_pack(inputs, DEFAULT, counter=counter, window=2_000)
    m = pack.manifest
    assert request_tokens(pack.request, counter) <= 2_000 - int(2_000 * DEFAULT.floors.slack)
    caps = {"evidence": DEFAULT.evidence.item_max_tokens, "memory": DEFAULT.memory.item_max_tokens}
    for layer, cap in caps.items():
        events = _overflow(m.truncation_events, layer)
        assert [(e["action"], e["reason"]) for e in events] == [
            ("compress", f"overflow: items summarised to {cap} tokens"),
            ("compress", f"overflow: items summarised to {cap // 2} tokens"), ("drop", "overflow")], (layer, events)
        for before, after in zip(events, events[1:]):
            assert after["tokens_before"] == before["tokens_after"]
        assert all(e["tokens_after"] < e["tokens_before"] for e in events), events
        kept = [s["id"] for s in m.selected[layer]]
        dropped = events[-1]["ids"]
        assert kept and dropped and all(s["compressed"] for s in m.selected[layer])
        assert sorted(kept + dropped) == sorted(i.id for i in getattr(inputs, layer)), "dropped without an event"
        assert m.layer_budgets[layer].dropped == len(dropped)
        for item_id in dropped:
            assert _first_word(item_id) not in payload_of(pack), item_id
        for item_id in kept:
            assert _first_word(item_id) in payload_of(pack), item_id
    mem_dropped = _overflow(m.truncation_events, "memory")[-1]["ids"]
    assert ranking[len(ranking) - len(mem_dropped):] == mem_dropped  # the lowest-ranked go first
    ev_dropped = _overflow(m.truncation_events, "evidence")[-1]["ids"]
    oldest = sorted(inputs.evidence, key=lambda e: e.timestamp)
    assert set(ev_dropped) == {e.id for e in oldest[:len(ev_dropped)]}  # the oldest go first


def test_the_final_fit_drops_memory_before_cutting_a_turn(counter):
    """The exact count after rendering may still be over: the final fit drops Memory (lowest-ranked first)
    before Evidence and before it cuts a kept turn, and records it after the budget fit.

    A tool result in this invocation compacts the history; the rendered compaction block and payload come
    out over what the budgets counted, so the final fit has to free room (asserted below, not assumed)."""
    loop = [call_msg("search", q="Q3 revenue"), resp_msg("search", result=filler(20, 1)),
            call_msg("fetch", q="Q3 revenue 2"), resp_msg("fetch", result=filler(800, 2))]
    inputs = _ranked_inputs(loop)
    ranking = [s["id"] for s in build_pack(inputs, DEFAULT, counter=counter, window=32_000).manifest.selected["memory"]]
    pack = build_pack(inputs, DEFAULT, counter=counter, window=3_180)
    assert request_tokens(pack.request, counter) <= 3_180 - int(3_180 * DEFAULT.floors.slack)
    events = pack.manifest.truncation_events
    final = [e for e in events if e["reason"] == "window still exceeded"]
    assert final, events  # the final fit did overflow
    # it dropped Memory only: no Evidence line and no kept turn went while Memory still had lines
    assert [(e["layer"], e["action"]) for e in final] == [("memory", "drop")] * len(final), events
    assert not any(e["layer"] == "conversation" and e["action"] == "cut" for e in events), events
    # recorded after the budget fit, which had dropped Memory's lowest-ranked lines already
    budget = [e for e in events if e["layer"] == "memory" and e["reason"] == "overflow"]
    assert len(budget) == 1 and events.index(budget[0]) < events.index(final[0]), events
    budget_drop, final_drop = budget[0]["ids"], [i for e in final for i in e["ids"]]
    assert final_drop and not set(final_drop) & set(budget_drop)
    # lowest-ranked first (the ranking of the memory service's items, without pressure): what the final fit
    # dropped ranks below every memory it kept and above every one the budget fit dropped
    kept = [s["id"] for s in pack.manifest.selected["memory"]]
    assert set(final_drop) <= set(ranking), (ranking, final_drop)
    position = {i: ranking.index(i) for i in ranking}
    kept_ranks = [position[i] for i in kept if i in position]
    budget_ranks = [position[i] for i in budget_drop if i in position]
    assert kept_ranks and max(kept_ranks) < min(position[i] for i in final_drop), (ranking, kept, final_drop)
    assert max(position[i] for i in final_drop) < min(budget_ranks), (ranking, final_drop, budget_drop)
    assert pack.manifest.selected["evidence"], "Evidence kept while Memory was dropped"


def _every_layer_inputs():
    """Six history turns, two big tool results in this invocation (one over max_turn_tokens), and
    evidence and memory that all match the request: every flexible layer overflows a 4K window."""
    def words(tag, n):
        return " ".join(f"{tag}{j}" for j in range(n))

    loop = [call_msg("search", q="Q3 revenue"), resp_msg("search", result=filler(3_000, 3)),
            call_msg("fetch", q="Q3 revenue 2"), resp_msg("fetch", result=filler(2_000, 5))]
    ev = [EvidenceItem(f"ev{i}", f"Q3 revenue figures, region {i}: " + words(f"e{i}x", 250),
                       uri=f"artifact://app/u/s1/doc{i}.txt", source="artifact", timestamp=1000.0 + i)
          for i in range(6)]
    mem = [MemoryItem(f"m{i}", f"Q3 revenue figures remembered {i}: " + words(f"m{i}y", 180),
                      timestamp=1_600_000_000.0 + i * 86_400, rank=i) for i in range(6)]
    return make_inputs(history_turns(6, big=700), "report the Q3 revenue figures", loop, task=TASK, evidence=ev,
                       memory=mem, tools=[tool_spec("search"), tool_spec("fetch")])


def test_every_layer_overflows_in_pipeline_order(counter):
    """Memory, Evidence and the conversation all overflow one pack, and the manifest lists the actions in the
    order the pipeline takes them: the per-turn cap, the compaction, Evidence then Memory fitted to their
    budgets (compress before drop), then the exact final fit cutting the largest kept turn."""
    inputs = _every_layer_inputs()
    pack = build_pack(inputs, DEFAULT, counter=counter, window=4_000)
    assert request_tokens(pack.request, counter) <= 4_000 - int(4_000 * DEFAULT.floors.slack)
    assert orphan_responses(pack.request.messages) == []
    events = pack.manifest.truncation_events
    assert [(e["layer"], e["action"]) for e in events] == [
        ("conversation", "cut"), ("conversation", "fold"),
        ("evidence", "compress"), ("evidence", "compress"), ("evidence", "drop"),
        ("memory", "compress"), ("memory", "compress"), ("memory", "drop"),
        ("conversation", "cut")], events
    per_turn_cap, fold, final_cut = events[0], events[1], events[-1]
    assert per_turn_cap["reason"] == "turn over max_turn_tokens"
    assert per_turn_cap["tokens_after"] <= DEFAULT.conversation.max_turn_tokens < per_turn_cap["tokens_before"]
    assert fold["tokens_after"] < fold["tokens_before"]
    assert final_cut["reason"].startswith("window still exceeded")
    assert final_cut["ids"][0].split(":")[0] not in fold["ids"]  # the cut turn is one the compaction kept
    for layer in ("evidence", "memory"):  # nothing left of them: every candidate is named by the drop
        assert pack.manifest.selected[layer] == []
        assert set(i.id for i in getattr(inputs, layer)) <= set(_overflow(events, layer)[-1]["ids"])


def _tight_inputs():
    """Folded history (a summary), a big evidence and memory pool and a tool loop, for a ~2K window."""
    def exchange(names, words, label):
        return [Message("model", tuple(FunctionCall(n, {"q": f"{label}{k}"}) for k, n in enumerate(names))),
                Message("user", tuple(FunctionResponse(n, {"result": filler(w, k)})
                                      for k, (n, w) in enumerate(zip(names, words))))]

    history = exchange(["search", "fetch"], [400, 400], "h") + [text_msg("model", filler(90))]
    loop = exchange(["search"], [60], "a") + exchange(["fetch"], [160], "b") + \
        exchange(["search", "read_file"], [180, 180], "c")
    task = TaskSpec(goal="Find the figures", step="Read the sources", acceptance=("one", "two", "three"),
                    constraints=("c1", "c2"), tools=("write_file", "search", "read_file"))
    ev = [EvidenceItem(f"ev{i}", filler(w, i)) for i, w in enumerate([500, 250, 180, 180, 190, 30, 60, 250])]
    mem = [MemoryItem(f"m{i}", filler(w, 20 + i)) for i, w in enumerate([300, 130, 250, 110, 100])]
    return make_inputs(history, "go", loop, task=task, evidence=ev, memory=mem, system="Be brief.",
                       tools=[tool_spec(n) for n in ("fetch", "read_file", "search", "write_file")])


@pytest.mark.parametrize("window", [2_000, 2_050, 2_100, 2_150, 2_200, 2_450, 2_500])
def test_pack_fits_when_the_fixed_layers_fit(counter, window):
    """System + task + tools take ~280 tokens of a ~1.8K limit: evidence, memory and the conversation
    summary can always give way, so packing must succeed (in ADK a BudgetError here means fail-open,
    i.e. the whole oversized original request goes to the model). Found by test_properties."""
    profile = load_profile("research")
    pack = build_pack(_tight_inputs(), profile, counter=counter, window=window)
    assert request_tokens(pack.request, counter) <= window - int(window * profile.floors.slack)
    assert orphan_responses(pack.request.messages) == []


def test_fixed_layers_that_do_not_fit_raise(counter):
    task = TaskSpec(goal=filler(2_000), acceptance=("a",))
    with pytest.raises(BudgetError, match="split the step"):
        build_pack(make_inputs([], "hi", task=task), DEFAULT, counter=counter, window=2_000)


# ------------------------------------------------------------------------------------------------
# reuse within an invocation (cache-stable prefix) and rebuild across invocations
# ------------------------------------------------------------------------------------------------


def _invocation(counter, window=16_000):
    history = history_turns(8)
    tools = [tool_spec("search")]
    ev, mem = evidence_items(2), memory_items(2)
    p1 = build_pack(make_inputs(history, "find the numbers", task=TASK, evidence=ev, memory=mem, tools=tools),
                    DEFAULT, counter=counter, window=window)
    loop = [call_msg("search", q="numbers"), resp_msg("search", result=filler(200, 3))]
    p2 = build_pack(make_inputs(history, "find the numbers", loop, task=TASK, evidence=ev, memory=mem, tools=tools,
                                previous=p1.state), DEFAULT, counter=counter, window=window)
    loop2 = loop + [call_msg("search", q="more"), resp_msg("search", result=filler(150, 4))]
    p3 = build_pack(make_inputs(history, "find the numbers", loop2, task=TASK, evidence=ev, memory=mem, tools=tools,
                                previous=p2.state), DEFAULT, counter=counter, window=window)
    return history, p1, p2, p3


def test_reuse_keeps_previous_request_as_strict_prefix(counter):
    _, p1, p2, p3 = _invocation(counter)
    for prev, cur in ((p1, p2), (p2, p3)):
        m = cur.manifest
        assert m.reused_payload
        assert m.cache_break is None
        # every status stays where it was sent (on the payload, or after a function response of the
        # loop, append-only): the previous request as sent is a strict prefix
        stable = prev.request.messages
        n = len(stable)
        assert cur.request.messages[:n] == stable
        assert len(cur.request.messages) == n + 2  # the call and its response, ADK's response part first
        last = cur.request.messages[-1]
        assert last.responses and last.parts[0] == last.responses[0]
        assert len(last.parts) == (2 if m.recited else 1)
        assert cur.request.system_instruction == prev.request.system_instruction
        assert cur.request.tools == prev.request.tools
        assert m.prefix_tokens == request_tokens(prev.request, counter) == m.previous_tokens
        assert m.previous_pack_id == prev.manifest.pack_id
        assert m.tokens_after == request_tokens(cur.request, counter)


def test_new_invocation_rebuilds(counter):
    history, p1, p2, p3 = _invocation(counter)
    grown = history + [text_msg("user", "find the numbers"), call_msg("search", q="numbers"),
                       resp_msg("search", result=filler(200, 3)), text_msg("model", "Revenue was 12M.")]
    p4 = build_pack(make_inputs(grown, "now compare with Q2", task=TASK, tools=[tool_spec("search")],
                                invocation_id="inv-2", previous=p3.state), DEFAULT, counter=counter, window=16_000)
    assert not p4.manifest.reused_payload
    text = p4.request.messages[p4.state.payload_index].parts[0].text  # the new payload (the previous one is kept)
    assert text.endswith(REQUEST_HEADER + "\nnow compare with Q2")
    assert "find the numbers" not in text.split("USER REQUEST")[1]
    assert p4.manifest.previous_pack_id == p3.manifest.pack_id
    # everything up to the previous payload, that payload included, is sent again as it was sent (issue 11;
    # this history's loop differs from p3's after it)
    k = p3.state.payload_index
    assert p4.request.messages[:k + 1] == p3.request.messages[:k + 1]
    assert p4.manifest.cache_break["index"] > k


def test_other_agent_state_is_not_reused(counter):
    _, p1, _, _ = _invocation(counter)
    loop = [call_msg("search", q="numbers"), resp_msg("search", result="x")]
    p = build_pack(make_inputs(history_turns(8), "find the numbers", loop, task=TASK, tools=[tool_spec("search")],
                               agent="someone_else", previous=p1.state), DEFAULT, counter=counter, window=16_000)
    assert not p.manifest.reused_payload


def test_overflow_within_invocation_compacts_behind_the_payload(counter):
    """A compaction inside the tool loop keeps the payload as sent; the block follows it (the request
    came before the turns the block holds), and the history it replaced is gone from the prefix."""
    history = history_turns(8, big=600)
    tools = [tool_spec("search")]
    window = 6_000
    p1 = build_pack(make_inputs(history, "dig in", task=TASK, tools=tools), DEFAULT, counter=counter, window=window)
    loop = [call_msg("search", q="all"), resp_msg("search", result=filler(2_300, 5))]
    p2 = build_pack(make_inputs(history, "dig in", loop, task=TASK, tools=tools, previous=p1.state), DEFAULT,
                    counter=counter, window=window)
    m = p2.manifest
    assert m.compaction and m.reused_payload
    assert p2.request.messages[0].text.startswith(p1.state.payload_text)
    assert p2.request.messages[1].text.startswith("CONVERSATION SO FAR")
    assert m.prefix_tokens < m.previous_tokens
    assert request_tokens(p2.request, counter) <= window - int(window * 0.12)
    assert orphan_responses(p2.request.messages) == []
    assert m.truncation_events


# ------------------------------------------------------------------------------------------------
# determinism
# ------------------------------------------------------------------------------------------------


def test_same_inputs_same_bytes():
    inputs = _overflow_inputs()
    a = build_pack(inputs, DEFAULT, counter=TokenCounter(), window=5_000)
    warm = TokenCounter()
    build_pack(make_inputs(history_turns(3), "warm the cache"), DEFAULT, counter=warm, window=5_000)
    b = build_pack(inputs, DEFAULT, counter=warm, window=5_000)
    assert a.request.checksum == b.request.checksum == a.manifest.checksum
    assert canonical_json(a.request.to_json()) == canonical_json(b.request.to_json())
    assert a.manifest == b.manifest
    assert a.state == b.state


def test_different_profile_different_pack_id(counter):
    inputs = _overflow_inputs()
    a = build_pack(inputs, DEFAULT, counter=counter, window=5_000)
    b = build_pack(inputs, load_profile("research"), counter=counter, window=5_000)
    assert a.manifest.pack_id != b.manifest.pack_id
    assert a.manifest.profile_digest != b.manifest.profile_digest


def test_manifest_layer_accounting(counter):
    pack = build_pack(_overflow_inputs(), DEFAULT, counter=counter, window=20_000)
    m = pack.manifest
    assert set(m.layer_budgets) == {"system", "task", "tools", "evidence", "memory", "conversation", "slack"}
    assert m.layer_budgets["slack"].used == 0 and m.layer_budgets["slack"].budget == 2_400
    assert m.tokens_after == request_tokens(pack.request, counter)
    assert m.tokens_before == request_tokens(pack.inputs.request, counter)
    assert m.checksum == pack.request.checksum
    assert m.schema_version == 2
    used = sum(u.used for k, u in m.layer_budgets.items())
    assert abs(used - m.tokens_after) <= 10


def test_stage_timings_are_collected_beside_the_pack_and_never_enter_it(counter):
    """Issue 15 item 7: the package times its own stages; the request and the manifest do not change."""
    from aether_context.pipeline import StageTimes

    inputs = make_inputs(history_turns(120, big=200), "next", task=TASK, evidence=evidence_items(4))
    timings = StageTimes()
    timed = build_pack(inputs, DEFAULT, counter=counter, window=4_000, timings=timings)
    plain = build_pack(inputs, DEFAULT, counter=counter, window=4_000)
    assert timed.request.checksum == plain.request.checksum
    assert timed.manifest.model_dump() == plain.manifest.model_dump()
    assert {"collect", "select", "allocate", "fit", "fit_window", "recite", "record"} <= set(timings.seconds)
    assert timed.manifest.compaction is not None and "compact" in timings.seconds  # 120 turns do not fit 4K
    assert all(v >= 0 for v in timings.seconds.values()) and timings.total >= max(timings.seconds.values())
    assert set(timings.to_json()) == set(timings.seconds) | {"total"}


def test_failures_section_only_when_it_adds_to_what_the_request_shows(counter):
    """Issue 11: a failure whose output is still sent verbatim is not repeated in FAILURES SO FAR;
    one the request no longer shows (or a warning about repeats) is."""
    error = "Error: payment amount does not add up, total price is 305, but paid 255"
    record = {"turn": 1, "tool": "book", "args_digest": "x", "category": "logic", "message": error}
    loop = [call_msg("book", amount=255), resp_msg("book", error=error)]
    shown = replace(make_inputs([], "book it", loop=loop), failures={"records": [record], "current_turn": 3})
    assert "FAILURES SO FAR" not in "\n".join(m.text for m in build_pack(shown, DEFAULT, counter=counter,
                                                                         window=8_000).request.messages)
    hidden = replace(make_inputs([], "book it"), failures={"records": [record], "current_turn": 3})
    assert "FAILURES SO FAR" in payload_of(build_pack(hidden, DEFAULT, counter=counter, window=8_000))


def test_the_failure_log_is_analysed_once_per_call_even_with_a_compaction(counter, monkeypatch):
    """The FAILURES SO FAR section is decided for the previous zone and again for the zone a compaction
    leaves; both read one analysis of the log (it was analysed twice per zone)."""
    from aether_context.loop.failures import FailureLog

    calls = []
    analyze = FailureLog.analyze
    monkeypatch.setattr(FailureLog, "analyze", lambda self, turn: calls.append(turn) or analyze(self, turn))
    record = {"turn": 1, "tool": "book", "args_digest": "x", "category": "logic", "message": "Error: amount mismatch"}
    inputs = replace(make_inputs(history_turns(120, big=200), "next", task=TASK),
                     failures={"records": [record], "current_turn": 3})
    pack = build_pack(inputs, DEFAULT, counter=counter, window=4_000)
    assert pack.manifest.compaction is not None and "FAILURES SO FAR" in payload_of(pack)
    assert len(calls) == 1


def test_shortened_lines_never_cut_a_uri(counter):
    """A retrieved line shortened to its cap keeps an artifact URI in its text whole or not at all (its own URI is
    appended whole): a cut inside one would show the model an address that names nothing."""
    from aether_context.pipeline.fit import fit_lines
    from aether_context.pipeline.select import Line

    uri = "artifact://app/u/s1/" + "/".join(f"part-{k}" for k in range(40)) + "/table.csv"
    text = "Q3 revenue by region, saved at " + uri + " with " + filler(300, 1)
    line = Line("ev0", text, counter.count_text(text), "artifact", uri="artifact://app/u/s1/doc0.txt")
    for cap in range(12, 200, 7):
        (short,), _ = fit_lines("evidence", (line,), cap + 60, cap, counter)
        cited = re.findall(r"artifact://[A-Za-z0-9_./:-]*[A-Za-z0-9_/]", short.text)
        assert set(cited) <= {uri, line.uri}, (cap, short.text)
        assert short.text.endswith(f"({line.uri})") or line.uri in short.text
