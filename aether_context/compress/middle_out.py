"""Middle-out truncation: keep the head and the tail of a text, drop the middle.

Why the middle: the head of a tool output usually holds headers, definitions and the command echo,
the tail holds results, summaries and the error that ended the run; repetitive logs and data sit
in between. The marker says how much was dropped and where the full text lives, so the model can
fetch it instead of guessing.

Usage::

    from aether_context.tokens import TokenCounter
    short = middle_out(log_text, 500, TokenCounter(), "oversized tool result", uri="artifact://run/7/stdout.txt")
"""

from __future__ import annotations

from ._fit import TokenCounterLike, as_count, clip_text, longest_prefix, longest_suffix

__all__ = ["middle_out", "omission_marker"]

_LINE_SNAP = 0.5  # move a cut to a line boundary when that keeps at least this share of the side
_MAX_RETRIES = 12


def omission_marker(omitted_tokens: int, uri: str | None = None, note: str = "") -> str:
    """The one line that replaces a dropped middle anywhere in a pack; it starts and ends with a newline.

    `…[N tokens omitted: <note>; full text: <uri>]…`, the note (why it was cut) and the URI optional.
    """
    why = f": {note}" if note else ""
    where = f"; full text: {uri}" if uri else ""
    return f"\n…[{omitted_tokens} tokens omitted{why}{where}]…\n"


def middle_out(
    text: str,
    max_tokens: int,
    counter: TokenCounterLike,
    note: str = "",
    *,
    uri: str | None = None,
    head_share: float = 0.5,
) -> str:
    """`text` unchanged when it fits, else head + omission marker + tail within `max_tokens`.

    Cuts fall on character-cluster boundaries (never inside a surrogate pair, emoji sequence or
    combining mark) and, when a line break is near, on line boundaries. `head_share` is the part
    of the remaining budget given to the head; the tail gets the rest. `note` says in the marker
    why the text was cut ("oversized tool result"); `uri` where the whole text is kept.
    """
    if not 0.0 <= head_share <= 1.0:
        raise ValueError(f"head_share must be between 0 and 1, got {head_share}")
    count = as_count(counter)
    if max_tokens <= 0:
        return ""
    total = count(text)
    if total <= max_tokens:
        return text
    budget = max_tokens - count(omission_marker(total, uri, note))
    for _ in range(_MAX_RETRIES):
        if budget <= 0:
            break
        result = _cut(text, budget, head_share, count, uri, note)
        overflow = count(result) - max_tokens
        if overflow <= 0:
            return result
        budget -= max(1, overflow)
    # Not even a marker fits beside some text: a plain clipped head is the best we can do.
    return clip_text(text, max_tokens, count)


def _cut(text: str, budget: int, head_share: float, count, uri: str | None, note: str) -> str:
    head_budget = int(budget * head_share)
    end = longest_prefix(text, head_budget, count)
    end = _snap_end(text, end)
    start = longest_suffix(text, budget - head_budget, count)
    start = max(_snap_start(text, start), end)
    omitted = count(text[end:start])
    head = text[:end]
    if head.endswith("\n"):
        head = head[:-1]  # the marker brings its own line break
    return head + omission_marker(omitted, uri, note) + text[start:]


def _snap_end(text: str, end: int) -> int:
    if end == 0 or text[end - 1] == "\n":
        return end
    nl = text.rfind("\n", 0, end)
    return nl + 1 if nl >= 0 and nl + 1 >= end * _LINE_SNAP else end


def _snap_start(text: str, start: int) -> int:
    if start <= 0 or start >= len(text) or text[start - 1] == "\n":
        return start
    nl = text.find("\n", start)
    kept = len(text) - start
    return nl + 1 if nl >= 0 and (nl + 1 - start) <= kept * (1 - _LINE_SNAP) else start
