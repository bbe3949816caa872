"""Caches that make a long session's calls cheap must give exactly what a fresh computation gives."""

from __future__ import annotations

import random
from dataclasses import replace

from google.adk.flows.llm_flows.context._contents import _copy_content_for_request
from google.adk.models.llm_request import LlmRequest
from google.genai import types

from aether_context import TokenCounter
from aether_context.adk import convert
from aether_context.adk.convert import request_from_llm, to_message
from aether_context.content import FunctionCall, FunctionResponse, Message, ModelRequest, TextPart
from aether_context.pipeline.cache import PackCache
from aether_context.pipeline.build import request_tokens
from aether_context.pipeline.inputs import Turn, group_turns
from aether_context.pipeline.fit import bounded_turns, cut_turn
from aether_context.pipeline.incremental import grouped_turns, turn_tokens

from conftest import in_memo


def _msg(kind: str, i: int) -> Message:
    if kind == "call":
        return Message("model", (FunctionCall("bash", {"command": f"ls {i}"}),))
    if kind == "call2":
        return Message("model", (TextPart(f"two at once {i}"), FunctionCall("bash", {"c": i}), FunctionCall("grep", {"c": i})))
    if kind == "resp":
        return Message("user", (FunctionResponse("bash", {"output": f"out {i}"}),))
    if kind == "resp2":
        return Message("user", (FunctionResponse("grep", {"output": f"g {i}"}),))
    return Message("user" if i % 2 else "model", (TextPart(f"text {i}"),))


def _random_messages(rng: random.Random, n: int) -> list[Message]:
    return [_msg(rng.choice(["call", "call2", "resp", "resp2", "text"]), i) for i in range(n)]


def _same(a, b) -> bool:
    return [(t.start, t.messages) for t in a] == [(t.start, t.messages) for t in b]


def test_grouped_turns_equals_a_full_grouping_as_a_session_grows_and_changes():
    rng = random.Random(7)
    for trial in range(40):
        cache = PackCache()
        msgs = _random_messages(rng, rng.randint(1, 30))
        offset = rng.choice([0, 1, 5])
        for step in range(12):
            got = in_memo(cache, lambda: grouped_turns(msgs, offset))
            assert _same(got, group_turns(msgs, offset)), (trial, step)
            action = rng.random()
            if action < 0.6:  # append (the common case: a tool loop grows)
                msgs = msgs + _random_messages(rng, rng.randint(1, 3))
            elif action < 0.8 and len(msgs) > 1:  # an earlier message replaced (not the first)
                k = rng.randrange(1, len(msgs))
                msgs = msgs[:k] + [_msg(rng.choice(["call", "resp", "resp2", "text"]), 1000 + step)] + msgs[k + 1:]
            else:  # history cut from the end
                msgs = msgs[: max(1, len(msgs) - rng.randint(1, 3))]


def test_grouped_turns_reuses_unchanged_turns_and_stays_bounded():
    cache = PackCache(max_entries=256)
    msgs = [_msg("text", 0)] + [m for i in range(1, 50) for m in (_msg("call", i), _msg("resp", i))]
    first = in_memo(cache, lambda: grouped_turns(msgs))
    grown = in_memo(cache, lambda: grouped_turns(msgs + [_msg("call", 99)]))
    assert all(a is b for a, b in zip(first[:-1], grown))  # turns before the open end are the same objects
    assert cache.stats()["by_kind"]["grouping"] == {"hits": 1, "misses": 1}
    for i in range(266):
        in_memo(cache, lambda: grouped_turns([_msg("text", 10_000 + i)]))
    assert cache.stats()["entries"] == 256
    cache.clear()
    assert cache.stats()["entries"] == 0 and in_memo(cache, lambda: grouped_turns(msgs)) == tuple(group_turns(msgs))


def test_turn_tokens_match_a_fresh_count_per_counter():
    a, b = TokenCounter(), TokenCounter()
    turn = Turn(0, (_msg("call", 1), _msg("resp", 1)))
    expected = sum(a.count_message(m) for m in turn.messages)
    assert turn_tokens(turn, a) == expected == turn_tokens(turn, a)
    assert turn_tokens(turn, b) == expected


