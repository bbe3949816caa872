"""A new user turn's question is embedded ahead (real Runner): the plugin's `on_user_message_callback` guesses
the retrieval query of the turn's first model call and embeds it on the work-ahead thread while ADK appends the
message and builds the request; the call then finds its vector. A wrong guess changes no request."""

from __future__ import annotations

import threading
from typing import Any, Optional

import numpy as np
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from aether_context import ContextPackPlugin
from aether_context.adk import request_from_llm
from aether_context.adk.worker import wait_ahead
from aether_context.retrieval import HashingEmbedder

from conftest import fixed_clock, make_runner, scripted_agent

NOTES = [{"text": f"note {i}: the customer's booking {i} moved to gate {i} at terminal {i % 3}", "timestamp": 1.7e9 + i}
         for i in range(12)]


class CountingEmbedder(HashingEmbedder):
    """The test embedder, noting which thread embedded which texts."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append((threading.current_thread().name, tuple(texts)))
        return super().embed(texts)

    def threads_of(self, text: str) -> list[str]:
        return [thread for thread, texts in self.calls if text in texts]


class ModelLatency(BasePlugin):
    """After the packer's hook: the time ADK takes to append the message and build the request (270 ms of CPU at
    10,000 events), which lets the work ahead finish first (without it, the call would embed the question itself)."""

    def __init__(self) -> None:
        super().__init__("latency")

    async def on_user_message_callback(self, *, invocation_context: Any, user_message: types.Content
                                       ) -> Optional[types.Content]:
        wait_ahead()
        self.missed = _line_misses(invocation_context)  # the lines missing from the packer's cache so far
        return None


def _line_misses(invocation_context: Any) -> "int | None":
    packer = next((p.packer for p in invocation_context.plugin_manager.plugins if hasattr(p, "packer")), None)
    return None if packer is None else packer.cache.stats()["by_kind"].get("line", {}).get("misses", 0)


async def _run(texts: "list[tuple[str, dict | None]]", *, work_ahead: bool, store: str
               ) -> "tuple[CountingEmbedder, list[str]]":
    fixed_clock()  # the runs compared date their turns alike
    embedder = CountingEmbedder()
    agent, llm = scripted_agent([f"answer {i}" for i in range(len(texts))], tools=())
    plugin = ContextPackPlugin(store=store, window_tokens=8_000, embedder=embedder, work_ahead=work_ahead)
    runner = make_runner(agent, plugins=[plugin, ModelLatency()])
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="s",
                                                state={"aether:notes": NOTES})
    for text, delta in texts:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _ in runner.run_async(user_id="u", session_id="s", new_message=message, state_delta=delta):
            pass
    wait_ahead()
    plugin.packer.store.flush()
    return embedder, [request_from_llm(r).to_json() for r in llm.requests]


QUESTIONS = ["Which gate does booking 3 leave from?", "And booking 7, which terminal?",
             "Was booking 11 moved at all?"]


async def test_the_opening_call_finds_its_question_embedded(memory_store_url):
    """Each later user turn's question is embedded on the work-ahead thread, never on the pack thread; the
    requests are those of a packer that works nothing ahead."""
    embedder, sent = await _run([(q, None) for q in QUESTIONS], work_ahead=True, store=f"{memory_store_url}/a")
    # the first turn's session has no index yet, so no search to embed it for: the call embeds it
    assert embedder.threads_of(QUESTIONS[0]) == ["aether-pack_0"]
    for question in QUESTIONS[1:]:
        assert embedder.threads_of(question) == ["aether-ahead_0"], embedder.calls
    _, plain = await _run([(q, None) for q in QUESTIONS], work_ahead=False, store=f"{memory_store_url}/b")
    assert sent == plain


async def test_a_wrong_guess_changes_no_request(memory_store_url):
    """The turn's state delta sets a goal after the message was seen (ADK applies it as it appends the message):
    the guess lacks the goal, the call embeds its own query, and the request is the one sent without guessing."""
    goal = {"aether:goal": "Rebook the customer onto an earlier flight"}
    texts = [(QUESTIONS[0], None), (QUESTIONS[1], goal), (QUESTIONS[2], None)]
    embedder, sent = await _run(texts, work_ahead=True, store=f"{memory_store_url}/a")
    assert embedder.threads_of(QUESTIONS[1]) == ["aether-ahead_0"]  # the guess, without the goal
    assert embedder.threads_of(QUESTIONS[1] + "\n" + goal["aether:goal"]) == ["aether-pack_0"]
    # the next turn reads the goal from state: guessed right
    assert embedder.threads_of(QUESTIONS[2] + "\n" + goal["aether:goal"]) == ["aether-ahead_0"]
    _, plain = await _run(texts, work_ahead=False, store=f"{memory_store_url}/b")
    assert sent == plain


def test_a_question_queued_behind_the_work_ahead_runs_after_it():
    """The work ahead drops a job while one runs; a queued question waits for it instead, and `wait_ahead` waits
    for both (the benchmark reads the thread's CPU after it)."""
    from aether_context.adk.worker import queue_ahead, start_ahead

    wait_ahead()
    release, ran = threading.Event(), []
    assert start_ahead(lambda: (release.wait(10), ran.append("work ahead")))
    queue_ahead(ran.append, "question")
    assert not start_ahead(ran.append, "dropped")
    release.set()
    assert wait_ahead(timeout=10)
    assert ran == ["work ahead", "question"]


def test_only_the_newest_queued_questions_wait_behind_a_long_job():
    """Many sessions' messages behind one long job: the oldest waiting questions are cancelled (their calls
    have run, embedding their own), so the queue stays bounded, and `wait_ahead` waits for the rest."""
    from aether_context.adk.worker import QUEUED_MAX, queue_ahead, start_ahead

    wait_ahead()
    release, ran = threading.Event(), []
    assert start_ahead(lambda: release.wait(10))
    for i in range(QUEUED_MAX + 5):
        queue_ahead(ran.append, i)
    release.set()
    assert wait_ahead(timeout=10)
    assert ran == list(range(5, QUEUED_MAX + 5))


# more notes than one search pools (`candidate_pool`), each long enough to be shortened when Memory is over budget
LONG_NOTES = [{"text": f"note {i}: booking {i} gate {i % 7} terminal {i % 3} " + " ".join(f"n{i}w{j}" for j in range(90)),
               "timestamp": 1.7e9 + i} for i in range(300)]


async def test_the_opening_call_finds_its_pool_and_lines_ahead(memory_store_url, monkeypatch):
    """The work ahead also pools the guessed question in Memory's index (BM25 over every row, the cosines, the
    cuts) and renders, counts, shortens and masks the pool's lines: each later turn's call then only ranks, and
    renders, shortens and masks no line itself (lines missing from the cache: none). Requests are unchanged."""
    from aether_context.pipeline import render
    from aether_context.retrieval.index import HybridIndex
    from aether_context.tokens import TokenCounter

    fixed_clock()  # compared with a run without the work ahead, dated alike
    seen: list[tuple[str, str]] = []  # (what, thread)
    pool, truncate = HybridIndex._pool, TokenCounter._truncate
    monkeypatch.setattr(HybridIndex, "_pool", lambda self, *a: seen.append(("pool", _thread())) or pool(self, *a))
    monkeypatch.setattr(TokenCounter, "_truncate",
                        lambda self, *a: seen.append(("shorten", _thread())) or truncate(self, *a))
    redact = render.redact
    monkeypatch.setattr(render, "redact", lambda text, *a: seen.append(("mask", _thread())) or redact(text, *a))
    render._masked.cache_clear()
    agent, llm = scripted_agent([f"answer {i}" for i in range(len(QUESTIONS))], tools=())
    plugin = ContextPackPlugin(store=f"{memory_store_url}/a", window_tokens=8_000, embedder=CountingEmbedder())
    latency = ModelLatency()
    runner = make_runner(agent, plugins=[plugin, latency])
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="s",
                                                state={"aether:notes": LONG_NOTES})
    missed = lambda: plugin.packer.cache.stats()["by_kind"].get("line", {}).get("misses", 0)  # noqa: E731
    for turn, question in enumerate(QUESTIONS):
        message = types.Content(role="user", parts=[types.Part(text=question)])
        async for _ in runner.run_async(user_id="u", session_id="s", new_message=message):
            pass
        if turn:  # what the call itself did, after the work ahead its message queued
            assert missed() == latency.missed, turn
            assert [what for what, thread in seen if thread != "aether-ahead_0"] == [], turn
        assert {what for what, _ in seen} == {"pool", "shorten", "mask"}, turn  # pooled, shortened, masked
        seen.clear()
        latency.missed = None
    wait_ahead()
    plugin.packer.store.flush()
    assert all(any(e["layer"] == "memory" and e["action"] == "compress" for e in record.manifest.truncation_events)
               for record in plugin.packer.recent)  # every call shortened Memory's lines
    sent = [request_from_llm(r).to_json() for r in llm.requests]
    assert sent == await _run_with_state({"aether:notes": LONG_NOTES}, work_ahead=False,
                                         store=f"{memory_store_url}/b")


def _thread() -> str:
    return threading.current_thread().name


async def _run_with_state(state: dict, *, work_ahead: bool, store: str) -> "list[dict]":
    fixed_clock()  # the runs compared date their turns alike
    agent, llm = scripted_agent([f"answer {i}" for i in range(len(QUESTIONS))], tools=())
    plugin = ContextPackPlugin(store=store, window_tokens=8_000, embedder=CountingEmbedder(), work_ahead=work_ahead)
    runner = make_runner(agent, plugins=[plugin, ModelLatency()])
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="s", state=state)
    for question in QUESTIONS:
        message = types.Content(role="user", parts=[types.Part(text=question)])
        async for _ in runner.run_async(user_id="u", session_id="s", new_message=message):
            pass
    wait_ahead()
    plugin.packer.store.flush()
    return [request_from_llm(r).to_json() for r in llm.requests]
