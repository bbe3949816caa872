"""Memory's documents for a compaction are built and embedded ahead (real Runner): a compaction inside a chat's tool
loop pins the invocation's request among compacted turns; the next invocation's compaction folds it, and the
documents of its compacted neighbours then read it as context. The work ahead builds those too, so no compaction
after the first embeds a document on the request's path."""

from __future__ import annotations

import threading

from aether_context import ContextPackPlugin
from aether_context.adk.worker import wait_ahead
from aether_context.retrieval import HashingEmbedder
from aether_context.testing import call

from conftest import filler, fixed_clock, make_runner, run_turn, scripted_agent

TURN_PREFIXES = ("user: ", "model: ", "called ")  # a compacted turn's document (`select._turn_text`)


class PackThreadDocuments(HashingEmbedder):
    """The hashing embedder, noting each turn document it embeds on the pack thread (the request's path), by call."""

    def __init__(self) -> None:
        super().__init__()
        self.call = -1
        self.on_pack: list[tuple[int, str]] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        if threading.current_thread().name.startswith("aether-pack"):
            self.on_pack.extend((self.call + 1, t) for t in texts if t.startswith(TURN_PREFIXES))
        return super().embed(texts)


def lookup_booking(ref: str) -> dict:
    """Look up a booking by its reference."""
    n = int(ref[3:])
    return {"booking_id": f"BK{n:04d}X", "user_id": f"user_{n % 3}_77", "notes": filler(220, seed=n)}


# The folded-pinned scenario was tuned at a 5K window when ScriptedLlm reported chars / 4 of the request's JSON
# (calibration about 2.8); it now reports our own count (calibration 1.0), so that test runs `_chat` at 3K, where
# a compaction pins the request and a later one folds it.
PINNED_WINDOW = 3_000
LOOKUPS = 5  # per user turn: its tool loop alone outgrows the conversation's room, so a compaction pins its request


def _steps(embedder: PackThreadDocuments, turns: int) -> list:
    """Per user turn `LOOKUPS` lookups and an answer, each waiting for the work ahead first (a model's latency)."""
    def step(i: int, reply):  # type: ignore[no-untyped-def]
        def answer(req):  # type: ignore[no-untyped-def]
            wait_ahead()
            embedder.call = i
            return reply
        return answer
    replies = []
    for t in range(turns):
        replies += [call("lookup_booking", ref=f"ref{LOOKUPS * t + k}") for k in range(LOOKUPS)]
        replies.append(f"Booking ref{LOOKUPS * t} belongs to user_{t % 3}_77.")
    return [step(i, r) for i, r in enumerate(replies)]


async def _chat(store: str, monkeypatch, *, work_ahead: bool = True, notes: int = 0, plugins: "list | None" = None,
                window: int = 5_000) -> "tuple[PackThreadDocuments, list, list]":
    """Eight user turns of `LOOKUPS` lookups each at a `window` (5K) (with `notes` remembered facts in Memory's pool);
    the embedder, the compaction calls, and per call whether its zone keeps a request pinned among compacted turns
    (the plugin is appended to `plugins`, when given)."""
    from aether_context.pipeline import build

    pinned: list[bool] = []
    record = build.record

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = record(*args, **kwargs)
        pinned.append(bool(out.state.pinned))
        return out
    monkeypatch.setattr(build, "record", recording)
    fixed_clock()
    embedder = PackThreadDocuments()
    agent, _ = scripted_agent(_steps(embedder, 8), tools=[lookup_booking])
    plugin = ContextPackPlugin(store=store, window_tokens=window, embedder=embedder, work_ahead=work_ahead)
    if plugins is not None:
        plugins.append(plugin)
    runner = make_runner(agent, plugins=[plugin])
    facts = [{"text": f"note {i}: booking ref{i} moved to gate {i % 7}. " + filler(30, seed=i), "timestamp": 1.7e9 + i}
             for i in range(notes)]
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="chat",
                                                state={"aether:notes": facts} if facts else None)
    for t in range(8):
        await run_turn(runner, "chat", f"Who holds booking ref{LOOKUPS * t}? " + filler(60, seed=100 + t))
        wait_ahead()
    return embedder, [k for k, r in enumerate(plugin.packer.recent) if r.manifest.compaction], pinned


