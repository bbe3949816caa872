"""Summaries of folded history: a pluggable summarizer, a model-free default, and a guard.

Old turns end up as fold lines; past a point even those must collapse into one running summary.
An LLM writes the best summaries but costs a call and can fail, so the default here is extractive:
deterministic, incremental (the previous summary plus new fold lines gives the next one) and
hard-capped. `build_handoff_request` is the text an LLM summarizer sends instead, and
`validate_summary` keeps an empty or garbled answer from replacing a good previous summary.

Usage::

    summarizer = ExtractiveSummarizer(TokenCounter())
    summary = summarizer.summarize(None, fold_lines, goal="Fix the admin inline bug", max_tokens=400)
    summary = summarizer.summarize(summary, newer_fold_lines, goal="Fix the admin inline bug", max_tokens=400)
"""

from __future__ import annotations

import inspect
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Hashable, Protocol, Sequence, Union, runtime_checkable

from ..tokens import lines_count
from ._fit import TokenCounterLike, as_count, clip_text
from .references import extract_references

__all__ = [
    "Summarizer", "SummarizeFn", "ExtractiveSummarizer", "HANDOFF_PROMPT", "build_handoff_request",
    "validate_summary", "run_summarizer",
]


@runtime_checkable
class Summarizer(Protocol):
    """Folds new history lines into the previous summary; may be sync or async."""

    def summarize(
        self, previous_summary: str | None, new_items: Sequence[str], *, goal: str, max_tokens: int
    ) -> Union[str, Awaitable[str]]: ...


# A plain function with the signature of `Summarizer.summarize`, for users who need no class.
SummarizeFn = Callable[..., Union[str, Awaitable[str]]]


async def run_summarizer(
    summarizer: Summarizer | SummarizeFn,
    previous_summary: str | None,
    new_items: Sequence[str],
    *,
    goal: str,
    max_tokens: int,
) -> str:
    """Call a sync or async summarizer (object or function) and return its text."""
    call = summarizer.summarize if isinstance(summarizer, Summarizer) else summarizer
    result = call(previous_summary, list(new_items), goal=goal, max_tokens=max_tokens)
    if inspect.isawaitable(result):
        result = await result
    return result


_SECTIONS = ("Progress", "Decisions", "Errors", "Files")
# Importance when the cap forces lines out; recency within a section scales it by 0.5 to 1.
_SECTION_WEIGHT = {"Progress": 1.0, "Files": 1.2, "Decisions": 1.5, "Errors": 1.5}
_HEADER_RE = re.compile(
    r"^\s*(?:#+\s*|[-*•]\s+)?\**\s*(goal|progress|decisions|errors|files)\s*\**\s*(?::\s*(.*)|$)", re.I
)
_TURN_RE = re.compile(r"^\[turn (\d+)\]")
_TURN_SUFFIX_RE = re.compile(r"(?: \(turn \d+\))?(?: · \S+://\S*)?$")
_URI_RE = re.compile(r" · ([a-zA-Z][\w+.-]*://\S*)$")
_PREFIX_RE = re.compile(r"^\[turn \d+\] (?:user|model): ")
_KIND_SECTION = {"decision": "Decisions", "error": "Errors"}
_PLAIN_PROGRESS = 0.7  # a Progress line naming no file, error or decision is the first to go
_Sections = dict[str, dict[str, str]]  # section -> (dedupe key -> line), oldest first
Reading = tuple[tuple[str, str, str], ...]  # what one item puts into the sections: (section, key, line), in order
# `memo(key, compute)`: compute() kept by key (a `PackCache` bound to a kind): a pure function of the key
Memo = Callable[[Hashable, Callable[[], Any]], Any]


