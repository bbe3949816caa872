"""What a KNOWN VALUES merge reads of the visible text (the pinned opening request and the verbatim turns,
joined by line breaks): which values it holds as whole tokens or phrases, so the block does not repeat them.

Why apart from the merge: the text comes in parts that mostly stay from one merge to the next, and what
is read of a part (its tokens and runs of word characters) is kept by the part (`visible_part`), as is
whether the text holds each phrase (`SeenText.phrases`): a phrase no part that changed contains keeps
its standing (`SeenText.carried`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

from .values import _WORD

if TYPE_CHECKING:
    from .value_merge import MergedValues

_RUN = re.compile(r"\w+")  # a run of word characters

__all__ = ["SeenText", "visible_part"]

_Part = "tuple[frozenset[str], frozenset[str]]"


def visible_part(part: str) -> _Part:
    """What a merge reads of one part of the visible text: its whole tokens and runs of word characters."""
    return frozenset(_WORD.findall(part)), frozenset(_RUN.findall(part))


class SeenText:
    """Which values one merge's visible text holds: the text's whole tokens and runs of word characters
    (per part of the text, taken from the earlier merge for a part it had: neither crosses the line
    break that joins two parts), and the phrases (values with a space) looked up once per merge, or taken
    from the earlier merge of the same text."""

    def __init__(self, visible: "str | tuple[str, ...]", since: "MergedValues | None",
                 read: "Callable[[str], _Part]") -> None:
        parts = (visible,) if isinstance(visible, str) else visible
        self.text = "\n".join(parts)
        same = since is not None and since.visible == self.text
        known = since.parts if since is not None else {}
        self.parts = {p: known.get(p) or read(p) for p in parts}
        if same:
            self.words, self.runs = since.words, since.runs  # type: ignore[union-attr]
        else:
            self.words = frozenset().union(*(w for w, _ in self.parts.values()))
            self.runs = frozenset().union(*(r for _, r in self.parts.values()))
        self.phrases: dict[str, bool] = dict(since.phrases) if same else {}  # type: ignore[union-attr]

    def phrase(self, v: str, runs: frozenset[str]) -> bool:
        """Whether the text holds `v` (a value with a space, `runs` its runs of word characters) as a whole:
        each of its runs is one of the text's (word characters do not touch it), so most phrases are
        ruled out without a search."""
        held = self.phrases.get(v)
        if held is None:
            held = self.phrases[v] = runs <= self.runs and _holds(self.text, v)
        return held

    def carried(self, since: "MergedValues") -> "Callable[[str, frozenset[str]], bool | None]":
        """Whether the text holds a phrase (with its runs of word characters) without a search: not when
        one of its runs is not the text's, else as in the earlier merge `since` when no part one text has
        and the other has not contains it (None: look it up). A phrase without a line break lies within
        one part, whose ends are not word characters in either text, so the parts both have answer alike."""
        delta = "\n".join([*(p for p in self.parts if p not in since.parts),
                           *(p for p in since.parts if p not in self.parts)])
        phrases, known, runs_now = self.phrases, since.phrases, self.runs

        def carry(v: str, runs: frozenset[str]) -> bool | None:
            if not runs <= runs_now:
                phrases[v] = False  # a run the text lacks: not held, no search (as `phrase`)
                return False
            held = known.get(v)
            if held is None or "\n" in v or v in delta:
                return None
            phrases[v] = held
            return held
        return carry


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
