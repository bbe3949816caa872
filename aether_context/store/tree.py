"""Incremental records: long lists and big values stored as shared, content-addressed pieces.

A long list is cut into chunks, each a blob named by its hash; the chunk references form the next
level, until at most `CHUNK` remain inline. A history list is cut every `CHUNK` items, other lists
where their items say (about `TARGET_BYTES` a chunk), so an append or a dropped front changes one
chunk per level. A big string is a blob of its own; a big dict is stored as its `[key, value]` pairs.

Encoded forms (anything else is plain JSON, and dicts with `$` keys are escaped):
`{"$s": ref}` string, `{"$l": tree}` list, `{"$m": tree}` dict as pairs, `{"$d": pairs}` escaped dict.
A tree is `{"n": count, "depth": d, "items": [...]}`: depth 0 holds the items, depth d > 0 holds
references to chunks `{"chunk": [...]}` of depth d - 1.
"""

from __future__ import annotations

import collections
import threading
import zlib
from typing import Any, Callable

from ..content import canonical_json

__all__ = ["TreeCodec", "CHUNK", "BIG_STRING"]

CHUNK = 16  # items per chunk: the last chunk of each level is what an append rewrites
BIG_STRING = 1024  # characters; longer strings are blobs of their own (written once, shared by later calls)
BIG_LIST = CHUNK
MAX_CHUNK = 4 * CHUNK  # content-defined chunks are cut here at the latest
TARGET_BYTES = 1024  # content-defined chunks hold about this much; a list bigger than this is chunked


class TreeCodec:
    """Encodes JSON values into pieces through `put(value) -> ref` and back through `get(ref)`.

    `put` stores a JSON value (or a `str` as raw text when `text=True`) content-addressed and
    returns its reference. A bounded memo of chunk -> reference avoids re-serialising and
    re-hashing chunks that were stored before (the common case: every chunk but the last).
    """

    def __init__(self, put: Callable[..., str], get: Callable[..., Any], *, memo_size: int = 8192):
        self._put = put
        self._get = get
        self._memo: collections.OrderedDict[Any, str] = collections.OrderedDict()
        self._memo_size = memo_size
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._memo.clear()

    # ------------------------------------------------------------------------------ encode
    def put_list(self, items: list[Any], *, by_content: bool = False) -> dict[str, Any]:
        """The tree of `items` (already encoded JSON values), storing every chunk.

        Fixed chunks (the default) suit append-only lists of references: cutting is a slice.
        `by_content` cuts where the items say (about `TARGET_BYTES` a chunk), so removing or
        inserting items anywhere changes one or two chunks, not every chunk after it, and a list of
        few but big items (a sliding window of fold lines) is chunked too.
        """
        level, depth = list(items), 0
        while len(level) > 1:
            if by_content:
                texts = [it if isinstance(it, str) else canonical_json(it) for it in level]
                if len(level) <= CHUNK and (depth > 0 or sum(map(len, texts)) <= TARGET_BYTES):
                    break
                bounds: Any = _content_bounds(texts)
            elif len(level) > CHUNK:
                bounds = range(CHUNK, len(level) + CHUNK, CHUNK)
            else:
                break
            start, chunks = 0, []
            for end in bounds:
                chunks.append(self._put_chunk(level[start:end]))
                start = end
            level = chunks
            depth += 1
        return {"n": len(items), "depth": depth, "items": level}

    def _put_chunk(self, chunk: list[Any]) -> str:
        key = _hashable(chunk)
        if key is not None:
            with self._lock:
                ref = self._memo.get(key)
                if ref is not None:
                    self._memo.move_to_end(key)
                    return ref
        ref = self._put({"chunk": chunk})
        if key is not None:
            with self._lock:
                self._memo[key] = ref
                while len(self._memo) > self._memo_size:
                    self._memo.popitem(last=False)
        return ref

    def encode(self, value: Any, *, chunk: bool = True) -> Any:
        """`value` with big strings, long lists and big dicts replaced by references (with `chunk`
        False, only big strings: lists and dicts stay inline)."""
        if isinstance(value, str):
            return {"$s": self._put(value, text=True)} if len(value) > BIG_STRING else value
        if isinstance(value, (list, tuple)):
            items = [self.encode(v, chunk=chunk) for v in value]
            tree = self.put_list(items, by_content=True) if chunk else {"depth": 0}
            return {"$l": tree} if tree["depth"] else items
        if isinstance(value, dict):
            if chunk and len(value) > BIG_LIST:
                return {"$m": self.put_list([[k, self.encode(v)] for k, v in value.items()], by_content=True)}
            if any(isinstance(k, str) and k.startswith("$") for k in value):
                return {"$d": [[k, self.encode(v, chunk=chunk)] for k, v in value.items()]}
            return {k: self.encode(v, chunk=chunk) for k, v in value.items()}
        return value

    def encode_inline(self, value: Any) -> Any:
        """`encode` without chunking: big strings only (for values written once, such as a patch's)."""
        return self.encode(value, chunk=False)

    # ------------------------------------------------------------------------------ decode
    def get_list(self, tree: dict[str, Any]) -> list[Any]:
        level, depth = list(tree["items"]), int(tree["depth"])
        while depth > 0:
            level = [item for ref in level for item in self._get(ref)["chunk"]]
            depth -= 1
        if len(level) != tree["n"]:
            raise ValueError(f"list tree holds {len(level)} items, its record says {tree['n']}")
        return level

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (tag, body), = value.items()
            if tag == "$s":
                return self._get(body, text=True)
            if tag == "$l":
                return [self.decode(v) for v in self.get_list(body)]
            if tag == "$m":
                return {k: self.decode(v) for k, v in self.get_list(body)}
            if tag == "$d":
                return {k: self.decode(v) for k, v in body}
        return {k: self.decode(v) for k, v in value.items()}


def _content_bounds(texts: list[str]) -> list[int]:
    """Chunk ends, decided by each item's own text: after an item whose crc32 is 0 modulo
    (TARGET_BYTES / its size) -- about TARGET_BYTES a chunk -- and at most every MAX_CHUNK items."""
    bounds, start = [], 0
    for i, text in enumerate(texts):
        every = max(1, TARGET_BYTES // max(1, len(text)))
        if zlib.crc32(text.encode("utf-8", "surrogatepass")) % every == 0 or i + 1 - start >= MAX_CHUNK:
            bounds.append(i + 1)
            start = i + 1
    if start < len(texts):
        bounds.append(len(texts))
    return bounds


def _hashable(chunk: list[Any]) -> tuple | None:
    """A memo key for a chunk of strings (or `[key, string]` pairs); None for anything else."""
    out = []
    for item in chunk:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], str):
            out.append((item[0], item[1]))
        else:
            return None
    return tuple(out)
