r"""Typed compression of tool outputs: each kind keeps what a model needs to act on it.

A generic head/tail cut treats a 500-line traceback, a search result and a flight record alike.
Reading the shape first lets each keep its decision-relevant part: a search keeps its top titles,
a file read its size and first lines, a command its exit code and every error line, a JSON record
its ids, status and error fields. The full output stays behind `uri`, named on the last line.

Usage::

    >>> from aether_context.tokens import TokenCounter
    >>> log = "<returncode>1</returncode>\n<output>\n" + "collecting ...\n" * 500 + "ValueError: bad config\n</output>"
    >>> out = compress_tool_output("bash", log, max_tokens=40, counter=TokenCounter(), uri="artifact://s/1/t4.txt")
    >>> print(out.text)
    exit code 1 · 501 lines
    collecting ...
    … 499 lines omitted …
    ValueError: bad config
    full output: artifact://s/1/t4.txt
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

from ..content import canonical_json
from . import _shapes as shapes
from . import error_lines
from ._fit import TokenCounterLike, as_count, clip_text, fit_lines
from .middle_out import middle_out

__all__ = ["ToolOutputKind", "CompressedOutput", "classify_tool_output", "compress_tool_output", "render_payload"]

ToolOutputKind = Literal["search", "file_read", "command", "json", "text"]

_CHARS_PER_TOKEN_MAX = 12  # longer text is assumed not to fit, so it is not counted in full
_ITEM_FIELDS = 12  # fields shown per list item; a line rarely has room for more
_HEAD_LINES = 5  # command output lines always offered from the start...
_TAIL_LINES = 10  # ...and from the end, where results and errors usually are
_SYMBOL_RE = re.compile(r"^[ \t]*(?:\d+[ \t]+)?(?:async[ \t]+)?(class|def|function|func|fn)[ \t]+([A-Za-z_]\w*)", re.M)


@dataclass(frozen=True)
class CompressedOutput:
    """A tool output as it goes into the prompt; `uri` names where the full output is kept."""

    kind: ToolOutputKind
    text: str
    original_tokens: int
    compressed_tokens: int
    uri: str | None = None

    @property
    def compressed(self) -> bool:
        """False when the output fitted and `text` is the original rendering."""
        return self.compressed_tokens < self.original_tokens


def render_payload(payload: Any) -> str:
    """The original output as text: strings as they are, anything else as canonical JSON."""
    return payload if isinstance(payload, str) else canonical_json(payload)


def classify_tool_output(tool_name: str, payload: Any) -> ToolOutputKind:
    """The kind of a tool output, from its shape first and its tool's name second."""
    return _classify(tool_name, shapes.normalize_payload(payload))


def _classify(tool_name: str, value: Any) -> ToolOutputKind:
    if shapes.is_command_shape(value):
        return "command"
    by_search_name = shapes.is_search_name(tool_name)
    if shapes.search_results(value, by_name=by_search_name) is not None:
        return "search"
    if shapes.is_file_read_shape(value):
        return "file_read"
    if shapes.is_file_read_name(tool_name) and (isinstance(value, str) or shapes.first_value(
            value, shapes.CONTENT_KEYS) is not None):
        return "file_read"
    if shapes.is_command_name(tool_name) and (isinstance(value, str) or (
            isinstance(value, Mapping) and "output" in value)):
        return "command"
    if isinstance(value, (dict, list)):
        return "json"
    return "text"


