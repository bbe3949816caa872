"""The conversation policy end to end (real Runner): verbatim while it fits, by need not by count,
cache-stable across invocations, repeatable, and no cost when there is nothing to add."""

from __future__ import annotations

import threading

import pytest
from google.adk.events import Event
from google.genai import types

from aether_context import ContextPackPlugin
from aether_context.adk import request_from_llm
from aether_context.retrieval import HashingEmbedder

from conftest import filler, make_runner, new_session, run_turn, scripted_agent, strip_continue

DAY = 86_400.0
T0 = 1_700_000_000.0


async def seed_chat(runner, session_id: str, turns: "list[tuple[str, str]]", *, start: float = T0, user_id: str = "u") -> None:
    """Append a past conversation to the session as real ADK events (user and agent alternating)."""
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id=user_id, session_id=session_id)
    for i, (author, text) in enumerate(turns):
        event = Event(author=author, invocation_id=f"past-{i // 2}", timestamp=start + 60 * i,
                      content=types.Content(role="user" if author == "user" else "model", parts=[types.Part(text=text)]))
        await runner.session_service.append_event(session, event)


def chat(n: int, seed: int = 0, words: int = 20) -> "list[tuple[str, str]]":
    return [("user" if i % 2 == 0 else "agent", f"turn {i}: " + filler(words, seed=seed + i)) for i in range(n)]


_MADE: list[ContextPackPlugin] = []


def plugin(store: str, window: int, **kw) -> ContextPackPlugin:
    made = ContextPackPlugin(store=store, window_tokens=window, embedder=HashingEmbedder(), **kw)
    _MADE.append(made)
    return made


@pytest.fixture(autouse=True)
def _flush_stores(memory_store_url):
    """Writes finish before the store fixture removes the folder."""
    yield
    while _MADE:
        _MADE.pop().packer.store.flush()


def scripted(turns):
    """A scripted agent whose model counts prompts with our own tokenizer (no calibration drift)."""
    from aether_context.pipeline import request_tokens
    from aether_context.tokens import TokenCounter

    agent, llm = scripted_agent(turns, tools=())
    counter = TokenCounter()
    llm.prompt_token_counter = lambda req: request_tokens(request_from_llm(req), counter)
    return agent, llm


def sent(llm, i: int = -1):
    return request_from_llm(strip_continue(llm.requests[i]))


async def test_a_conversation_that_fits_goes_out_verbatim(memory_store_url):
    agent, llm = scripted_agent(["fine"], tools=())
    base_agent, base_llm = scripted_agent(["fine"], tools=())
    p = plugin(memory_store_url, 32_000)
    runs = []
    for a, plugins in ((agent, [p]), (base_agent, [])):
        runner = make_runner(a, plugins=plugins)
        sid = await new_session(runner)
        await seed_chat(runner, sid, chat(400, words=35))  # about 20K tokens
        await run_turn(runner, sid, "What did we say in turn 3?")
        runs.append(runner)
    ours, adk = sent(llm).to_json(), sent(base_llm).to_json()
    m = p.packer.recent[-1].manifest
    assert m.tokens_after > 15_000 and m.compaction is None and m.truncation_events == []
    # ADK's request, untouched: over 70 % of the window the manifest flags the pressure, but a chat without a
    # task gets no STATUS for it
    assert m.tokens_after >= 0.7 * m.window and any(f.startswith("context_pressure") for f in m.flags)
    assert ours == adk


async def test_a_fact_from_turn_5_of_2000_comes_back_when_asked(memory_store_url):
    agent, llm = scripted(["ok"])
    p = plugin(memory_store_url, 8_000)
    runner = make_runner(agent, plugins=[p])
    sid = await new_session(runner)
    turns = chat(2000, words=12)
    turns[5] = ("agent", "turn 5: the spare key is hidden under the blue flowerpot by the garage door")
    await seed_chat(runner, sid, turns)
    await run_turn(runner, sid, "Where is the spare key hidden?")
    request = sent(llm)
    text = "\n".join(m.text for m in request.messages)
    assert "blue flowerpot" in text
    m = p.packer.recent[-1].manifest
    assert m.compaction is not None and m.layer_budgets["memory"].used > 0
    # dated: the turn's own event time is shown with it
    line = next(ln for ln in text.splitlines() if "blue flowerpot" in ln)
    assert "(2023-11-14" in line


