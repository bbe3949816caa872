"""What a KNOWN VALUES merge reads of the visible text (the pinned opening request and the verbatim turns,
joined by line breaks): which values it holds as whole tokens or phrases, so the block does not repeat them.

The text comes in parts (the opening request, each verbatim turn) that mostly stay from one compaction
to the next: what is read of a part (its tokens and runs of word characters) can be kept by the part
(`visible_part`).
"""

from __future__ import annotations

import re
from typing import Callable

from .values import _WORD

_RUN = re.compile(r"\w+")  # a run of word characters

__all__ = ["SeenText", "visible_part"]

_Part = "tuple[frozenset[str], frozenset[str]]"


def visible_part(part: str) -> _Part:
    """What a merge reads of one part of the visible text: its whole tokens and runs of word characters."""
    return frozenset(_WORD.findall(part)), frozenset(_RUN.findall(part))


class SeenText:
    """Which values one merge's visible text holds: the text's whole tokens and runs of word characters
    (per part of the text: neither crosses the line break that joins two parts), and the phrases (values
    with a space) looked up once per merge."""

    def __init__(self, visible: "str | tuple[str, ...]", read: "Callable[[str], _Part]") -> None:
        parts = (visible,) if isinstance(visible, str) else visible
        self.text = "\n".join(parts)
        read_parts = [read(p) for p in parts]
        self.words = frozenset().union(*(w for w, _ in read_parts))
        self.runs = frozenset().union(*(r for _, r in read_parts))
        self.phrases: dict[str, bool] = {}

    def phrase(self, v: str, runs: frozenset[str]) -> bool:
        """Whether the text holds `v` (a value with a space, `runs` its runs of word characters) as a whole:
        each of its runs is one of the text's (word characters do not touch it), so most phrases are
        ruled out without a search."""
        held = self.phrases.get(v)
        if held is None:
            held = self.phrases[v] = runs <= self.runs and _holds(self.text, v)
        return held


def _holds(text: str, phrase: str) -> bool:
    """Whether `text` holds `phrase` as a whole (no word character just before or after it: a regex
    `(?<!\\w)phrase(?!\\w)`, without compiling one per phrase)."""
    at = text.find(phrase)
    while at >= 0:
        end = at + len(phrase)
        if not (at and _word_char(text[at - 1])) and not (end < len(text) and _word_char(text[end])):
            return True
        at = text.find(phrase, at + 1)
    return False


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"  # what `\w` matches in a str pattern
