"""Where the Task, Evidence and Memory layers live in ADK session state, and a helper to set them.

State persists across model calls (request edits do not), so the task is kept there. Key names
are configurable with `StateKeys` for apps that already store a plan under other names.

Usage::

    set_task(callback_context.state, goal="Fix the failing test", step="Reproduce it",
             acceptance=["test passes", "no other test breaks"], tools=["run_tests", "read_file"])
"""

from __future__ import annotations

import time
from typing import Any, Iterable, MutableMapping

from pydantic import BaseModel, ConfigDict, Field

from ..pipeline.inputs import EvidenceItem, MemoryItem, TaskSpec
from ..redact import redact

__all__ = ["StateKeys", "set_task", "add_evidence", "add_note", "task_from_state", "evidence_from_state", "notes_from_state"]


class StateKeys(BaseModel):
    """Session-state keys read by the pack (the `app:`/`user:` prefixes of ADK state work too)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goal: str = Field("aether:goal", description="The overall goal (text).")
    step: str = Field("aether:step", description="The current step (text).")
    acceptance: str = Field("aether:acceptance", description="Acceptance checklist (list of text).")
    constraints: str = Field("aether:constraints", description="Constraints (list of text).")
    tools: str = Field("aether:tools", description="Tool names the step may use (list); absent = all tools.")
    expected_tool_calls: str = Field("aether:expected_tool_calls", description="How many tool calls the step expects (int).")
    risk: str = Field("aether:risk", description="Risk of the step, 0..1.")
    evidence_needed: str = Field("aether:evidence_needed", description="Checklist items that need evidence (list).")
    plan: str = Field("aether:plan", description="Plan steps: list of {step, done} (progress in the recitation).")
    done: str = Field("aether:done", description="Acceptance items already met (list of text).")
    evidence: str = Field("aether:evidence", description="Evidence items: list of {id, summary, uri}.")
    notes: str = Field("aether:notes", description="Memory notes: list of {text, timestamp}.")


DEFAULT_KEYS = StateKeys()


def _list(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


def set_task(state: MutableMapping[str, Any], *, goal: str | None = None, step: str | None = None,
             acceptance: Iterable[str] | None = None, constraints: Iterable[str] | None = None,
             tools: Iterable[str] | None = None, expected_tool_calls: int | None = None, risk: float | None = None,
             evidence_needed: Iterable[str] | None = None, plan: "Iterable[str | tuple[str, bool]] | None" = None,
             done: Iterable[str] | None = None, keys: StateKeys = DEFAULT_KEYS) -> None:
    """Write the task into state; arguments left as None are not touched.

    `plan` is a list of steps (text, or (text, done) pairs); `done` lists acceptance items already met.
    """
    if plan is not None:
        plan = [{"step": p, "done": False} if isinstance(p, str) else {"step": p[0], "done": bool(p[1])} for p in plan]
    values = {"goal": goal, "step": step, "acceptance": acceptance, "constraints": constraints, "tools": tools,
              "expected_tool_calls": expected_tool_calls, "risk": risk, "evidence_needed": evidence_needed,
              "plan": plan, "done": done}
    for name, value in values.items():
        if value is None:
            continue
        if not isinstance(value, (str, int, float)):
            value = list(value)
        state[getattr(keys, name)] = value


def add_evidence(state: MutableMapping[str, Any], *, id: str, summary: str, uri: str = "", keys: StateKeys = DEFAULT_KEYS) -> None:
    items = [e for e in list(state.get(keys.evidence) or []) if e.get("id") != id]
    items.append({"id": id, "summary": redact(summary)[0], "uri": uri, "timestamp": time.time()})  # secrets masked
    state[keys.evidence] = items


def add_note(state: MutableMapping[str, Any], text: str, *, timestamp: float | None = None, keys: StateKeys = DEFAULT_KEYS) -> None:
    notes = list(state.get(keys.notes) or [])
    notes.append({"text": redact(text)[0], "timestamp": time.time() if timestamp is None else timestamp})  # secrets masked
    state[keys.notes] = notes


def task_from_state(state: Any, keys: StateKeys = DEFAULT_KEYS) -> TaskSpec:
    tools = state.get(keys.tools)
    return TaskSpec(
        goal=str(state.get(keys.goal) or ""), step=str(state.get(keys.step) or ""),
        acceptance=_list(state.get(keys.acceptance)), constraints=_list(state.get(keys.constraints)),
        tools=None if tools is None else _list(tools),
        expected_tool_calls=int(state.get(keys.expected_tool_calls) or 0), risk=float(state.get(keys.risk) or 0.0),
        evidence_needed=_list(state.get(keys.evidence_needed)),
        plan=tuple((str(p.get("step", "")), bool(p.get("done"))) if isinstance(p, dict) else (str(p), False)
                   for p in (state.get(keys.plan) or ())),
        done=_list(state.get(keys.done)),
    )


def evidence_from_state(state: Any, keys: StateKeys = DEFAULT_KEYS) -> list[EvidenceItem]:
    out = []
    for i, e in enumerate(state.get(keys.evidence) or []):
        if isinstance(e, str):
            e = {"summary": e}
        out.append(EvidenceItem(id=str(e.get("id") or f"ev-{i}"), summary=str(e.get("summary", "")),
                                uri=str(e.get("uri") or ""), source="state", timestamp=e.get("timestamp")))
    return out


def notes_from_state(state: Any, keys: StateKeys = DEFAULT_KEYS) -> list[MemoryItem]:
    out = []
    for i, n in enumerate(state.get(keys.notes) or []):
        if isinstance(n, str):
            n = {"text": n}
        out.append(MemoryItem(id=f"note-{i}", text=str(n.get("text", "")), timestamp=n.get("timestamp"), source="state", rank=i))
    return out
