"""The replay library every benchmark shares: a recorded session driven through a real ADK Runner.

A scripted model (`ReplayLlm`, a subclass of the package's own `aether_context.testing.ScriptedLlm`)
returns the i-th recorded turn on the i-th call and `RecordedTool`s return the recorded outputs, so
every request the model receives is built by ADK's own request pipeline from real content and then
passes through whatever plugins / App options are under test. Nothing in ADK is mocked; the only
instrumentation is a timer around ADK's request building and two probe plugins that bracket the
plugins' `before_model` work. Sessions get seeded ids and a fixed clock (`ClockedSessionService`),
so two replays of one recording are the same session, byte for byte.

Usage::

    from trajectories import load_mini_swe
    from replay_adk import replay
    result = asyncio.run(replay(load_mini_swe(limit=1)[0], plugins=[ContextPackPlugin(window_tokens=32_000)]))
"""

from __future__ import annotations

import collections
import contextlib
import copy
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Callable, Iterable, Literal, Mapping, Sequence

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps.app import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.memory import InMemoryMemoryService
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.base_tool import BaseTool
from google.genai import types
from pydantic import PrivateAttr

from aether_context.testing import ScriptedLlm
from replay_probes import GatedPlugin, ModelCall, ProbeFirst, ProbeLast, time_adk_request_building
from trajectories import ModelTurn, ReplayError, ToolCall, ToolDecl, Trajectory

__all__ = ["ReplayLlm", "RecordedTool", "ModelCall", "ReplayResult", "replay", "GatedPlugin", "ClockedSessionService",
           "AGENT_NAME"]

AGENT_NAME = "replayed_agent"
CLOCK_START = 1_700_000_000.0  # 2023-11-14: events of a replay are stamped from here, one step apart


class ClockedSessionService(InMemorySessionService):
    """ADK's in-memory sessions with a seeded session id and a fixed clock for event timestamps.

    Session ids end up in artifact URIs inside packed requests, and event timestamps in dated memory
    items: with the wall clock and uuid4 ids, two replays of one recording would be two different
    sessions. Here an appended event is stamped `step` seconds after the session's previous event
    (or at `start`), unless it is appended through `append_seeded`, which keeps the event's own time.
    """

    def __init__(self, seed: str, *, start: float = CLOCK_START, step: float = 30.0):
        super().__init__()
        self._seed, self._start, self._step = seed, start, step

    async def create_session(self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> Any:
        session_id = session_id or str(uuid.uuid5(uuid.NAMESPACE_URL, f"aether-bench/{self._seed}"))
        return await super().create_session(app_name=app_name, user_id=user_id, state=state, session_id=session_id)

    async def append_event(self, session: Any, event: Any) -> Any:
        if not event.partial:
            event.timestamp = (session.events[-1].timestamp if session.events else self._start) + self._step
        return await super().append_event(session, event)

    async def append_seeded(self, session: Any, event: Any) -> Any:
        """Append `event` with the timestamp it carries (a recorded conversation's own time)."""
        return await super().append_event(session, event)


# --------------------------------------------------------------------------- the scripted model and tools
class _Outputs:
    """Recorded outputs the model's last calls are owed, per tool name, in call order."""

    def __init__(self) -> None:
        self._pending: dict[str, collections.deque] = collections.defaultdict(collections.deque)

    def push(self, calls: Iterable[ToolCall]) -> None:
        for c in calls:
            self._pending[c.name].append(c.output)

    def pop(self, name: str) -> dict[str, Any]:
        if not self._pending[name]:
            raise ReplayError(f"tool {name!r} was called but the recording has no output owed for it")
        return self._pending[name].popleft()


class RecordedTool(BaseTool):
    """A tool with a given declaration that returns the recorded output of each call, in order."""

    def __init__(self, decl: ToolDecl, outputs: _Outputs):
        super().__init__(name=decl.name, description=decl.description)
        self._decl = decl.declaration()
        self._outputs = outputs

    def _get_declaration(self) -> types.FunctionDeclaration:
        return self._decl

    async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
        # A copy: the recording is replayed again by other passes, and a plugin may edit the result it is given.
        return copy.deepcopy(self._outputs.pop(self.name))


class ReplayLlm(ScriptedLlm):
    """`ScriptedLlm` answering the i-th agent call with the i-th recorded `ModelTurn`.

    What it adds to the package's model: recorded turns (text + calls, whose outputs it hands to the
    `RecordedTool`s), an error instead of repeating the last turn when the script runs out, side calls
    (`is_agent_call(llm_request)` False: a summarizer using the agent's model) answered without
    consuming the script, and a bounded request log (`keep_requests` deep copies, 0 by default:
    benchmarks measure each request in `prompt_token_counter`, which sees the very request sent).
    """

    model: str = "replay-model"
    is_agent_call: Any = None
    side_answer: str = "(replay: the recording has no answer for this side call)"
    side_calls: int = 0
    keep_requests: int = 0
    _outputs: _Outputs = PrivateAttr(default_factory=_Outputs)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._requests = collections.deque(maxlen=self.keep_requests)  # type: ignore[assignment]

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"replay-.*"]

    @property
    def calls_made(self) -> int:
        return self._cursor

    @property
    def outputs(self) -> _Outputs:
        """Where the recorded outputs of the calls just made wait for the `RecordedTool`s."""
        return self._outputs

    def _next_turn(self, llm_request: LlmRequest) -> Any:
        i = self._cursor
        if i >= len(self.turns):
            raise ReplayError(f"model called {i + 1} times but the recording has {len(self.turns)} turns")
        self._cursor += 1
        turn: ModelTurn = self.turns[i]
        self._outputs.push(turn.calls)
        parts = [types.Part(text=turn.text)] if turn.text or not turn.calls else []
        return parts + [types.Part(function_call=types.FunctionCall(name=c.name, args=c.args)) for c in turn.calls]

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        if self.is_agent_call is not None and not self.is_agent_call(llm_request):
            self.side_calls += 1
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=self.side_answer)]),
                              finish_reason=types.FinishReason.STOP)
            return
        async for response in super().generate_content_async(llm_request, stream):
            yield response