async def test_same_session_packs_the_same_a_day_apart(memory_store_url, monkeypatch):
    import time as time_module

    checksums = []
    for shift in (0.0, DAY):
        monkeypatch.setattr(time_module, "time", lambda s=shift: T0 + 10 * DAY + s)
        agent, llm = scripted(["ok"])
        p = plugin(memory_store_url, 4_000)
        runner = make_runner(agent, plugins=[p])
        sid = "fixed-session"
        await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id=sid)
        await seed_chat(runner, sid, chat(300, words=15))
        await run_turn(runner, sid, "What was said about the weather?")
        checksums.append(p.packer.recent[-1].manifest.checksum)
    assert checksums[0] == checksums[1]


async def test_short_session_without_a_task_goes_out_unchanged(memory_store_url):
    agent, llm = scripted_agent(["hello!"], tools=())
    base, base_llm = scripted_agent(["hello!"], tools=())
    for a, plugins in ((agent, [plugin(memory_store_url, 32_000)]), (base, [])):
        runner = make_runner(a, plugins=plugins)
        sid = await new_session(runner)
        await run_turn(runner, sid, "hi")
        await run_turn(runner, sid, "how are you?")
    for ours, theirs in zip(llm.requests, base_llm.requests):
        assert request_from_llm(ours).to_json() == request_from_llm(theirs).to_json()


async def test_a_second_user_turn_appends_to_the_first_turns_request(memory_store_url):
    agent, llm = scripted(["first answer", "second answer"])
    p = plugin(memory_store_url, 4_000)
    runner = make_runner(agent, plugins=[p])
    sid = await new_session(runner)
    await seed_chat(runner, sid, chat(200, words=15))  # forces a compaction at the first call
    await run_turn(runner, sid, "Tell me about turn 7.")
    await run_turn(runner, sid, "And turn 9?")
    first, second = sent(llm, 0), sent(llm, 1)
    m1, m2 = (r.manifest for r in list(p.packer.recent)[-2:])
    assert m1.compaction is not None and m2.compaction is None
    # everything before the first turn's payload is sent again unchanged
    k = next(i for i, m in enumerate(first.messages) if m.text.startswith("CONTEXT PACK"))
    assert k >= 1 and first.messages[0].text.startswith("CONVERSATION SO FAR")
    assert second.messages[:k] == first.messages[:k]
    assert second.system_instruction == first.system_instruction and second.tools == first.tools


async def test_the_same_session_replayed_twice_gives_the_same_requests(memory_store_url):
    checksums = []
    for _ in range(2):
        agent, llm = scripted(["a", "b", "c"])
        p = plugin(memory_store_url, 3_000)
        runner = make_runner(agent, plugins=[p])
        sid = "replayed"
        await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id=sid)
        await seed_chat(runner, sid, chat(150, words=15))
        for q in ("first question about turn 3", "second about turn 40", "third about turn 90"):
            await run_turn(runner, sid, q)
        checksums.append([r.manifest.checksum for r in p.packer.recent])
    assert checksums[0] == checksums[1]


def get_reservation(reservation_id: str) -> dict:
    """Look up a reservation."""
    return {"reservation_id": reservation_id, "user_id": "mia_li_3668", "payment_id": "credit_card_4421486",
            "flights": [{"flight_number": "HAT136", "date": "2024-05-15"}], "notes": filler(150, seed=7)}


def search_flights(origin: str, destination: str) -> dict:
    """Search flights."""
    return {"results": filler(400, seed=len(origin) + len(destination))}


async def test_an_identifier_from_an_early_tool_result_reaches_the_call_that_uses_it(memory_store_url):
    from aether_context.testing import call

    script = [call("get_reservation", reservation_id="YAX4DR")]
    script += [call("search_flights", origin=f"city{i}", destination=f"town{i}") for i in range(12)]
    uses: list[str] = []

    def pay(req):  # the model now needs the payment id it read at the first call
        uses.append("\n".join(m.text + " ".join(str(r.response) for r in m.responses)
                              for m in request_from_llm(req).messages))
        return call("get_reservation", reservation_id="YAX4DR")

    script += [pay, "done"]
    agent, llm = scripted_agent(script, tools=(get_reservation, search_flights))
    p = await _one_turn_at(4_000, agent, llm, memory_store_url,
                           "Please rebook my reservation YAX4DR onto a later flight and pay with my card.")
    assert any(r.manifest.compaction for r in p.packer.recent)  # the first result left the verbatim zone
    assert uses and "credit_card_4421486" in uses[0] and "mia_li_3668" in uses[0]