async def test_a_folded_pinned_request_leaves_no_document_to_embed_on_the_request_path(memory_store_url, monkeypatch):
    embedder, compacting, pinned = await _chat(f"{memory_store_url}/pinned", monkeypatch, window=PINNED_WINDOW)
    assert len(compacting) >= 3, compacting
    # the scenario: a compaction kept the invocation's request pinned among compacted turns, a later one folded it
    assert any(pinned[k - 1] and not pinned[k] for k in compacting), (pinned, compacting)
    assert not [(k, text[:80]) for k, text in embedder.on_pack if k in compacting[1:]]
    # the recorder works: without the work ahead, those compactions embed documents on the pack thread
    control, cold, _ = await _chat(f"{memory_store_url}/control", monkeypatch, work_ahead=False, window=PINNED_WINDOW)
    assert cold == compacting and {k for k, _ in control.on_pack} & set(compacting[1:])


async def test_a_compaction_compares_its_memory_pool_without_listing_its_documents(memory_store_url, monkeypatch):
    """A compaction gives the retriever a new Memory pool (the last one less its newest documents, plus the turns it
    folded): the retriever compares it with the last pool by identity in one pass, not by a list of every
    document's id() (0.4 ms a compaction at 5,000 documents)."""
    import builtins

    from aether_context.pipeline import retrieve

    ids, ranks, pooled = [0], [0], [0]

    def counting_id(obj):  # type: ignore[no-untyped-def]
        ids[0] += 1
        return builtins.id(obj)
    rank = retrieve.Retriever.rank

    def ranking(self, namespace, layer, query, documents, **kwargs):  # type: ignore[no-untyped-def]
        ranks[0] += 1
        pooled[0] += len(documents)
        return rank(self, namespace, layer, query, documents, **kwargs)
    monkeypatch.setattr(retrieve, "id", counting_id, raising=False)
    monkeypatch.setattr(retrieve.Retriever, "rank", ranking)
    _, compacting, _ = await _chat(f"{memory_store_url}/identity", monkeypatch)
    assert len(compacting) >= 3 and pooled[0] > 4 * ranks[0], (ranks, pooled)
    assert ids[0] <= 3 * ranks[0], (ids, ranks)  # the index's own, a few a call (a list of the pool's: 6 a call)


async def test_a_compaction_multiplies_only_the_vectors_embedded_since_its_question_was_last_scored(
        memory_store_url, monkeypatch):
    """A compaction's Memory search scores the question over every vector of the shared matrix (the fast scores that
    narrow the pool); the product of that question from its last search is kept (`QueryVectors.product`), so the
    compaction multiplies only the vectors embedded since: the turns it folds, embedded ahead."""
    import numpy as np

    from aether_context.retrieval import EmbeddingCache

    products: list[tuple[int, int, int]] = []  # per matrix-vector product on the pack thread: (call, rows, matrix)
    embedder_of: list[PackThreadDocuments] = []
    matrix = EmbeddingCache.matrix

    class Counted(np.ndarray):
        def __matmul__(self, other):  # type: ignore[no-untyped-def]
            if np.ndim(other) == 1 and threading.current_thread().name.startswith("aether-pack") and embedder_of:
                products.append((embedder_of[0].call + 1, self.shape[0], len(HELD[0])))
            return np.asarray(self) @ other
    HELD: list = [()]

    def counted(self):  # type: ignore[no-untyped-def]
        HELD[0] = matrix.fget(self)
        return HELD[0].view(Counted)
    monkeypatch.setattr(EmbeddingCache, "matrix", property(counted))
    init = PackThreadDocuments.__init__

    def noted(self):  # type: ignore[no-untyped-def]
        init(self)
        embedder_of.append(self)
    monkeypatch.setattr(PackThreadDocuments, "__init__", noted)
    _, compacting, _ = await _chat(f"{memory_store_url}/products", monkeypatch, notes=80)
    later = [(rows, size) for k, rows, size in products if k in compacting[1:]]
    # the compactions that hold the payload find their search ranked ahead (no product on the request's path at
    # all: `test_a_compaction_that_holds_the_payload_finds_its_memory_ranked_ahead`); the others multiply here
    assert len(later) >= 2, (compacting, products)
    assert all(2 * rows < size for rows, size in later), later  # the new vectors, not the matrix


