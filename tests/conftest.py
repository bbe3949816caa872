"""Shared fixtures: real ADK runners over a scripted model, big-output tools, unique stores.

Nothing here mocks ADK: `make_runner` builds a real `Runner(app=App(...))` with the in-memory
session, artifact and memory services, and `run_turn` drives one user message to completion.
Core (non-ADK) helpers build `ModelRequest`s and `PackInputs` directly.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, Iterable, Sequence

import fsspec
import pytest

# A pack on a loaded machine can take longer than the 10 s default deadline; a test must not send another request
# because the machine is slow (the deadline's own test passes pack_timeout explicitly).
os.environ.setdefault("AETHER_CONTEXT_PACK_TIMEOUT", "600")

from aether_context.content import FunctionCall, FunctionResponse, Message, ModelRequest, TextPart, ToolSpec
from aether_context.pipeline import PackInputs, TaskSpec
from aether_context.tokens import TokenCounter
from aether_context.pipeline.retrieve import use_default_embedder
from aether_context.retrieval import HashingEmbedder

# Pipeline and plugin tests rank Memory/Evidence with a deterministic, model-free embedder (fast);
# the real MiniLM is exercised by the retrieval tests that ask for it explicitly.
use_default_embedder(HashingEmbedder())

# ---------------------------------------------------------------------------------------------
# deterministic filler text
# ---------------------------------------------------------------------------------------------

VOCAB = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
    "quebec romeo sierra tango uniform victor whiskey xray yankee zulu market report revenue churn "
    "latency throughput cache budget window evidence memory summary figure table source citation"
).split()


def filler(n_words: int, seed: int = 0) -> str:
    """`n_words` deterministic words (about one token each), with a newline every 12 words."""
    out = []
    for i in range(n_words):
        out.append(VOCAB[(seed * 7 + i * 3 + i // 5) % len(VOCAB)])
        if i % 12 == 11:
            out.append("\n")
    return " ".join(out)


# ---------------------------------------------------------------------------------------------
# tools with large outputs (plain functions: ADK wraps them as FunctionTools)
# ---------------------------------------------------------------------------------------------

BIG_WORDS = 1200  # ~1.2K tokens per tool result


def fetch_page(url: str) -> dict:
    """Fetch a web page and return its text."""
    return {"url": url, "body": filler(BIG_WORDS, seed=len(url))}


def grep_logs(pattern: str) -> dict:
    """Search the service logs for a pattern."""
    return {"pattern": pattern, "matches": [filler(60, seed=i) for i in range(15)]}


def lookup(key: str) -> dict:
    """Look up a small fact."""
    return {"key": key, "value": f"value-of-{key}"}


async def save_report(title: str, tool_context: Any) -> dict:
    """Save a report as an artifact named report.txt."""
    from google.genai import types

    version = await tool_context.save_artifact(
        "report.txt", types.Part(text=f"{title}: quarterly revenue grew 12 percent; churn fell to 3 percent."))
    return {"saved": "report.txt", "version": version}


# ---------------------------------------------------------------------------------------------
# ADK runner helpers
# ---------------------------------------------------------------------------------------------


def make_runner(agent: Any, *, plugins: Sequence[Any] = (), app_name: str = "testapp", memory_service: Any = None,
                artifact_service: Any = None, session_service: Any = None, **app_kwargs: Any):
    """A real ADK Runner over `App(name, root_agent=agent, plugins=...)` with in-memory services."""
    from google.adk.apps.app import App
    from google.adk.artifacts import InMemoryArtifactService
    from google.adk.memory import InMemoryMemoryService
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService

    app = App(name=app_name, root_agent=agent, plugins=list(plugins), **app_kwargs)
    return Runner(app=app, session_service=session_service or InMemorySessionService(),
                  artifact_service=artifact_service or InMemoryArtifactService(),
                  memory_service=memory_service or InMemoryMemoryService())


def scripted_agent(turns: Iterable[Any], *, name: str = "agent", tools: Sequence[Any] = (fetch_page, grep_logs, lookup),
                   instruction: str = "You are a careful research assistant.", **kwargs: Any):
    """An `LlmAgent` over a fresh `ScriptedLlm`; returns (agent, llm)."""
    from google.adk.agents import LlmAgent

    from aether_context.testing import ScriptedLlm

    llm = ScriptedLlm(turns=list(turns))
    agent = LlmAgent(name=name, model=llm, instruction=instruction, tools=list(tools), **kwargs)
    return agent, llm


def in_memo(memo: Any, fn: Any) -> Any:
    """`fn()` with `memo` as the call's memo (what the packer sets for the stages: `pipeline.cache.memo_scope`)."""
    from aether_context.pipeline.cache import memo_scope

    with memo_scope(memo):
        return fn()