def test_bounded_turns_memo_gives_the_same_cut_every_call():
    counter = TokenCounter()
    big = Turn(3, (Message("model", (FunctionCall("cat", {"path": "x"}),)),
                   Message("user", (FunctionResponse("cat", {"output": "line of text\n" * 800}),))))
    cache = PackCache()
    first, ev1 = in_memo(cache, lambda: bounded_turns((big,), 200, counter))
    again, ev2 = in_memo(cache, lambda: bounded_turns((big,), 200, counter))
    assert first[0] == cut_turn(big, 200, counter) and again[0] is first[0] and ev1 == ev2
    assert not hasattr(big, "_cut") and "_cut" not in big.__dict__  # nothing written into the frozen turn
    other, _ = in_memo(cache, lambda: bounded_turns((big,), 300, counter))  # another cap is not served from the memo
    assert other[0] == cut_turn(big, 300, counter)


def test_request_tokens_memo_equals_a_fresh_count():
    counter = TokenCounter()
    msgs = tuple(_random_messages(random.Random(1), 20))
    req = ModelRequest("m", "sys", msgs)
    fresh = request_tokens(ModelRequest("m", "sys", msgs), counter)
    assert request_tokens(req, counter) == fresh == request_tokens(req, counter)


def _contents() -> list[types.Content]:
    out = [types.Content(role="user", parts=[types.Part(text="the task")])]
    for i in range(20):
        call = types.FunctionCall(name="bash", args={"c": i}, id=f"adk-{i}")
        signed = {"thought_signature": f"sig-{i}".encode()} if i % 3 == 0 else {}  # Gemini thinking
        out.append(types.Content(role="model", parts=[types.Part(text=f"step {i}"), types.Part(function_call=call, **signed)]))
        out.append(types.Content(role="user", parts=[
            types.Part(function_response=types.FunctionResponse(name="bash", response={"output": f"o {i}"}, id=f"adk-{i}"))]))
    out.append(types.Content(role="model", parts=[types.Part(text="done")]))
    out.append(types.Content(role="user", parts=[types.Part(text="x", thought=True)]))  # not a plain text part
    return out


def test_memoised_conversion_equals_a_fresh_one_and_hits_return_the_same_messages():
    contents = _contents()

    def adk_copy() -> LlmRequest:  # what ADK sends on each call: shallow copies sharing the payloads
        return LlmRequest(model="m", contents=[_copy_content_for_request(c, strip_client_function_call_ids=True)
                                               for c in contents])

    cache = PackCache()
    first = in_memo(cache, lambda: request_from_llm(adk_copy()))
    second = in_memo(cache, lambda: request_from_llm(adk_copy()))
    fresh = _fresh(adk_copy().contents)
    assert first.messages == second.messages == fresh
    assert first.checksum == second.checksum == replace(first, messages=fresh).checksum
    assert all(a is b for a, b in zip(first.messages[:-1], second.messages[:-1]))  # cache hits
    assert to_message(contents[0]).text == "the task"
    # a text part and a one-part content of another role never share an entry
    assert to_message(types.Content(role="model", parts=[contents[0].parts[0]])).role == "model"


def _adk_copies(contents: list[types.Content]) -> list[types.Content]:
    return [_copy_content_for_request(c, strip_client_function_call_ids=True) for c in contents]


def _fresh(contents: list[types.Content]) -> tuple[Message, ...]:
    """The conversion with no cache at all: the reference the caches must equal."""
    return tuple(Message("model" if c.role == "model" else "user", tuple(convert._to_part(p) for p in c.parts or ()))
                 for c in contents)


def test_incremental_conversion_equals_a_full_conversion_as_contents_change():
    rng = random.Random(3)
    base = _contents()
    for trial in range(30):
        contents = list(base)
        cache = PackCache()
        for step in range(10):
            got = in_memo(cache, lambda: convert._messages(_adk_copies(contents)))
            assert got == _fresh(_adk_copies(contents)), (trial, step)
            k = rng.randrange(1, len(contents))
            action = rng.random()
            if action < 0.4:  # the session grows
                contents.append(types.Content(role=rng.choice(["user", "model"]), parts=[types.Part(text=f"new {trial}.{step}")]))
            elif action < 0.55:  # an earlier content replaced by an equal copy (new payload objects)
                contents[k] = types.Content.model_validate(contents[k].model_dump())
            elif action < 0.7:  # same payload, another role
                contents[k] = types.Content(role="model" if contents[k].role == "user" else "user", parts=contents[k].parts)
            elif action < 0.8:  # same payload, another function name
                parts = contents[k].parts or []
                if parts and parts[-1].function_call is not None:
                    fc = parts[-1].function_call
                    contents[k] = types.Content(role=contents[k].role, parts=parts[:-1] + [types.Part(
                        function_call=types.FunctionCall(name=fc.name + "_x", args=fc.args, id=fc.id))])
            elif action < 0.85:  # same payload, another thought signature
                parts = contents[k].parts or []
                if parts and parts[-1].function_call is not None:
                    contents[k] = types.Content(role=contents[k].role, parts=parts[:-1] + [types.Part(
                        function_call=parts[-1].function_call, thought_signature=f"other {trial}.{step}".encode())])
            elif action < 0.9:  # a part more, with the same payloads before it
                contents[k] = types.Content(role=contents[k].role, parts=list(contents[k].parts or []) + [types.Part(text="more")])
            else:  # cut from the end
                contents = contents[: max(1, len(contents) - 3)]


