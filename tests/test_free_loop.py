"""The event loop stays free: packing runs on the packer's worker thread, the first packs rank
lexically while the embedding model loads, and a hanging LLM summarizer does not hang the turn.

No timing assertions: a probe task on the loop must make progress *while* the pack is building
(the build waits for it), which it cannot if the build holds the loop.
"""

from __future__ import annotations

import asyncio
import threading

from aether_context import ContextPackPlugin
from aether_context.tokens import TokenCounter

from conftest import make_runner, new_session, run_turn, scripted_agent
from test_retrieval_behaviour import SlowModel


class GatedCounter(TokenCounter):
    """A counter whose first count, once armed, waits until the loop probe has ticked a few times.

    Run on the event loop's thread, the wait cannot end (the probe never runs): `blocked` is set
    after `patience` seconds and the pack goes on, so a regression fails instead of hanging."""

    def __init__(self, patience: float = 20.0):
        super().__init__()
        self.armed = False
        self.ticks = 0
        self.moved = threading.Event()
        self.blocked = False
        self.patience = patience
        self.waited_on: list[str] = []

    def count_text(self, text: str) -> int:
        if self.armed:
            self.armed = False
            start = self.ticks
            self.waited_on.append(threading.current_thread().name)
            self.moved.clear()
            while self.ticks < start + 3:
                if not self.moved.wait(self.patience):
                    self.blocked = True
                    break
                self.moved.clear()
        return super().count_text(text)


async def _probe(counter: GatedCounter, stop: asyncio.Event) -> None:
    """A loop-lag probe: ticks as often as the loop lets it."""
    while not stop.is_set():
        counter.ticks += 1
        counter.moved.set()
        await asyncio.sleep(0.001)


async def test_the_loop_runs_while_the_first_pack_builds_and_the_model_loads(memory_store_url):
    model = SlowModel()  # its warm-up blocks until released: the model is "loading" for the whole first pack
    counter = GatedCounter()
    agent, llm = scripted_agent(["noted", "noted"], tools=())
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=16_000, counter=counter, embedder=model)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    stop = asyncio.Event()
    probe = asyncio.create_task(_probe(counter, stop))
    counter.armed = True
    try:
        await asyncio.wait_for(run_turn(runner, sid, "remember that the deploy script lives in ops/deploy.sh"), 60)
    finally:
        stop.set()
        await probe
    assert counter.waited_on and not counter.blocked, counter.waited_on  # the probe ran during the build
    assert counter.waited_on[0].startswith("aether-pack")
    first = plugin.packer.recent[-1].manifest
    assert first.error is None and not model.loaded.is_set()
    assert any(f.startswith("dense_ranking_off") for f in first.flags)  # lexical while the model loads
    model.release.set()
    assert plugin.packer.retriever.wait_ready(timeout=30)
    await run_turn(runner, sid, "where does the deploy script live?")
    assert not any(f.startswith("dense_ranking_off") for f in plugin.packer.recent[-1].manifest.flags)


async def test_concurrent_sessions_pack_in_order_on_one_worker(memory_store_url):
    agent, llm = scripted_agent(["ok"] * 40, tools=())
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=16_000)
    runner = make_runner(agent, plugins=[plugin])

    async def user(i: int) -> None:
        sid = await new_session(runner, user_id=f"user-{i}")
        for turn in range(2):
            await run_turn(runner, sid, f"message {turn} of user-{i}", user_id=f"user-{i}")

    await asyncio.gather(*(user(i) for i in range(8)))
    manifests = [r.manifest for r in plugin.packer.recent]
    assert len(manifests) == 16 and all(m.error is None for m in manifests)
    by_user = {}
    for m in manifests:
        by_user.setdefault(m.user_id, []).append(m)
    for ms in by_user.values():  # each user's second pack names the user's own first one as previous
        assert ms[1].previous_pack_id == ms[0].pack_id


class HangingSummarizer:
    """An async summarizer that never answers, and a sync one that blocks (both must be left behind)."""

    def __init__(self):
        self.calls = 0
        self.release = threading.Event()

    async def summarize(self, previous_summary, new_items, *, goal, max_tokens):
        self.calls += 1
        await asyncio.Event().wait()


def _blocking_summarizer(release: threading.Event):
    def summarize(previous_summary, new_items, *, goal, max_tokens):
        release.wait(30)
        return "late"
    return summarize


async def _compacting_run(memory_store_url, summarizer):
    from aether_context.profile import load_profile

    profile = load_profile("default").override(name="llm-summary", decay={"summarizer": "llm",
                                                                          "summary_timeout_seconds": 0.2})
    agent, llm = scripted_agent(["ok"] * 40, tools=())
    # 1,500: twelve 300-token turns compact (ScriptedLlm reports our own count, so the calibration stays 1.0)
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=1_500, profile=profile, summarizer=summarizer)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    for i in range(12):
        await asyncio.wait_for(run_turn(runner, sid, f"turn {i}: " + "the quarterly figures and the churn " * 40), 30)
    return plugin


async def test_a_hanging_llm_summarizer_does_not_hang_the_turn(memory_store_url):
    hanging = HangingSummarizer()
    plugin = await _compacting_run(memory_store_url, hanging)
    flags = [f for r in plugin.packer.recent for f in r.manifest.flags]
    assert hanging.calls >= 1
    assert any(f.startswith("summary_timeout: no answer within 0.2s") for f in flags)
    assert all(r.manifest.error is None for r in plugin.packer.recent)


