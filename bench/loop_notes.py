"""Cache cost of in-loop notes: one invocation's tool loop through a real Runner (ScriptedLlm).

Per call: the request's tokens, the tokens of the longest message prefix it shares with the call
before (what a prompt cache can reuse), re-processed tokens (the rest) and cache breaks (the
previous request is not a prefix of this one). Run from a checkout: `python bench/loop_notes.py`
(PYTHONPATH picks the code under test). Offline, deterministic, a few seconds.
"""

from __future__ import annotations

import asyncio
import json

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_context import ContextPackPlugin, TokenCounter, set_task
from aether_context.adk import request_from_llm
from aether_context.testing import ScriptedLlm, call

COUNTER = TokenCounter()


def run_tests(path: str) -> dict:
    """Run the tests of a file."""
    if "dates" in path:
        return {"returncode": 1, "output": "FAILED tests/test_dates.py::test_parse - ValueError: bad month 13"}
    return {"returncode": 0, "output": f"ran {path}: 5 passed"}


def read_file(path: str) -> dict:
    """Read a file."""
    return {"content": f"# {path}\n" + "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(40))}


def _turns(n: int) -> list:
    text = types.Part(text="Working on the failing date parser test in utils/dates.py.")
    out = []
    for i in range(n):
        tool = call("run_tests", path="tests/test_dates.py") if i % 3 == 2 else call("read_file", path=f"utils/m{i}.py")
        out.append([text, tool])
    return out + ["done"]


async def one(n: int) -> dict:
    llm = ScriptedLlm(turns=_turns(n))
    agent = LlmAgent(name="fixer", model=llm, instruction="Fix bugs.", tools=[run_tests, read_file])
    plugin = ContextPackPlugin(store="memory://loop-bench", window_tokens=64_000, profile="default")
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    state: dict = {}
    set_task(state, goal="Fix the failing date parser test in utils/dates.py",
             plan=[("Reproduce the failure", True), ("Fix the parser", False)])
    session = await runner.session_service.create_session(app_name="app", user_id="u", state=state)
    async for _ in runner.run_async(user_id="u", session_id=session.id,
                                    new_message=types.Content(role="user", parts=[types.Part(text="start")])):
        pass
    sent = [request_from_llm(r) for r in llm.requests]
    total = reprocessed = breaks = 0
    for k, req in enumerate(sent):
        tokens = sum(COUNTER.count_message(m) for m in req.messages)
        total += tokens
        if k == 0:
            reprocessed += tokens
            continue
        prev = sent[k - 1].messages
        shared = 0
        while shared < min(len(prev), len(req.messages)) and prev[shared] == req.messages[shared]:
            shared += 1
        breaks += shared < len(prev)
        reprocessed += tokens - sum(COUNTER.count_message(m) for m in req.messages[:shared])
    warned = sum("do not retry it unchanged" in p.text for p in sent[-1].messages[-1].parts if hasattr(p, "text")
                 ) + sum("do not retry it unchanged" in m.text for m in sent[-1].messages)
    statuses = sum(m.text.count("STATUS") for m in sent[-1].messages)
    return {"calls": len(sent), "input_tokens": total, "reprocessed_tokens": reprocessed, "cache_breaks": breaks,
            "statuses_in_last_request": statuses, "repeat_warnings_in_last_request": warned}


if __name__ == "__main__":
    print(json.dumps({n: asyncio.run(one(n)) for n in (12, 30)}))