async def test_a_compaction_that_holds_the_payload_finds_its_memory_ranked_ahead(memory_store_url, monkeypatch):
    """A compaction inside a tool loop keeps the payload as sent and ranks Memory once, at the payload's clock, over
    the turns it compacts: the work ahead plans its cut and ranks that pool while the model answers, so such a
    compaction runs no Memory search on the request's path (without the work ahead, each does), and sends what
    a packer without the work ahead sends."""
    from aether_context.pipeline import retrieve
    from aether_context.retrieval import HybridIndex

    searched: list[int] = []  # per Memory search on the pack thread: the call
    layer, embedders, plugins = [""], [], []
    rank, search, init = retrieve.Retriever.rank, HybridIndex.search, PackThreadDocuments.__init__

    def ranking(self, namespace, kind, *args, **kwargs):  # type: ignore[no-untyped-def]
        layer[0] = kind
        return rank(self, namespace, kind, *args, **kwargs)

    def searching(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if layer[0] == "memory" and threading.current_thread().name.startswith("aether-pack"):
            searched.append(embedders[-1].call + 1)
        return search(self, *args, **kwargs)

    def noted(self):  # type: ignore[no-untyped-def]
        init(self)
        embedders.append(self)
    monkeypatch.setattr(retrieve.Retriever, "rank", ranking)
    monkeypatch.setattr(HybridIndex, "search", searching)
    monkeypatch.setattr(PackThreadDocuments, "__init__", noted)
    sent, holding = {}, {}
    for ahead in (True, False):
        searched.clear()
        _, compacting, _ = await _chat(f"{memory_store_url}/ranked-{ahead}", monkeypatch, work_ahead=ahead,
                                       plugins=plugins)
        recent = plugins[-1].packer.recent
        sent[ahead] = [r.manifest.checksum for r in recent]
        holding[ahead] = [k for k in compacting if recent[k].manifest.reused_payload]
        assert len(holding[ahead]) >= 3, compacting
        # after the first (its pool was never planned ahead), none searches; without the work ahead, each does
        assert [k for k in holding[ahead][1:] if k in searched] == ([] if ahead else holding[ahead][1:]), searched
    assert sent[True] == sent[False]


async def _pruning_chat(store: str, monkeypatch, *, work_ahead: bool) -> "tuple[PackThreadDocuments, list[int]]":
    """`_chat`'s eight user turns with a pruning that clears outputs past the newest 1,500 tokens of them, once 600
    are reclaimed: the embedder, and the calls whose pruning cleared turns already compacted (Memory documents)
    without compacting too (one that also folds the last invocation's tool loop still embeds a few: the work
    ahead predicts the prune from that loop's turns as they stood, long report item 42)."""
    from aether_context import load_profile
    from aether_context.pipeline import build

    through: list[int] = []
    record = build.record

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = record(*args, **kwargs)
        through.append(out.state.compacted_through)
        return out
    monkeypatch.setattr(build, "record", recording)
    fixed_clock()
    profile = load_profile("default").override(pruning={"protect_tokens": 1_500, "minimum_tokens": 600})
    embedder = PackThreadDocuments()
    agent, _ = scripted_agent(_steps(embedder, 8), tools=[lookup_booking])
    plugin = ContextPackPlugin(store=store, profile=profile, window_tokens=5_000, embedder=embedder,
                               work_ahead=work_ahead)
    runner = make_runner(agent, plugins=[plugin])
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="chat")
    for t in range(8):
        await run_turn(runner, "chat", f"Who holds booking ref{LOOKUPS * t}? " + filler(60, seed=100 + t))
        wait_ahead()
    pruning = []
    for k, r in enumerate(plugin.packer.recent):
        cleared = {int(t.split("-")[1].split(":")[0]) for e in r.manifest.truncation_events
                   if "pruning" in e["reason"] for t in e["ids"]}
        if cleared and min(cleared) < through[k] and not r.manifest.compaction:
            pruning.append(k)
    return embedder, pruning


async def test_a_prune_of_compacted_turns_leaves_no_document_to_embed_on_the_request_path(memory_store_url,
                                                                                          monkeypatch):
    """A new invocation's pruning clears the outputs of turns that are already Memory documents: the work ahead
    built and embedded their documents as that call rebuilds them, so it embeds none on the pack thread."""
    embedder, pruning = await _pruning_chat(f"{memory_store_url}/pruning", monkeypatch, work_ahead=True)
    assert pruning  # the scenario: a new invocation's pruning clears outputs of turns that are Memory documents
    assert not [(k, text[:80]) for k, text in embedder.on_pack if k in pruning]
    # the recorder works: without the work ahead, those calls embed the cleared turns' documents on the pack thread
    control, cold = await _pruning_chat(f"{memory_store_url}/pruning-control", monkeypatch, work_ahead=False)
    assert cold == pruning and {k for k, _ in control.on_pack} & set(pruning)
