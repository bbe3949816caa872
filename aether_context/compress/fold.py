r"""Folding old turns into one line each: what was done, with what, and how it ended.

An old tool call and its result cost hundreds of tokens but the model mostly needs to remember
that it happened, on what, and whether it worked; the full result stays behind a URI it can
re-read. A fold line keeps exactly that. Lines are built by shrinking the argument and outcome
parts in a fixed order until the line fits, so the same turn always folds to the same bytes.

Usage::

    >>> from aether_context.content import FunctionCall, FunctionResponse
    >>> from aether_context.tokens import TokenCounter
    >>> fold_tool_pair(12, FunctionCall("read_file", {"path": "src/a.py"}),
    ...                FunctionResponse("read_file", {"content": "import os\n" * 230}),
    ...                uri="artifact://s/1/t12.json", counter=TokenCounter())
    '[turn 12] read_file(path="src/a.py") → ok, 230 lines: import os · artifact://s/1/t12.json'
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping

from ..content import Blob, FunctionCall, FunctionResponse, Message, canonical_json
from . import _shapes as shapes
from .error_lines import (
    failure_line_indices, last_failure_line, noise_indices, run_counts, strip_ansi, traceback_ends,
)
from ._fit import ELLIPSIS, TokenCounterLike, as_count, clip_text, safe_end
from .tool_results import brief_value, classify_tool_output
from .values import argument_order, render_call

__all__ = ["fold_tool_pair", "fold_message", "describe_outcome"]

# (argument chars, outcome chars) tried in order: arguments shrink first, the outcome last.
# The arguments name what was done to what (ids, paths): the outcome shrinks first once they are at 24.
_SHRINK_STEPS = ((80, 160), (40, 160), (40, 100), (40, 60), (24, 60), (24, 32), (24, 16), (16, 0), (12, 0), (0, 0))
_SENTENCE_RE = re.compile(r"(.+?[^\d\s][.!?])(?:\s|$)", re.S)  # "1." in a list does not end one
_FENCE_RE = re.compile(r"```([\w+-]*)[ \t]*\n(.*?)```", re.S)
_SHELL_FENCES = frozenset({"bash", "sh", "shell", "console", "zsh"})
_THOUGHT_RE = re.compile(r"^\s*(?:THOUGHT|Thought|Reasoning|Plan)\s*:\s*")
_OMITTED_RE = re.compile(r"^… \d+ lines? omitted …$|^…\[\d+ tokens omitted")  # the compressors' own markers
_MEANINGFUL_RE = re.compile(r"[0-9A-Za-z\u00c0-\uffff].*[0-9A-Za-z\u00c0-\uffff]")


def fold_tool_pair(
    turn_index: int,
    call: FunctionCall,
    response: FunctionResponse,
    *,
    uri: str | None,
    counter: TokenCounterLike,
    max_tokens: int = 60,
) -> str:
    """One line for a call and its response: `[turn N] name(args) → outcome · uri`."""
    count = as_count(counter)
    outcome = describe_outcome(call.name, response.response, call.args)
    suffix = f" · {uri}" if uri else ""
    for arg_chars, out_chars in _SHRINK_STEPS:
        brief = _clip_chars(outcome, out_chars) if out_chars else ELLIPSIS

        def render(args: str) -> str:
            return f"[turn {turn_index}] {call.name}({args}) → {brief}{suffix}"

        if count(render(ELLIPSIS if call.args else "")) > max_tokens:
            continue
        args = _fit_args(_brief_args(call.args, arg_chars), lambda a: count(render(a)) <= max_tokens)
        if args is not None:
            return render(args)
    return _keep_uri(f"[turn {turn_index}] {call.name}(…)", suffix, max_tokens, count)


def _keep_uri(head: str, suffix: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The last resort of a fold line: the URI goes out whole, whatever the cap. The name and arguments
    go first (then the head is clipped); a line over its soft cap beats a URI the model cannot recall.
    The fold zone counts each line as rendered, so its budget sees the overrun."""
    if not suffix:
        return clip_text(head, max_tokens, count)
    turn = head.split("] ", 1)[0] + "]"
    for line in (head + suffix, turn + suffix):
        if count(line) <= max_tokens:
            return line
    return turn + suffix


