"""Property tests over random sessions: the pack's invariants hold whatever the history looks like."""

from __future__ import annotations

from dataclasses import replace

import uuid

import fsspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aether_context.content import FunctionCall, FunctionResponse, Message, TextPart
from aether_context.pipeline import EvidenceItem, MemoryItem, TaskSpec, build_pack, request_tokens
from aether_context.pipeline.render import PAYLOAD_HEADER
from aether_context.profile import load_profile
from aether_context.replay import replay
from aether_context.store import PackStore
from aether_context.tokens import TokenCounter

from conftest import filler, make_inputs, orphan_responses, resp_msg, text_msg, tool_spec

PROFILES = {name: load_profile(name) for name in ("default", "research", "coding_agent")}
TOOLS = ("fetch", "read_file", "search", "write_file")
COUNTER = TokenCounter()  # shared on purpose: the cache must never change a result

short_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80).filter(
    lambda s: s.strip() != "")
sizes = st.integers(1, 1_500)  # words, about a token each
seeds = st.integers(0, 10_000)


@st.composite
def exchange(draw, label: str) -> list[Message]:
    """A model call (one or two functions) with its responses (one message or one per call)."""
    names = draw(st.lists(st.sampled_from(TOOLS + ("helper",)), min_size=1, max_size=2))
    calls = tuple(FunctionCall(n, {"q": f"{label}-{k}"}) for k, n in enumerate(names))
    responses = [FunctionResponse(n, {"result": filler(draw(sizes), draw(seeds))}) for n in names]
    out = [Message("model", calls)]
    if len(responses) > 1 and draw(st.booleans()):
        out.append(Message("user", tuple(responses)))
    else:
        out.extend(Message("user", (r,)) for r in responses)
    return out


@st.composite
def history(draw) -> list[Message]:
    out: list[Message] = []
    for i in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "model", "tool", "tool"]))
        if kind == "tool":
            out += draw(exchange(f"h{i}"))
        else:
            out.append(text_msg(kind, f"{kind} {i}: " + filler(draw(st.integers(1, 400)), draw(seeds))))
    return out


@st.composite
def sessions(draw):
    task = TaskSpec(
        goal=draw(short_text),
        step=draw(st.one_of(st.just(""), short_text)),
        acceptance=tuple(draw(st.lists(short_text, min_size=1, max_size=3))),
        constraints=tuple(draw(st.lists(short_text, max_size=2))),
        tools=draw(st.one_of(st.none(), st.lists(st.sampled_from(TOOLS + ("unknown_tool",)), max_size=4,
                                                 unique=True).map(tuple))),
        expected_tool_calls=draw(st.integers(0, 5)),
        risk=draw(st.floats(0, 1)),
    )
    evidence = [EvidenceItem(f"ev{i}", filler(draw(st.integers(1, 600)), draw(seeds)),
                             uri=draw(st.sampled_from(["", f"artifact://app/u/s1/doc{i}.txt"])),
                             timestamp=draw(st.one_of(st.none(), st.floats(1.5e9, 1.7e9))))
                for i in range(draw(st.integers(0, 8)))]
    memory = [MemoryItem(f"m{i}", filler(draw(st.integers(1, 300)), draw(seeds)),
                         timestamp=draw(st.one_of(st.none(), st.floats(1.5e9, 1.7e9))), rank=i)
              for i in range(draw(st.integers(0, 8)))]
    loop: list[Message] = []
    for i in range(draw(st.integers(0, 3))):
        loop += draw(exchange(f"l{i}"))
    inputs = make_inputs(draw(history()), draw(short_text), loop, task=task, evidence=evidence, memory=memory,
                         tools=[tool_spec(n) for n in TOOLS], system=draw(short_text))
    # windows from 2K to 32K, with extra weight on small ones where every layer is under pressure
    window = draw(st.one_of(st.integers(2_000, 4_000), st.integers(2_000, 32_000)))
    return inputs, window, draw(st.sampled_from(sorted(PROFILES)))


