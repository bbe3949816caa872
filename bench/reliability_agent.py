"""The small agent the reliability scenarios run: a scripted model that saves notes, fetches a page
(a big result, offloaded), then answers; every text carries its user's marker (`MARK`), so a
marker of another user in a stored request is a leak. Shared by `reliability_load.py` (users, kill)
and `reliability_stall.py` (stall).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MARK", "WORDS", "_text", "_agent", "_runner", "_turn"]

MARK = re.compile(r"MARK-u(\d+)-")
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu revenue churn latency cache budget").split()


def _text(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3 + i // 5) % len(WORDS)] for i in range(n))


# --------------------------------------------------------------------------- a small agent with tools
def _agent(name: str = "agent"):
    """An LlmAgent whose scripted model saves notes, fetches a page, then answers (decided per request)."""
    from google.adk.agents import LlmAgent
    from google.genai import types

    from aether_context.testing import ScriptedLlm, call

    async def save_notes(marker: str, tool_context) -> dict:
        """Save the user's notes as notes.txt."""
        await tool_context.save_artifact("notes.txt", types.Part(text=f"notes of {marker}: {_text(60, len(marker))}"))
        return {"saved": "notes.txt", "marker": marker}

    def fetch(url: str) -> dict:
        """Fetch a page."""
        marker = url.rsplit("/", 1)[-1]
        return {"url": url, "body": f"{marker} " + _text(1500, len(url))}

    def decide(request) -> Any:
        last = request.contents[-1] if request.contents else None
        responses = [p.function_response.name for c in request.contents for p in c.parts or () if p.function_response]
        texts = [p.text for c in request.contents if c.role == "user" for p in c.parts or () if p.text and "MARK-" in p.text]
        marker = MARK.search(texts[-1]).group(0) + "x" if texts else "MARK-u0-x"
        if last is not None and any(p.function_response for p in last.parts or ()):
            name = [p.function_response.name for p in last.parts if p.function_response][-1]
            return call("fetch", url=f"https://example.com/{marker}") if name == "save_notes" else "done"
        if "save_notes" not in responses:
            return call("save_notes", marker=marker)
        return "noted"

    llm = ScriptedLlm(turns=[decide])
    return LlmAgent(name=name, model=llm, instruction="You keep notes for the user.", tools=[save_notes, fetch]), llm


def _runner(agent, plugins, store_url: str | None = None):
    from google.adk.apps.app import App
    from google.adk.artifacts import InMemoryArtifactService
    from google.adk.memory import InMemoryMemoryService
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService

    return Runner(app=App(name="reliability", root_agent=agent, plugins=plugins),
                  session_service=InMemorySessionService(), artifact_service=InMemoryArtifactService(),
                  memory_service=InMemoryMemoryService())


async def _turn(runner, user: str, session: str, text: str) -> None:
    from google.genai import types

    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=user, session_id=session, new_message=message):
        pass