def fold_message(turn_index: int, message: Message, counter: TokenCounterLike, max_tokens: int = 60) -> str:
    """One line for a plain turn: role, first sentence, a shell command it ran, calls it made."""
    count = as_count(counter)
    text = message.text.strip()
    extras: list[str] = []
    if shapes.is_command_shape(text):  # a command result sent back as user text (mini-swe-agent)
        lead = describe_outcome("bash", text)
    else:
        body = _FENCE_RE.sub(" ", text)
        lead = first_sentence(_THOUGHT_RE.sub("", body))
        command = _fenced_command(text)
        if command:
            extras.append(f"$ {command}")
    if message.calls:
        extras.append("calls " + ", ".join(render_call(c.name, c.args, 24) for c in message.calls))
    if message.responses:
        extras.append("results of " + ", ".join(r.name for r in message.responses))
    images = sum(1 for p in message.parts if isinstance(p, Blob))
    if images:
        extras.append(f"[{images} image{'s' if images != 1 else ''}]")
    prefix = f"[turn {turn_index}] {message.role}: "
    for lead_chars, extra_chars in ((200, 120), (120, 80), (80, 60), (48, 40), (24, 24), (12, 0), (0, 0)):
        parts = [_clip_chars(lead, lead_chars)] if lead and lead_chars else []
        parts.extend(_clip_chars(e, extra_chars) for e in extras if extra_chars)
        line = prefix + " · ".join(p for p in parts if p)
        if count(line) <= max_tokens:
            return line.rstrip()
    return clip_text(prefix.rstrip(), max_tokens, count)


def describe_outcome(tool_name: str, payload: Any, args: Mapping[str, Any] | None = None) -> str:
    """How a tool call ended, in a few words: the error first when there is one."""
    value = shapes.normalize_payload(payload)
    if shapes.is_offload_envelope(value):
        return _offloaded_outcome(tool_name, value["summary"], args)
    error = shapes.error_summary(value)
    if error:
        return f"error: {error}"
    kind = classify_tool_output(tool_name, value)
    if kind == "command":
        return _command_outcome(value)
    if kind == "file_read":
        content = shapes.file_content(value)
        n = len(content.splitlines())
        path = shapes.file_path(value, None)
        named = f" ({path})" if path and not (args and path in args.values()) else ""
        lead = _meaningful_line(content)
        return f"ok, {n} line{'s' if n != 1 else ''}{named}" + (f": {lead}" if lead else "")
    if kind == "search":
        results = shapes.search_results(value, by_name=True) or []
        titles = "; ".join(_flat(shapes.first_value(r, shapes.TITLE_KEYS)) for r in results[:3])
        return f"{len(results)} result{'s' if len(results) != 1 else ''}" + (f": {titles}" if titles.strip("; ") else "")
    if kind == "json":
        return _json_outcome(value)
    text = value if isinstance(value, str) else canonical_json(value)
    return _meaningful_line(text) or "ok (empty)"


def first_sentence(text: str, min_chars: int = 40) -> str:
    """The opening sentences up to `min_chars`, whitespace collapsed ("Hi!" alone says little)."""
    flat = " ".join(text[:2000].split())
    taken = ""
    for match in _SENTENCE_RE.finditer(flat):
        taken = flat[: match.end(1)]
        if len(taken) >= min_chars:
            return taken
    return taken if len(taken) >= len(flat) else flat


def _command_outcome(value: Any) -> str:
    result = shapes.parse_command(value)
    text = strip_ansi("\n".join(out for _, out in result.streams))
    return _text_outcome(result.exit_code, text, len(text.splitlines()))


_COMPACT_HEAD_RE = re.compile(r"^(?:exit code (-?\d+)|command output) · (\d+) lines?")


def _offloaded_outcome(tool_name: str, summary: str, args: Mapping[str, Any] | None) -> str:
    """An offloaded result's compact form, described like the original (its head line gives code and size)."""
    head, _, body = summary.partition("\n")
    m = _COMPACT_HEAD_RE.match(head)
    if not m:
        return describe_outcome(tool_name, summary, args)
    code = int(m.group(1)) if m.group(1) is not None else None
    return _text_outcome(code, body, int(m.group(2)))


