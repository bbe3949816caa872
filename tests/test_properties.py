"""Property tests over random sessions: the pack's invariants hold whatever the history looks like.

Sessions are drawn with and without a goal, with inline images, failed tool calls (error results and
the failure log the plugin keeps) and results offloaded to artifact URIs, over windows from 2K to 32K.
The runs are derandomized (the same examples on every CI run); the strategies cover every dimension.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import replace

import fsspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aether_context.content import (Blob, FunctionCall, FunctionResponse, Message, TextPart, canonical_json,
                                    response_digest)
from aether_context.loop.failures import FailureLog
from aether_context.pipeline import EvidenceItem, MemoryItem, TaskSpec, build_pack, group_turns, request_tokens
from aether_context.pipeline.decay import blob_key
from aether_context.pipeline.record import FINAL_CUT_CAUSE
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
IMAGES = tuple(b"\x89PNG\r\n\x1a\n" + bytes([k]) * 48 for k in range(4))
URI_RE = re.compile(r"artifact://[A-Za-z0-9_./:-]+")
NO_GOAL_LABELS = ("GOAL:", "STEP:")


class Session:
    """What a drawn session registered beside its messages: saved originals and failed calls."""

    def __init__(self) -> None:
        self.uris: dict[str, str] = {}  # response or blob digest -> artifact URI (the plugin's aether:uris)
        self.failures = FailureLog()


@st.composite
def tool_response(draw, name: str, label: str, session: Session) -> FunctionResponse:
    """A result as the plugin leaves it in the session: plain (its original saved or not), an error
    (logged as a failure), or offloaded (a summary and the artifact URI of the original)."""
    kind = draw(st.sampled_from(["plain", "plain", "error", "offloaded"]))
    words, seed = draw(sizes), draw(seeds)
    if kind == "error":
        text = (f"Traceback (most recent call last):\n  File \"jobs/{label}.py\", line {seed % 90 + 1}, in run\n"
                f"    {filler(min(words, 40), seed)}\nValueError: {name} failed on {label}")
        session.failures.add(turn=seed % 50, tool=name, args={"q": label}, error_text=text)
        return FunctionResponse(name, {"error": text})
    if kind == "offloaded":
        uri = f"artifact://app/u/s1/{label}.txt"
        response = {"summary": filler(min(words, 200), seed), "artifact_uri": uri, "original_tokens": words * 4}
        session.uris[response_digest(response)] = uri
        return FunctionResponse(name, response)
    response = {"result": filler(words, seed)}
    if draw(st.booleans()):  # the original was saved: pruning may clear the result to its URI
        session.uris[response_digest(response)] = f"artifact://app/u/s1/{label}-original.txt"
    return FunctionResponse(name, response)


@st.composite
def exchange(draw, label: str, session: Session) -> list[Message]:
    """A model call (one or two functions) with its responses (one message or one per call)."""
    names = draw(st.lists(st.sampled_from(TOOLS + ("helper",)), min_size=1, max_size=2))
    calls = tuple(FunctionCall(n, {"q": f"{label}-{k}"}) for k, n in enumerate(names))
    responses = [draw(tool_response(n, f"{label}-{k}", session)) for k, n in enumerate(names)]
    out = [Message("model", calls)]
    if len(responses) > 1 and draw(st.booleans()):
        out.append(Message("user", tuple(responses)))
    else:
        out.extend(Message("user", (r,)) for r in responses)
    return out


@st.composite
def history(draw, session: Session) -> list[Message]:
    out: list[Message] = []
    for i in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "model", "tool", "tool", "image"]))
        if kind == "tool":
            out += draw(exchange(f"h{i}", session))
        elif kind == "image":
            data = draw(st.sampled_from(IMAGES))
            if draw(st.booleans()):
                session.uris[blob_key(data)] = f"artifact://app/u/s1/image-{i}.png"
            out.append(Message("user", (TextPart(f"user {i}: what does this chart show?"), Blob("image/png", data))))
        else:
            out.append(text_msg(kind, f"{kind} {i}: " + filler(draw(st.integers(1, 400)), draw(seeds))))
    return out


@st.composite
def tasks(draw, opening: str) -> TaskSpec:
    """A goal with its step and checklists, or no goal at all (the opening request stands in, if any)."""
    tools = draw(st.one_of(st.none(), st.lists(st.sampled_from(TOOLS + ("unknown_tool",)), max_size=4,
                                               unique=True).map(tuple)))
    if not draw(st.booleans()):
        return TaskSpec(tools=tools, opening_request=opening)
    return TaskSpec(
        goal=draw(short_text),
        step=draw(st.one_of(st.just(""), short_text)),
        acceptance=tuple(draw(st.lists(short_text, min_size=1, max_size=3))),
        constraints=tuple(draw(st.lists(short_text, max_size=2))),
        tools=tools, expected_tool_calls=draw(st.integers(0, 5)), risk=draw(st.floats(0, 1)),
        opening_request=opening,
    )


@st.composite
def sessions(draw):
    session = Session()
    past = draw(history(session))
    request = draw(short_text)
    opening = next((m.text for m in past if m.role == "user" and m.text and not m.responses), request)
    task = draw(tasks(opening))
    evidence = [EvidenceItem(f"ev{i}", filler(draw(st.integers(1, 600)), draw(seeds)),
                             uri=draw(st.sampled_from(["", f"artifact://app/u/s1/doc{i}.txt"])),
                             timestamp=draw(st.one_of(st.none(), st.floats(1.5e9, 1.7e9))))
                for i in range(draw(st.integers(0, 8)))]
    memory = [MemoryItem(f"m{i}", filler(draw(st.integers(1, 300)), draw(seeds)),
                         timestamp=draw(st.one_of(st.none(), st.floats(1.5e9, 1.7e9))), rank=i)
              for i in range(draw(st.integers(0, 8)))]
    loop: list[Message] = []
    for i in range(draw(st.integers(0, 3))):
        loop += draw(exchange(f"l{i}", session))
    inputs = make_inputs(past, request, loop, task=task, evidence=evidence, memory=memory,
                         tools=[tool_spec(n) for n in TOOLS], system=draw(short_text))
    failures = {**session.failures.to_json(), "current_turn": len(inputs.request.messages)} \
        if len(session.failures) else {}
    inputs = replace(inputs, uris=dict(session.uris), failures=failures)
    # windows from 2K to 32K, with extra weight on small ones where every layer is under pressure
    window = draw(st.one_of(st.integers(2_000, 4_000), st.integers(2_000, 32_000)))
    return inputs, window, draw(st.sampled_from(sorted(PROFILES)))


def payload_text(request) -> str | None:
    """The pack payload (its first part: a closing STATUS may ride on the message), or None when the
    user's message went out as it is."""
    payloads = [m for m in request.messages if m.role == "user" and m.text.startswith(PAYLOAD_HEADER + "\n")]
    assert len(payloads) <= 1
    return payloads[0].parts[0].text if payloads else None


