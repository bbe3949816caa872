"""A compaction costs what its new turns add: what it carries from the last one changes no request,
and what the work ahead could compute is not computed on the request's path."""

from __future__ import annotations

import threading

from aether_context import ContextPackPlugin
from aether_context.adk import request_from_llm
from aether_context.adk.worker import wait_ahead
from aether_context.pipeline.cache import PackCache
from aether_context.retrieval import HashingEmbedder
from aether_context.testing import call

from conftest import filler, make_runner, run_turn, scripted_agent

# These loops were tuned at a 5K window when ScriptedLlm reported chars / 4 of the request's JSON: the
# calibration learnt about 2.8 and packed them for far fewer of our tokens than 5K. ScriptedLlm now reports
# our own count (calibration 1.0), so the window is set to one where they compact as often as they need
# (3K; at 1.5K-2K no compaction tries to hold its payload, and at 2.4K such a compaction read known values:
# [0, 1, 2] in test_a_compaction_that_cannot_hold_the_payload_merges_no_value).
WINDOW = 3_000

ON_PACK_THREAD: list[tuple[int, str]] = []  # (call, text) embedded on the pack thread
CALL = [-1]


def on_pack_thread() -> bool:
    """Whether this runs on the pack thread (the request's path), not the work-ahead thread."""
    return threading.current_thread().name.startswith("aether-pack")


class RecordingEmbedder(HashingEmbedder):
    """The hashing embedder, noting each text it embeds on the pack thread (the request's path)."""

    def embed(self, texts):  # type: ignore[no-untyped-def]
        if on_pack_thread():
            ON_PACK_THREAD.extend((CALL[0] + 1, t) for t in texts)  # the next call's pack
        return super().embed(texts)


def lookup_booking(ref: str) -> dict:
    """Look up a booking by its reference."""
    n = int(ref[3:])
    return {"booking_id": f"BK{n:04d}X", "user_id": f"user_{n % 3}_77", "flight": f"HAT{100 + n}",
            "date": f"2024-05-{10 + n:02d}", "notes": filler(260, seed=n)}


def _booking_chat(store: str, *, stride: int) -> tuple:
    """A plugin and a runner at a 5K window whose eight turns each look up two bookings (`stride` apart from
    turn to turn) and answer: long enough to compact several times."""
    steps = []
    for t in range(8):
        steps += [call("lookup_booking", ref=f"ref{stride * t}"), call("lookup_booking", ref=f"ref{stride * t + 1}"),
                  f"Booking ref{stride * t} belongs to user_{t % 3}_77."]
    agent, _ = scripted_agent(steps, tools=[lookup_booking])
    p = ContextPackPlugin(store=store, window_tokens=WINDOW, embedder=HashingEmbedder())
    return p, make_runner(agent, plugins=[p])


class CarryCache(PackCache):
    """The packer's cache, noting each lookup of a compaction's carried known values (hit or miss), and
    each turn folded on the pack thread (the request's path), by call."""

    def __init__(self) -> None:
        super().__init__()
        self.carried: list[bool] = []
        self.folded: list[int] = []

    def get(self, kind, key, compute):  # type: ignore[no-untyped-def]
        if kind == "fold_line" and on_pack_thread() \
                and self.lookup(kind, key) is None:
            self.folded.append(CALL[0] + 1)  # the next call's pack
        return super().get(kind, key, compute)

    def lookup(self, kind, key):  # type: ignore[no-untyped-def]
        value = super().lookup(kind, key)
        if kind == "carried" and key[0] == "known_values":
            self.carried.append(value is not None)
        return value


async def _run(store: str, *, cold: bool, cache: PackCache | None = None) -> tuple[list, list]:
    """A tool loop long enough to compact several times; with `cold` the packer's cache is emptied before
    every call (each compaction then reads and merges every value afresh)."""
    holder = {}

    def step(i: int):
        def answer(req):
            wait_ahead()  # the model's latency lets the work ahead finish
            CALL[0] = i
            if cold:
                holder["plugin"].packer.cache.clear()
            return call("lookup_booking", ref=f"ref{i}")
        return answer

    agent, llm = scripted_agent([step(i) for i in range(16)] + ["done"], tools=[lookup_booking])
    p = holder["plugin"] = ContextPackPlugin(store=store, window_tokens=WINDOW, embedder=RecordingEmbedder(),
                                             cache=cache)
    runner = make_runner(agent, plugins=[p])
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="fixed")
    await run_turn(runner, "fixed", "Check every booking from ref0 on and list their user ids.")
    wait_ahead()
    return [request_from_llm(r).to_json() for r in llm.requests], [r.manifest for r in p.packer.recent]