def compress_tool_output(
    tool_name: str,
    payload: Any,
    *,
    max_tokens: int,
    counter: TokenCounterLike,
    uri: str | None = None,
    args: Mapping[str, Any] | None = None,
    search_top: int = 5,
    file_head_lines: int = 10,
) -> CompressedOutput:
    """Compress one tool output to at most `max_tokens` tokens (an output that fits is kept as is).

    `args` are the call's arguments, used to name the file of a read whose result omits its path.
    Every compressed form ends with `full output: <uri>` when `uri` is given.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    if search_top < 1 or file_head_lines < 0:
        raise ValueError(f"search_top must be >= 1 and file_head_lines >= 0, got {search_top} and {file_head_lines}")
    count = as_count(counter)
    value = shapes.normalize_payload(payload)
    kind = _classify(tool_name, value)
    original = render_payload(payload)
    original_tokens = count(original)
    if original_tokens <= max_tokens:
        return CompressedOutput(kind, original, original_tokens, original_tokens, uri)
    footer = f"full output: {uri}" if uri else None
    if kind == "command":
        text = _compress_command(value, max_tokens, count, footer)
    elif kind == "file_read":
        text = _compress_file(value, args, max_tokens, count, footer, file_head_lines)
    elif kind == "search":
        text = _compress_search(value, max_tokens, count, footer, search_top)
    elif kind == "json":
        text = _compress_json(value, max_tokens, count, footer)
    else:
        text = _with_footer(lambda budget: middle_out(render_payload(value), budget, count), max_tokens, count, footer)
    return CompressedOutput(kind, text, original_tokens, count(text), uri)


def _with_footer(body: Callable[[int], str], max_tokens: int, count: Callable[[str], int], footer: str | None) -> str:
    """`body(budget)` followed by the footer line, re-measured as a whole."""
    if not footer:
        return body(max_tokens)
    budget = max_tokens - count("\n" + footer)
    while budget > 0:
        text = body(budget)
        joined = f"{text}\n{footer}" if text else footer
        if count(joined) <= max_tokens:
            return joined
        budget -= 1
    return clip_text(footer, max_tokens, count)


def _line_cap(max_tokens: int) -> int:
    return max(8, max_tokens // 4)


def _clip_line(line: str, cap: int, count: Callable[[str], int]) -> str:
    return clip_text(line, cap, count) if len(line) > cap else line


# ---- command ----------------------------------------------------------------------------------------

def _compress_command(value: Any, max_tokens: int, count, footer: str | None) -> str:
    result = shapes.parse_command(value)
    cap = _line_cap(max_tokens)
    stream_lines = [(label, error_lines.strip_ansi(text).splitlines()) for label, text in result.streams]
    total = sum(len(lines) for _, lines in stream_lines)
    # Unknown exit codes count as failures; exit 0 too when the output crashed or reports failing tests.
    failed = result.exit_code != 0 or any(_output_failed(out) for _, out in stream_lines)
    head = [f"exit code {result.exit_code}" if result.exit_code is not None else "command output"]
    head.append(f"{total} line{'s' if total != 1 else ''}")
    if result.note:
        head.append(result.note)
    lines: list[tuple[tuple, str]] = []
    if result.command:
        lines.append(((0, 1), "$ " + _clip_line(result.command, cap, count)))
    lines.insert(0, ((0, 0), " · ".join(head)))
    labelled = len(stream_lines) > 1 or any(label == "stderr" for label, _ in stream_lines)
    for label, out in stream_lines:
        if labelled:
            lines.append(((0, 2), f"{label} ({len(out)} lines):"))
        roles = _LineRoles.of(out)
        for i, line in enumerate(out):
            text = line
            if i in roles.diff_headers:
                hunks = roles.diff_headers[i]
                text = f"{line} ({hunks} hunk{'s' if hunks != 1 else ''})"
            # the decisive line and its assertion details stay whole: the output is cut between lines
            keep = max(cap, max_tokens * 3 // 4) if i in roles.decisive else cap
            lines.append((roles.rank(i, line, failed), _clip_line(text, keep, count)))
    return fit_lines(lines, max_tokens, count, footer=footer)


def _output_failed(lines: list[str]) -> bool:
    """A crash or a test run reporting failures, whatever the exit code said."""
    counts = error_lines.run_counts("\n".join(lines))
    return bool(error_lines.traceback_ends(lines)[0]) or (counts is not None and counts.failed)


@dataclass(frozen=True)
class _LineRoles:
    """What each line of a command's output is: failure, counts, diff header, noise (by index)."""

    n: int
    finals: frozenset[int]
    frames: frozenset[int]
    failures: frozenset[int]
    noise: frozenset[int]
    counts: int | None
    diff_headers: Mapping[int, int]
    decisive: frozenset[int] = frozenset()  # the decisive line and its assertion details

    @classmethod
    def of(cls, out: list[str]) -> "_LineRoles":
        finals, frames = error_lines.traceback_ends(out)
        decisive = frozenset(error_lines.decisive_span(out))
        return cls(len(out), frozenset(finals), frozenset(frames), frozenset(error_lines.failure_line_indices(out)),
                   frozenset(error_lines.noise_indices(out)), error_lines.counts_line_index(out),
                   shapes.diff_headers(out), decisive)

    def rank(self, i: int, line: str, failed: bool) -> tuple:
        """Lower keeps first: the decisive line and its details, counts and diff headers, failure lines
        (newest first), errors, head and tail."""
        from_end = self.n - 1 - i
        if i in self.decisive:
            return (0, 2, i)
        if i == self.counts or i in self.diff_headers:
            return (0, 3, i)
        if i in self.finals or i in self.failures:
            return (1, 0, from_end)
        if i in self.noise:
            return (5, min(i, from_end))
        error = i in self.frames or error_lines.is_error_line(line)
        if error and failed:
            return (1, 1, from_end)
        if i < _HEAD_LINES or from_end < _TAIL_LINES:
            return (2, min(i, from_end))
        if error:
            return (3, from_end)
        return (4, min(i, from_end))


