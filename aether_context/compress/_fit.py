"""Shared token-fitting primitives: counting, safe cut points, clipping and line selection.

Every compressor promises "at most `max_tokens` tokens" and the promise is only as good as the
count, so each helper here measures the final string with the caller's counter instead of trusting
a chars-per-token estimate. Token counts are not strictly monotone in prefix length (BPE merges),
which is why the searches below only ever accept a length they have measured to fit.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable, Protocol, Sequence, Union, runtime_checkable

__all__ = [
    "ELLIPSIS", "TextCounting", "TokenCounterLike", "URI_RE", "as_count", "clip_text", "fit_lines", "longest_prefix",
    "longest_suffix", "safe_end", "safe_start",
]

ELLIPSIS = "…"
_MAX_MISSES = 64  # consecutive lines that did not fit before the line search gives up
# An offloaded original's address: the model recalls it by these exact bytes, so no cut ever lands inside
# one (a clipped URI names nothing). Trailing punctuation is the sentence's, not the URI's.
URI_RE = re.compile(r"artifact://[^\s\"'<>()\[\]{}`,;|…]*[^\s\"'<>()\[\]{}`,;|….:!?]")


@runtime_checkable
class TextCounting(Protocol):
    """The one method the compressors need; `aether_context.tokens.TokenCounter` satisfies it."""

    def count_text(self, text: str) -> int: ...


# A counter object or a plain `str -> int` function, so tests and users can pass `len`-like callables.
TokenCounterLike = Union[TextCounting, Callable[[str], int]]


def as_count(counter: TokenCounterLike) -> Callable[[str], int]:
    if isinstance(counter, TextCounting):
        return counter.count_text
    if callable(counter):
        return counter
    raise TypeError(f"counter must have count_text(str) -> int or be a callable, got {type(counter).__name__}")


def _unsafe_boundary(text: str, i: int) -> bool:
    """True when cutting between text[i-1] and text[i] would split one visible character."""
    if i <= 0 or i >= len(text):
        return False
    prev, cur = text[i - 1], text[i]
    if "\ud800" <= prev <= "\udbff" and "\udc00" <= cur <= "\udfff":
        return True  # surrogate pair (only present in strings decoded with surrogatepass)
    if prev == "\r" and cur == "\n":
        return True
    if prev == "\u200d" or cur == "\u200d":
        return True  # zero-width joiner inside an emoji sequence
    cp = ord(cur)
    if 0xFE00 <= cp <= 0xFE0F or 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F:
        return True  # variation selectors, skin tones, tag characters
    if unicodedata.combining(cur) or unicodedata.category(cur) in ("Mn", "Me"):
        return True
    if 0x1F1E6 <= cp <= 0x1F1FF and 0x1F1E6 <= ord(prev) <= 0x1F1FF:
        run = 0  # regional-indicator flags come in pairs: split only after an even run
        j = i - 1
        while j >= 0 and 0x1F1E6 <= ord(text[j]) <= 0x1F1FF:
            run += 1
            j -= 1
        return run % 2 == 1
    return False


def _uri_around(text: str, i: int) -> "tuple[int, int] | None":
    """The span of the artifact URI that a cut at `i` would split, if any."""
    if "artifact://" not in text:
        return None
    for m in URI_RE.finditer(text):
        if m.start() < i < m.end():
            return m.span()
        if m.start() >= i:
            return None
    return None


def safe_end(text: str, end: int) -> int:
    """Move a prefix end left until it sits on a character-cluster boundary, outside any artifact URI."""
    span = _uri_around(text, end) if 0 < end < len(text) else None
    if span is not None:
        end = span[0]
    while 0 < end < len(text) and _unsafe_boundary(text, end):
        end -= 1
    return end


def safe_start(text: str, start: int) -> int:
    """Move a suffix start right until it sits on a character-cluster boundary, outside any artifact URI."""
    span = _uri_around(text, start) if 0 < start < len(text) else None
    if span is not None:
        start = span[1]
    while 0 < start < len(text) and _unsafe_boundary(text, start):
        start += 1
    return start


def _longest(text: str, budget: int, count: Callable[[str], int], take: Callable[[int], str]) -> int:
    """Largest n (measured, not estimated) with count(take(n)) <= budget; take(0) must fit."""
    if budget <= 0 or not text:
        return 0
    lo, hi = 0, min(len(text), max(16, budget * 4))
    while hi < len(text) and count(take(hi)) <= budget:  # grow until too long or whole text
        lo, hi = hi, min(len(text), hi * 2)
    if lo == hi or (hi == len(text) and count(take(hi)) <= budget):
        return hi
    while hi - lo > 1:  # invariant: take(lo) fits, take(hi) does not
        mid = (lo + hi) // 2
        if count(take(mid)) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def longest_prefix(text: str, budget: int, count: Callable[[str], int]) -> int:
    """End index of the longest prefix within `budget` tokens, on a safe character boundary."""
    return safe_end(text, _longest(text, budget, count, lambda n: text[:n]))


def longest_suffix(text: str, budget: int, count: Callable[[str], int]) -> int:
    """Start index of the longest suffix within `budget` tokens, on a safe character boundary."""
    n = _longest(text, budget, count, lambda k: text[len(text) - k:] if k else "")
    return safe_start(text, len(text) - n)


def clip_text(text: str, max_tokens: int, counter: TokenCounterLike, *, ellipsis: str = ELLIPSIS) -> str:
    """`text` itself when it fits, else its longest prefix plus `ellipsis`, within `max_tokens`."""
    count = as_count(counter)
    if max_tokens <= 0:
        return ""
    if count(text) <= max_tokens:
        return text
    budget = max_tokens - count(ellipsis)
    while budget >= 0:
        end = longest_prefix(text, budget, count)
        clipped = text[:end].rstrip() + ellipsis
        if count(clipped) <= max_tokens:
            return clipped
        budget -= 1
    return ""


def fit_lines(
    lines: Sequence[tuple[tuple, str]],
    max_tokens: int,
    counter: TokenCounterLike,
    *,
    footer: str | None = None,
    elide: bool = True,
) -> str:
    """Keep the best-ranked lines that fit, printed in their original order, then `footer`.

    `lines` are `(rank, text)`; a lower rank is kept first and ties go to the earlier line. Gaps
    left by dropped lines read `… N lines omitted …` so the reader knows something is missing.
    """
    count = as_count(counter)
    if max_tokens <= 0:
        return ""
    footer_cost = count("\n" + footer) if footer else 0
    if footer and footer_cost > max_tokens:
        return clip_text(footer, max_tokens, count)
    budget = max_tokens - footer_cost
    gap_cost = count(_gap(len(lines))) + 1 if elide else 0
    chosen: set[int] = set()
    used = misses = 0
    for i in sorted(range(len(lines)), key=lambda k: (lines[k][0], k)):
        cost = count(lines[i][1]) + 1 + (gap_cost if i > 0 and i - 1 not in chosen else 0)
        if used + cost <= budget:
            chosen.add(i)
            used += cost
            misses = 0
        else:
            misses += 1
            if misses > _MAX_MISSES:
                break
    drop_order = sorted(chosen, key=lambda k: (lines[k][0], k), reverse=True)
    while True:
        text = _render(lines, chosen, footer, elide)
        if count(text) <= max_tokens or not chosen:
            return text
        chosen.discard(drop_order.pop(0))


def _gap(n: int) -> str:
    return f"{ELLIPSIS} {n} line{'s' if n != 1 else ''} omitted {ELLIPSIS}"


def _render(lines: Sequence[tuple[tuple, str]], chosen: set[int], footer: str | None, elide: bool) -> str:
    out: list[str] = []
    skipped = 0
    for i, (_, text) in enumerate(lines):
        if i in chosen:
            if skipped and elide:
                out.append(_gap(skipped))
            skipped = 0
            out.append(text)
        else:
            skipped += 1
    if skipped and elide and out:
        out.append(_gap(skipped))
    if footer:
        out.append(footer)
    return "\n".join(out)