async def test_carried_known_values_send_what_a_cold_cache_sends(memory_store_url):
    """Each compaction carries the value sets it read and its merge to the next (the packer's cache):
    the requests are byte for byte those of a packer that reads and merges every value afresh."""
    cache = CarryCache()
    warm, manifests = await _run(f"{memory_store_url}/warm", cold=False, cache=cache)
    cold, _ = await _run(f"{memory_store_url}/cold", cold=True)
    compactions = sum(1 for m in manifests if m.compaction)
    assert compactions >= 3, "too few compactions: make the loop longer"
    assert any("KNOWN VALUES" in str(r) for r in warm)
    # every compaction after the first found what the one before it carried (else this compares cold to cold)
    assert len(cache.carried) >= compactions and all(cache.carried[1:]), cache.carried
    assert warm == cold


async def test_a_compaction_embeds_no_document_the_work_ahead_could(memory_store_url):
    """The newest compacted turn's retrieval document reads the turn after it once that one is compacted
    too: the work ahead embeds it while the model answers, so no compaction after the first embeds a
    document on the request's path."""
    ON_PACK_THREAD.clear()
    _, manifests = await _run(f"{memory_store_url}/ahead", cold=False)
    compacting = [k for k, m in enumerate(manifests) if m.compaction]
    assert len(compacting) >= 3
    assert compacting[0] in {k for k, _ in ON_PACK_THREAD}  # the recorder works: nothing warmed the first
    assert not [(k, text[:80]) for k, text in ON_PACK_THREAD if k in compacting[1:]]


async def test_a_compaction_folds_no_turn_the_work_ahead_could(memory_store_url):
    """The turns a compaction moves out of the verbatim zone were verbatim at the call before: the work
    ahead folds them then (and counts and quotes their lines), so no compaction after the first folds a
    turn on the request's path."""
    cache = CarryCache()
    _, manifests = await _run(f"{memory_store_url}/folds", cold=False, cache=cache)
    compacting = [k for k, m in enumerate(manifests) if m.compaction]
    assert len(compacting) >= 3
    assert not [k for k in cache.folded if k in compacting[1:]], (cache.folded, compacting)
    control = CarryCache()  # the recorder sees the pack thread: emptied before every call, each compaction folds there
    await _run(f"{memory_store_url}/folds-cold", cold=True, cache=control)
    assert set(compacting) <= set(control.folded), control.folded


