"""References: the names an agent needs to keep after the text that mentioned them is gone.

When old turns are folded or summarised, the exact file paths, failing functions, error messages
and commands are what the model most often needs again, and what a summary most often blurs.
They are extracted here with plain patterns, scored against the goal and by recency, merged
across turns, and rendered as a compact block where each name points at the URI it came from.

Usage::

    refs = extract_references(tool_text, source_uri="artifact://s/1/t7.txt", turn=7)
    refs = merge_references([*old_refs, *refs])
    block = render_references(score_references(refs, goal, current_turn=9), 200, counter)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Literal, Mapping

from ..content import FunctionCall
from ..retrieval.analyzer import STOP_WORDS
from . import _shapes as shapes
from . import error_lines as errs
from ._fit import ELLIPSIS, TokenCounterLike, as_count, safe_end

__all__ = [
    "ReferenceKind", "Reference", "extract_references", "extract_call_references", "score_references",
    "merge_references", "render_references", "KIND_WEIGHTS",
]

ReferenceKind = Literal["error", "file", "function", "command", "decision", "url"]

KIND_ORDER: tuple[ReferenceKind, ...] = ("error", "file", "function", "command", "decision", "url")
KIND_WEIGHTS: Mapping[str, float] = {
    "error": 1.0, "file": 0.9, "function": 0.7, "decision": 0.6, "command": 0.5, "url": 0.5,
}
_GROUP_TITLES = {"error": "Errors", "file": "Files", "function": "Functions", "command": "Commands",
                 "decision": "Decisions", "url": "URLs"}
_MAX_VALUE_CHARS = 200


@dataclass(frozen=True)
class Reference:
    """A named thing seen at `turn`; `source_uri` is where the text that named it is kept.

    Kinds: `error` (exception or error message), `file` (a path, line numbers dropped so mentions
    merge), `function` (a function, method or class name), `command` (a shell command), `decision`
    (a sentence stating a choice or a cause), `url`.
    """

    kind: ReferenceKind
    value: str
    source_uri: str | None = None
    turn: int = 0
    score: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.value)


_EXTENSIONS = (
    "py|pyi|pyx|ipynb|js|jsx|mjs|cjs|ts|tsx|vue|svelte|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|md|rst|txt|"
    "html|htm|css|scss|less|xml|csv|tsv|sql|sh|bash|zsh|c|h|cc|cpp|cxx|hpp|hh|go|rs|java|kt|kts|scala|rb|php|"
    "swift|m|mm|cs|fs|lua|pl|r|ex|exs|erl|hs|clj|dart|proto|gradle|tf|lock|log|diff|patch|mk|cmake|jinja|j2|tpl"
)
# The scheme is bounded so a long dotted token cannot make the search quadratic.
_URL_RE = re.compile(r"(?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^\s<>\"'`)\]}]+")
_FILE_RE = re.compile(
    # The look-behind holds every character the path classes accept, so a match can only start at
    # the beginning of a path-like run: that keeps the search linear on long tokens.
    r"(?<![\w/.@+~-])((?:\.{1,2}/|~/|/)?(?:[\w@+-][\w.@+-]*/)*[\w@+-][\w.@+-]*\.(?:" + _EXTENSIONS + r"))"
    r"(?::\d+(?::\d+)?)?(?![\w/(-])",
    re.I,
)
# Extensions too ambiguous to trust on a bare name (`django.conf`, `np.r`): they need a directory.
_WEAK_EXTENSIONS = frozenset(
    "conf env log lock m mm r h c cc hh mk cs fs pl ex exs erl hs clj tf tpl j2 jinja less dart lua data".split()
)
_DIFF_FILE_RE = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|(?:\+\+\+|---) (?:[ab]/)?(\S+))", re.M)
_FRAME_RE = re.compile(r'File "([^"]+)", line \d+, in ([A-Za-z_]\w*)')
_DEF_RE = re.compile(
    r"\b(?:(?:async\s+)?def|class|function|fn|func(?:\s*\([^)]*\))?)\s+([A-Za-z_$][\w$]*)\s*[(:<{]"
)
_CALL_RE = re.compile(r"`((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\([^`]*\)`")
_DOLLAR_RE = re.compile(r"^[ \t]*\$ +(\S[^\n]*)", re.M)
_FENCE_RE = re.compile(r"```([\w+-]*)[ \t]*\n(.*?)```", re.S)
_SHELL_FENCES = frozenset({"bash", "sh", "shell", "console", "zsh"})
_DECISION_RE = re.compile(
    r"\b(?:decided to|decide to|decision:|we will|we'll|i will use|i'll use|instead of|rather than|fix:|"
    r"the fix (?:is|was)|root cause|the (?:issue|problem|bug) (?:is|was)|chose to|switch(?:ed)? to|"
    r"should use|must not|(?:need|have) to (?:change|move|modify|update|fix|add|remove|replace|use|keep|avoid))\b",
    re.I,
)
_URI_TAIL_RE = re.compile(r" · [a-zA-Z][\w+.-]*://\S*$")  # a fold line's trailing pointer, kept as source_uri
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+|\n+")
# The package's one English stop-word list, plus words every coding goal and reference shares.
_STOPWORDS = STOP_WORDS | frozenset(
    "cannot use using used file files line lines error errors test tests".split())


def extract_references(text: str, *, source_uri: str | None = None, turn: int = 0) -> list[Reference]:
    """Every reference in `text`, once per (kind, value), in order of first appearance."""
    found: list[tuple[int, str, str]] = []
    spans: list[tuple[int, int]] = []  # URLs and diff headers, hidden from the path pattern
    for match in _URL_RE.finditer(text):
        url = match.group(0).rstrip(".,;:!?")
        if url.lower().startswith(("http://", "https://", "ftp://")):
            found.append((match.start(), "url", url))
        spans.append(match.span())
    for match in _DIFF_FILE_RE.finditer(text):
        path = match.group(2) or match.group(3)
        if path and path != "/dev/null":
            found.append((match.start(), "file", path))
        spans.append(match.span())
    work = _blank(text, spans)
    for match in _FRAME_RE.finditer(work):
        found.append((match.start(), "file", match.group(1)))
        found.append((match.start(2), "function", match.group(2)))
    for match in _FILE_RE.finditer(work):
        path = match.group(1)
        if "/" not in path and path.rsplit(".", 1)[1].lower() in _WEAK_EXTENSIONS:
            continue
        found.append((match.start(), "file", path[2:] if path.startswith("./") else path))
    for regex in (_DEF_RE, _CALL_RE):
        found.extend((m.start(1), "function", re.sub(r"^(?:self|cls|this)\.", "", m.group(1)))
                     for m in regex.finditer(work))
    found.extend(_errors(text))
    found.extend(_commands(text))
    found.extend(_decisions(text))
    return _dedupe(found, source_uri, turn)


def extract_call_references(call: FunctionCall, *, source_uri: str | None = None, turn: int = 0) -> list[Reference]:
    """References named by a tool call's arguments: its paths, its command, its URLs."""
    found: list[tuple[int, str, str]] = []
    for position, (key, value) in enumerate(call.args.items()):
        if not isinstance(value, str) or not value.strip():
            continue
        lowered = key.lower()
        if lowered in shapes.PATH_KEYS or lowered.endswith(("_path", "_file")):
            found.append((position, "file", value.strip()))
        elif lowered in ("command", "cmd", "script", "shell", "bash"):
            first = next(line.strip() for line in value.splitlines() if line.strip())
            found.append((position, "command", first))
            found.extend((position, kind, v) for _, kind, v in _raw(extract_references(value)) if kind == "file")
        elif lowered in ("url", "uri", "link", "href") and _URL_RE.match(value.strip()):
            found.append((position, "url", value.strip()))
    return _dedupe(found, source_uri, turn)