def _text_outcome(code: int | None, text: str, n: int) -> str:
    """`exit N, M lines: lead`; a failure (nonzero exit, crash, failing tests) names its telling line and counts."""
    status = f"exit {code}" if code is not None else "ran"
    if n == 0 or not text.strip():
        return f"{status}, no output"
    lines = text.splitlines()
    counts = run_counts(text)
    error = last_failure_line(text)
    finals = traceback_ends(lines)[0]
    failed = (code not in (0, None) or bool(finals) or bool(failure_line_indices(lines, finals))
              or (counts is not None and counts.failed))
    size = f"{n} line{'s' if n != 1 else ''}"
    if failed or (code is None and error):
        said = [error or _meaningful_line(text, lines) or "no output"]
        if counts is not None and counts.line not in said[0]:
            said.append(counts.line.strip("= "))
        lead = f"{status}, {size}, failed: " if code in (0, None) else f"{status}: "
        return lead + " · ".join(said)
    files = shapes.diff_files(text)
    if files:
        return f"{status}, diff of {len(files)} file{'s' if len(files) != 1 else ''}: " + ", ".join(files)
    detail = counts.line.strip("= ") if counts is not None else _meaningful_line(text, lines)
    return f"{status}, {size}" + (f": {detail}" if detail else "")


def _json_outcome(value: Any) -> str:
    if isinstance(value, list):
        first = value[0] if value else None
        if isinstance(first, Mapping):
            return f"{len(value)} items: " + _record_brief(first)
        return f"{len(value)} items" + (f": {brief_value(first, len, 40)}" if first is not None else "")
    if isinstance(value, Mapping):
        return "ok: " + _record_brief(value) if value else "ok (empty)"
    return canonical_json(value)


def _record_brief(record: Mapping[str, Any]) -> str:
    fields = [f"{k}={brief_value(record[k], len, 30)}" for k in shapes.ordered_keys(record)
              if not isinstance(record[k], (dict, list))]
    return ", ".join(fields[:6]) or "{" + ", ".join(shapes.ordered_keys(record)[:6]) + "}"


def _brief_args(args: Mapping[str, Any], max_chars: int) -> list[str]:
    """`key=value` items in `argument_order` (never the call's own order: re-packs give the same bytes),
    values as canonical JSON clipped to `max_chars`; no items at all when it is 0."""
    if max_chars <= 0:
        return [ELLIPSIS] if args else []
    parts = []
    for key in argument_order(args):
        value = args[key]
        if isinstance(value, str):
            rendered = json.dumps(_clip_chars(" ".join(value.split()), max_chars), ensure_ascii=False)
        else:
            rendered = _clip_chars(canonical_json(value), max_chars)
        parts.append(f"{key}={rendered}")
    return parts


def _fit_args(items: list[str], fits: Callable[[str], bool]) -> str | None:
    """As many leading items as fit, with `…` for the rest; None when not even one fits."""
    kept: list[str] = []
    for i, item in enumerate(items):
        more = i + 1 < len(items)
        candidate = ", ".join([*kept, item, ELLIPSIS] if more else [*kept, item])
        if fits(candidate):
            kept.append(item)
        elif kept:
            return ", ".join([*kept, ELLIPSIS])
        else:
            return None
    return ", ".join(kept)


def _fenced_command(text: str) -> str | None:
    """The first line of the first shell block: the command a mini-swe-agent style turn ran."""
    for match in _FENCE_RE.finditer(text):
        if match.group(1).lower() in _SHELL_FENCES:
            return next((line.strip() for line in match.group(2).splitlines() if line.strip()), None)
    return None


def _meaningful_line(text: str, lines: list[str] | None = None) -> str:
    """The first line with some words in it that is not a warning or banner, skipping blanks and rulers."""
    lines = text.splitlines() if lines is None else lines
    noise = noise_indices(lines)
    for i, line in enumerate(lines):
        if i not in noise and _MEANINGFUL_RE.search(line) and not _OMITTED_RE.match(line):
            return " ".join(line.split())
    return ""


def _flat(value: Any) -> str:
    return " ".join((value if isinstance(value, str) else canonical_json(value) if value is not None else "").split())


def _clip_chars(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[: safe_end(text, max(0, max_chars - 1))].rstrip() + ELLIPSIS