def _no_search_ahead(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The compactions add their new documents to Memory's index on their own path: the Memory search ranked ahead
    (`memory_ahead`) would add them first, and leave these tests nothing to see."""
    from aether_context.pipeline import warm
    monkeypatch.setattr(warm, "memory_ahead", lambda *args, **kwargs: False)


async def test_a_compaction_analyses_no_document_the_work_ahead_could(memory_store_url, monkeypatch):
    """The documents a compaction adds to Memory's index were analysed for BM25 by the work ahead
    (`Retriever.ahead`): a compaction after the first analyses its question on the request's path, not
    the documents' texts and contexts (which it does when the work ahead does not analyse them)."""
    from aether_context.pipeline.retrieve import Retriever
    from aether_context.retrieval.analyzer import Analyzer

    analysed: list[tuple[int, str]] = []
    analyse = Analyzer.analyse

    def recording(self, text):  # type: ignore[no-untyped-def]
        if on_pack_thread():
            analysed.append((CALL[0] + 1, text))
        return analyse(self, text)
    monkeypatch.setattr(Analyzer, "analyse", recording)
    _no_search_ahead(monkeypatch)
    per_call = {}
    for ahead in (True, False):
        if not ahead:  # the control: documents are embedded ahead, not analysed
            monkeypatch.setattr(Retriever, "ahead", lambda self, docs: self.cache.rows([d.search_text for d in docs]))
        analysed.clear()
        _, manifests = await _run(f"{memory_store_url}/analysed-{ahead}", cold=False)
        later = [k for k, m in enumerate(manifests) if m.compaction][1:]
        assert len(later) >= 2
        per_call[ahead] = [sum(1 for c, _ in analysed if c == k) for k in later]
    assert max(per_call[True]) <= 1 and min(per_call[False]) > 1, per_call


async def test_a_compaction_keys_no_document_the_work_ahead_could(memory_store_url, monkeypatch):
    """Memory's index keys each document's text (normalised and hashed: `content_key`, for duplicates and
    exclusions); the work ahead keys the texts a compaction will add with their analysis, so a compaction
    after the first normalises none of them on the request's path (it does when the work ahead does not)."""
    from aether_context.pipeline.retrieve import Retriever
    from aether_context.retrieval import analyzer, index

    normalised: list[tuple[int, str]] = []  # (call, text) normalised for a key on the pack thread
    added: list[tuple[int, str]] = []  # (call, text) of each document added to an index
    normalize, add = analyzer.normalize_text, index.HybridIndex.add

    def recording(text):  # type: ignore[no-untyped-def]
        if on_pack_thread():
            normalised.append((CALL[0] + 1, text))
        return normalize(text)

    def adding(self, documents, **kw):  # type: ignore[no-untyped-def]
        documents = list(documents)
        added.extend((CALL[0] + 1, d.text) for d in documents)
        return add(self, documents, **kw)
    monkeypatch.setattr(analyzer, "normalize_text", recording)
    monkeypatch.setattr(index.HybridIndex, "add", adding)
    _no_search_ahead(monkeypatch)
    per_call = {}
    for ahead in (True, False):
        if not ahead:  # the control: documents are analysed and embedded ahead, not keyed
            def unkeyed(self, docs):  # type: ignore[no-untyped-def]
                for doc in docs:
                    for text in filter(None, (doc.text, doc.context)):
                        self.analyzer.ahead(text)
                self.cache.rows([d.search_text for d in docs])
            monkeypatch.setattr(Retriever, "ahead", unkeyed)
        normalised.clear(), added.clear()
        _, manifests = await _run(f"{memory_store_url}/keyed-{ahead}", cold=False)
        later = [k for k, m in enumerate(manifests) if m.compaction][1:]
        assert len(later) >= 2
        texts = {k: {t for c, t in added if c == k} for k in later}
        assert all(texts.values()), texts  # each compaction adds documents to Memory's index
        per_call[ahead] = [sum(1 for c, t in normalised if c == k and t in texts[k]) for k in later]
    assert max(per_call[True]) == 0 and min(per_call[False]) > 0, per_call


async def test_a_compaction_places_only_the_value_sources_it_adds(memory_store_url, monkeypatch):
    """A compaction's KNOWN VALUES merge starts from the last one's (carried, or planned by the work ahead):
    it places in merge order only the sources new since then, and looks again only at those a change
    touches, not at every source (a merge from scratch places every one)."""
    from aether_context.compress import value_merge
    from aether_context.pipeline import known_values

    local = threading.local()  # sources placed by the merge running on this thread
    merges: list[tuple[bool, int, int]] = []  # per merge on either thread: (from an earlier merge, sources, placed)
    order, merged = value_merge._order, known_values.merged_values

    def placing(vs):  # type: ignore[no-untyped-def]
        local.placed = getattr(local, "placed", 0) + 1
        return order(vs)

    def merging(sets, *, visible="", since=None, read=None):  # type: ignore[no-untyped-def]
        local.placed = 0
        out = merged(sets, visible=visible, since=since, read=read)
        merges.append((since is not None, len(out.sources), local.placed))
        return out
    monkeypatch.setattr(value_merge, "_order", placing)
    monkeypatch.setattr(known_values, "merged_values", merging)
    await _run(f"{memory_store_url}/placed", cold=False)
    later = [(sources, placed) for again, sources, placed in merges if again]
    assert len(later) >= 2, merges
    assert all(placed * 2 <= sources for sources, placed in later), later
    assert any(placed for _, _, placed in merges), merges  # the count sees placing at all


async def test_a_compaction_that_cannot_hold_the_payload_merges_no_value(memory_store_url, monkeypatch):
    """A compaction inside a tool loop first tries to keep the payload as sent, which holds only when the
    cut pins this invocation's request; when the cut stays before the request even at the most room the
    block may take, it gives up before reading, merging or rendering any known value (the compaction that
    follows does that once)."""
    from aether_context.pipeline import build, conversation

    values_in: list[bool] = []  # per known_values call: inside a compaction that tries to hold the payload
    gave_up: list[int] = []  # those compactions' calls of known_values, when they came to nothing
    compact, known = build.compact, conversation.known_values

    def compacting(*args, **kwargs):  # type: ignore[no-untyped-def]
        before = len(values_in)
        out = compact(*args, **kwargs)
        if kwargs.get("pinned_only") and out is None:
            gave_up.append(len(values_in) - before)
        return out

    def values(*args, **kwargs):  # type: ignore[no-untyped-def]
        if on_pack_thread():  # the work ahead plans the next compaction's values meanwhile, on its own thread
            values_in.append(True)
        return known(*args, **kwargs)
    monkeypatch.setattr(build, "compact", compacting)
    monkeypatch.setattr(conversation, "known_values", values)
    p, runner = _booking_chat(f"{memory_store_url}/gave-up", stride=3)
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="chat")
    for t in range(8):
        await run_turn(runner, "chat", f"Who holds booking ref{3 * t}?")
        wait_ahead()
    assert sum(1 for r in p.packer.recent if r.manifest.compaction) >= 2
    assert gave_up, "no compaction tried to hold its payload in vain: make the turns longer"
    assert gave_up == [0] * len(gave_up), gave_up


