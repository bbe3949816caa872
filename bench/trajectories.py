"""Recorded agent runs in one neutral, typed form, for benchmarks.

Real runs (mini-swe-agent on SWE-bench Verified, tau-bench airline) are loaded into
`Trajectory` → `Invocation` → `ModelTurn` → `ToolCall`; `replay_adk.replay` drives one through an
unmodified ADK Runner (re-exported here, so `from trajectories import replay` keeps working).

Usage::

    from trajectories import load_mini_swe, load_tau_airline, replay
    runs = load_mini_swe("../shared/datasets", limit=5)
    result = asyncio.run(replay(runs[0], plugins=[ContextPackPlugin(window_tokens=32_000)]))

Mapping (see the loaders): mini-swe-agent `messages[0]` → agent instruction, `messages[1]` → the
one user message, each assistant message → a model turn (reasoning text + `bash(command=...)`),
each following user message → that call's output, all in ONE invocation; tau-bench user messages
start invocations, assistant `tool_calls` → function calls, `tool` messages → their outputs.
"""

from __future__ import annotations

import collections
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from google.genai import types

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


_REPLAY_NAMES = frozenset({"GatedPlugin", "ModelCall", "RecordedTool", "ReplayLlm", "ReplayResult", "replay"})


def __getattr__(name: str) -> Any:
    """The replay library lives in `replay_adk`; its names are served from here too (loaded on first use)."""
    if name in _REPLAY_NAMES:
        import replay_adk
        return getattr(replay_adk, name)
    raise AttributeError(f"module 'trajectories' has no attribute {name!r}")