def test_incremental_conversion_keeps_unchanged_messages_and_is_bounded():
    contents = _contents()
    cache = PackCache(max_entries=200)
    first = in_memo(cache, lambda: convert._messages(_adk_copies(contents)))
    again = in_memo(cache, lambda: convert._messages(_adk_copies(contents + [types.Content(role="model", parts=[types.Part(text="next")])])))
    assert all(a is b for a, b in zip(first[:-1], again))  # thought-signed calls included
    assert any("thought_signature" in str(p) for m in first for p in m.parts)
    for i in range(300):
        contents = [types.Content(role="user", parts=[types.Part(text=f"session {i}")])] + _contents()[1:]
        assert in_memo(cache, lambda: convert._messages(_adk_copies(contents))) == _fresh(_adk_copies(contents))
    assert cache.stats()["entries"] == 200
    assert in_memo(None, lambda: convert._messages(_adk_copies(contents))) == _fresh(_adk_copies(contents))  # no cache: the same


def test_pack_cache_is_shared_safely_between_threads():
    import threading
    cache = PackCache(max_entries=500)
    errors = []

    def work(seed: int) -> None:
        try:
            for i in range(2000):
                k = (seed * 7 + i) % 900
                assert cache.get("turn_values", k, lambda k=k: k * k) == k * k
        except Exception as e:  # collected: an assertion in a thread would not fail the test
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = cache.stats()
    assert not errors and stats["entries"] <= 500 and stats["hits"] + stats["misses"] == 8000


def test_conversion_hits_across_a_deep_copied_session_and_misses_on_a_changed_value():
    import copy
    contents = _contents()
    cache = PackCache()
    first = in_memo(cache, lambda: convert._messages(_adk_copies(contents)))
    copied = copy.deepcopy(contents)  # a new invocation: ADK's session service hands out a deep copy
    again = in_memo(cache, lambda: convert._messages(_adk_copies(copied)))
    assert again == first == _fresh(_adk_copies(copied))
    assert all(a is b for a, b in zip(first[:-1], again))  # served from the cache, not converted again
    changed = copy.deepcopy(contents)
    changed[2].parts[0].function_response.response["output"] = "another output"
    got = in_memo(cache, lambda: convert._messages(_adk_copies(changed)))
    assert got == _fresh(_adk_copies(changed)) and got[2] != first[2]
    nested = copy.deepcopy(contents)
    nested[1].parts[1].function_call.args["c"] = 1.5  # a number: compared by value and type
    assert in_memo(cache, lambda: convert._messages(_adk_copies(nested))) == _fresh(_adk_copies(nested))


def test_history_documents_from_the_cache_equal_a_fresh_build_as_the_pool_grows_and_changes():
    from aether_context.pipeline.select import history_documents
    counter = TokenCounter()
    rng = random.Random(11)
    cache = PackCache()
    msgs = _random_messages(rng, 40)
    for step in range(15):
        turns = in_memo(cache, lambda: grouped_turns(msgs, 0))  # unchanged turns are the same objects: the run path
        moved = 30.0 if 6 <= step < 9 else 0.0  # early messages' times change, then change back
        times = tuple(1_700_000_000.0 + 60 * i + (moved if 2 <= i < 6 else 0.0) if i % 7 else None
                      for i in range(len(msgs)))
        got = in_memo(cache, lambda: history_documents(turns, times, counter.count_text))
        assert got == history_documents(turns, times, counter.count_text), step
        assert in_memo(cache, lambda: history_documents(turns, times, counter.count_text)) == got
        if step % 4 == 3 and len(msgs) > 6:  # a turn in the middle replaced
            k = rng.randrange(2, len(msgs) - 2)
            msgs = msgs[:k] + [_msg("text", 500 + step)] + msgs[k + 1:]
        else:
            msgs = msgs + _random_messages(rng, rng.randint(1, 4))


