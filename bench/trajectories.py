"""Replay recorded agent trajectories through a real ADK Runner, for benchmarks.

Real runs (mini-swe-agent on SWE-bench Verified, tau-bench airline) are loaded into one neutral,
typed form (`Trajectory` → `Invocation` → `ModelTurn` → `ToolCall`) and driven through an
unmodified ADK 2.13 `Runner`: a scripted model (`ReplayLlm`, a real `BaseLlm`) returns the i-th
recorded assistant turn on the i-th call, and `RecordedTool`s return the recorded outputs. So every
request the model receives is built by ADK's own request pipeline from real content, then passes
through whatever plugins / App options are under test. Nothing in ADK is mocked; the only
instrumentation is a timer around ADK's request building (`BaseLlmFlow._preprocess_async`) and two
probe plugins that bracket the plugins' `before_model` work.

The model does not react to what it is sent (it replays), so different context managers can be
compared on identical sessions: what they send (tokens, prefix reuse) and what they cost (time).

Usage::

    from bench.trajectories import load_mini_swe, load_tau_airline, replay
    runs = load_mini_swe("../shared/datasets", limit=5)
    result = asyncio.run(replay(runs[0], plugins=[ContextPackPlugin(window_tokens=32_000)]))
    for call in result.calls:
        print(call.events, call.adk_build_s, call.plugins_s, call.request and len(call.request.messages))

Mapping (see the loaders): mini-swe-agent `messages[0]` → agent instruction, `messages[1]` → the
one user message, each assistant message → a model turn (reasoning text + `bash(command=...)`),
each following user message → that call's output, all in ONE invocation; tau-bench user messages
start invocations, assistant `tool_calls` → function calls, `tool` messages → their outputs.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncGenerator, Callable, Iterable, Iterator, Literal, Mapping, Sequence

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps.app import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.flows.llm_flows.base_llm_flow import BaseLlmFlow
from google.adk.memory import InMemoryMemoryService
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.base_tool import BaseTool
from google.genai import types
from pydantic import PrivateAttr

__all__ = [
    "ToolCall", "ModelTurn", "Invocation", "ToolDecl", "Trajectory", "load_mini_swe", "load_tau_airline",
    "concat_trajectories", "ReplayLlm", "RecordedTool", "ModelCall", "ReplayResult", "replay", "ReplayError", "GatedPlugin",
    "DEFAULT_DATA",
]

DEFAULT_DATA = "../shared/datasets"
MINI_SWE_DIR = "trajectories/mini-swe-agent"
TAU_AIRLINE_FILE = "trajectories/tau-bench-airline/gpt-4o-airline-dev.json"
CLOSING_TEXT = "(end of the recorded trajectory)"

_BASH_BLOCK = re.compile(r"```bash[ \t]*\n(.*?)\n?```", re.S)


class ReplayError(Exception):
    """The recording cannot be mapped to ADK, or the run diverged from the script."""


# --------------------------------------------------------------------------- neutral form
@dataclass(frozen=True)
class ToolCall:
    """One recorded tool call and the output the tool returned (a dict: ADK sends dicts as they are)."""

    name: str
    args: dict[str, Any]
    output: dict[str, Any]


@dataclass(frozen=True)
class ModelTurn:
    """One recorded model response: text (reasoning or answer) and the tool calls it made.

    A turn without calls is a final answer: ADK ends the invocation there. `synthetic` marks turns
    the loader added because the recording lacks them (e.g. the closing answer after the last tool).
    """

    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    synthetic: bool = False


@dataclass(frozen=True)
class Invocation:
    """One user message and the model/tool loop it started; only the last turn has no calls."""

    user: str
    turns: tuple[ModelTurn, ...]

    def __post_init__(self) -> None:
        if not self.turns:
            raise ReplayError("an invocation needs at least one model turn")
        if self.turns[-1].calls:
            raise ReplayError("the last turn of an invocation must be a final answer (no tool calls)")
        if any(not t.calls for t in self.turns[:-1]):
            raise ReplayError("only the last turn of an invocation may be a final answer")


@dataclass(frozen=True)
class ToolDecl:
    """A function declaration: name, description and a JSON schema of the parameters."""

    name: str
    description: str
    parameters: dict[str, Any]

    def declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(name=self.name, description=self.description,
                                         parameters_json_schema=self.parameters)


@dataclass(frozen=True)
class Trajectory:
    """A recorded session in neutral form: system prompt, tools, invocations, and source metadata."""

    id: str
    source: str
    system: str
    tools: tuple[ToolDecl, ...]
    invocations: tuple[Invocation, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def turns(self) -> tuple[ModelTurn, ...]:
        return tuple(t for inv in self.invocations for t in inv.turns)

    @property
    def model_calls(self) -> int:
        return sum(len(inv.turns) for inv in self.invocations)

    @property
    def tool_calls(self) -> int:
        return sum(len(t.calls) for t in self.turns)


# --------------------------------------------------------------------------- loaders
BASH_TOOL = ToolDecl(
    name="bash",
    description="Run one bash command in the repository's shell; returns its return code and output.",
    parameters={"type": "object", "properties": {"command": {"type": "string", "description": "The command to run."}},
                "required": ["command"]},
)


def _mini_swe_turns(messages: list[dict[str, Any]], ident: str) -> list[Invocation]:
    """Assistant/user pairs → one invocation; a reply without a bash block ends it (see `load_mini_swe`)."""
    invocations: list[Invocation] = []
    user, turns = messages[1]["content"], []
    rest = messages[2:]
    for i in range(0, len(rest), 2):
        assistant = rest[i]
        if assistant["role"] != "assistant":
            raise ReplayError(f"{ident}: message {i + 2} should be an assistant message, is {assistant['role']!r}")
        feedback = rest[i + 1]["content"] if i + 1 < len(rest) else None
        text = assistant["content"] or ""
        blocks = _BASH_BLOCK.findall(text)
        if blocks and feedback is not None:
            reasoning = text[: text.find("```bash")].rstrip()
            turns.append(ModelTurn(reasoning, (ToolCall("bash", {"command": blocks[0]}, {"output": feedback}),)))
            continue
        # No command (or nothing came back): a final answer; the environment's reply opens the next invocation.
        turns.append(ModelTurn(text))
        invocations.append(Invocation(user, tuple(turns)))
        if feedback is None:
            return invocations
        user, turns = feedback, []
    turns.append(ModelTurn(CLOSING_TEXT, synthetic=True))
    invocations.append(Invocation(user, tuple(turns)))
    return invocations


def load_mini_swe(data: str | Path = DEFAULT_DATA, *, ids: Iterable[str] | None = None,
                  limit: int | None = None) -> list[Trajectory]:
    """mini-swe-agent SWE-bench runs, sorted by instance id.

    Each assistant message becomes a turn `[reasoning text, bash(command=<first ```bash block>)]`
    whose output is the next user message (`{"output": text}`), all in one invocation. Where the
    assistant wrote several blocks, mini-swe-agent rejected the reply and the next user message is
    that rejection: it is replayed as the output of a call to the first block, so the loop goes on
    as recorded. A reply with no block at all is a final answer (it ends the invocation) and the
    environment's reply opens a new one. After the last output the recording stops; a synthetic
    closing answer ends the run. `meta` holds `resolved`, `exit_status` and `submission`.
    """
    folder = Path(data) / MINI_SWE_DIR
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} not found: pass --data pointing at the shared datasets folder")
    results = json.loads((folder / "results.json").read_text(encoding="utf-8")) if (folder / "results.json").exists() else {}
    wanted = set(ids) if ids is not None else None
    out: list[Trajectory] = []
    for path in sorted(folder.glob("*.traj.json")):
        ident = path.name[: -len(".traj.json")]
        if wanted is not None and ident not in wanted:
            continue
        raw = json.loads(path.read_text(encoding="utf-8"))
        messages = raw["messages"]
        if len(messages) < 2 or messages[0]["role"] != "system" or messages[1]["role"] != "user":
            raise ReplayError(f"{path}: expected a system prompt then the task")
        info = raw.get("info", {})
        out.append(Trajectory(
            id=ident, source="mini-swe-agent", system=messages[0]["content"], tools=(BASH_TOOL,),
            invocations=tuple(_mini_swe_turns(messages, ident)),
            meta={"resolved": results.get(ident, {}).get("resolved"), "exit_status": info.get("exit_status"),
                  "submission": info.get("submission", "")},
        ))
        if limit is not None and len(out) >= limit:
            break
    return out


def _json_type(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, list):
        return {"type": "array", "items": _json_type(value[0]) if value else {"type": "string"}}
    if isinstance(value, dict):
        return {"type": "object", "properties": {k: _json_type(v) for k, v in sorted(value.items())}}
    return {"type": "string"}


def _infer_tools(calls: Iterable[tuple[str, dict[str, Any]]], description: str) -> tuple[ToolDecl, ...]:
    """Declarations inferred from recorded calls: every argument seen, required if always present."""
    seen: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for name, args in calls:
        seen[name].append(args)
    decls = []
    for name in sorted(seen):
        props: dict[str, Any] = {}
        for args in seen[name]:
            for k, v in args.items():
                props.setdefault(k, _json_type(v))
        required = sorted(k for k in props if all(k in a for a in seen[name]))
        decls.append(ToolDecl(name, description.format(name=name),
                              {"type": "object", "properties": dict(sorted(props.items())), "required": required}))
    return tuple(decls)


def _tau_args(raw: str | None, ident: str) -> dict[str, Any]:
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as e:
        raise ReplayError(f"{ident}: tool call arguments are not JSON: {raw!r}") from e
    return args if isinstance(args, dict) else {"value": args}


def _tau_invocations(traj: list[dict[str, Any]], ident: str) -> list[Invocation]:
    outputs = {m["tool_call_id"]: m["content"] for m in traj if m["role"] == "tool"}
    invocations: list[Invocation] = []
    user: str | None = None
    turns: list[ModelTurn] = []
    for m in traj[1:]:
        role = m["role"]
        if role == "user":
            if user is not None:
                if turns and turns[-1].calls:  # the model was cut off after a tool: close the invocation
                    turns.append(ModelTurn(CLOSING_TEXT, synthetic=True))
                if turns:
                    invocations.append(Invocation(user, tuple(turns)))
            user, turns = m["content"] or "", []
        elif role == "assistant":
            if user is None:
                raise ReplayError(f"{ident}: an assistant message comes before any user message")
            calls = tuple(
                ToolCall(tc["function"]["name"], _tau_args(tc["function"].get("arguments"), ident),
                         {"result": outputs.get(tc["id"], "")})
                for tc in m.get("tool_calls") or ())
            turns.append(ModelTurn(m.get("content") or "", calls))
        elif role != "tool":
            raise ReplayError(f"{ident}: unexpected role {role!r}")
    # A trailing user message got no model reply in the recording: it is not replayed.
    if user is not None and turns:
        if turns[-1].calls:
            turns.append(ModelTurn(CLOSING_TEXT, synthetic=True))
        invocations.append(Invocation(user, tuple(turns)))
    return invocations


def load_tau_airline(data: str | Path = DEFAULT_DATA, *, limit: int | None = None) -> list[Trajectory]:
    """tau-bench airline episodes (gpt-4o), in file order.

    The system message is the instruction; each user message starts an invocation; assistant
    `tool_calls` become function calls (JSON arguments parsed) with the matching `tool` message as
    output (`{"result": text}`, as ADK wraps a tool's non-dict return). Tool declarations are not in
    the recording: they are inferred from the arguments seen across all episodes. A trailing user
    message (e.g. "###STOP###") got no reply and is dropped; an episode cut off after a tool output
    gets a synthetic closing answer. `meta` holds `task_id`, `reward` and `trial`.
    """
    path = Path(data) / TAU_AIRLINE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: pass --data pointing at the shared datasets folder")
    episodes = json.loads(path.read_text(encoding="utf-8"))
    tools = _infer_tools(
        ((tc["function"]["name"], _tau_args(tc["function"].get("arguments"), "tau")) for e in episodes
         for m in e["traj"] if m["role"] == "assistant" for tc in m.get("tool_calls") or ()),
        "tau-bench airline tool {name} (declaration inferred from the recorded calls).")
    out = []
    for n, e in enumerate(episodes):
        ident = f"tau-airline-{e['task_id']}-t{e.get('trial', 0)}-{n}"
        traj = e["traj"]
        if not traj or traj[0]["role"] != "system":
            raise ReplayError(f"{ident}: expected a system message first")
        out.append(Trajectory(id=ident, source="tau-bench-airline", system=traj[0]["content"], tools=tools,
                              invocations=tuple(_tau_invocations(traj, ident)),
                              meta={"task_id": e["task_id"], "reward": e.get("reward"), "trial": e.get("trial")}))
        if limit is not None and len(out) >= limit:
            break
    return out


def concat_trajectories(trajectories: Sequence[Trajectory], *, min_model_calls: int, ident: str = "") -> Trajectory:
    """One long single-invocation session from the tool turns of several runs (cycled if needed).

    The first run gives the system prompt and the user message; then the tool-calling turns of
    each run follow one another (final answers dropped) until `min_model_calls` turns, and a
    synthetic closing answer ends it. All runs must declare the same tools. This is how the
    benchmarks reach ~1000 events: no recorded run is that long.
    """
    if not trajectories:
        raise ReplayError("nothing to concatenate")
    tools = trajectories[0].tools
    if any(t.tools != tools for t in trajectories):
        raise ReplayError("concatenated trajectories must declare the same tools")
    turns: list[ModelTurn] = []
    used: list[str] = []
    while len(turns) < min_model_calls:
        for t in trajectories:
            used.append(t.id)
            turns.extend(turn for turn in t.turns if turn.calls)
            if len(turns) >= min_model_calls:
                break
    turns.append(ModelTurn(CLOSING_TEXT, synthetic=True))
    first = trajectories[0]
    return Trajectory(id=ident or f"concat-{len(used)}-runs", source=first.source, system=first.system, tools=tools,
                      invocations=(Invocation(first.invocations[0].user, tuple(turns)),),
                      meta={"concatenated": used})


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
        return self._outputs.pop(self.name)


class ReplayLlm(BaseLlm):
    """A real ADK model that answers the i-th call with the i-th recorded turn.

    `on_request(i, llm_request)` sees each request as the model receives it (after every plugin);
    `prompt_tokens(llm_request)`, when set, is reported as `usage_metadata.prompt_token_count`
    (ADK's token-threshold compaction reads it). When `is_agent_call(llm_request)` is False the call
    is a side call (a summarizer using the agent's model, say): it gets `side_answer` and does not
    consume the script.
    """

    model: str = "replay-model"
    script: list[Any] = []
    on_request: Any = None
    prompt_tokens: Any = None
    is_agent_call: Any = None
    side_answer: str = "(replay: the recording has no answer for this side call)"
    side_calls: int = 0
    _cursor: int = PrivateAttr(default=0)
    _outputs: _Outputs = PrivateAttr(default_factory=_Outputs)

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

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        if self.is_agent_call is not None and not self.is_agent_call(llm_request):
            self.side_calls += 1
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=self.side_answer)]),
                              finish_reason=types.FinishReason.STOP)
            return
        i = self._cursor
        if i >= len(self.script):
            raise ReplayError(f"model called {i + 1} times but the recording has {len(self.script)} turns")
        self._cursor += 1
        if self.on_request is not None:
            self.on_request(i, llm_request)
        turn: ModelTurn = self.script[i]
        parts = [types.Part(text=turn.text)] if turn.text or not turn.calls else []
        parts += [types.Part(function_call=types.FunctionCall(name=c.name, args=c.args)) for c in turn.calls]
        self._outputs.push(turn.calls)
        usage = None
        if self.prompt_tokens is not None:
            n = int(self.prompt_tokens(llm_request))
            usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=n, candidates_token_count=0,
                                                               total_token_count=n)
        yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage,
                          finish_reason=types.FinishReason.STOP)


# --------------------------------------------------------------------------- timing instrumentation
_BUILD_TIMES: dict[int, tuple[float, float]] = {}  # id(llm_request) -> (wall, thread CPU) seconds in ADK's request processors
_PATCH_DEPTH = 0


@contextlib.contextmanager
def _time_adk_request_building() -> Iterator[None]:
    """Time `BaseLlmFlow._preprocess_async` (ADK's request processors) per request, while active.

    Only the time the generator itself runs is counted, not time spent by its consumer while it
    is suspended on a yielded event; both wall time and this thread's CPU time (`time.thread_time`,
    which other processes on a shared machine do not inflate). The patch is process-wide and undone
    on exit.
    """
    global _PATCH_DEPTH
    original = BaseLlmFlow.__dict__["_preprocess_async"] if _PATCH_DEPTH == 0 else None
    if _PATCH_DEPTH == 0:
        async def timed(self, invocation_context, llm_request, **kwargs):  # type: ignore[no-untyped-def]
            agen = original(self, invocation_context, llm_request, **kwargs)
            wall = cpu = 0.0
            try:
                while True:
                    t0, c0 = time.perf_counter(), time.thread_time()
                    try:
                        event = await agen.__anext__()
                    except StopAsyncIteration:
                        wall, cpu = wall + time.perf_counter() - t0, cpu + time.thread_time() - c0
                        break
                    wall, cpu = wall + time.perf_counter() - t0, cpu + time.thread_time() - c0
                    yield event
            finally:
                await agen.aclose()
                _BUILD_TIMES[id(llm_request)] = (wall, cpu)

        BaseLlmFlow._preprocess_async = timed  # type: ignore[method-assign]
    _PATCH_DEPTH += 1
    try:
        yield
    finally:
        _PATCH_DEPTH -= 1
        if _PATCH_DEPTH == 0 and original is not None:
            BaseLlmFlow._preprocess_async = original  # type: ignore[method-assign]
            _BUILD_TIMES.clear()


@dataclass
class ModelCall:
    """One model call of a replay.

    `events`: session events when the request was handed to the plugins. `adk_build_s`: ADK's
    request building for it (`_preprocess_async`; `adk_build_cpu_s` the same in thread CPU time).
    `plugins_s`: all plugins' `before_model` work.
    `request`: what the model received, per `keep_requests` (`ModelRequest`, `LlmRequest` or None).
    """

    index: int
    invocation: int
    events: int = 0
    adk_build_s: float | None = None
    adk_build_cpu_s: float | None = None
    plugins_s: float | None = None
    request: Any = None
    _t0: float = 0.0


class _ProbeFirst(BasePlugin):
    def __init__(self, result: "ReplayResult"):
        super().__init__("bench_probe_first")
        self.result = result

    async def before_model_callback(self, *, callback_context, llm_request):  # type: ignore[no-untyped-def]
        wall, cpu = _BUILD_TIMES.pop(id(llm_request), (None, None))
        call = ModelCall(index=len(self.result.calls), invocation=self.result._invocation,
                         events=len(callback_context.session.events), adk_build_s=wall, adk_build_cpu_s=cpu)
        self.result.calls.append(call)
        self.result._agent_requests.add(id(llm_request))
        call._t0 = time.perf_counter()
        return None


class _ProbeLast(BasePlugin):
    def __init__(self, result: "ReplayResult"):
        super().__init__("bench_probe_last")
        self.result = result

    async def before_model_callback(self, *, callback_context, llm_request):  # type: ignore[no-untyped-def]
        call = self.result.calls[-1]
        call.plugins_s = time.perf_counter() - call._t0
        return None


_HOOKS = (
    "on_user_message_callback", "before_run_callback", "on_event_callback", "after_run_callback",
    "before_agent_callback", "after_agent_callback", "before_model_callback", "after_model_callback",
    "on_model_error_callback", "before_tool_callback", "after_tool_callback", "on_tool_error_callback",
    "on_agent_error_callback", "on_run_error_callback",
)


class GatedPlugin(BasePlugin):
    """Forwards every hook to `inner` only once the session holds `from_events` events.

    For long sessions where only the late calls are measured: earlier calls run as with no plugin
    (which saves time), and the plugin joins cold at `from_events` (leave it some warm-up calls
    before the measured ones). `close` is always forwarded.
    """

    def __init__(self, inner: BasePlugin, *, from_events: int):
        super().__init__(f"{inner.name}_from_{from_events}")
        self.inner = inner
        self.from_events = from_events
        for hook in _HOOKS:
            if hasattr(inner, hook):
                setattr(self, hook, self._gated(hook))

    def _gated(self, hook: str) -> Callable[..., Any]:
        target = getattr(self.inner, hook)

        async def forward(**kwargs: Any) -> Any:
            ctx = kwargs.get("callback_context") or kwargs.get("tool_context") or kwargs.get("invocation_context")
            session = getattr(ctx, "session", None)
            if session is not None and len(session.events) < self.from_events:
                return None
            return await target(**kwargs)

        return forward

    async def close(self) -> None:
        await self.inner.close()


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


async def replay(trajectory: Trajectory, *, plugins: Sequence[BasePlugin] = (),
                 app_options: Mapping[str, Any] | None = None, agent_options: Mapping[str, Any] | None = None,
                 run_config: RunConfig | None = None, keep_requests: Literal["core", "llm", "none"] = "core",
                 on_request: "Callable[[ModelCall, LlmRequest], None] | None" = None,
                 prompt_tokens: Callable[[LlmRequest], int] | None = None, deadline_s: float | None = None,
                 session_service: Any = None, artifact_service: Any = None, memory_service: Any = None,
                 app_name: str = "replay", user_id: str = "bench") -> ReplayResult:
    """Run `trajectory` through a real ADK Runner with `plugins`, returning every request and timings.

    `app_options` go to `App(...)` (e.g. `events_compaction_config`, `context_cache_config`),
    `agent_options` to `LlmAgent(...)`. Plugins must be fresh instances (ADK binds them to one
    app). `keep_requests="core"` keeps each request as an `aether_context` `ModelRequest` (compact,
    immutable), `"llm"` as a deep-copied `LlmRequest`, `"none"` keeps nothing (use `on_request` to
    measure on the fly in long sessions). The model is called exactly once per recorded turn;
    a plugin that answers in place of the model (returns an `LlmResponse`) desynchronises the script.
    `on_request(call, llm_request)` runs inside the model call (untimed) with the call's record so far.
    `deadline_s` stops the replay after that many seconds (`result.truncated`), to bound slow systems.
    """
    from aether_context.adk import request_from_llm  # the harness's neutral request view

    result = ReplayResult(trajectory=trajectory)

    def hook(i: int, llm_request: LlmRequest) -> None:
        if i >= len(result.calls):  # a plugin before the probe answered in place of the model
            raise ReplayError(f"{trajectory.id}: model call {i} was not seen by the probe plugin")
        call = result.calls[i]
        if keep_requests == "core":
            call.request = request_from_llm(llm_request)
        elif keep_requests == "llm":
            call.request = llm_request.model_copy(deep=True)
        if on_request is not None:
            on_request(call, llm_request)

    def is_agent_call(llm_request: LlmRequest) -> bool:
        if id(llm_request) in result._agent_requests:
            result._agent_requests.discard(id(llm_request))
            return True
        return False

    llm = ReplayLlm(script=list(trajectory.turns), on_request=hook, prompt_tokens=prompt_tokens,
                    is_agent_call=is_agent_call)
    system = trajectory.system
    agent = LlmAgent(name="replayed_agent", model=llm, instruction=lambda _ctx: system,  # a provider: no {var} templating
                     tools=[RecordedTool(d, llm.outputs) for d in trajectory.tools], **dict(agent_options or {}))
    app = App(name=app_name, root_agent=agent,
              plugins=[_ProbeFirst(result), *plugins, _ProbeLast(result)], **dict(app_options or {}))
    runner = Runner(app=app, session_service=session_service or InMemorySessionService(),
                    artifact_service=artifact_service or InMemoryArtifactService(),
                    memory_service=memory_service or InMemoryMemoryService())
    config = run_config or RunConfig(max_llm_calls=max(500, trajectory.model_calls + 10))
    session = await runner.session_service.create_session(app_name=app_name, user_id=user_id)
    start = time.perf_counter()
    stop_at = None if deadline_s is None else start + deadline_s
    try:
        with _time_adk_request_building():
            for n, inv in enumerate(trajectory.invocations):
                result._invocation = n
                t0 = time.perf_counter()
                final = ""
                message = types.Content(role="user", parts=[types.Part(text=inv.user)])
                async with contextlib.aclosing(runner.run_async(user_id=user_id, session_id=session.id,
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
    finally:
        await runner.close()
    result.wall_s = time.perf_counter() - start
    result.side_calls = llm.side_calls
    if not result.truncated and llm.calls_made != len(llm.script):
        raise ReplayError(f"{trajectory.id}: the model was called {llm.calls_made} times for {len(llm.script)} recorded turns")
    result.session = await runner.session_service.get_session(app_name=app_name, user_id=user_id, session_id=session.id)
    return result