def test_a_request_without_content_words_retrieves_nothing_and_the_manifest_says_so(counter):
    from aether_context.pipeline import MemoryItem, build_pack
    from aether_context.profile import load_profile

    from conftest import make_inputs

    memory = [MemoryItem(f"m{i}", f"note {i}: the deploy failed on node {i}", 1_699_000_000.0 + i) for i in range(5)]
    profile = load_profile("default")
    empty = build_pack(make_inputs((), "?? !!", memory=memory), profile, counter=counter, window=8_000)
    assert empty.manifest.layer_budgets["memory"].items == 0
    assert any(f.startswith("empty_query") for f in empty.manifest.flags)
    asked = build_pack(make_inputs((), "which node failed the deploy?", memory=memory), profile, counter=counter,
                       window=8_000)
    assert asked.manifest.layer_budgets["memory"].items > 0
    assert not any(f.startswith("empty_query") for f in asked.manifest.flags)


async def test_a_compaction_inside_a_tool_loop_keeps_the_payload_cached(memory_store_url):
    """Issue 11: the task came before the loop's turns, so a compaction inside the loop writes its block
    after the payload, which stays where the cached prefix has it. No result was offloaded, so the recall
    tool is not declared: the block cites no original (a change of the tools would re-process the whole
    request, ADK's head included), and every compaction keeps the head and the payload cached."""
    from aether_context.pipeline import request_tokens
    from aether_context.pipeline.render import head_tokens
    from aether_context.testing import call
    from aether_context.tokens import TokenCounter

    script = [call("search_flights", origin=f"city{i}", destination=f"town{i}") for i in range(14)] + ["done"]
    agent, llm = scripted_agent(script, tools=(search_flights,))
    counter = TokenCounter()
    llm.prompt_token_counter = lambda req: request_tokens(request_from_llm(req), counter)
    p = plugin(memory_store_url, 4_000)
    runner = make_runner(agent, plugins=[p])
    await run_turn(runner, await new_session(runner), "Find me a flight out of any city this week. " + filler(300, seed=4))
    sent = [request_from_llm(r) for r in llm.requests]
    records = list(p.packer.recent)
    compactions = [i for i, r in enumerate(records) if r.manifest.compaction]
    assert compactions and compactions[0] > 0
    assert all([t.name for t in r.tools] == ["search_flights"] for r in sent)  # never changed
    for i in compactions:
        assert sent[i].messages[0] == sent[i - 1].messages[0]  # the payload, as the previous call sent it
        assert sent[i].messages[1].text.startswith("CONVERSATION SO FAR")
        assert "artifact://" not in sent[i].messages[1].text
        payload = head_tokens(sent[i], counter) + counter.count_message(sent[i].messages[0])
        assert records[i].manifest.prefix_tokens >= payload  # only the block and the turns after it


async def test_the_next_invocation_appends_after_a_compaction_inside_a_tool_loop(memory_store_url):
    """Issue 11: a compaction inside a tool loop wrote its block after the invocation's request (pinned); the
    next user turn keeps the block where it was sent, after that request, instead of moving it to the head
    (which re-processed the whole conversation): its first call appends to the last request."""
    from aether_context.testing import call

    script = [call("search_flights", origin=f"city{i}", destination=f"town{i}") for i in range(8)] + ["done", "ok"]
    agent, llm = scripted_agent(script, tools=(search_flights,))
    p = plugin(memory_store_url, 6_000)
    runner = make_runner(agent, plugins=[p])
    sid = await new_session(runner)
    await run_turn(runner, sid, "Find me a flight out of any city this week.")
    first = len(llm.requests)
    await run_turn(runner, sid, "Thanks.")
    sent = [request_from_llm(r) for r in llm.requests]
    records = list(p.packer.recent)
    assert any(r.manifest.compaction for r in records[:first])
    assert sent[first - 1].messages[1].text.startswith("CONVERSATION SO FAR")  # after the pinned request
    m = records[first].manifest
    assert m.compaction is None and m.cache_break is None
    assert sent[first].messages[:len(sent[first - 1].messages)] == sent[first - 1].messages