def test_a_pool_that_only_grows_ranks_as_a_fresh_retriever_does():
    from aether_context.pipeline.retrieve import Retriever
    from aether_context.retrieval import Document, HashingEmbedder
    counter = TokenCounter()
    kept = Retriever(embedder=HashingEmbedder())
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()
    docs = [Document(f"turn-{i}", f"{words[i % 10]} {words[(i * 3) % 10]} step {i}", "history") for i in range(30)]
    for n in (5, 12, 12, 20, 9, 30):  # grows, stays, grows, shrinks (a full sync), grows
        pool = docs[:n]
        got = kept.rank("ns", "memory", "charlie step", pool, k=5, count_tokens=counter.count_text, now=None)
        fresh = Retriever(embedder=HashingEmbedder()).rank("ns", "memory", "charlie step", pool, k=5,
                                                           count_tokens=counter.count_text, now=None)
        assert [(i.document.id, i.score) for i in got.items] == [(i.document.id, i.score) for i in fresh.items], n


def test_sampled_conversion_of_a_grown_history_equals_a_full_conversion():
    """`grown` (the session's events only grew): samples of the last request's contents stand for
    all of them; a history that shrank, shifted or changed at a sample is checked content by content."""
    rng = random.Random(5)
    for trial in range(30):
        contents, cache = list(_contents()), PackCache()
        for step in range(10):
            got = in_memo(cache, lambda: convert._messages(_adk_copies(contents), grown=True, scope="s"))
            assert got == _fresh(_adk_copies(contents)), (trial, step)
            action = rng.random()
            if action < 0.5:  # the session grows
                contents += [types.Content(role=rng.choice(["user", "model"]), parts=[types.Part(text=f"n {trial}.{step}.{j}")])
                             for j in range(rng.randint(1, 3))]
            elif action < 0.6:  # an earlier content rebuilt with equal values (new payload objects)
                k = rng.randrange(len(contents))
                contents[k] = types.Content.model_validate(contents[k].model_dump())
            elif action < 0.75:  # the last content changed (a merged response, another branch's turn)
                contents[-1] = types.Content(role="user", parts=[types.Part(text=f"changed {trial}.{step}")])
            elif action < 0.9 and len(contents) > 3:  # a run replaced by one summary (the history shifted)
                a = rng.randrange(1, len(contents) - 2)
                contents = contents[:a] + [types.Content(role="model", parts=[types.Part(text=f"sum {step}")])] + contents[a + 2:]
            else:  # cut from the end
                contents = contents[: max(1, len(contents) - 3)]


def test_a_zone_split_by_bisection_equals_testing_every_turn():
    from aether_context.pipeline.types import Verbatim
    rng = random.Random(11)
    for trial in range(200):
        starts = sorted(rng.sample(range(60), rng.randint(0, 30)))
        turns = tuple(Turn(s, (_msg("text", s),)) for s in starts)
        zone = Verbatim(through=rng.randint(0, 62), pinned=tuple(rng.sample(range(62), rng.randint(0, 4))))
        assert zone.split(turns) == (tuple(t for t in turns if not zone.keeps(t)), tuple(t for t in turns if zone.keeps(t)))


def test_mapped_and_running_totals_equal_a_fresh_pass_as_a_sequence_grows_and_changes():
    from aether_context.pipeline.incremental import mapped, running_totals
    rng = random.Random(13)
    cache = PackCache()
    items = [f"x{i}" for i in range(20)]
    for step in range(300):
        seq = tuple(items)
        assert in_memo(cache, lambda: mapped("len", seq, len)) == tuple(len(x) for x in seq)
        assert in_memo(cache, lambda: running_totals("len", seq, len)) == tuple(sum(len(x) for x in seq[:i + 1]) for i in range(len(seq)))
        action = rng.random()
        if action < 0.5:
            items += [f"y{step}" * rng.randint(1, 3) for _ in range(rng.randint(1, 3))]
        elif action < 0.7 and len(items) > 1:
            items[rng.randrange(1, len(items))] = f"z{step}"
        elif len(items) > 2:
            items = items[: rng.randrange(1, len(items))]