def score_references(
    refs: Iterable[Reference], goal_text: str, current_turn: int, *, half_life: float = 8.0
) -> list[Reference]:
    """New references scored by goal-word overlap, recency and kind, best first.

    score = kind weight x (1 + 2 x overlap) x (0.25 + 0.75 x 0.5 ** (turns ago / half_life)), where
    overlap = hits / (hits + 1) counts the reference's words that also occur in the goal.
    """
    if half_life <= 0:
        raise ValueError(f"half_life must be > 0, got {half_life}")
    goal = _words(goal_text)
    scored = []
    for ref in refs:
        hits = len(_words(ref.value) & goal)
        overlap = hits / (hits + 1)
        recency = 0.5 ** (max(0, current_turn - ref.turn) / half_life)
        score = KIND_WEIGHTS.get(ref.kind, 0.5) * (1 + 2 * overlap) * (0.25 + 0.75 * recency)
        scored.append(replace(ref, score=round(score, 6)))
    return sorted(scored, key=_order)


def merge_references(refs: Iterable[Reference]) -> list[Reference]:
    """One reference per (kind, value): the best score, and the URI and turn of the latest mention."""
    merged: dict[tuple[str, str], Reference] = {}
    for ref in refs:
        old = merged.get(ref.key)
        if old is None:
            merged[ref.key] = ref
            continue
        latest = ref if ref.turn >= old.turn else old
        merged[ref.key] = replace(latest, score=max(old.score, ref.score))
    return sorted(merged.values(), key=_order)


