"""What a coding run's final request must still hold: the files it changed and its latest failures.

From the recording alone (system-independent): the files of the run's final diff (`diff --git a/X b/X`
in `info.submission`) and the last five distinct real failure lines (`failure_lines`) of the tool
outputs before the final call. A file counts as named when its path is a substring of the final
request's text; a failure line when its first 200 characters are (ANSI colours removed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from context_eval.failure_lines import failure_lines  # the definition, not the package's
from aether_context.compress.error_lines import strip_ansi
from measure import string_leaves
from trajectories import Trajectory

__all__ = ["CodingFacts", "coding_facts", "check_final"]

LAST_FAILURES = 5
LINE_CHARS = 200
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)


@dataclass(frozen=True)
class CodingFacts:
    files: tuple[str, ...]  # files of the final diff
    failures: tuple[str, ...]  # last five distinct failure lines before the final call, oldest first


def coding_facts(traj: Trajectory) -> CodingFacts:
    files: list[str] = []
    for _, b in _DIFF_FILE.findall(traj.meta.get("submission") or ""):
        if b not in files:
            files.append(b)
    found = [line[:LINE_CHARS] for turn in traj.turns[:-1] for c in turn.calls
             for text in string_leaves(c.output) for line in failure_lines(text)]
    last: list[str] = []
    for line in reversed(found):
        if line not in last:
            last.append(line)
        if len(last) == LAST_FAILURES:
            break
    return CodingFacts(tuple(files), tuple(reversed(last)))


def check_final(facts: CodingFacts, final_text: str) -> tuple[list[bool], list[bool]]:
    """(file named?, failure line present?) per fact, in the final request's text."""
    text = strip_ansi(final_text)
    return [f in text for f in facts.files], [line in text for line in facts.failures]
