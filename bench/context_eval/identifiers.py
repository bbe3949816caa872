"""Identifier uses in tool loops: values the agent got from the user or a tool and later passed to a tool.

A use is (model call, value): a string or number leaf (at least 3 characters) of a tool call's
arguments that appeared, as a whole token, in an earlier user message or tool result of the same
run, and is not in the system instruction (always sent, nothing to remember). The value must be in
the request of the model call that made the tool call: the model can only copy what it was sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from measure import string_leaves
from trajectories import Trajectory

__all__ = ["Use", "identifier_uses", "present"]

MIN_CHARS = 3


@dataclass(frozen=True)
class Use:
    call: int  # index of the model call that issued the tool call
    tool: str
    value: str
    source: str  # "user" or "tool" (where it was first seen)


def _token(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(value)}(?!\w)")


def present(value: str, text: str) -> bool:
    """`value` occurs in `text` as a whole token."""
    return value in text and _token(value).search(text) is not None


def identifier_uses(traj: Trajectory) -> list[Use]:
    """Every identifier use of a run, in call order (a value counts once per call)."""
    seen: list[tuple[str, str]] = []  # (text, source) seen so far
    uses: list[Use] = []
    call = 0
    for inv in traj.invocations:
        seen.append((inv.user, "user"))
        for turn in inv.turns:
            counted: set[str] = set()
            for c in turn.calls:
                for value in string_leaves(c.args):
                    value = value.strip()
                    if len(value) < MIN_CHARS or value in counted or present(value, traj.system):
                        continue
                    source = next((src for text, src in seen if present(value, text)), None)
                    if source:
                        counted.add(value)
                        uses.append(Use(call, c.name, value, source))
            for c in turn.calls:
                seen.append(("\n".join(string_leaves(c.output)), "tool"))
            call += 1
    return uses
