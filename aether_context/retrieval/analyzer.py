"""Text analysis for the lexical index: words of any script, identifiers split, accents folded,
CJK as character bigrams, stop words dropped, Snowball stems.

Why not `str.split()`: BM25 ranks by term overlap, so "Mutations," must meet the query's
"mutation", `getUserName` must meet "user name" and `MAX_RETRY_COUNT` must meet `MaxRetryCount`,
"Munchen" must meet "München", and "北京" must meet "我住在北京市中心" (CJK is written without spaces).
The document text itself is never changed: folding only shapes the index terms, so what is shown
keeps its accents and case. Each stage is switchable so the benchmark can show what it buys
(docs/benchmarks.md, retrieval section).

Usage::

    analyzer = Analyzer()
    analyzer("The mutations were mutated.")   # -> ['mutat', 'mutat']
    analyzer("getUserName")                   # -> ['getusernam', 'get', 'user', 'name']
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
import unicodedata
from dataclasses import dataclass

__all__ = ["Analyzer", "STOP_WORDS", "normalize_text", "content_key", "fold", "stem",
           "split_identifier"]

# Letters and digits of any script; underscores and punctuation split words.
_WORD = re.compile(r"[^\W_]+")
# Han, Hiragana, Katakana, Hangul (syllables and jamo), CJK compatibility ideographs.
_CJK_CHARS = ("\u1100-\u11ff\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
              "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff")
_CJK = re.compile(f"[{_CJK_CHARS}]+")
_HAS_CJK = re.compile(f"[{_CJK_CHARS}]")
# Combining diacritical marks (the blocks accents decompose into); a regex keeps folding at C speed.
_MARKS = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")

STOP_WORDS: frozenset[str] = frozenset(
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
"""The project's one English stop-word list (lower-case, accent-free): import it rather than typing another."""



def normalize_text(text: str) -> str:
    """Unicode-compatible, case-folded, whitespace-collapsed text: the key for "identical text"."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())  # split: C, no regex over the text


def content_key(text: str) -> str:
    """sha256 of `normalize_text(text)`: equal for texts that differ only in case or spacing."""
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


def fold(text: str) -> str:
    """Accents stripped (NFKD minus combining marks), case kept: "München" -> "Munchen", "ﬁle" -> "file"."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", _MARKS.sub("", unicodedata.normalize("NFKD", text)))


def _kind(c: str) -> int:
    """0 digit, 1 upper-case letter, 2 any other letter (lower-case or uncased scripts)."""
    if c.isdigit():
        return 0
    return 1 if c.isupper() else 2


_ASCII_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def split_identifier(word: str) -> list[str]:
    """Parts of a CamelCase / letter-digit word: "getUserName" -> get User Name, "HTTPServer2" ->
    HTTP Server 2, "utf8" -> utf 8. A word without such boundaries comes back whole."""
    if word.isascii():
        return _ASCII_PARTS.findall(word)
    parts: list[str] = []
    start = 0
    n = len(word)
    for i in range(1, n):
        prev, cur = _kind(word[i - 1]), _kind(word[i])
        if prev == cur:
            continue
        if cur == 0 or prev == 0:  # letter <-> digit
            boundary = i
        elif prev == 2 and cur == 1:  # lower -> Upper: getUser
            boundary = i
        elif prev == 1 and cur == 2 and i - start > 1:  # UPPER run then Word: HTTPServer -> HTTP|Server
            boundary = i - 1
        else:
            continue
        if boundary > start:
            parts.append(word[start:boundary])
            start = boundary
    parts.append(word[start:])
    return parts


def _simple(word: str) -> bool:
    """True when `word` cannot split: all one case (or Title case) and no digits."""
    return word.isalpha() and (word.islower() or word.isupper() or word.istitle())


def _cjk_terms(run: str) -> list[str]:
    """Overlapping character bigrams of a CJK run (a lone character stays a unigram)."""
    if len(run) == 1:
        return [run]
    return [run[i:i + 2] for i in range(len(run) - 1)]