def check_pack(pack, inputs, window, profile, earlier_events=()) -> None:
    request, task = pack.request, inputs.task
    limit = window - int(window * profile.floors.slack)
    assert request_tokens(request, COUNTER) <= limit
    assert pack.manifest.tokens_after <= limit
    # System: ADK's instruction, untouched (nothing appended)
    assert request.system_instruction == inputs.request.system_instruction
    # Tools: every step tool that exists, none other
    expected = set(TOOLS) if task.tools is None else set(task.tools) & set(TOOLS)
    assert [t.name for t in request.tools] == sorted(expected)
    user_request = inputs.request.messages[inputs.request_index]
    text = payload_text(request)
    if text is None:  # nothing to add: the user's message goes out as ADK built it
        assert not task.goal and user_request in without_status(pack)
    else:  # the request verbatim and last
        assert text.endswith("USER REQUEST (VERBATIM; answer it):\n" + user_request.text)
    if task.goal:
        check_task(text, task)
    else:
        check_no_goal(pack, inputs, text)
    # no function response without its call right before it
    assert orphan_responses(request.messages) == []
    assert not any(e["layer"] in ("system", "task", "tools") for e in pack.manifest.truncation_events)
    assert pack.manifest.checksum == request.checksum
    check_nothing_dropped_silently(pack, inputs, [*earlier_events, *pack.manifest.truncation_events])
    check_cited_uris_are_known(pack, inputs)


def check_task(text: str | None, task: TaskSpec) -> None:
    """Goal, step, constraints and acceptance go out whole in the payload."""
    assert text is not None
    assert f"GOAL: {task.goal}" in text
    if task.step:
        assert f"STEP: {task.step}" in text
    for c in task.constraints:
        assert f"- {c}" in text
    for a in task.acceptance:
        assert f"- [ ] {a}" in text