async def test_a_blocking_sync_summarizer_does_not_hang_the_turn(memory_store_url):
    release = threading.Event()
    try:
        plugin = await _compacting_run(memory_store_url, _blocking_summarizer(release))
    finally:
        release.set()
    flags = [f for r in plugin.packer.recent for f in r.manifest.flags]
    assert any(f.startswith("summary_timeout") for f in flags)


async def test_a_store_slower_than_the_calls_holds_the_calls_not_the_loop(memory_store_url):
    """A full write queue (a slow bucket) makes the saving call wait, while the loop serves everyone else:
    the writer is held until the loop probe has ticked 20 times while a save waits for room, which it could
    not do if the save waited on the loop's thread (as it did: up to `put_timeout`, then the write on the loop)."""
    from aether_context.store import PackStore

    async def held_and_full(store: PackStore, gate: threading.Event) -> None:
        store._writer.submit("held", lambda: gate.wait(60))  # the writer is busy until the gate opens
        while store._writer.pending() and store._writer._queue.qsize():  # the writer has taken it
            await asyncio.sleep(0.001)
        store._writer.submit("queued", lambda: None)  # and the queue (size 1) is full

    gate, waiting, ticks = threading.Event(), [], []
    store = PackStore(memory_store_url, max_queue=1, put_timeout=30)
    await held_and_full(store, gate)
    room = store._writer.room

    async def watched_room() -> None:
        waiting.append(store._writer.full())
        await room()

    store._writer.room = watched_room
    plugin = ContextPackPlugin(store=store, window_tokens=16_000)
    runner = make_runner(scripted_agent(["noted"] * 4, tools=())[0], plugins=[plugin])
    sid = await new_session(runner)

    async def probe() -> None:
        while not gate.is_set():
            if waiting and waiting[0]:
                ticks.append(1)
                if len(ticks) >= 20:
                    gate.set()
            await asyncio.sleep(0.001)

    ticking = asyncio.create_task(probe())
    try:
        await asyncio.wait_for(run_turn(runner, sid, "remember that the deploy script lives in ops/deploy.sh"), 20)
    finally:
        gate.set()
        await ticking
    assert waiting[0] and len(ticks) >= 20 and store.flush(timeout=10)
    assert not store.stats().get("inline") and not store.stats().get("failed")
    assert [r.manifest.error for r in plugin.packer.recent] == [None]

    # Past `put_timeout` the oldest queued write runs on a worker thread, so the call goes on; the loop never waits.
    slow, held = PackStore(memory_store_url + "-slow", max_queue=1, put_timeout=0.05), threading.Event()
    await held_and_full(slow, held)
    plugin = ContextPackPlugin(store=slow, window_tokens=16_000)
    runner = make_runner(scripted_agent(["noted"] * 4, tools=())[0], plugins=[plugin])
    try:
        await asyncio.wait_for(run_turn(runner, await new_session(runner), "and the runbook is in ops/RUNBOOK.md"), 20)
        assert slow.stats()["inline"] >= 1 and [r.manifest.error for r in plugin.packer.recent] == [None]
    finally:
        held.set()
    assert slow.flush(timeout=10) and not slow.stats().get("failed")


class ResultGate(TokenCounter):
    """Counting the large result waits, on whatever thread works on it, until another session's turn is over
    (its pack needs the pack thread: had the result's work taken that thread, the wait would run out)."""

    def __init__(self, patience: float = 20.0):
        super().__init__()
        self.other_done = threading.Event()
        self.threads: list[str] = []
        self.blocked = False
        self.patience = patience

    def count_text(self, text: str) -> int:
        if "LARGE-RESULT" in text[:200] and not self.threads:
            self.threads.append(threading.current_thread().name)
            self.blocked = not self.other_done.wait(self.patience)
        return super().count_text(text)


def large_export() -> dict:
    """Export every row."""
    return {"log": "LARGE-RESULT " + "row ok status=200\n" * 2000}


async def test_a_large_tool_result_is_worked_on_beside_the_packs(memory_store_url):
    from aether_context.testing import call

    def decide(request):
        last = request.contents[-1]
        if any(p.function_response for p in last.parts or ()):
            return "exported"
        text = "".join(p.text or "" for p in last.parts or ())
        return call("large_export") if text.startswith("export") else "ok"

    counter = ResultGate()
    agent, llm = scripted_agent([decide] * 10, tools=[large_export])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=16_000, counter=counter)
    runner = make_runner(agent, plugins=[plugin])
    first, second = await new_session(runner, user_id="a"), await new_session(runner, user_id="b")

    async def other_session() -> None:
        while not counter.threads:  # the large result is being worked on
            await asyncio.sleep(0.001)
        await run_turn(runner, second, "hello", user_id="b")
        counter.other_done.set()

    await asyncio.wait_for(asyncio.gather(run_turn(runner, first, "export it", user_id="a"), other_session()), 60)
    assert counter.threads and not counter.threads[0].startswith("aether-pack"), counter.threads
    assert not counter.blocked
    assert all(r.manifest.error is None for r in plugin.packer.recent)