def test_pruning_carried_from_the_last_call_equals_a_fresh_pruning():
    """Outputs cleared as a session grows, more of them saved (URIs added) and some cleared before:
    the carried outcome equals a pruning with no cache at all."""
    from aether_context.pipeline.decay import prune_tool_outputs
    counter, cache, rng = TokenCounter(), PackCache(), random.Random(17)
    msgs: list[Message] = [_msg("text", 0)]
    uris: dict[str, str] = {}
    already: frozenset[int] = frozenset()
    for step in range(60):
        msgs += [_msg("call", step), Message("user", (FunctionResponse("bash", {"output": f"out {step} " * 40}),))]
        turns = in_memo(cache, lambda: grouped_turns(msgs))
        for t in turns:  # most outputs are saved; a few never are
            for m in t.messages:
                for r in m.responses:
                    if rng.random() < 0.8 and r.key not in uris:
                        uris = {**uris, r.key: f"artifact://x/{r.key[:8]}"}
        kwargs = dict(protect_tokens=rng.choice([0, 200, 600]), minimum_tokens=rng.choice([0, 100, 400]), uris=uris,
                      already=already, counter=counter, consider_new=rng.random() < 0.8)
        got = in_memo(cache, lambda: prune_tool_outputs(turns, **kwargs))
        assert got == prune_tool_outputs(turns, **kwargs), step
        already = got[1]


def test_carried_checksum_and_inputs_digest_equal_a_fresh_hash_as_a_session_grows_and_changes():
    from conftest import make_inputs
    from aether_context.pipeline.incremental import inputs_digest, request_checksum
    rng = random.Random(19)
    cache = PackCache()
    msgs = _random_messages(rng, 5)
    for step in range(60):
        inputs = make_inputs(msgs)
        times = tuple(rng.choice([None, 1.7e9 + i, float(i)]) for i in range(len(inputs.request.messages)))
        inputs = replace(inputs, message_times=times)
        fresh = replace(inputs, request=replace(inputs.request))  # no cached checksum
        assert in_memo(cache, lambda: request_checksum(inputs.request)) == fresh.request.checksum, step
        assert in_memo(cache, lambda: inputs_digest(inputs)) == fresh.digest, step
        action = rng.random()
        if action < 0.6:
            msgs = msgs + _random_messages(rng, rng.randint(1, 3))
        elif action < 0.8 and len(msgs) > 2:
            msgs = msgs[: rng.randrange(1, len(msgs))]
        else:
            msgs = [_msg("text", 500 + step)] + msgs[1:]
    tricky = replace(inputs, summary={"text": "\x00message_times\x00"})  # the stand-in in the inputs' own text
    assert in_memo(cache, lambda: inputs_digest(tricky)) == replace(tricky, request=replace(tricky.request)).digest


def test_kept_contents_found_by_carried_positions_equal_a_full_scan():
    rng = random.Random(23)
    cache = PackCache()
    msgs = _random_messages(rng, 8)
    for step in range(80):
        original = ModelRequest("m", "sys", tuple(msgs))
        contents = [object() for _ in msgs]  # ADK's copies: new objects on every call
        sent = ModelRequest("m", "sys", tuple(rng.sample(msgs, min(len(msgs), 5))) + (_msg("text", 9000 + step),))
        expected = {m.digest: c for m, c in zip(original.messages, contents)}
        assert in_memo(cache, lambda: convert._kept(sent, original, contents, "slot")) == {m.digest: expected[m.digest] for m in sent.messages
                                                                   if m.digest in expected}, step
        action = rng.random()
        if action < 0.6:
            msgs = msgs + _random_messages(rng, rng.randint(1, 3)) + rng.sample(msgs, 1)  # repeats: the newest wins
        elif action < 0.8 and len(msgs) > 2:
            msgs = msgs[: rng.randrange(1, len(msgs))]
        else:
            msgs = [_msg("text", 700 + step)] + msgs[1:]


def test_carried_orphan_repair_reports_only_the_orphans():
    """A turn equal to the last call's (rebuilt as a new object) keeps its carried repair, and only the
    turns really rewritten are named in the manifest's truncation event, as a cold pass names them."""
    from aether_context.pipeline.fit import repair_orphans

    orphan = Turn(0, (Message("user", (FunctionResponse("search", {"hits": 3}),)),))

    def text(i: int, words: str) -> Turn:
        return Turn(i, (Message("user" if i % 2 else "model", (TextPart(words),)),))

    cache = PackCache()
    in_memo(cache, lambda: repair_orphans((orphan, text(1, "a"), text(2, "b"))))
    again = (orphan, text(1, "a"), text(2, "b"), text(3, "c"))  # equal turns, new objects
    carried, events = in_memo(cache, lambda: repair_orphans(again))
    cold, cold_events = repair_orphans(again)
    assert carried == cold and events == cold_events
    assert events[0].ids == ("turn-0:" + orphan.messages[0].digest[:8],)