def check_no_goal(pack, inputs, text: str | None) -> None:
    """Without a goal the pack invents none: no GOAL or STEP section, and a status only when there is
    something real to recite (the opening request once history was compacted, new failures, or pressure)."""
    own = (text or "").split("USER REQUEST (VERBATIM; answer it):")[0]
    assert not any(line.startswith(NO_GOAL_LABELS) for line in own.splitlines()), own
    if not pack.manifest.recited:
        return
    status = "\n".join(status_texts(pack))
    first_line = next((ln.strip() for ln in inputs.task.opening_request.splitlines() if ln.strip()), "")
    pressed = any(f.startswith("context_pressure") for f in pack.manifest.flags)
    assert (first_line and pack.state.compacted_through > 0) or inputs.failures or pressed, status
    if not first_line:
        assert "not set" in status, status


def status_texts(pack) -> list[str]:
    """The STATUS parts of the request: extra text parts riding on a message (never its first part)."""
    return [p.text for m in pack.request.messages for p in m.parts[1:]
            if isinstance(p, TextPart) and p.text.startswith("STATUS")]


def without_status(pack) -> tuple[Message, ...]:
    """The request's messages without the STATUS parts (a status rides as an extra text part on the
    message `recitation.placement` chose, or is kept there from an earlier call of the invocation)."""
    def bare(m: Message) -> Message:
        parts = m.parts[:1] + tuple(p for p in m.parts[1:] if not (isinstance(p, TextPart) and p.text.startswith("STATUS")))
        return m if len(parts) == len(m.parts) else Message(m.role, parts)
    return tuple(bare(m) for m in pack.request.messages)


def check_nothing_dropped_silently(pack, inputs, events) -> None:
    """Every evidence and memory item is sent or named by an event of its layer; every turn of the
    conversation that is not sent as it came is named by a conversation event (its turn, or its image)."""
    named: dict[str, set[str]] = {"evidence": set(), "memory": set(), "conversation": set()}
    for e in events:
        named.setdefault(e["layer"], set()).update(e["ids"])
    for layer, items in (("evidence", inputs.evidence), ("memory", inputs.memory)):
        sent = {s["id"] for s in pack.manifest.selected[layer]}
        silent = [i.id for i in items if i.id not in sent and i.id not in named[layer]]
        assert not silent, (layer, silent, events)
    sent = without_status(pack)
    sent_digests = {m.digest for m in sent}
    msgs, r = inputs.request.messages, inputs.request_index
    for turn in group_turns(msgs[:r]) + group_turns(msgs[r + 1:], offset=r + 1):
        if all(m.digest in sent_digests for m in turn.messages):
            continue
        ids = named["conversation"]
        images = {blob_key(b.data) for m in turn.messages for b in m.blobs}
        assert images & ids or any(i == f"turn-{turn.start}" or i.startswith(f"turn-{turn.start}:") for i in ids), \
            (turn.start, events)


def check_cited_uris_are_known(pack, inputs) -> None:
    """Every artifact URI the request cites is one the session saved (so the recall tool can read it):
    none invented, none cut in half by a truncation."""
    known = set(inputs.uris.values()) | {e.uri for e in inputs.evidence if e.uri}
    known |= set(URI_RE.findall(canonical_json([m.to_json() for m in inputs.request.messages])))
    cited = set(URI_RE.findall(canonical_json([m.to_json() for m in pack.request.messages])))
    assert cited <= known, cited - known


