"""Acceptance gating: does the final answer address each open acceptance item? Model-free rules, plus
the judge's prompt and its reply read back. Pure; `adk/acceptance.py` runs it on the model's answer.

The rule: an item is met when the answer contains each of its exact terms (quoted phrases, and
identifiers: words with a digit, `_`, `/`, an inner `.` or an inner capital, e.g. `PAY-88`,
`utils/dates.py`, `parseDate`) and at least half of its other content words (stemmed, stop words
left out). An item with no such terms counts as met.
"""

from __future__ import annotations

import re
from typing import Sequence

from ..retrieval.analyzer import Analyzer

__all__ = ["unmet_items", "repair_note", "judge_prompt", "read_judge"]

_QUOTED = re.compile(r"`([^`]+)`|\"([^\"]+)\"|“([^”]+)”")
_IDENT = re.compile(r"[\w][\w.\-/]*[\w]")
_ANALYZER = Analyzer()


def _is_identifier(word: str) -> bool:
    return any(c.isdigit() or c in "_/" for c in word) or "." in word[1:-1] or any(c.isupper() for c in word[1:])


def _terms(item: str) -> tuple[list[str], set[str]]:
    """The item's exact terms (lower case) and its other content words (analysed)."""
    exact = [next(g for g in m.groups() if g).lower() for m in _QUOTED.finditer(item)]
    rest = _QUOTED.sub(" ", item)
    exact += [w.lower() for w in _IDENT.findall(rest) if _is_identifier(w)]
    words = " ".join(w for w in _IDENT.findall(rest) if not _is_identifier(w))
    return exact, set(_ANALYZER(words))


def unmet_items(answer: str, items: Sequence[str]) -> list[str]:
    """The items `answer` does not address, by the rule above, in their order."""
    text = answer.lower()
    said = set(_ANALYZER(answer))
    out = []
    for item in items:
        exact, words = _terms(item)
        if any(e not in text for e in exact) or 2 * len(words & said) < len(words):
            out.append(item)
    return out


def repair_note(unmet: Sequence[str]) -> str:
    """The user turn of the repair pass: the unmet items, named."""
    listed = "\n".join(f"- {item}" for item in unmet)
    return ("ACCEPTANCE CHECK: your answer does not yet address these acceptance items:\n"
            f"{listed}\nRevise your answer so it meets each of them, or say plainly why one cannot be met.")


def judge_prompt(answer: str, items: Sequence[str]) -> str:
    listed = "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))
    return ("You check an answer against acceptance items.\n<answer>\n" + answer + "\n</answer>\nItems:\n"
            f"{listed}\nReply with the numbers of the items the answer does NOT meet, separated by commas, or NONE.")


def read_judge(reply: str, items: Sequence[str]) -> list[str]:
    """The unmet items the judge named; ValueError for a reply that is neither numbers nor NONE."""
    numbers = [int(n) for n in re.findall(r"\d+", reply)]
    if not numbers and "none" in reply.lower():
        return []
    if not numbers or any(not 1 <= n <= len(items) for n in numbers):
        raise ValueError(f"the judge's reply names no item: {reply[:80]!r}")
    return [item for i, item in enumerate(items, 1) if i in numbers]
