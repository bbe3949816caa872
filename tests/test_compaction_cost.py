"""A compaction costs what its new turns add, and what the packer's cache keeps changes no request."""

from __future__ import annotations

from aether_context import ContextPackPlugin
from aether_context.adk import request_from_llm
from aether_context.pipeline.cache import PackCache
from aether_context.retrieval import HashingEmbedder
from aether_context.testing import call

from conftest import filler, make_runner, run_turn, scripted_agent

# ScriptedLlm reports our own count (calibration 1.0): at this window the loops compact as often as they need.
WINDOW = 3_000


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


async def _run(store: str, *, cold: bool, cache: PackCache | None = None) -> tuple[list, list]:
    """A tool loop long enough to compact several times; with `cold` the packer's cache is emptied before
    every call (each compaction then reads and merges every value afresh)."""
    holder = {}

    def step(i: int):
        def answer(req):
            if cold:
                holder["plugin"].packer.cache.clear()
            return call("lookup_booking", ref=f"ref{i}")
        return answer

    agent, llm = scripted_agent([step(i) for i in range(16)] + ["done"], tools=[lookup_booking])
    p = holder["plugin"] = ContextPackPlugin(store=store, window_tokens=WINDOW, embedder=HashingEmbedder(),
                                             cache=cache)
    runner = make_runner(agent, plugins=[p])
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="fixed")
    await run_turn(runner, "fixed", "Check every booking from ref0 on and list their user ids.")
    return [request_from_llm(r).to_json() for r in llm.requests], [r.manifest for r in p.packer.recent]


async def test_a_warm_cache_sends_what_a_cold_cache_sends(memory_store_url):
    """What the packer's cache keeps between calls (value sets, fold lines, documents) changes no request:
    the requests are byte for byte those of a packer whose cache is emptied before every call."""
    warm, manifests = await _run(f"{memory_store_url}/warm", cold=False)
    cold, _ = await _run(f"{memory_store_url}/cold", cold=True)
    assert sum(1 for m in manifests if m.compaction) >= 3, "too few compactions: make the loop longer"
    assert any("KNOWN VALUES" in str(r) for r in warm)
    assert warm == cold


async def test_the_pinned_opening_request_is_cut_once_per_cap(memory_store_url, monkeypatch):
    """Every compaction of a session pins the same opening request, cut middle-out to the block's share
    (a binary search of its prefix and suffix, each counted): the cut is kept (the packer's cache), so a
    later compaction with the same cap does not cut it again."""
    from aether_context.pipeline.compaction import policy as conversation

    cuts: list[tuple[str, int]] = []
    cut = conversation.middle_out

    def cutting(text, max_tokens, counter, *args, **kwargs):  # type: ignore[no-untyped-def]
        cuts.append((text, max_tokens))
        return cut(text, max_tokens, counter, *args, **kwargs)
    monkeypatch.setattr(conversation, "middle_out", cutting)
    pinned: list[str] = []  # per opening request a compaction pinned
    opening = conversation._opening

    def pinning(*args, **kwargs) -> str:  # type: ignore[no-untyped-def]
        text = opening(*args, **kwargs)
        if text:
            pinned.append(text)
        return text
    monkeypatch.setattr(conversation, "_opening", pinning)
    p, runner = _booking_chat(f"{memory_store_url}/opening", stride=2)
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="chat")
    await run_turn(runner, "chat", "Audit these bookings one by one: " + filler(900, seed=5))
    for t in range(1, 8):
        await run_turn(runner, "chat", f"Who holds booking ref{2 * t}?")
    assert sum(1 for r in p.packer.recent if r.manifest.compaction) >= 3
    assert len(cuts) >= 2 and any(cut(text, cap, p.packer.counter) != text for text, cap in cuts), cuts
    assert len(cuts) == len(set(cuts)), [(len(text), cap) for text, cap in cuts]
    assert len(pinned) > len(cuts), (len(pinned), len(cuts))  # a later compaction found its cut kept
