"""In-loop notes through a real ADK Runner: what the pack adds inside a tool loop rides at the end
of the request and stays as it was sent (append-only), while the payload stays frozen.

A failure repeated three times within one invocation is warned at the next call; the goal is
recited again late in a long loop; each request extends the one before, notes and all.
"""

from __future__ import annotations

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_context import ContextPackPlugin, set_task
from aether_context.adk import request_from_llm
from aether_context.content import TextPart
from aether_context.testing import ScriptedLlm, call

GOAL = "Fix the failing date parser test in utils/dates.py"


def run_tests(path: str) -> dict:
    """Run the tests of a file."""
    return {"returncode": 1, "output": "FAILED tests/test_dates.py::test_parse - ValueError: bad month 13"}


def read_file(path: str) -> dict:
    """Read a file."""
    return {"content": f"# {path}\ndef parse(text):\n    return text\n"}


async def _run(turns, tools, *, goal: bool = True):
    llm = ScriptedLlm(turns=turns)
    agent = LlmAgent(name="fixer", model=llm, instruction="Fix bugs.", tools=tools)
    plugin = ContextPackPlugin(store="memory://loop-notes", window_tokens=64_000, profile="default")
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    state: dict = {}
    if goal:
        set_task(state, goal=GOAL, plan=[("Reproduce the failure", True), ("Fix the parser", False)])
    session = await runner.session_service.create_session(app_name="app", user_id="u", state=state)
    async for _ in runner.run_async(user_id="u", session_id=session.id,
                                    new_message=types.Content(role="user", parts=[types.Part(text="start")])):
        pass
    return plugin, [request_from_llm(r) for r in llm.requests]


def _notes(message) -> list[str]:
    return [p.text for p in message.parts[1:] if isinstance(p, TextPart)] if message.responses else []


def _extends(sent) -> None:
    for before, after in zip(sent, sent[1:]):
        assert after.messages[:len(before.messages)] == before.messages


async def test_a_failure_repeated_three_times_in_one_invocation_is_warned_at_the_next_call():
    turns = [call("run_tests", path="tests/test_dates.py")] * 4 + ["giving up"]
    plugin, sent = await _run(turns, [run_tests], goal=False)
    assert len(sent) == 5
    records = list(plugin.packer.recent)
    assert all(r.manifest.reused_payload for r in records[1:]) and not any(r.manifest.compaction for r in records)
    assert "FAILURES SO FAR" not in sent[0].messages[-1].text  # the frozen payload predates every failure
    for i in (1, 2):
        assert not _notes(sent[i].messages[-1])  # a single failure is in ADK's own response: nothing to add
    third, fourth = _notes(sent[3].messages[-1]), _notes(sent[4].messages[-1])
    assert len(third) == 1 and "run_tests failed 3x with the same arguments" in third[0]
    assert "do not retry it unchanged" in third[0] and "ValueError: bad month 13" in third[0]
    assert len(fourth) == 1 and "run_tests failed 4x" in fourth[0]
    assert _notes(sent[4].messages[-3]) == third  # the earlier note is re-sent as it was sent
    _extends(sent)
    assert all(r.manifest.cache_break is None for r in records[1:])


async def test_the_goal_is_recited_at_the_end_late_in_a_long_loop():
    on_track = types.Part(text="Reading utils/dates.py to fix the failing date parser test.")
    turns = [[on_track, call("read_file", path="utils/dates.py")]] * 14 + ["fixed"]
    plugin, sent = await _run(turns, [read_file])
    records = list(plugin.packer.recent)
    late = [i for i, r in enumerate(records) if r.manifest.recited and i >= 10]
    assert late, [r.manifest.recited for r in records]
    for i in late:
        last = sent[i].messages[-1]
        assert last.responses and last.parts[-1].text.startswith("STATUS — goal: " + GOAL)
        assert "next: Fix the parser" in last.parts[-1].text
    assert all(r.manifest.reused_payload for r in records[1:])
    _extends(sent)
    assert all(r.manifest.cache_break is None for r in records[1:])