def test_pruning_finds_the_saved_turns_a_full_scan_finds_as_the_history_grows_and_is_rewritten():
    """The turns whose outputs all have a URI are found from the URIs (a carried index of output keys),
    not by walking the history, and carried from the last call: the turns cleared equal the plain scan's,
    also after a rewind, a URI gone or turns no longer cleared."""
    from bisect import bisect_right
    from itertools import accumulate

    from aether_context.pipeline.decay import _response_keys, _response_tokens, prune_tool_outputs
    counter, cache, rng = TokenCounter(), PackCache(), random.Random(29)
    msgs: list[Message] = [_msg("text", 0)]
    uris: dict[str, str] = {}
    already: frozenset[int] = frozenset()
    for step in range(80):
        msgs += [_msg("call", step), Message("user", (FunctionResponse("bash", {"output": f"out {step} " * 30}),))]
        if rng.random() < 0.15 and len(msgs) > 5:
            msgs = msgs[: rng.randrange(3, len(msgs))]  # a rewind: the carried index must not be trusted
        turns = in_memo(cache, lambda: grouped_turns(msgs))
        for t in turns:
            for r in (r for m in t.messages for r in m.responses):
                if rng.random() < 0.3:
                    uris = {**uris, r.key: f"artifact://x/{r.key[:8]}"}
        if uris and rng.random() < 0.1:  # a URI gone: what the last call found saved must not be trusted
            uris = {k: v for k, v in uris.items() if k != rng.choice(sorted(uris))}
        already = frozenset(t.start for t in turns if rng.random() < 0.2) if rng.random() < 0.5 else already
        protect = rng.choice([0, 100, 300])
        totals = list(accumulate(_response_tokens(t, counter) for t in turns))
        older = bisect_right(totals, (totals[-1] if totals else 0) - protect)
        want = tuple(turns[i].start for i in range(older - 1, -1, -1) if _response_keys(turns[i])
                     and turns[i].start not in already and all(k in uris for k in _response_keys(turns[i])))
        got = in_memo(cache, lambda: prune_tool_outputs(turns, protect_tokens=protect, minimum_tokens=0, uris=uris, already=already,
                                 counter=counter))
        assert got[2] == want, step


def test_shared_prefix_by_halving_equals_walking_item_by_item():
    from aether_context.pipeline.incremental import shared_prefix

    def walked(old, new):
        i = 0
        while i < min(len(old), len(new)) and (old[i] is new[i] or old[i] == new[i]):
            i += 1
        return i

    rng = random.Random(11)
    nan = float("nan")
    for _ in range(3000):
        old = tuple(rng.choice([1, 2, 2.0, "a", None, nan]) for _ in range(rng.randint(0, 40)))
        new = list(old[: rng.randint(0, len(old))]) + [rng.choice([1, 3, "b", nan]) for _ in range(rng.randint(0, 5))]
        if new and rng.random() < 0.5:  # a change inside the shared part
            new[rng.randrange(len(new))] = rng.choice([4, "c", float("nan")])
        assert shared_prefix(old, tuple(new)) == walked(old, tuple(new)), (old, new)


def test_request_index_carried_from_the_last_call_equals_a_search_of_every_message():
    """The invocation's request found by reading only the messages added since the last call equals the
    last equal message found by walking the whole request, as the history grows, repeats the request
    and is rewound."""
    from aether_context.adk.collect import find_request_index
    cache, rng = PackCache(), random.Random(41)
    asks = [types.Content(role="user", parts=[types.Part(text=f"task {k}")]) for k in range(3)]
    targets = [to_message(ask).digest for ask in asks]
    msgs: list[Message] = []
    for step in range(400):  # the request often more than `_NEAR` messages back: the carried search
        msgs.append(to_message(rng.choice(asks)) if rng.random() < 0.02 else _msg(rng.choice(["call", "resp"]), step))
        if rng.random() < 0.005:
            msgs = msgs[: rng.randrange(0, len(msgs) + 1)]  # a rewind: the carried index must not be trusted
        request = ModelRequest("m", "sys", tuple(msgs))
        for ask, target in zip(asks, targets):
            want = max((i for i, m in enumerate(msgs) if m.digest == target), default=None)
            got = in_memo(cache, lambda: find_request_index(request, ask))
            assert got == (want if want is not None else find_request_index(request, None)), step