async def test_a_compaction_reads_its_turns_values_without_a_search_per_turn(memory_store_url, monkeypatch):
    """The known values read the compacted turns newest first, each before any cut: one walk down the
    prepared turns gives those, not a search of every turn per turn read (a thousand in a long chat)."""
    import sys

    from aether_context.pipeline.prepare import TurnsByStart

    searched: list[str] = []  # per search of a turn by its start: the function that needed it
    get = TurnsByStart.get

    def searching(self, start, default=None):  # type: ignore[no-untyped-def]
        searched.append(sys._getframe(2).f_code.co_name)
        return get(self, start, default)
    monkeypatch.setattr(TurnsByStart, "get", searching)
    requests, manifests = await _run(f"{memory_store_url}/walk", cold=False)
    assert sum(1 for m in manifests if m.compaction) >= 3 and any("KNOWN VALUES" in str(r) for r in requests)
    assert "_read" not in searched, searched.count("_read")


async def test_a_compaction_ranks_only_the_value_sources_the_last_render_did_not(memory_store_url, monkeypatch):
    """KNOWN VALUES' render ranks each source's fields (an identifier pattern over every value) before it
    fills the room; a merge keeps most sources as they were, so the compaction's carry keeps their ranked
    fields and a later render (the work ahead's, or a compaction's) ranks only the sources it has not seen
    (a render from scratch ranks all)."""
    from aether_context.compress import values as values_module
    from aether_context.pipeline import known_values

    local = threading.local()  # fields ranked by the render running on this thread
    renders: list[tuple[int, int, int]] = []  # per render: (its sources' fields, those not rendered before, ranked)
    seen: dict[int, object] = {}  # the sources rendered so far, by id (held: an id is not reused)
    lock = threading.Lock()
    rank, render = values_module._field_rank, known_values.render_values

    def ranking(*args, **kwargs):  # type: ignore[no-untyped-def]
        local.ranked = getattr(local, "ranked", 0) + 1
        return rank(*args, **kwargs)

    def rendering(sets, *args, **kwargs):  # type: ignore[no-untyped-def]
        sets = list(sets)
        with lock:
            new = sum(len(vs.fields) for vs in sets if seen.get(id(vs)) is not vs)
            seen.update((id(vs), vs) for vs in sets)
        local.ranked = 0
        out = render(sets, *args, **kwargs)
        renders.append((sum(len(vs.fields) for vs in sets), new, local.ranked))
        return out
    monkeypatch.setattr(values_module, "_field_rank", ranking)
    monkeypatch.setattr(known_values, "render_values", rendering)
    requests, _ = await _run(f"{memory_store_url}/ranks", cold=False)
    assert any("KNOWN VALUES" in str(r) for r in requests)
    later = renders[1:]
    assert len(later) >= 2 and all(new < fields for fields, new, _ in later), renders
    assert all(ranked <= new for _, new, ranked in later), renders
    assert any(ranked for _, _, ranked in renders), renders  # the count sees ranking at all


