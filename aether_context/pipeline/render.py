"""Stage 5 — render: the Pack Payload text and the final request, in a fixed order.

The system instruction gets a fixed contract appended (stable across calls, so the cached prefix
stays warm); the user message that started the invocation is rewritten into the Pack Payload
(never stacked: the original text appears once, verbatim, under USER REQUEST).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..content import Message, ModelRequest, TextPart, ToolSpec
from .collect import TaskSpec, Turn
from .select import Line

__all__ = ["CONTRACT", "PAYLOAD_HEADER", "PayloadSections", "render_payload", "render_request", "system_text"]

PAYLOAD_HEADER = "CONTEXT PACK"

CONTRACT = """\
CONTEXT PACK CONTRACT
The user turn that begins with "CONTEXT PACK" holds the context prepared for this step:
- GOAL, STEP, CONSTRAINTS and ACCEPTANCE there are authoritative for the current step.
- OPENING REQUEST is the session's first user message: the overall task when no GOAL is given.
- EVIDENCE items are summaries; an artifact:// URI points to the full original. Cite them; do not invent facts.
- MEMORY items are dated recollections; prefer newer ones when they disagree.
- CONVERSATION SUMMARY stands in for earlier turns that are not repeated verbatim.
- FAILURES SO FAR lists this session's tool failures: do not repeat a failing action unchanged.
- A closing STATUS message restates the goal and progress: keep working toward it.
- USER REQUEST is the user's message, verbatim: answer it.
- If evidence is missing, say "unknown" and ask for the tool call or action that would provide it."""


def system_text(original: str) -> str:
    """The original system instruction with the pack contract appended (stable)."""
    return f"{original}\n\n{CONTRACT}" if original else CONTRACT


@dataclass(frozen=True)
class PayloadSections:
    """The rendered sections, kept apart so each layer's tokens can be counted on its own."""

    task: str
    evidence: str
    memory: str
    summary: str
    failures: str
    acceptance: str
    request: str

    def text(self) -> str:
        return "\n".join(s for s in (PAYLOAD_HEADER, self.task, self.evidence, self.memory, self.summary,
                                     self.failures, self.acceptance, self.request) if s)


def _bullets(header: str, lines: "list[str] | tuple[str, ...]") -> str:
    return f"{header}\n" + "\n".join(lines) if lines else ""


def render_task(task: TaskSpec, opening: str = "") -> str:
    """`opening`: the (capped) opening request, when the pack pins it; the caller decides when."""
    out = [f"OPENING REQUEST:\n{opening}"] if opening else []
    if task.goal:
        out.append(f"GOAL: {task.goal}")
    if task.step:
        out.append(f"STEP: {task.step}")
    if task.constraints:
        out.append(_bullets("CONSTRAINTS:", [f"- {c}" for c in task.constraints]))
    return "\n".join(out)


def render_acceptance(task: TaskSpec) -> str:
    return _bullets("ACCEPTANCE:", [f"- [ ] {a}" for a in task.acceptance])


def render_request_section(request: Message | None) -> str:
    if request is None:
        return ""
    return f"USER REQUEST (VERBATIM):\n{request.text}"


def render_summary(summary_text: str, fold_lines: "tuple[str, ...]") -> str:
    """The summary zone (running summary) then the fold zone (one line per folded turn)."""
    lines = ([summary_text] if summary_text else []) + [f"- {s}" for s in fold_lines]
    return _bullets("CONVERSATION SUMMARY:", lines)


def render_payload(task: TaskSpec, request: Message | None, evidence: "tuple[Line, ...]", memory: "tuple[Line, ...]",
                   summary_text: str = "", fold_lines: "tuple[str, ...]" = (), failures: str = "",
                   opening: str = "") -> PayloadSections:
    return PayloadSections(
        task=render_task(task, opening),
        evidence=_bullets("EVIDENCE:", [ln.text for ln in evidence]),
        memory=_bullets("MEMORY:", [ln.text for ln in memory]),
        summary=render_summary(summary_text, fold_lines),
        failures=failures,
        acceptance=render_acceptance(task),
        request=render_request_section(request),
    )


def payload_message(payload_text: str, request: Message | None) -> Message:
    """The pack as a user message; non-text parts of the original request (images, files) are kept."""
    extra = tuple(p for p in request.parts if not isinstance(p, TextPart)) if request is not None else ()
    return Message("user", (TextPart(payload_text),) + extra)


def render_request(*, model: str, system_instruction: str, tools: "tuple[ToolSpec, ...]",
                   other_tools: "tuple[dict, ...]", history: "tuple[Turn, ...]", payload: Message,
                   loop: "tuple[Turn, ...]", instructions: "tuple[Message, ...]") -> ModelRequest:
    messages = tuple(m for t in history for m in t.messages) + (payload,) + tuple(m for t in loop for m in t.messages) + instructions
    return ModelRequest(model=model, system_instruction=system_text(system_instruction), messages=messages,
                        tools=tools, other_tools=other_tools)