def test_instruction_positions_carried_from_the_last_call_equal_a_fresh_scan():
    from aether_context.adk.collect import _instruction_indices, _is_instruction
    rng = random.Random(19)
    cache = PackCache()
    pool = [Message("user", (TextPart(f"<<<BEGIN_SYSTEM_INSTRUCTION>>> {i}"),)) for i in range(3)]
    msgs = _random_messages(rng, 10)
    for step in range(200):
        got = in_memo(cache, lambda: _instruction_indices(tuple(msgs)))
        assert got == tuple(i for i, m in enumerate(msgs) if _is_instruction(m)), step
        if rng.random() < 0.7:
            msgs = msgs + [rng.choice(pool) if rng.random() < 0.3 else _msg("text", step)]
        elif len(msgs) > 3:
            msgs = msgs[: rng.randrange(1, len(msgs))]


def test_history_documents_follow_a_changed_time_of_an_unchanged_turn():
    """The pool carries its documents' times while the times up to a turn's start are the last call's: a time
    that changed before a turn, the turns unchanged, gives that turn (and those after it) their new time."""
    from aether_context.pipeline.select import history_documents
    counter = TokenCounter()
    cache = PackCache()
    msgs = _random_messages(random.Random(5), 30)
    turns = in_memo(cache, lambda: grouped_turns(msgs, 0))
    times = tuple(1_700_000_000.0 + 60 * i for i in range(len(msgs)))
    in_memo(cache, lambda: history_documents(turns, times, counter.count_text))
    k = turns[len(turns) // 2].start
    later = times[:k] + tuple(t + 3600 for t in times[k:])  # the same turns, said an hour later from turn k on
    got = in_memo(cache, lambda: history_documents(turns, later, counter.count_text))
    assert got == history_documents(turns, later, counter.count_text)
    assert got[len(turns) // 2].timestamp == later[k] and got[0].timestamp == times[0]


def test_a_span_of_the_history_groups_as_its_slice_as_the_session_grows_and_changes():
    rng = random.Random(11)
    for trial in range(40):
        cache = PackCache()
        msgs = _random_messages(rng, rng.randint(2, 30))
        for step in range(12):
            lo = rng.choice([0, 1, min(3, len(msgs) - 1)])
            hi = rng.choice([len(msgs), max(lo, len(msgs) - 1)])
            got = in_memo(cache, lambda: grouped_turns(tuple(msgs), 0, span=(lo, hi)))
            assert _same(got, group_turns(msgs[lo:hi], lo)), (trial, step)
            action = rng.random()
            if action < 0.6:
                msgs = msgs + _random_messages(rng, rng.randint(1, 3))
            elif action < 0.8 and len(msgs) > 2:
                k = rng.randrange(1, len(msgs))
                msgs = msgs[:k] + [_msg(rng.choice(["call", "resp", "resp2", "text"]), 1000 + step)] + msgs[k + 1:]
            elif len(msgs) > 3:
                msgs = msgs[: len(msgs) - rng.randint(1, 2)]


def test_a_grown_history_shares_what_is_unchanged_instead_of_copying_it():
    """The passes of a call over a grown history give back the sequences they were given when they change
    nothing (no orphan, no cut), and the turns grouped are noted as sharing the last call's: no pass
    copies or compares the history again."""
    from aether_context.pipeline.fit import repair_orphans
    from aether_context.pipeline.incremental import mapped, shared_prefix
    cache = PackCache()
    msgs = tuple([_msg("text", 0)] + [m for i in range(1, 200) for m in (_msg("call", i), _msg("resp", i))])
    counter = TokenCounter()
    first = in_memo(cache, lambda: grouped_turns(msgs, 0))
    grown = in_memo(cache, lambda: grouped_turns(msgs + (_msg("call", 500), _msg("resp", 500)), 0))
    assert cache.lookup("prefix", id(grown[0]))[0][:3] == (first, grown, len(first))  # noted, not compared later
    assert in_memo(cache, lambda: shared_prefix(first, grown)) == len(first)
    for turns in (first, grown):
        assert in_memo(cache, lambda: repair_orphans(turns))[0] is turns
        assert in_memo(cache, lambda: mapped("same", turns, lambda t: t)) is turns
        assert in_memo(cache, lambda: bounded_turns(turns, 10_000, counter)) == (turns, ())


def test_a_changed_last_turn_gives_what_a_fresh_computation_gives():
    """A chat's opening call: the last call's request turn joins the history and its answer follows, so the
    last turn of the last call changed. The per-turn cap's cuts and the image positions carried from the last
    call equal a fresh computation."""
    from aether_context.content import Blob
    from aether_context.pipeline.decay import decay_images
    counter, cache = TokenCounter(), PackCache()
    big = Message("user", (FunctionResponse("bash", {"output": "word " * 400}),))
    image = Message("user", (Blob("image/png", b"\x89PNG" + bytes(range(40))),))
    turns = tuple(Turn(i, (_msg("call", i), big if i % 7 == 0 else image if i % 11 == 0 else _msg("resp", i)))
                  for i in range(0, 600, 2))
    first = (in_memo(cache, lambda: bounded_turns(turns, 300, counter))[1], in_memo(cache, lambda: decay_images(turns, 3, {}))[1])
    changed = turns[:-1] + (Turn(598, (_msg("text", 598),)), Turn(599, (image,)), Turn(600, (_msg("call", 600), big)))
    got = (in_memo(cache, lambda: bounded_turns(changed, 300, counter)), in_memo(cache, lambda: decay_images(changed, 3, {})))
    fresh = (bounded_turns(changed, 300, counter), decay_images(changed, 3, {}))
    assert got == fresh and first[0] and got[0][1] and got[1][1]


def test_items_changed_in_place_give_what_a_fresh_pass_gives():
    """A prune clears a few turns deep in the history: the carried passes (`mapped`, the Memory documents)
    equal a fresh pass, also over a shorter sequence in between."""
    from aether_context.pipeline.incremental import mapped
    from aether_context.pipeline.select import history_documents
    counter = TokenCounter()
    rng = random.Random(23)
    cache = PackCache()
    msgs = _random_messages(rng, 400)
    times = tuple(1_700_000_000.0 + 60 * i for i in range(len(msgs) + 20))
    size = lambda t: turn_tokens(t, counter)  # noqa: E731
    for step in range(12):
        turns = in_memo(cache, lambda: grouped_turns(msgs, 0))
        assert in_memo(cache, lambda: mapped("size", turns, size)) == tuple(turn_tokens(t, counter) for t in turns)
        assert in_memo(cache, lambda: history_documents(turns, times, counter.count_text)) == history_documents(
            turns, times, counter.count_text), step
        outputs = [k for k in range(10, len(msgs) - 10) if msgs[k].responses]
        for k in rng.sample(outputs, rng.randint(1, 6)):  # a few old tool outputs cleared in place
            msgs[k] = Message(msgs[k].role, tuple(FunctionResponse(p.name, {"cleared": f"{step}"}, p.id)
                                                  for p in msgs[k].parts))
        if step % 3 == 2:  # the pass over a shorter sequence in between (another pool of the same turns)
            shorter = in_memo(cache, lambda: grouped_turns(msgs[:-3], 0))
            assert in_memo(cache, lambda: mapped("size", shorter, size)) == tuple(turn_tokens(t, counter) for t in shorter)
            assert in_memo(cache, lambda: history_documents(shorter, times, counter.count_text)) == history_documents(
                shorter, times, counter.count_text)
        msgs += _random_messages(rng, 1)


def test_turns_changed_in_place_take_their_documents_times_from_this_call():
    """A pool whose turns changed in place is carried by position only while the times its kept documents read are
    the last call's: times given now and not then (or then and not now) give every document this call's time."""
    from aether_context.pipeline.select import history_documents
    counter = TokenCounter()
    msgs = _random_messages(random.Random(5), 200)
    full = tuple(1_700_000_000.0 + 60 * i for i in range(len(msgs)))
    for before, now in (((), full), (full, ()), (full[:50], full)):
        cache = PackCache()
        m = list(msgs)
        in_memo(cache, lambda: history_documents(grouped_turns(m, 0), before, counter.count_text))
        k = next(k for k in range(60, 150) if m[k].responses)
        m[k] = Message(m[k].role, tuple(FunctionResponse(p.name, {"cleared": "x"}, p.id) for p in m[k].parts))
        turns = in_memo(cache, lambda: grouped_turns(m, 0))
        assert in_memo(cache, lambda: history_documents(turns, now, counter.count_text)) == history_documents(
            turns, now, counter.count_text), (len(before), len(now))