@dataclass(frozen=True)
class ExtractiveSummarizer:
    """A model-free summarizer: Goal, Progress, Decisions, Errors and Files, under a hard token cap.

    Each new item becomes a Progress line (clipped to `line_tokens`); references found in it feed
    the other sections. When the summary is over `max_tokens`, the least important, oldest lines
    go first; the Goal line is clipped but never dropped. A previous summary's other text (an LLM's
    prose, its `Next steps:`) is kept under the goal, whole lines, within half the cap.
    """

    counter: TokenCounterLike
    line_tokens: int = 60
    max_progress: int = 40
    max_decisions: int = 12
    max_errors: int = 12
    max_files: int = 30
    memo: Memo | None = field(default=None, compare=False, repr=False)  # keeps each item's reading by content

    def __post_init__(self) -> None:
        if self.line_tokens < 8:
            raise ValueError(f"line_tokens must be >= 8, got {self.line_tokens}")

    def summarize(self, previous_summary: str | None, new_items: Sequence[str], *, goal: str, max_tokens: int) -> str:
        count = as_count(self.counter)
        if max_tokens <= 0:
            return ""
        old_goal, sections, free = _parse(previous_summary or "")
        for item in new_items:
            for section, key, line in self.reading(item):
                _put(sections[section], key, line)
        limits = {"Progress": self.max_progress, "Decisions": self.max_decisions, "Errors": self.max_errors,
                  "Files": self.max_files}
        for name in _SECTIONS:
            kept = list(sections[name].items())[-limits[name]:] if limits[name] > 0 else []
            sections[name] = dict(kept)
        goal_text = " ".join((goal or old_goal).split())
        goal_line = f"Goal: {clip_text(goal_text, max(8, max_tokens // 3), count)}" if goal_text else ""
        # an LLM summary's own text (prose, its other sections) stays, whole lines within a cap, under the goal
        kept_free = _free_text(free, max_tokens // FREE_SHARE - (count(goal_line) + 1 if goal_line else 0), count)
        head = "\n".join(x for x in (goal_line, kept_free) if x)
        return _fit(head, sections, max_tokens, count, lines_count(self.counter, count), self.plain)

    def reading(self, item: str) -> Reading:
        """What `item` puts into the sections: its clipped Progress line, then its decisions, errors and
        files. With a `memo`, read once per content: a session's summaries take in each fold line once."""
        if self.memo is None:
            return self._read(item)
        return self.memo(("reading", item, self.line_tokens), lambda: self._read(item))

    def plain(self, line: str) -> bool:
        """Whether a Progress line names no file, error or decision (it is the first to go).
        With a `memo`, once per line: every summary ranks the lines it keeps again."""
        if self.memo is None:
            return not extract_references(line)
        return self.memo(("plain", line), lambda: not extract_references(line))

    def _read(self, item: str) -> Reading:
        count = as_count(self.counter)
        flat = " ".join(item.split())
        if not flat:
            return ()
        turn = _TURN_RE.match(flat)
        uri = _URI_RE.search(flat)
        tag = f" (turn {turn.group(1)})" if turn else ""
        tag += f" · {uri.group(1)}" if uri else ""
        clipped = clip_text(flat, self.line_tokens, count)
        out = [("Progress", clipped, clipped)]
        for ref in extract_references(item):
            if ref.kind in ("decision", "error"):
                value = _PREFIX_RE.sub("", ref.value).split(" · ")[0] if ref.kind == "decision" else ref.value
                value = clip_text(value, self.line_tokens, count)
                out.append((_KIND_SECTION[ref.kind], value, value + tag))
            elif ref.kind == "file":
                out.append(("Files", ref.value, ref.value))
        return tuple(out)


def _put(entries: dict[str, str], key: str, text: str) -> None:
    """Append, moving an entry seen before to the end: it is now the most recent."""
    entries.pop(key, None)
    entries[key] = text


_OTHER_HEADER_RE = re.compile(r"^\s*(?:#+\s*)?\**\s*[A-Z][A-Za-z ]{1,30}?\s*\**\s*:(?:\s|$)")
FREE_SHARE = 2  # an LLM summary's free text keeps at most 1/2 of the summary's cap


def _parse(summary: str) -> tuple[str, _Sections, list[str]]:
    """Read a previous summary: its goal, its known sections, and the rest (an LLM's prose and sections
    of its own, such as `Next steps:`), line by line as written."""
    goal = ""
    sections: _Sections = {name: {} for name in _SECTIONS}
    free: list[str] = []
    current: str | None = None
    for raw in summary.splitlines():
        line = raw.strip()
        if not line:
            continue
        header = _HEADER_RE.match(line)
        if header:
            name = header.group(1).capitalize()
            rest = (header.group(2) or "").strip()
            if name == "Goal":
                goal = rest or goal
                continue
            current = name
            if not rest:
                continue
            line = rest
        elif _OTHER_HEADER_RE.match(line):
            current = None
        if current is None:
            free.append(line)
            continue
        text = re.sub(r"^[-*•]\s+", "", line)
        key = _TURN_SUFFIX_RE.sub("", text) if current in ("Errors", "Decisions") else text
        _put(sections[current], key, text)
    return goal, sections, free


def _free_text(free: Sequence[str], max_tokens: int, count: Callable[[str], int]) -> str:
    """The free lines from the first, whole, while they fit `max_tokens` (the first is clipped if alone it
    does not)."""
    kept: list[str] = []
    for line in free:
        if count("\n".join([*kept, line])) > max_tokens:
            break
        kept.append(line)
    if not kept and free and max_tokens > 0:
        return clip_text(free[0], max_tokens, count)
    return "\n".join(kept)


def _fit(goal_line: str, sections: _Sections, max_tokens: int, count: Callable[[str], int],
         count_whole: Callable[[str], int], plain: Callable[[str], bool]) -> str:
    """The best lines within `max_tokens`; the rendered text is counted by `count_whole` (by its lines where
    the counter can: each try drops one line of the last)."""
    ranked: list[tuple[float, int, int, str]] = []  # (score, section index, position, text)
    for s, name in enumerate(_SECTIONS):
        entries = list(sections[name].values())
        for i, text in enumerate(entries):
            recency = i / (len(entries) - 1) if len(entries) > 1 else 1.0
            weight = _SECTION_WEIGHT[name]
            if name == "Progress" and plain(text):
                weight *= _PLAIN_PROGRESS
            ranked.append((weight * (0.5 + 0.5 * recency), s, i, text))
    ranked.sort(key=lambda r: (-r[0], r[1], -r[2]))
    budget = max_tokens - (count(goal_line) + 1 if goal_line else 0)
    kept: list[tuple[float, int, int, str]] = []
    used = 0
    headers: set[int] = set()
    for row in ranked:
        cost = count("- " + row[3]) + 1 + (0 if row[1] in headers else count(_SECTIONS[row[1]] + ":") + 1)
        if used + cost <= budget:
            kept.append(row)
            headers.add(row[1])
            used += cost
    while True:
        text = _render(goal_line, kept)
        if count_whole(text) <= max_tokens:
            return text
        if not kept:
            return clip_text(goal_line, max_tokens, count)
        kept.pop()  # `kept` is in rank order: the last is the least important


def _render(goal_line: str, kept: list[tuple[float, int, int, str]]) -> str:
    lines = [goal_line] if goal_line else []
    for s, name in enumerate(_SECTIONS):
        rows = sorted((r for r in kept if r[1] == s), key=lambda r: r[2])
        if rows:
            lines.append(f"{name}:")
            lines.extend(f"- {r[3]}" for r in rows)
    return "\n".join(lines)


HANDOFF_PROMPT = """\
You are writing a CONTEXT CHECKPOINT: a handoff summary for another model that will resume this \
task without seeing the history below. Merge the previous summary with the new events.

Write these sections, as short bullet points, leaving out a section only when it has nothing:
Goal: the task in one line.
Progress: what has been done and what it showed, in order.
Decisions: choices made and why; approaches ruled out.
Constraints: requirements, user preferences and limits that still apply.
Next steps: what remains, most urgent first.
Files: files read or changed, and how.
Errors: errors met, and whether and how each was resolved.

Keep exact file paths, function names, commands, error messages, ids and artifact:// URIs as \
written; the next model can open a URI to recover details. Do not invent facts. Output only the summary."""


def build_handoff_request(previous_summary: str | None, new_items: Sequence[str], goal: str, max_tokens: int) -> str:
    """The full prompt an LLM summarizer sends: instructions, goal, previous summary, new events."""
    events = "\n".join(f"- {' '.join(item.split())}" for item in new_items if item.strip()) or "- (none)"
    return (
        f"{HANDOFF_PROMPT}\n\nWrite at most {max_tokens} tokens.\n\n"
        f"Goal: {' '.join(goal.split()) or '(not given)'}\n\n"
        f"Previous summary:\n{(previous_summary or '').strip() or '(none)'}\n\n"
        f"New events, oldest first:\n{events}\n"
    )


_REFUSAL_RE = re.compile(r"^(?:i'?m sorry|i am sorry|sorry,|i cannot|i can'?t|i can not|i'?m unable|as an ai)\b", re.I)
_FENCE_WRAP_RE = re.compile(r"^```[\w-]*\n(.*)\n```$", re.S)
_WORD_RE = re.compile(r"[^\W\d_]{2,}")


def validate_summary(text: str | None, max_tokens: int, counter: TokenCounterLike) -> str | None:
    """A cleaned summary within `max_tokens`, or None when it is empty, a refusal or garbage.

    Callers keep the previous summary on None, so a failed summarizer call never loses history.
    An over-long summary is cut at the last whole line that fits.
    """
    if not isinstance(text, str) or max_tokens <= 0:
        return None
    cleaned = text.strip()
    fenced = _FENCE_WRAP_RE.match(cleaned)
    if fenced:
        cleaned = fenced.group(1).strip()
    count = as_count(counter)
    if cleaned and count(cleaned) > max_tokens:
        lines = cleaned.splitlines()
        kept: list[str] = []
        for line in lines:
            if count("\n".join([*kept, line])) > max_tokens:
                break
            kept.append(line)
        cleaned = "\n".join(kept).strip() or clip_text(lines[0], max_tokens, count)
    return cleaned if _looks_like_prose(cleaned) else None


def _looks_like_prose(text: str) -> bool:
    if not text or _REFUSAL_RE.match(text):
        return False
    words = _WORD_RE.findall(text)
    if len(words) < 3:
        return False
    visible = [c for c in text if not c.isspace()]
    letters = sum(1 for c in visible if c.isalpha())
    if letters < 0.25 * len(visible) or text.count("\ufffd") > 0.05 * len(visible):
        return False
    if len(words) >= 20 and Counter(w.lower() for w in words).most_common(1)[0][1] > 0.5 * len(words):
        return False  # one word over and over: a degenerate generation
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return not (len(lines) >= 6 and len(set(lines)) < 0.3 * len(lines))