@dataclass
class ReplayResult:
    trajectory: Trajectory
    calls: list[ModelCall] = field(default_factory=list)
    invocation_wall_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    session: Any = None  # the final ADK Session (events, state)
    final_texts: list[str] = field(default_factory=list)
    truncated: bool = False  # stopped at `deadline_s` before the end of the recording
    side_calls: int = 0  # model calls that were not the agent's own (e.g. a summarizer on the agent's model)
    _invocation: int = 0
    _agent_requests: set[int] = field(default_factory=set)

    @property
    def events(self) -> int:
        return len(self.session.events) if self.session is not None else 0


    def is_agent_call(self, llm_request: LlmRequest) -> bool:
        """The probe saw this request in before_model: it is the agent's call, not a side call."""
        if id(llm_request) in self._agent_requests:
            self._agent_requests.discard(id(llm_request))
            return True
        return False


def _measurer(result: ReplayResult, keep_requests: str, on_request: Callable[..., None] | None,
              prompt_tokens: Callable[[LlmRequest], int] | None) -> Callable[[LlmRequest], int]:
    """The model's `prompt_token_counter`: keeps / hands over the request it sees, reports its token count."""
    from aether_context.adk import request_from_llm  # the harness's neutral request view

    def measure(llm_request: LlmRequest) -> int:
        call = result.calls[-1]
        if keep_requests == "core":
            call.request = request_from_llm(llm_request)
        elif keep_requests == "llm":
            call.request = llm_request.model_copy(deep=True)
        if on_request is not None:
            on_request(call, llm_request)
        return int(prompt_tokens(llm_request)) if prompt_tokens is not None else 0

    return measure


@dataclass
class _Services:
    session: Any
    artifact: Any
    memory: Any