def render_references(refs: Iterable[Reference], max_tokens: int, counter: TokenCounterLike,
                      *, title: str = "References:") -> str:
    """A block grouped by kind, `- value · uri` per line, the best references kept within `max_tokens`."""
    count = as_count(counter)
    ranked = sorted(merge_references(refs), key=_order)
    if max_tokens <= 0 or not ranked:
        return ""
    chosen: list[Reference] = []
    used = count(title) + 1
    groups: set[str] = set()
    for ref in ranked:
        cost = count(_ref_line(ref)) + 1 + (0 if ref.kind in groups else count(_GROUP_TITLES[ref.kind]) + 2)
        if used + cost <= max_tokens:
            chosen.append(ref)
            groups.add(ref.kind)
            used += cost
    while chosen:
        text = _render_groups(chosen, title)
        if count(text) <= max_tokens:
            return text
        chosen.pop()  # `chosen` is in rank order: the last one is the least valuable
    return ""


def _render_groups(refs: list[Reference], title: str) -> str:
    lines = [title]
    for kind in KIND_ORDER:
        group = [r for r in refs if r.kind == kind]
        if group:
            lines.append(f"{_GROUP_TITLES[kind]}:")
            lines.extend(_ref_line(r) for r in group)
    return "\n".join(lines)


def _ref_line(ref: Reference) -> str:
    return f"- {ref.value} · {ref.source_uri}" if ref.source_uri else f"- {ref.value}"


def _order(ref: Reference) -> tuple:
    return (-ref.score, -ref.turn, KIND_ORDER.index(ref.kind) if ref.kind in KIND_ORDER else 99, ref.value)


def _errors(text: str) -> list[tuple[int, str, str]]:
    """Exception mentions, `error:` phrases and failure lines; warnings and banner lines are noise."""
    lines = text.splitlines()
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    noise = errs.noise_indices(lines)
    failures = set(errs.failure_line_indices(lines))
    found: list[tuple[int, str, str]] = []
    for i, line in enumerate(lines):
        if i in noise:
            continue
        mentions = errs.exception_mentions(line)
        found.extend((offsets[i] + start, "error", _clip(value)) for start, value in mentions)
        spans = [start for start, _ in mentions]
        if i in failures:
            bare = re.sub(r"^(?:E\s+)?(?:[a-z_]\w*\.)*(?=[A-Z])", "", line.strip())
            found.append((offsets[i], "error", _clip(bare)))
        for start, phrase in errs.error_phrases(line):
            if not any(s <= start for s in spans):
                found.append((offsets[i] + start, "error", _clip("error: " + phrase)))
    return found


def _commands(text: str) -> list[tuple[int, str, str]]:
    found = [(m.start(1), "command", _clip(m.group(1).strip())) for m in _DOLLAR_RE.finditer(text)]
    for m in _FENCE_RE.finditer(text):
        first = next((line.strip() for line in m.group(2).splitlines() if line.strip()), None)
        if first and m.group(1).lower() in _SHELL_FENCES:
            found.append((m.start(2), "command", _clip(first)))
    return found


def _decisions(text: str) -> list[tuple[int, str, str]]:
    prose = _FENCE_RE.sub(lambda m: " " * len(m.group(0)), text)
    found = []
    position = 0
    for sentence in _SENTENCE_SPLIT_RE.split(prose):
        start = prose.find(sentence, position)
        position = max(position, start)
        if _DECISION_RE.search(sentence):
            cleaned = re.sub(r"^\s*(?:THOUGHT|Thought)\s*:\s*", "", " ".join(sentence.split()))
            found.append((start, "decision", _clip(cleaned)))
    return found


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each span replaced by spaces, positions unchanged."""
    if not spans:
        return text
    pieces, last = [], 0
    for start, end in sorted(spans):
        start = max(start, last)
        pieces.append(text[last:start])
        pieces.append(" " * max(0, end - start))
        last = max(last, end)
    pieces.append(text[last:])
    return "".join(pieces)


def _dedupe(found: list[tuple[int, str, str]], source_uri: str | None, turn: int) -> list[Reference]:
    seen: set[tuple[str, str]] = set()
    refs = []
    for _, kind, value in sorted(found, key=lambda f: f[0]):  # stable: ties keep discovery order
        if value and (kind, value) not in seen:
            seen.add((kind, value))
            refs.append(Reference(kind, value, source_uri, turn))  # type: ignore[arg-type]
    return refs


def _raw(refs: list[Reference]) -> list[tuple[int, str, str]]:
    return [(i, r.kind, r.value) for i, r in enumerate(refs)]


def _clip(value: str) -> str:
    value = _URI_TAIL_RE.sub("", " ".join(value.split()))
    if len(value) <= _MAX_VALUE_CHARS:
        return value
    return value[: safe_end(value, _MAX_VALUE_CHARS - 1)].rstrip() + ELLIPSIS


def _words(text: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return {w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if len(w) >= 3 and w not in _STOPWORDS}