def run_tests(target: str) -> dict:
    """Run a test file."""
    return {"output": f"<returncode>1</returncode>\n{filler(220, seed=len(target))}\nFAILED {target}::test_x"}


async def _coding_loop_compactions(store: str, profile) -> "list[int]":
    return (await _coding_loop(store, profile))[1]


async def _coding_loop(store: str, profile) -> "tuple[list[int], list[int], int]":
    """A 40-step test loop at 8K: tokens per call, the calls that compacted, re-processed tokens."""
    from aether_context.testing import call

    script = [call("run_tests", target=f"tests/test_{i}.py") for i in range(40)] + ["done"]
    agent, llm = scripted_agent(script, tools=(run_tests,))
    p = plugin(store, 8_000, profile=profile)
    runner = make_runner(agent, plugins=[p])
    await run_turn(runner, await new_session(runner), "Make the test suite pass. " + filler(200, seed=9))
    manifests = [r.manifest for r in p.packer.recent]
    return ([m.tokens_after for m in manifests], [i for i, m in enumerate(manifests) if m.compaction],
            sum(m.tokens_after - m.prefix_tokens for m in manifests))


async def test_a_coding_loop_compacts_rarely(memory_store_url):
    """Issue 11: each compaction re-processes the verbatim tail. In `coding_agent` the minimum tail
    leaves room for `growth_turns` (8) more turns, so a long loop of regular tool turns goes several calls
    between compactions; leaving room for two (the default profile's) compacts every two or three calls."""
    from aether_context import load_profile

    coding = load_profile("coding_agent")
    rare = await _coding_loop_compactions(memory_store_url, coding)
    often = await _coding_loop_compactions(memory_store_url, coding.override(conversation={"growth_turns": 2}))
    assert len(rare) >= 2 and len(often) > len(rare), (rare, often)
    assert min(b - a for a, b in zip(rare, rare[1:])) >= 4, rare


