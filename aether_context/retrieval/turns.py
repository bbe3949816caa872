"""An older conversation turn as a retrievable document: its text plus the context a reader needs.

Why: a turn alone is often unplaceable ("Yes, last Tuesday, with her." answers nothing a later
question asks); with its date and the turn it answers, both BM25 and the embedding see who, what
and when. On LoCoMo this context lifts evidence recall a lot (docs/benchmarks.md, retrieval
section). The context is searched, never shown: put it in `Document.context`, keep the turn as
`Document.text`. Pure and deterministic: the same turns give the same document.

The pack's retriever weighs context words half as much as the turn's own in BM25
(`RetrievalSettings.context_weight`) and embeds both together.

Usage::

    previous, next = neighbours(turn_texts, i)            # two turns before, one after
    context = turn_context(date="8 May 2023", previous=previous, next=next,
                           max_tokens=CONTEXT_TOKENS, count_tokens=counter.count_text)
    Document("turn-12", "Caroline: Lovely, we saw the lake.", "history", context=context)
    # its search_text equals turn_document("Caroline: Lovely, we saw the lake.", date=..., previous=..., ...)
"""

from __future__ import annotations

from typing import Callable, Sequence

__all__ = ["turn_context", "turn_document", "clip_words", "neighbours", "TURNS_BEFORE", "TURNS_AFTER",
           "CONTEXT_TOKENS"]

# The window measured best on LoCoMo dev (docs/benchmarks.md, retrieval section): two turns before,
# one after, 192 tokens of context in all. One previous turn at 96 tokens: R@10 0.718; this: 0.757.
TURNS_BEFORE = 2
TURNS_AFTER = 1
CONTEXT_TOKENS = 192


def neighbours(turns: Sequence[str], i: int, *, before: int = TURNS_BEFORE, after: int = TURNS_AFTER
               ) -> tuple[str, str]:
    """The `before` turns preceding `turns[i]` and the `after` turns following it, each joined by spaces."""
    return " ".join(turns[max(0, i - before):i]), " ".join(turns[i + 1:i + 1 + after])


def clip_words(text: str, max_tokens: int, count_tokens: Callable[[str], int], *, keep_end: bool = False) -> str:
    """The longest run of whole words of `text` within `max_tokens`, from its start (or its end
    with `keep_end`: the part of a previous turn nearest to the turn that follows it)."""
    if max_tokens <= 0 or not text:
        return ""
    words = text.split()
    # The largest n with count(n words) <= max_tokens, without counting a long neighbour (a tool's output) whole:
    # a first guess of max_tokens words, doubled while it fits, then a search between the last count that fits
    # and the first that does not, each probe placed where the two counts say the bound lies (token counts
    # grow about linearly with words, so two or three probes), the middle after two that did not halve it.
    def count(n: int) -> int:
        return count_tokens(" ".join(words[-n:] if keep_end else words[:n])) if n else 0

    low, low_count = 0, 0
    high = min(len(words), max(8, max_tokens))
    while True:
        if high == len(words) and count_tokens(text) <= max_tokens:
            return text
        high_count = count(high)
        if high_count > max_tokens:
            break
        low, low_count = high, high_count
        if high == len(words):
            break
        high = min(len(words), 2 * high)
    slow = 0  # probes in a row that did not halve the gap (one huge word): after two, the next is the middle
    while high - low > 1 and high_count > max_tokens:
        gap = high - low
        step = gap // 2 if slow >= 2 else (max_tokens - low_count) * gap // max(1, high_count - low_count)
        mid = low + min(gap - 1, max(1, step))
        mid_count = count(mid)
        slow = 0 if slow >= 2 or 2 * (mid - low if mid_count > max_tokens else high - mid) <= gap else slow + 1
        if mid_count <= max_tokens:
            low, low_count = mid, mid_count
        else:
            high, high_count = mid, mid_count
    if low == 0:
        return ""
    return " ".join(words[-low:] if keep_end else words[:low])


def turn_context(*, date: str = "", previous: str = "", next: str = "", max_tokens: int = CONTEXT_TOKENS,
                 count_tokens: Callable[[str], int]) -> str:
    """The date, then the end of the previous turn, then the start of the next one, within `max_tokens`.

    The date is kept whole when it fits; the previous turn gets up to two thirds of what is left
    (it is what the turn usually answers), the next turn the rest.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    date = clip_words(date.strip(), max_tokens, count_tokens)
    left = max_tokens - (count_tokens(date) if date else 0)
    prev_cap = left if not next.strip() else (2 * left) // 3
    before = clip_words(previous.strip(), prev_cap, count_tokens, keep_end=True)
    left -= count_tokens(before) if before else 0
    after = clip_words(next.strip(), left, count_tokens)
    return "\n".join(p for p in (date, before, after) if p)


def turn_document(text: str, *, date: str = "", previous: str = "", next: str = "",
                  max_tokens: int = CONTEXT_TOKENS, count_tokens: Callable[[str], int]) -> str:
    """What the index searches for an older turn: the turn, then `turn_context` (same layout as
    `Document(text=..., context=turn_context(...)).search_text`)."""
    context = turn_context(date=date, previous=previous, next=next, max_tokens=max_tokens,
                           count_tokens=count_tokens)
    return f"{text}\n{context}" if context else text