async def test_a_compaction_whose_step_was_guessed_finds_its_values_rendered(memory_store_url, monkeypatch):
    """A compaction's values are merged against the verbatim turns before the step its call added
    (`conversation.newest_step`), so the work ahead, which guesses that step as the last one again, plans the
    very values the compaction shows: in a loop of like steps, a compaction after the first merges and renders
    no values on the request's path (both were done while the model answered)."""
    from aether_context.pipeline import known_values

    on_path: dict[str, list[int]] = {"render_values": [], "merged_values": []}  # per call on the request's path
    for name in on_path:
        def noting(*args, __name=name, __inner=getattr(known_values, name), **kwargs):  # type: ignore[no-untyped-def]
            if on_pack_thread():
                on_path[__name].append(CALL[0] + 1)
            return __inner(*args, **kwargs)
        monkeypatch.setattr(known_values, name, noting)
    requests, manifests = await _run(f"{memory_store_url}/guessed", cold=False)
    compacting = [k for k, m in enumerate(manifests) if m.compaction]
    assert any("KNOWN VALUES" in str(r) for r in requests) and len(compacting) >= 3, compacting
    for calls in on_path.values():
        assert calls and calls[0] == compacting[0], (on_path, compacting)  # the first compaction had no plan
        assert not [k for k in calls if k in compacting[1:]], (on_path, compacting)


async def test_a_new_compaction_block_is_counted_by_its_new_lines(memory_store_url, monkeypatch):
    """A compaction block keeps most of the last one's lines (fold lines, the opening request, known
    values): the count of the conversation it takes encodes the lines it has not counted before, not
    the whole block (the sum over its lines is the count of the block: `TokenCounter.count_lines`)."""
    from aether_context.pipeline import conversation

    encoded = [0]
    blocks: list[tuple[int, int]] = []  # per count of a new zone's conversation: (block chars, chars encoded)

    class Encoding:
        def __init__(self, inner):  # type: ignore[no-untyped-def]
            self.inner = inner

        def encode_ordinary(self, text):  # type: ignore[no-untyped-def]
            if on_pack_thread():  # not the work ahead's counts, which may run meanwhile
                encoded[0] += len(text)
            return self.inner.encode_ordinary(text)

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)
    count = conversation.conversation_tokens

    def counting(prepared, zone, counter):  # type: ignore[no-untyped-def]
        if not isinstance(counter._encoding, Encoding):
            counter._encoding = Encoding(counter._encoding)
        before = encoded[0]
        out = count(prepared, zone, counter)
        blocks.append((len(zone.block), encoded[0] - before))
        return out
    monkeypatch.setattr(conversation, "conversation_tokens", counting)
    requests, _ = await _run(f"{memory_store_url}/lines", cold=False)
    assert len(blocks) >= 3 and any("KNOWN VALUES" in str(r) for r in requests)
    for size, chars in blocks[1:]:
        assert chars * 3 <= size * 2, blocks  # a whole count encodes every character (and more: the kept turns)


async def test_the_pinned_opening_request_is_cut_once_per_cap(memory_store_url, monkeypatch):
    """Every compaction of a session pins the same opening request, cut middle-out to the block's share
    (a binary search of its prefix and suffix, each counted): the cut is kept (the packer's cache), so a
    later compaction with the same cap does not cut it again. Counted on the request's path (the pack
    thread): the work ahead plans the next compaction's values with its opening too, on its own thread,
    and may cut a new cap at the same time as a call."""
    from aether_context.pipeline import conversation

    cuts: list[tuple[str, int]] = []
    cut = conversation.middle_out

    def cutting(text, max_tokens, counter, *args, **kwargs):  # type: ignore[no-untyped-def]
        if on_pack_thread():
            cuts.append((text, max_tokens))
        return cut(text, max_tokens, counter, *args, **kwargs)
    monkeypatch.setattr(conversation, "middle_out", cutting)
    pinned: list[str] = []  # per opening request a compaction pinned on the request's path
    opening = conversation._opening

    def pinning(*args, **kwargs) -> str:  # type: ignore[no-untyped-def]
        text = opening(*args, **kwargs)
        if text and on_pack_thread():
            pinned.append(text)
        return text
    monkeypatch.setattr(conversation, "_opening", pinning)
    p, runner = _booking_chat(f"{memory_store_url}/opening", stride=2)
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="chat")
    await run_turn(runner, "chat", "Audit these bookings one by one: " + filler(900, seed=5))
    for t in range(1, 8):
        await run_turn(runner, "chat", f"Who holds booking ref{2 * t}?")
        wait_ahead()
    assert sum(1 for r in p.packer.recent if r.manifest.compaction) >= 3
    assert len(cuts) >= 2 and any(cut(text, cap, p.packer.counter) != text for text, cap in cuts), cuts
    assert len(cuts) == len(set(cuts)), [(len(text), cap) for text, cap in cuts]
    assert len(pinned) > len(cuts), (len(pinned), len(cuts))  # a later compaction found its cut kept