# Words of a text that are indexed (Lucene's old default field length): a pasted log or a 50,000-word message
# costs a bounded analysis, and a match that deep in one text is a weak signal anyway.
MAX_WORDS = 10_000

_STEM_LOCK = threading.Lock()
_STEMS: dict[str, str] = {}
_STEM_CACHE_MAX = 200_000
_MEMO_MAX = 200_000
_STEMMER: list = []


def stem(word: str) -> str:
    """English Snowball (Porter2) stem of a lower-case word, memoised (the stemmer is pure Python).

    Porter2 over our former hand-written Porter (1980): the maintained algorithm, and on SciFact
    BM25 it measured at least as well (docs/benchmarks.md, retrieval section).
    """
    cached = _STEMS.get(word)
    if cached is not None:
        return cached
    with _STEM_LOCK:  # a snowballstemmer instance keeps state while it stems: one caller at a time
        if not _STEMMER:
            try:
                import snowballstemmer
            except ImportError as e:
                raise ImportError("stemming needs the snowballstemmer package: pip install snowballstemmer "
                                  "(or set the retrieval setting stem: false)") from e

            _STEMMER.append(snowballstemmer.stemmer("english"))
        result = _STEMMER[0].stemWord(word)
        if len(_STEMS) >= _STEM_CACHE_MAX:
            _STEMS.clear()
        _STEMS[word] = result
    return result


@dataclass(frozen=True)
class Analyzer:
    """Turns text into index terms; the same instance must analyse documents and queries.

    `split_identifiers` adds the parts of CamelCase / snake_case / letter-digit words after the
    whole word (so "getUserName" still matches itself best); `fold_accents` matches "Munchen" with
    "München"; `cjk_bigrams` indexes CJK runs as overlapping character pairs.
    """

    stop_words: frozenset[str] = STOP_WORDS
    stem: bool = True
    min_length: int = 1
    split_identifiers: bool = True
    fold_accents: bool = True
    cjk_bigrams: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "_memo", {})  # word -> its terms: a vocabulary is far smaller than a corpus

    def __call__(self, text: str) -> list[str]:
        return self.analyse(text)

    def analyse(self, text: str) -> list[str]:
        """The terms of the first `MAX_WORDS` words of `text`, read afresh (with the per-word memo)."""
        text = unicodedata.normalize("NFKC", text)
        if self.fold_accents:
            text = fold(text)
        memo: dict[str, tuple[str, ...]] = self._memo  # type: ignore[attr-defined]
        out: list[str] = []
        # words are separated by a character at least: a text under 2 x MAX_WORDS characters has no more
        words = (_WORD.findall(text) if len(text) < 2 * MAX_WORDS
                 else (m.group() for m in itertools.islice(_WORD.finditer(text), MAX_WORDS)))
        for word in words:
            terms = memo.get(word)
            if terms is None:
                terms = self._terms(word)
                if len(memo) >= _MEMO_MAX:
                    memo.clear()
                memo[word] = terms
            out += terms
        return out

    def _terms(self, word: str) -> tuple[str, ...]:
        out: list[str] = []
        if self.cjk_bigrams and _HAS_CJK.search(word):
            self._add_cjk(word, out)
        else:
            self._add_word(word, out)
        return tuple(out)

    def _add_word(self, word: str, out: list[str]) -> None:
        if self.split_identifiers and not _simple(word):
            self._add_identifier(word, out)
        else:
            self._add(word.casefold(), out)

    def _add(self, word: str, out: list[str]) -> None:
        if len(word) < self.min_length or word in self.stop_words:
            return
        out.append(stem(word) if self.stem and not word.isdigit() else word)

    def _add_identifier(self, word: str, out: list[str]) -> None:
        parts = split_identifier(word)
        self._add(word.casefold(), out)
        if len(parts) > 1:
            for part in parts:
                self._add(part.casefold(), out)

    def _add_cjk(self, word: str, out: list[str]) -> None:
        pos = 0
        for match in _CJK.finditer(word):
            if match.start() > pos:
                self._add_word(word[pos:match.start()], out)
            out.extend(_cjk_terms(match.group()))
            pos = match.end()
        if pos < len(word):
            self._add_word(word[pos:], out)
