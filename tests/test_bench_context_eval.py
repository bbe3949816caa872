"""The context benchmark's own pieces, on small synthetic sessions through a real ADK Runner (no datasets)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from google.adk.memory import InMemoryMemoryService  # noqa: E402

from aether_context import TokenCounter  # noqa: E402
from context_eval.capture import CallRecord, RunRecord  # noqa: E402
from context_eval.cost import cost_figures, determinism  # noqa: E402
from context_eval.failure_lines import failure_lines  # noqa: E402
from context_eval.identifiers import identifier_uses  # noqa: E402
from context_eval.locomo import Conversation, Question, Turn, evidence_share, normalize, question_trajectory  # noqa: E402
from context_eval.run import Job, Services, run_pass  # noqa: E402
from context_eval.systems import by_key  # noqa: E402
from context_eval.locomo import seed_memory_mode, seed_session_mode  # noqa: E402
from trajectories import Invocation, ModelTurn, ToolCall, ToolDecl, Trajectory  # noqa: E402

LOOKUP = ToolDecl("lookup", "Look up a record.", {"type": "object", "properties": {"id": {"type": "string"}}})


def _tool_run() -> Trajectory:
    turns = (ModelTurn("", (ToolCall("lookup", {"id": "user_1"}, {"result": "reservation ABC123 for user_1"}),)),
             ModelTurn("", (ToolCall("lookup", {"id": "ABC123"}, {"result": "Error: not cancellable"}),)),
             ModelTurn("done"))
    return Trajectory("t1", "test", "You are an agent.", (LOOKUP,), (Invocation("I am user_1, cancel my trip", turns),))


def _conversation(turns: int = 40) -> Conversation:
    chat = tuple(Turn(f"D1:{k + 1}", "Ann" if k % 2 == 0 else "Bob", f"turn {k} mentions topic{k} " + "filler " * 30)
                 for k in range(turns))
    qs = (Question("What was topic1?", "topic1", ("D1:2",), 4), Question("And topic39?", "topic39", ("D1:40",), 4))
    return Conversation("c1", "Ann", "Bob", ((1_680_000_000.0, chat),), qs)


def test_failure_lines_read_the_issue_kinds_and_skip_banners():
    """The benchmark's own reading of issue 10's failure lines (not the package's broader recognizer)."""
    text = ("RuntimeWarning: Expected 80 from C header, got 96\nTraceback (most recent call last):\n"
            '  File "a.py", line 1, in <module>\nValueError: bad\nE       AssertionError: assert 1 == 2\n'
            "E        +  where 1 = f()\nt.py:12: TypeError\nFAILED (errors=6, skipped=2)\nError: nope\n"
            "FAIL: printed by the agent's own script\n")
    assert failure_lines(text) == ["ValueError: bad", "AssertionError: assert 1 == 2", "t.py:12: TypeError",
                                   "FAILED (errors=6, skipped=2)", "Error: nope"]


def test_identifier_uses_come_from_user_and_tool_text():
    uses = identifier_uses(_tool_run())
    assert [(u.call, u.value, u.source) for u in uses] == [(0, "user_1", "user"), (1, "ABC123", "tool")]


def test_replays_are_deterministic_and_scored_per_call():
    counter = TokenCounter()
    job = Job(_tool_run(), want_text=lambda i: True)
    first = asyncio.run(run_pass(by_key("none"), "default", None, [job], counter))
    second = asyncio.run(run_pass(by_key("none"), "default", None, [job], counter))
    assert first[0].error is None and len(first[0].calls) == 3
    assert "ABC123" in first[0].texts[1]
    d = determinism(first, second)
    assert (d.runs, d.identical_runs, d.differing_calls) == (1, 1, 0)
    figures = cost_figures(first, None)
    assert figures.breaks_per_run == 0 and figures.prefix_median > 0.5


def test_sliding_window_keeps_the_newest_turns_within_budget():
    conv = _conversation()

    async def prepare() -> Services:
        service, session_id = await seed_session_mode(conv, app_name="bench", user_id="bench-user")
        return Services(service, session_id)

    job = Job(question_trajectory(conv, "session"), want_text=lambda i: True, prepare=prepare)
    counter = TokenCounter()
    none = asyncio.run(run_pass(by_key("none"), "default", None, [job], counter))[0]
    sliding = asyncio.run(run_pass(by_key("sliding"), "default", 1500, [job], counter))[0]
    assert none.error is None and sliding.error is None
    assert all(c.tokens <= 1500 * 0.88 for c in sliding.calls)
    hits = [evidence_share(conv, q, normalize(sliding.texts[i]))[0] for i, q in enumerate(conv.questions)]
    assert hits == [0, 1]  # the oldest turn fell out, the newest stayed
    assert all(evidence_share(conv, q, normalize(none.texts[i]))[0] == 1 for i, q in enumerate(conv.questions))


def test_cost_counts_breaks_and_larger_calls():
    def rec(i: int, tokens: int, shared: int, prev: int) -> CallRecord:
        return CallRecord(i, 0, tokens, str(i), shared, prev, 10 if i else 0, False)

    base = RunRecord("r", [rec(0, 100, 0, 0), rec(1, 150, 100, 100)])
    other = RunRecord("r", [rec(0, 120, 0, 0), rec(1, 130, 50, 120)])
    f = cost_figures([other], [base])
    assert f.larger_than_none == 0.5 and f.breaks_per_run == 1 and f.reprocessed_per_run == 120 + 80


def test_memory_mode_questions_reach_memory_through_preload():
    conv = _conversation(turns=20)
    sessions = (conv.sessions[0][0], conv.sessions[0][1][:10]), (conv.sessions[0][0] + 86_400, conv.sessions[0][1][10:])
    conv = Conversation("c2", "Ann", "Bob", sessions, (Question("What was topic1?", "topic1", ("D1:2",), 4),))

    async def prepare() -> Services:
        memory = InMemoryMemoryService()
        service = await seed_memory_mode(conv, memory, app_name="bench", user_id="bench-user")
        return Services(service, None, memory)

    job = Job(question_trajectory(conv, "memory"), want_text=lambda i: True, prepare=prepare)
    counter = TokenCounter()
    none = asyncio.run(run_pass(by_key("none"), "default", None, [job], counter))[0]
    preload = asyncio.run(run_pass(by_key("preload"), "default", None, [job], counter))[0]
    question = conv.questions[0]
    assert evidence_share(conv, question, normalize(none.texts[0])) == (0, 1)
    assert evidence_share(conv, question, normalize(preload.texts[0])) == (1, 1)