def lookup_note(ref: str) -> dict:
    """Look up a short note by its reference."""
    n = int(ref[3:])
    return {"note_id": f"NT{n:04d}Y", "owner": f"user_{n % 3}_77", "text": filler(90, seed=n)}


async def test_a_compaction_reads_no_verbatim_text_the_work_ahead_could(memory_store_url, monkeypatch):
    """The known values are not repeated where the verbatim text holds them: a merge reads that text's
    words. The turns a compaction leaves verbatim, but for the newest (this call's own), were verbatim at
    the call before: the work ahead reads their words then, so a compaction after the first reads on the
    request's path the words of one turn at most."""
    from aether_context.compress import _visible_text

    read: list[int] = []  # per text whose words were read on the pack thread: the call

    class Words:
        def __init__(self, inner):  # type: ignore[no-untyped-def]
            self.inner = inner

        def findall(self, text):  # type: ignore[no-untyped-def]
            if on_pack_thread():
                read.append(CALL[0] + 1)
            return self.inner.findall(text)
    monkeypatch.setattr(_visible_text, "_WORD", Words(_visible_text._WORD))

    def step(i: int):
        def answer(req):
            wait_ahead()
            CALL[0] = i
            return call("lookup_note", ref=f"ref{i}")
        return answer
    agent, _ = scripted_agent([step(i) for i in range(40)] + ["done"], tools=[lookup_note])
    p = ContextPackPlugin(store=f"{memory_store_url}/words", window_tokens=WINDOW, embedder=HashingEmbedder())
    runner = make_runner(agent, plugins=[p])
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="fixed")
    await run_turn(runner, "fixed", "Read every note from ref0 on and list their owners.")
    wait_ahead()
    compacting = [k for k, r in enumerate(p.packer.recent) if r.manifest.compaction]
    assert len(compacting) >= 3 and compacting[0] in read, (compacting, read)  # nothing warmed the first
    assert all(read.count(k) <= 1 for k in compacting[1:]), (compacting, read)


async def test_a_compaction_merges_the_values_the_work_ahead_planned(memory_store_url, monkeypatch):
    """After each request has gone out, the work ahead plans the known values of the compaction the next
    call would make (the last compaction's target, a turn like the newest to come): a compaction after
    the first merges from that plan, so it places no value source on the request's path (it used to
    place the sources of each turn it folded); the requests are those of a packer that reads and
    merges every value afresh (`test_carried_known_values_send_what_a_cold_cache_sends`)."""
    from aether_context.compress import value_merge

    placed: list[int] = []  # calls whose pack placed a value source in merge order on the request's path
    order = value_merge._order

    def placing(vs):  # type: ignore[no-untyped-def]
        if on_pack_thread():
            placed.append(CALL[0] + 1)
        return order(vs)
    monkeypatch.setattr(value_merge, "_order", placing)
    _, manifests = await _run(f"{memory_store_url}/planned", cold=False)
    compacting = [k for k, m in enumerate(manifests) if m.compaction]
    assert len(compacting) >= 3, compacting
    assert compacting[0] in placed, placed  # the recorder works: the first compaction merges from scratch
    assert not [k for k in placed if k in compacting[1:]], (placed, compacting)