def test_the_uri_check_catches_a_clipped_uri():
    """check_cited_uris_are_known fails on a URI cut short (what a clip inside one leaves), not only on an
    invented one: the property tests above rely on it."""
    from types import SimpleNamespace

    uri = "artifact://app/u/s1/h3-0-original.txt"
    inputs = SimpleNamespace(uris={"k": uri}, evidence=(), request=SimpleNamespace(messages=(text_msg("user", "hi"),)))
    whole = SimpleNamespace(request=SimpleNamespace(messages=(text_msg("user", f"[turn 3] fetch(…) · {uri}"),)))
    check_cited_uris_are_known(whole, inputs)
    for clipped in (uri[:-4] + "…", uri[:24] + "…", uri[:-9]):
        cut = SimpleNamespace(request=SimpleNamespace(messages=(text_msg("user", f"[turn 3] fetch(…) · {clipped}"),)))
        try:
            check_cited_uris_are_known(cut, inputs)
        except AssertionError:
            continue
        raise AssertionError(f"a clipped URI passed the check: {clipped}")


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
    events = list(pack.manifest.truncation_events)
    loop = list(inputs.request.messages[inputs.request_index + 1:])
    for i, words in enumerate(more):
        loop += [Message("model", (FunctionCall("search", {"q": f"more {i}"}),)),
                 resp_msg("search", result=filler(words, i))]
        nxt_inputs = make_inputs(list(inputs.request.messages[:inputs.request_index]),
                                 inputs.request.messages[inputs.request_index].text, loop, task=inputs.task,
                                 evidence=inputs.evidence, memory=inputs.memory,
                                 tools=list(inputs.request.tools), system=inputs.request.system_instruction,
                                 previous=pack.state)
        nxt_inputs = replace(nxt_inputs, uris=inputs.uris, failures=inputs.failures)
        nxt = build_pack(nxt_inputs, profile, counter=COUNTER, window=window)
        # a turn compacted by an earlier call of the invocation was named by that call's manifest
        check_pack(nxt, nxt_inputs, window, profile, earlier_events=events)
        events += nxt.manifest.truncation_events
        final_cut = [e for e in nxt.manifest.truncation_events
                     if e["action"] == "cut" and e["reason"].startswith("window still exceeded")]
        if nxt.manifest.reused_payload and nxt.manifest.compaction:
            # a compaction inside the loop: the payload is kept as sent, first, and the block follows it
            assert nxt.state.payload_index == 0 and nxt.state.payload_text == pack.state.payload_text
            assert nxt.request.messages[1].text.startswith("CONVERSATION SO FAR")
        elif nxt.manifest.reused_payload and final_cut and nxt.manifest.cache_break is not None:
            # nothing could leave the verbatim zone and the window was still exceeded: the final fit cut a
            # turn the previous call sent (the last resort), and the receipt says so with what it costs
            assert nxt.manifest.cache_break["cause"] == FINAL_CUT_CAUSE, nxt.manifest.cache_break
            assert nxt.manifest.prefix_tokens < request_tokens(pack.request, COUNTER)
        elif nxt.manifest.reused_payload:
            # every note is kept where it was sent (a loop's rides after ADK's function response, which stays
            # first): the previous request, as sent, is a strict prefix
            stable = pack.request.messages
            n = len(stable)
            assert nxt.request.messages[:n] == stable
            assert nxt.manifest.prefix_tokens == request_tokens(pack.request, COUNTER)
            last = nxt.request.messages[-1]
            assert not last.responses or last.parts[0] == last.responses[0]
            assert all(isinstance(p, TextPart) for p in last.parts[1:]) if last.responses else True
        pack = nxt
    replay_through_store(pack)


def test_a_frozen_payload_cut_by_the_final_fit_is_not_reported_as_reused():
    """Found by test_later_calls_of_an_invocation: the fourth call of an invocation froze the payload, the final
    fit had to drop a Memory line from it, and the manifest still said `reused_payload` (so the prefix the
    previous call cached was claimed kept while it was rewritten)."""
    def traceback(label: str) -> str:
        return (f'Traceback (most recent call last):\n  File "jobs/{label}.py", line 1, in run\n    alpha\n'
                f"ValueError: fetch failed on {label}")

    loop = [Message("model", (FunctionCall("fetch", {"q": "l0-0"}),)), resp_msg("fetch", result="alpha"),
            Message("model", (FunctionCall("fetch", {"q": "l1-0"}),)), resp_msg("fetch", result="alpha"),
            Message("model", (FunctionCall("fetch", {"q": "l2-0"}), FunctionCall("fetch", {"q": "l2-1"}))),
            Message("user", (FunctionResponse("fetch", {"error": traceback("l2-0")}),)),
            Message("user", (FunctionResponse("fetch", {"error": traceback("l2-1")}),))]
    log = FailureLog()
    for label in ("l2-0", "l2-1"):
        log.add(turn=0, tool="fetch", args={"q": label}, error_text=traceback(label))
    inputs = make_inputs([text_msg("user", "user 0: hotel")], "0", loop, task=TaskSpec(opening_request="user 0: hotel"),
                         tools=[tool_spec(n) for n in TOOLS], system="0")
    inputs = replace(inputs, failures={**log.to_json(), "current_turn": 9})
    test_later_calls_of_an_invocation.hypothesis.inner_test((inputs, 2_037, "research"), [234, 305, 93])