async def replay(trajectory: Trajectory, *, plugins: Sequence[BasePlugin] = (),
                 app_options: Mapping[str, Any] | None = None, agent_options: Mapping[str, Any] | None = None,
                 run_config: RunConfig | None = None, keep_requests: Literal["core", "llm", "none"] = "core",
                 on_request: "Callable[[ModelCall, LlmRequest], None] | None" = None,
                 prompt_tokens: Callable[[LlmRequest], int] | None = None, deadline_s: float | None = None,
                 session_service: Any = None, artifact_service: Any = None, memory_service: Any = None,
                 session_id: str | None = None, extra_tools: Sequence[Any] = (),
                 app_name: str = "replay", user_id: str = "bench") -> ReplayResult:
    """Run `trajectory` through a real ADK Runner with `plugins`, returning every call's record.

    `app_options` go to `App(...)` (e.g. `events_compaction_config`), `agent_options` to
    `LlmAgent(...)`, `extra_tools` join the recorded tools (e.g. ADK's `PreloadMemoryTool`). Plugins
    must be fresh instances (ADK binds them to one app). `session_id` continues an existing session
    of `session_service` (a conversation seeded beforehand) instead of creating one. `keep_requests`:
    `"core"` keeps each request as an `aether_context` `ModelRequest`, `"llm"` as a deep-copied
    `LlmRequest`, `"none"` nothing (measure in `on_request`, which runs inside the model call, untimed).
    `prompt_tokens(llm_request)` is reported as the model's `prompt_token_count`. `deadline_s` stops
    the replay after that many seconds (`result.truncated`).
    """
    result = ReplayResult(trajectory=trajectory)
    llm = ReplayLlm(turns=list(trajectory.turns), prompt_token_counter=_measurer(result, keep_requests, on_request, prompt_tokens),
                    is_agent_call=result.is_agent_call)
    system = trajectory.system
    agent = LlmAgent(name=AGENT_NAME, model=llm, instruction=lambda _ctx: system,  # a provider: no {var} templating
                     tools=[*(RecordedTool(d, llm.outputs) for d in trajectory.tools), *extra_tools],
                     **dict(agent_options or {}))
    app = App(name=app_name, root_agent=agent,
              plugins=[ProbeFirst(result), *plugins, ProbeLast(result)], **dict(app_options or {}))
    services = _Services(session_service or ClockedSessionService(trajectory.id),
                         artifact_service or InMemoryArtifactService(), memory_service or InMemoryMemoryService())
    runner = Runner(app=app, session_service=services.session, artifact_service=services.artifact,
                    memory_service=services.memory)
    config = run_config or RunConfig(max_llm_calls=max(500, trajectory.model_calls + 10))
    if session_id is None:
        session_id = (await services.session.create_session(app_name=app_name, user_id=user_id)).id
    start = time.perf_counter()
    try:
        with time_adk_request_building():
            await _run_invocations(runner, trajectory, result, config, user_id, session_id,
                                   None if deadline_s is None else start + deadline_s)
    finally:
        await runner.close()
    result.wall_s = time.perf_counter() - start
    result.side_calls = llm.side_calls
    if not result.truncated and llm.calls_made != len(llm.turns):
        raise ReplayError(f"{trajectory.id}: the model was called {llm.calls_made} times for {len(llm.turns)} recorded turns")
    result.session = await services.session.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
    return result


async def _run_invocations(runner: Runner, trajectory: Trajectory, result: ReplayResult, config: RunConfig,
                           user_id: str, session_id: str, stop_at: float | None) -> None:
    """Send each recorded user message in turn and drain ADK's events; ADK errors end the replay."""
    for n, inv in enumerate(trajectory.invocations):
        result._invocation = n
        t0 = time.perf_counter()
        final = ""
        message = types.Content(role="user", parts=[types.Part(text=inv.user)])
        async with contextlib.aclosing(runner.run_async(user_id=user_id, session_id=session_id,
                                                        run_config=config, new_message=message)) as events:
            async for event in events:
                if event.error_code:
                    raise ReplayError(f"{trajectory.id}: ADK reported {event.error_code}: {event.error_message}")
                if event.content and event.content.parts and event.is_final_response():
                    final = "".join(p.text or "" for p in event.content.parts)
                if stop_at is not None and time.perf_counter() > stop_at:
                    result.truncated = True
                    break
        result.invocation_wall_s.append(time.perf_counter() - t0)
        result.final_texts.append(final)
        if result.truncated:
            break
