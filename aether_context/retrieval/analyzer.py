"""Text analysis for the lexical index: Unicode words, case folding, stop words, Porter stems.

Why not `str.split()`: BM25 ranks by term overlap, so "Mutations," and "mutated" must meet the
query's "mutation", and "the"/"of" must not count as overlap. Each stage is switchable so the
benchmark can show what it buys (docs/benchmarks.md, retrieval section).

Usage::

    analyzer = Analyzer()
    analyzer("The mutations were mutated.")   # -> ['mutat', 'mutat']
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

from .stemmer import porter_stem

__all__ = ["Analyzer", "ENGLISH_STOP_WORDS", "normalize_text", "content_key"]

# Letters and digits of any script; underscores and punctuation split words.
_WORD = re.compile(r"[^\W_]+")
_SPACE = re.compile(r"\s+")

ENGLISH_STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves s t d ll m re ve
    """.split()
)


def normalize_text(text: str) -> str:
    """Unicode-compatible, case-folded, whitespace-collapsed text: the key for "identical text"."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def content_key(text: str) -> str:
    """sha256 of `normalize_text(text)`: equal for texts that differ only in case or spacing."""
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Analyzer:
    """Turns text into index terms; the same instance must analyse documents and queries."""

    stop_words: frozenset[str] = ENGLISH_STOP_WORDS
    stem: bool = True
    min_length: int = 1

    def __call__(self, text: str) -> list[str]:
        words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
        stop, min_len = self.stop_words, self.min_length
        kept = [w for w in words if len(w) >= min_len and w not in stop]
        if self.stem:
            return [porter_stem(w) for w in kept]
        return kept