async def test_a_coding_loop_settles_below_its_room(memory_store_url):
    """Issue 11: a tool loop appends steps as large as its largest. With `headroom_turns` (2 in
    `coding_agent`), once it has compacted, it compacts again while two more such turns still fit its
    room (the first compaction comes where it did), so the late calls of a
    long loop are smaller than when it fills the room to the last turn before compacting, and each
    compaction re-processes about as much as before (the block and a short tail, after the kept payload)."""
    from aether_context import load_profile

    coding = load_profile("coding_agent")
    low = await _coding_loop(memory_store_url, coding)
    full = await _coding_loop(memory_store_url, coding.override(conversation={"headroom_turns": 0}))
    late = lambda run: run[0][-len(run[0]) // 5:]  # noqa: E731 (the last fifth of the calls)
    assert sum(late(low)) < 0.9 * sum(late(full)), (late(low), late(full))
    assert low[1][0] == full[1][0]  # the first compaction: where the room is full, as without headroom
    assert max(low[0][low[1][0]:]) < max(full[0][full[1][0]:])  # after it: a lower peak
    assert low[2] <= full[2] * 1.25, (low[2], full[2])  # re-processed tokens: about as many compactions' worth


def get_user(user_id: str) -> dict:
    """Look up a user."""
    return {"user_id": user_id, "name": {"first_name": "Mia", "last_name": "Li"}, "dob": "1990-04-05",
            "address": {"address1": "975 Sunset Drive", "city": "Austin", "zip": "78750"},
            "payment_methods": {"credit_card_4421486": {"source": "credit_card", "last_four": "7447"},
                                "gift_card_7091239": {"source": "gift_card", "amount": 157}},
            "reservations": ["NO6JO3", "AIXC49"], "membership": "gold"}


def calculate(expression: str) -> str:
    """Compute an expression."""
    return str(sum(int(x) for x in expression.split("+")))


def pay_flight(reservation_id: str, payment_id: str) -> dict:
    """Pay for a reservation."""
    return {"reservation_id": reservation_id, "payment_id": payment_id, "status": "paid"}


async def test_ids_read_early_survive_model_chatter_and_tool_noise_at_a_small_window(memory_store_url):
    """At 4K, the KNOWN VALUES of the compaction block have room for a few lines. They go to where the
    values were read (the user's message, the tool results), not to the model's own texts, which repeat
    codes it already read, nor to calls with nothing worth typing back (a calculation's expression)."""
    from aether_context.testing import call

    script = [call("get_user", user_id="mia_li_3668")]
    for i in range(9):
        said = types.Part(text=f"Options: HAT{100 + i}, HAT{200 + i} from JFK via ORD to SEA at ${120 + i}, "
                                f"or LAX{i}B; " + filler(60, seed=i))
        script += [[said, call("calculate", expression=f"{100 + i} + {23 * i} + {7 * i}")],
                   call("search_flights", origin=f"JFK{i}", destination=f"SEA{i}")]
    uses: list[str] = []

    def pay(req):  # the model now needs the user's id and a payment id read at the first call
        uses.append("\n".join(m.text + " ".join(str(r.response) for r in m.responses)
                              for m in request_from_llm(req).messages))
        return call("pay_flight", reservation_id="NO6JO3", payment_id="gift_card_7091239")

    agent, llm = scripted_agent(script + [pay, "done"], tools=(get_user, calculate, search_flights, pay_flight))
    p = await _one_turn_at(4_000, agent, llm, memory_store_url,
                           "Hi, I am mia_li_3668. Pay for my reservation with the gift card, cheapest flight.")
    assert sum(1 for r in p.packer.recent if r.manifest.compaction) >= 2
    assert uses and all(v in uses[0] for v in ("gift_card_7091239", "NO6JO3", "mia_li_3668"))


async def _one_turn_at(window: int, agent, llm, store: str, message: str):
    """One user turn through a plugin at `window`, the scripted model counting its prompts as the pack does."""
    from aether_context.pipeline import request_tokens
    from aether_context.tokens import TokenCounter
    counter = TokenCounter()
    llm.prompt_token_counter = lambda req: request_tokens(request_from_llm(req), counter)
    p = plugin(store, window)
    runner = make_runner(agent, plugins=[p])
    await run_turn(runner, await new_session(runner), message)
    return p


async def test_a_compaction_with_a_frozen_payload_ranks_once(memory_store_url, monkeypatch):
    """Issue 17: a compaction inside a tool loop keeps the payload (its Evidence and Memory) as sent, so the
    room is known without ranking: the call ranks for the zone it keeps, not also for the one it leaves
    (which doubled a compaction call's retrieval)."""
    import aether_context.pipeline.build as build
    from aether_context.testing import call

    ranked: list[int] = []
    held: list[int] = []  # rankings of each plan that compacted and kept the payload
    select, plan = build.select, build._plan
    monkeypatch.setattr(build, "select", lambda *a, **kw: ranked.append(1) or select(*a, **kw))

    def counted(*a, **kw):
        before = len(ranked)
        out = plan(*a, **kw)
        if out.compaction is not None and out.frozen is not None:
            held.append(len(ranked) - before)
        return out
    monkeypatch.setattr(build, "_plan", counted)
    script = [call("search_flights", origin=f"city{i}", destination=f"town{i}") for i in range(14)] + ["done"]
    agent, _ = scripted_agent(script, tools=(search_flights,))
    runner = make_runner(agent, plugins=[plugin(memory_store_url, 4_000)])
    await run_turn(runner, await new_session(runner), "Find me a flight out of any city this week. " + filler(300, seed=4))
    assert held and held == [1] * len(held), held


async def test_the_calls_of_a_payload_kept_as_sent_rank_at_its_clock_and_search_no_more(memory_store_url, monkeypatch):
    """Issue 17: a tool loop's later calls keep the payload (its Evidence and Memory) as sent. They rank at
    the session clock the payload was ranked at (`PackState.ranked_at`), not each at its own, so they rank
    as it was built and repeat its searches, which the index keeps: they search nothing again."""
    import aether_context.adk.packer as packer
    import aether_context.pipeline.build as build
    from aether_context.retrieval import HybridIndex
    from aether_context.testing import call

    searches: list[int] = []  # the thread of each search
    calls: list[tuple[bool, int, float, float]] = []  # per call: payload kept, searches, its clock, its payload's
    rank, plan = HybridIndex._rank, build._plan  # every search not repeated from the index's last ones ranks
    monkeypatch.setattr(HybridIndex, "_rank", lambda *a, **kw: searches.append(threading.get_ident()) or rank(*a, **kw))

    def counted(c, *a, **kw):
        before = len(searches)
        out = plan(c, *a, **kw)
        mine = searches[before:].count(threading.get_ident())  # this call's own searches
        calls.append((out.frozen is not None and out.compaction is None, mine, c.inputs.now,
                      getattr(c.inputs.previous, "ranked_at", None)))
        return out
    monkeypatch.setattr(build, "_plan", counted)
    clock = iter(range(10**6))  # the session's clock moves on at each call, as a model's answers take time
    monkeypatch.setattr(packer, "session_now", lambda events: T0 + DAY + 60 * next(clock))
    script = [call("search_flights", origin=f"city{i}", destination=f"town{i}") for i in range(4)] + ["done"]
    agent, _ = scripted_agent(script, tools=(search_flights,))
    runner = make_runner(agent, plugins=[plugin(memory_store_url, 12_000)])
    sid = await new_session(runner)
    await seed_chat(runner, sid, chat(300, words=35))
    await run_turn(runner, sid, "Which flights did we look at for the trip to town 3?")
    built_at, kept = None, 0
    for is_kept, n, now, payload_at in calls:
        if not is_kept:  # a payload built at this call's clock
            built_at = now
            continue
        kept += 1
        assert n == 0 and payload_at == built_at != now, calls
    assert kept >= 2, calls


def find_trips(origin: str) -> dict:
    """Find trips."""
    n = sum(map(ord, origin))
    return {"origin": origin, "trips": [{"flight_number": f"HAT{(n * 7 + k * 13) % 900 + 100}", "date": f"2024-05-{10 + k}",
                                         "price": 100 + (n + k * 37) % 400, "fare_id": f"F{n % 97}X{k}{origin}"}
                                        for k in range(5)], "note": filler(40, seed=n)}


async def test_known_values_take_memorys_room_so_later_user_turns_append(memory_store_url):
    """Issue 11: at a small window the compaction block's KNOWN VALUES and Memory both bring compacted turns
    back. When Memory also claimed its full share of the conversation's room, every later user turn compacted
    again (a cache break re-processing everything after the head) to make room for the same turns twice; the
    values now take Memory's share first, so most later calls append to the request."""
    from aether_context.pipeline import request_tokens
    from aether_context.testing import call
    from aether_context.tokens import TokenCounter

    script = [call("get_user", user_id="mia_li_3668"), call("get_reservation", reservation_id="NO6JO3")]
    script += [call("find_trips", origin=f"JFK{i}") for i in range(4)] + ["Found them."]
    questions = [f"Which reservation and payment card did we look at before, for trip {i}?" for i in range(4)]
    for i in range(len(questions)):
        script += [call("find_trips", origin=f"SEA{i}"), f"Reservation NO6JO3, paid with credit_card_4421486 ({i})."]
    agent, llm = scripted_agent(script, tools=(get_user, get_reservation, find_trips),
                                instruction="You are an airline agent. " + filler(1200, seed=3))
    counter = TokenCounter()
    llm.prompt_token_counter = lambda req: request_tokens(request_from_llm(req), counter)
    p = plugin(memory_store_url, 4_000)  # ADK's head (instruction, tools) takes about half of it, as in tau-bench
    runner = make_runner(agent, plugins=[p])
    sid = await new_session(runner)
    await run_turn(runner, sid, "Hi, I am mia_li_3668. Find me a later flight for my reservation NO6JO3.")
    first = len(llm.requests)
    for q in questions:
        await run_turn(runner, sid, q)
    manifests = [r.manifest for r in p.packer.recent]
    assert manifests[first].compaction  # the second user turn compacts: the block now holds KNOWN VALUES
    block = request_from_llm(llm.requests[first]).messages[0].text
    assert block.startswith("CONVERSATION SO FAR") and "KNOWN VALUES" in block
    later = manifests[first + 1:]
    again = [i for i, m in enumerate(later) if m.compaction]
    # most later calls append. Measured: 3 of 7 later calls compact (4, every later user turn and a loop call,
    # before issue 11; 2 while the dialogue's depth also counted compacted turns, which grew the conversation's
    # room with the whole history and starved Memory)
    assert len(again) <= 3, (again, len(later))