def test_the_next_call_is_guessed_as_one_of_the_last_steps_again():
    """The work ahead plans the next compaction with the turns the next call will most likely add: after a
    tool exchange the loop's next one, after a user message a chat's model answer and next user message
    (both, or the cut moves less than the real one), placed after the newest turn; the newest step first,
    then the steps before it (their sizes move the cut elsewhere)."""
    from aether_context.content import FunctionCall, FunctionResponse, Message, TextPart
    from aether_context.pipeline.collect import group_turns
    from aether_context.pipeline.values_ahead import _next_turns

    def said(role: str, text: str) -> Message:
        return Message(role, (TextPart(text),))

    call = Message("model", (FunctionCall("look", {"q": 1}),))
    result = Message("user", (FunctionResponse("look", {"hits": 3}),))
    chat = tuple(group_turns([said("user", "hi"), said("model", "hello"), said("user", "book a flight")]))
    guessed = _next_turns(chat)
    assert [[t.messages for t in g] for g in guessed] == [[chat[1].messages, chat[2].messages], [chat[0].messages]]
    assert [[t.start for t in g] for g in guessed] == [[3, 4], [3]]
    loop = tuple(group_turns([said("user", "fix it"), call, result, Message("model", (FunctionCall("look", {"q": 2}),)),
                              result]))
    assert [[(t.start, t.messages) for t in g] for g in _next_turns(loop)] == [
        [(5, loop[-1].messages)], [(5, loop[-2].messages)], [(5, loop[-3].messages)]]
    started = tuple(group_turns([said("user", "fix it"), call, result, said("model", "done"), said("user", "next"),
                                 call, result]))  # a loop's first exchange: the loop goes on
    assert [(t.start, t.messages) for t in _next_turns(started)[0]] == [(7, started[-1].messages)]
    alone = tuple(group_turns([said("user", "hi")]))
    assert [[(t.start, t.messages) for t in g] for g in _next_turns(alone)] == [[(1, alone[0].messages)]]


def test_a_carry_counted_by_one_counter_renders_nothing_for_another():
    """What a compaction carries for the next one's render (each source's ranked fields and the tokens of the lines
    tried) holds for the counter it was counted with: a compaction counted by another counter, with the same cache,
    renders the values that counter gives afresh."""
    from aether_context.content import Message, TextPart
    from aether_context.pipeline.collect import Turn
    from aether_context.pipeline.known_values import known_values
    from aether_context.tokens import TokenCounter

    class HalfCounter(TokenCounter):  # another count of the same encoding: a line costs about half as much
        def count_text(self, text: str) -> int:
            return (super().count_text(text) + 1) // 2

    turns = tuple(Turn(i, (Message("user", (TextPart(
        f"Booking BK{i:04d}X for user_{i % 7}_77 on 2024-05-{i % 28 + 1:02d}, flight HAT{100 + i}"),)),))
        for i in range(60))

    def values(counter: TokenCounter, cache: PackCache | None) -> tuple[str, int]:
        return known_values(turns, lambda ts: iter(reversed(ts)), lambda t: t, limit=60, cap=120,
                            counter=counter, cache=cache)

    cache, full, half = PackCache(), TokenCounter(), HalfCounter()
    assert values(full, cache) == values(full, None)
    assert values(half, cache) == values(half, None) != values(full, None)
    assert values(full, cache) == values(full, None)



def test_the_newest_step_is_a_tool_exchange_or_a_chats_answer_and_message():
    """What a compaction's KNOWN VALUES may repeat, and what the work ahead guesses comes next: the turns the
    conversation's last step added (a loop's exchange; after a message, the turns since the last one shaped
    like it)."""
    from aether_context.content import FunctionCall, FunctionResponse, Message, TextPart
    from aether_context.pipeline.collect import group_turns
    from aether_context.pipeline.conversation import newest_step

    def said(role: str, text: str) -> Message:
        return Message(role, (TextPart(text),))

    call = Message("model", (FunctionCall("look", {"q": 1}),))
    result = Message("user", (FunctionResponse("look", {"hits": 3}),))
    assert newest_step(tuple(group_turns([said("user", "hi"), said("model", "hello"), said("user", "book")]))) == 2
    assert newest_step(tuple(group_turns([said("user", "fix it"), call, result, call, result]))) == 1
    assert newest_step(tuple(group_turns([said("user", "a"), said("user", "b")]))) == 1
    assert newest_step(tuple(group_turns([said("user", "hi")]))) == 1