def check_pack(pack, inputs, window, profile) -> None:
    request, task = pack.request, inputs.task
    limit = window - int(window * profile.floors.slack)
    assert request_tokens(request, COUNTER) <= limit
    assert pack.manifest.tokens_after <= limit
    # System: ADK's instruction, untouched (nothing appended)
    assert request.system_instruction == inputs.request.system_instruction
    # Tools: every step tool that exists, none other
    expected = set(TOOLS) if task.tools is None else set(task.tools) & set(TOOLS)
    assert [t.name for t in request.tools] == sorted(expected)
    # Task: goal, step, constraints, acceptance whole; the request verbatim and last
    payloads = [m for m in request.messages if m.role == "user" and m.text.startswith(PAYLOAD_HEADER + "\n")]
    assert len(payloads) == 1
    text = payloads[0].parts[0].text  # a closing STATUS may ride on the message as a further part
    assert f"GOAL: {task.goal}" in text
    if task.step:
        assert f"STEP: {task.step}" in text
    for c in task.constraints:
        assert f"- {c}" in text
    for a in task.acceptance:
        assert f"- [ ] {a}" in text
    assert text.endswith("USER REQUEST (VERBATIM; answer it):\n" + inputs.request.messages[inputs.request_index].text)
    # no function response without its call right before it
    assert orphan_responses(request.messages) == []
    assert not any(e["layer"] in ("system", "task", "tools") for e in pack.manifest.truncation_events)
    assert pack.manifest.checksum == request.checksum


def replay_through_store(pack) -> None:
    url = f"memory://aether-props/{uuid.uuid4().hex}"
    try:
        store = PackStore(url, background=False)
        uri = store.save(pack)
        again = replay(uri)
        assert again == pack.request
        assert again.checksum == pack.manifest.checksum
    finally:
        fs = fsspec.filesystem("memory")
        path = url[len("memory://"):]
        if fs.exists(path):
            fs.rm(path, recursive=True)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=sessions())
def test_pack_invariants(case):
    inputs, window, name = case
    profile = PROFILES[name]
    pack = build_pack(inputs, profile, counter=COUNTER, window=window)
    check_pack(pack, inputs, window, profile)
    # the same input gives the same bytes, whatever the counter's cache holds
    again = build_pack(inputs, profile, counter=TokenCounter(), window=window)
    assert again.request.checksum == pack.request.checksum
    assert again.manifest == pack.manifest
    replay_through_store(pack)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=sessions(), more=st.lists(st.integers(1, 1_200), min_size=1, max_size=3))
def test_later_calls_of_an_invocation(case, more):
    """Calls that follow in the same invocation keep every invariant, and extend the previous
    request whenever the payload was reused."""
    inputs, window, name = case
    profile = PROFILES[name]
    pack = build_pack(inputs, profile, counter=COUNTER, window=window)
    loop = list(inputs.request.messages[inputs.request_index + 1:])
    for i, words in enumerate(more):
        loop += [Message("model", (FunctionCall("search", {"q": f"more {i}"}),)),
                 resp_msg("search", result=filler(words, i))]
        nxt_inputs = make_inputs(list(inputs.request.messages[:inputs.request_index]),
                                 inputs.request.messages[inputs.request_index].text, loop, task=inputs.task,
                                 evidence=inputs.evidence, memory=inputs.memory,
                                 tools=list(inputs.request.tools), system=inputs.request.system_instruction,
                                 previous=pack.state)
        nxt = build_pack(nxt_inputs, profile, counter=COUNTER, window=window)
        check_pack(nxt, nxt_inputs, window, profile)
        if nxt.manifest.reused_payload:
            # a status is kept where it was sent and never rides on a function response: the previous
            # request, as sent, is a strict prefix
            stable = pack.request.messages
            n = len(stable)
            assert nxt.request.messages[:n] == stable
            assert nxt.manifest.prefix_tokens == request_tokens(pack.request, COUNTER)
            assert not any(isinstance(p, TextPart) and p.text.startswith("STATUS")
                           for p in nxt.request.messages[-1].parts if nxt.request.messages[-1].responses)
        pack = nxt
    replay_through_store(pack)