# ---- file read --------------------------------------------------------------------------------------

def _compress_file(value: Any, args, max_tokens: int, count, footer: str | None, head_lines: int) -> str:
    content = shapes.file_content(value)
    path = shapes.file_path(value, args) or "file"
    all_lines = content.splitlines()
    cap = _line_cap(max_tokens)
    size = f"{path}: {len(all_lines)} lines, {len(content)} chars"
    lines: list[tuple[tuple, str]] = [((0, 0), size)]
    shown = all_lines[:head_lines]
    lines.extend(((1, i), _clip_line(line, cap, count)) for i, line in enumerate(shown))
    if len(all_lines) > len(shown):
        lines.append(((0, 1), f"… {len(all_lines) - len(shown)} more lines"))
    symbols = [name for _, name in _SYMBOL_RE.findall(content)]
    if symbols:
        listed = ", ".join(dict.fromkeys(symbols))
        lines.append(((2, 0), _clip_line(f"defines: {listed}", cap, count)))
    return fit_lines(lines, max_tokens, count, footer=footer)


# ---- search -----------------------------------------------------------------------------------------

def _compress_search(value: Any, max_tokens: int, count, footer: str | None, top: int) -> str:
    results = shapes.search_results(value, by_name=True) or []
    query = shapes.first_value(value, ("query", "q", "search_query")) if isinstance(value, Mapping) else None
    header = f"{len(results)} result{'s' if len(results) != 1 else ''}"
    if isinstance(query, str):
        header = f"search {json.dumps(query, ensure_ascii=False)}: {header}"
    shown = results[:top]
    cap = _line_cap(max_tokens)
    lines: list[tuple[tuple, str]] = [((0, 0), header)]
    if len(results) > len(shown):
        lines.append(((1, len(shown)), f"… {len(results) - len(shown)} more results"))
    titles = []
    for i, record in enumerate(shown):
        title = _flat(shapes.first_value(record, shapes.TITLE_KEYS)) or "(untitled)"
        url = _flat(shapes.first_value(record, shapes.URL_KEYS))
        titles.append(((1, i), _clip_line(f"{i + 1}. {title}" + (f" — {url}" if url else ""), cap, count)))
    # Titles come first; snippets share what is left evenly.
    spent = sum(count(text) + 1 for _, text in lines + titles) + (count(footer) + 1 if footer else 0)
    snippet_cap = max(8, (max_tokens - spent) // max(1, len(shown)) - 2)
    for i, record in enumerate(shown):
        lines.append(titles[i])
        snippet = _flat(shapes.first_value(record, shapes.SNIPPET_KEYS))
        if snippet and snippet != titles[i][1]:
            lines.append(((2, i), "   " + _clip_line(snippet, snippet_cap, count)))
    lines.sort(key=lambda item: _search_position(item[0]))
    return fit_lines(lines, max_tokens, count, footer=footer, elide=False)


def _search_position(rank: tuple) -> tuple:
    """Print order: header, then each result's title and snippet, then the "more results" line."""
    tier, index = rank
    return (0, 0, 0) if tier == 0 else (1, index, tier)


def _flat(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else canonical_json(value)
    return " ".join(text.split())


# ---- JSON -------------------------------------------------------------------------------------------

def brief_value(value: Any, count: Callable[[str], int], max_tokens: int = 24) -> str:
    """A short rendering of a JSON value: small values inline, containers by size and keys."""
    if isinstance(value, str):
        if len(value) > max_tokens * _CHARS_PER_TOKEN_MAX:  # never count megabytes to show a few words
            value = value[: max_tokens * _CHARS_PER_TOKEN_MAX] + "…"
        return clip_text(json.dumps(value, ensure_ascii=False), max_tokens, count)
    if not isinstance(value, (dict, list)):
        return canonical_json(value)
    inline = canonical_json(value)
    if len(inline) <= max_tokens * _CHARS_PER_TOKEN_MAX and count(inline) <= max_tokens:
        return inline
    if isinstance(value, dict):
        keys = sorted(str(k) for k in value)
        return clip_text("{" + ", ".join(keys) + "}" + f" ({len(keys)} keys)", max_tokens, count)
    first = value[0] if value else None
    detail = ""
    if isinstance(first, dict):
        detail = "; first: {" + ", ".join(shapes.ordered_keys(first)) + "}"
    elif first is not None:
        detail = "; first: " + canonical_json(first)
    return clip_text(f"[{len(value)} items{detail}]", max_tokens, count)


_ID_NAME = re.compile(r"(?:^|_)(?:id|ids|number|code|key|uuid|ref|no)$|Id$", re.I)
_IDS_SHARE = 2  # every list's ids together take at most 1/2 of a compact form


def _id_fields(items: list) -> list[str]:
    """The fields of a list's items that name them (`order_id`, `flight_number`, `code`): the ones most
    items carry first, then by name."""
    seen: dict[str, int] = {}
    for item in items:
        if isinstance(item, dict):
            for key, v in item.items():
                if _ID_NAME.search(str(key)) and isinstance(v, (str, int)) and not isinstance(v, bool):
                    seen[str(key)] = seen.get(str(key), 0) + 1
    return sorted(seen, key=lambda k: (-seen[k], k))


def _ids_line(path: str, items: list, budget: int, count: Callable[[str], int]) -> str | None:
    """`path.field=["A1","B2",…]` for the id fields of every item of a list of objects (JSON without
    spaces, so the compact form reads back as values), as many values as fit `budget` tokens; the
    count of those left out follows. None when the items have no id field."""
    pairs = []
    for field in _id_fields(items):
        values = [item[field] for item in items if isinstance(item, dict) and field in item
                  and not (isinstance(item[field], str) and (not item[field] or any(c.isspace() for c in item[field])))]
        pairs.append((f"{path}.{field}" if path else field, list(dict.fromkeys(values))))
    if not pairs:
        return None

    def render(k: int) -> str:  # the first k values of the fields in turn
        out, left, more = [], k, 0
        for name, values in pairs:
            shown = values[:max(0, left)]
            left -= len(shown)
            more += len(values) - len(shown)
            if shown:
                out.append(f"{name}={json.dumps(shown, separators=(',', ':'), ensure_ascii=False)}")
        return " ".join(out) + (f" (+{more} more)" if more else "")

    total = sum(len(v) for _, v in pairs)
    lo, hi = 0, total
    while lo < hi:  # the most values that fit (counts grow with k)
        mid = (lo + hi + 1) // 2
        if count(render(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return render(lo) if lo else None


def _compress_json(value: Any, max_tokens: int, count, footer: str | None) -> str:
    cap = _line_cap(max_tokens)
    lines: list[tuple[tuple, str]] = []
    most = max(1, max_tokens // 4)  # more fields or items than this cannot fit: do not render them
    ids_room = max_tokens // _IDS_SHARE
    if isinstance(value, dict) and value:
        keys = shapes.ordered_keys(value)
        lists = [k for k in keys if isinstance(value[k], list) and len(value[k]) > 1 and isinstance(value[k][0], dict)]
        for i, key in enumerate(keys[:most]):
            lines.append(((i,), f"{key}: {brief_value(value[key], count, cap)}"))
            if key in lists:  # a list of records: every item's ids (built from the original, not from the brief)
                ids = _ids_line(key, value[key], max(1, ids_room // len(lists)), count)
                if ids is not None:
                    lines.append(((i, 1), ids))
        if len(keys) > most:
            lines.append(((most,), f"… {len(keys) - most} more keys"))
    elif isinstance(value, list) and value:
        first = value[0]
        keys = "; first: {" + ", ".join(shapes.ordered_keys(first)) + "}" if isinstance(first, dict) else ""
        lines.append(((0,), _clip_line(f"[{len(value)} items{keys}]", cap, count)))
        ids = _ids_line("", value, ids_room, count) if isinstance(first, dict) and len(value) > 1 else None
        if ids is not None:
            lines.append(((0, 1), ids))
        for i, item in enumerate(value[:most]):
            if isinstance(item, dict):
                fields = [f"{k}={brief_value(item[k], count, 12)}" for k in shapes.ordered_keys(item)[:_ITEM_FIELDS]]
                text = " ".join(fields) or brief_value(item, count, cap)
            else:
                text = brief_value(item, count, cap)
            lines.append(((1, i), _clip_line(f"{i + 1}. {text}", cap, count)))
        if len(value) > most:
            lines.append(((0, 1), f"… {len(value) - most} more items"))
    if not lines:
        return _with_footer(lambda budget: middle_out(render_payload(value), budget, count), max_tokens, count, footer)
    return fit_lines(lines, max_tokens, count, footer=footer)