async def new_session(runner: Any, user_id: str = "u", state: dict | None = None) -> str:
    session = await runner.session_service.create_session(app_name=runner.app_name, user_id=user_id, state=state)
    return session.id


async def run_turn(runner: Any, session_id: str, text: str, user_id: str = "u") -> list:
    """Send one user message and run the invocation to completion; returns its events."""
    from google.genai import types

    events = []
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id=user_id, session_id=session_id, new_message=message):
        events.append(event)
    return events


def offloaded_uri(llm_request: Any) -> str:
    """The artifact URI of the offloaded result in the request the model is answering."""
    for content in llm_request.contents:
        for part in content.parts or []:
            if part.function_response and "artifact_uri" in (part.function_response.response or {}):
                return part.function_response.response["artifact_uri"]
    raise AssertionError("no offloaded result reached the model")


def strip_continue(llm_request: Any) -> Any:
    """ADK's Gemini wrapper may append a "Continue processing" user turn after the callbacks ran;
    a copy without it is what the pack produced."""
    contents = list(llm_request.contents)
    if contents and contents[-1].role == "user" and contents[-1].parts and \
            (contents[-1].parts[0].text or "").startswith("Continue processing previous requests"):
        llm_request = llm_request.model_copy()
        llm_request.contents = contents[:-1]
    return llm_request


def orphan_responses(messages: Sequence[Message]) -> list[int]:
    """Indices of messages with a function response not immediately preceded by a message
    (or a run of response messages after one) that calls that function."""
    bad = []
    for i, m in enumerate(messages):
        if not m.responses:
            continue
        j = i - 1
        while j >= 0 and messages[j].responses and not messages[j].calls:
            j -= 1
        caller = messages[j] if j >= 0 else None
        names = [c.name for c in caller.calls] if caller is not None else []
        if caller is None or not names or any(r.name not in names for r in m.responses):
            bad.append(i)
    return bad


# ---------------------------------------------------------------------------------------------
# core (no ADK) helpers
# ---------------------------------------------------------------------------------------------


def tool_spec(name: str, description: str = "") -> ToolSpec:
    return ToolSpec(name, {"name": name, "description": description or f"The {name} tool.",
                           "parameters": {"type": "OBJECT", "properties": {"q": {"type": "STRING"}}}})


def call_msg(name: str, **args: Any) -> Message:
    return Message("model", (FunctionCall(name, args),))


def resp_msg(name: str, **response: Any) -> Message:
    return Message("user", (FunctionResponse(name, response),))


def text_msg(role: str, text: str) -> Message:
    return Message(role, (TextPart(text),))


def history_turns(n: int, *, big: int = 40, seed: int = 0) -> list[Message]:
    """`n` history turns alternating user text, model text and tool exchanges (call + response)."""
    out: list[Message] = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            out.append(text_msg("user", f"question {i}: {filler(12, seed + i)}"))
        elif kind == 1:
            out.append(text_msg("model", f"answer {i}: {filler(20, seed + i)}"))
        else:
            out.append(call_msg("search", q=f"query {i}"))
            out.append(resp_msg("search", result=filler(big, seed + i)))
    return out


def make_inputs(history: Sequence[Message] = (), request_text: str = "Please summarise the findings.",
                loop: Sequence[Message] = (), *, task: TaskSpec = TaskSpec(), evidence=(), memory=(),
                tools: Sequence[ToolSpec] = (), model: str = "gpt-4o", system: str = "You are a helpful analyst.",
                invocation_id: str = "inv-1", agent: str = "analyst", previous=None, now: float = 1_700_000_000.0,
                session_id: str = "s1") -> PackInputs:
    messages = tuple(history) + (text_msg("user", request_text),) + tuple(loop)
    request = ModelRequest(model=model, system_instruction=system, messages=messages, tools=tuple(tools))
    return PackInputs(request=request, request_index=len(history), task=task, evidence=tuple(evidence),
                      memory=tuple(memory), app_name="app", user_id="u", session_id=session_id,
                      invocation_id=invocation_id, agent=agent, now=now, previous=previous)


# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def counter() -> TokenCounter:
    return TokenCounter()


@pytest.fixture
def memory_store_url():
    """A unique `memory://` store URL, removed after the test."""
    url = f"memory://aether-tests/{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    path = url[len("memory://"):]
    for _ in range(40):  # a store's background writer may still be moving files into place
        try:
            if fs.exists(path):
                fs.rm(path, recursive=True)
            break
        except (OSError, RuntimeError):  # FileNotFoundError, "Directory not empty" while a write lands, or
            time.sleep(0.05)            # fsspec's one in-memory dict changing size under another store's writer


@pytest.fixture
def file_store_url(tmp_path):
    return f"file://{tmp_path}/packs"
