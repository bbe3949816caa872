"""Records as chains of patches: a call writes what changed since the call before, not its whole record.

Consecutive calls of a session record almost the same manifest, inputs and message lists. Each
record is a node, a blob named by its content hash: a *key* (the record whole) or a reference to the
previous record of its kind and session plus the patch to this one. A key is written every
`MAX_DEPTH` nodes or when the patch outgrows `MAX_PATCH`; a reader follows at most `MAX_DEPTH` nodes
by content address, so any replica reads any record.

A patch (`diff(old, new)`) is JSON with these forms; anything else is the new value itself:

- `{"$o": {key: patch, ...}, "$r": [removed keys]}` -- a dict, keys changed or added (in order);
- `{"$t": [head, start, end, tail]}` -- a list: the items of `head`, `old[start:end]`, the items of `tail`
  (the first run of the old list it keeps: an append, a window that slid, a new first item);
- `{"$e": [[index, patch], ...]}` -- a list of the same length, its changed items patched;
- `{"$v": value}` -- the new value, escaped (a dict with a key that starts with `$`).

Leaves (new values and list tails) pass through the store's `TreeCodec` (`encode_inline`: a big
string becomes a shared blob; a key's long lists become chunk trees shared with the keys before it).
Equality is strict (`1` is not `1.0` nor `True`), so
`apply(old, diff(old, new))` is `new` to the byte, key order included.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from ..content import canonical_json
from .io import Lru

__all__ = ["diff", "apply", "same", "RecordChain", "MAX_DEPTH", "MAX_PATCH", "MIN_RUN"]

MAX_DEPTH = 16  # nodes a chain grows before a key: what a reader follows at most, and the key's share of the writes
MAX_PATCH = 4096  # bytes of patch JSON past which a key is written instead (the record changed too much)
KEY_INLINE = 8192  # bytes: a key's lists and maps up to this size stay in the key's node
READ_CACHE_CHARS = 8_000_000  # records a reader keeps as text, by total length
MAX_READ_DEPTH = 1024  # a reader's bound (another writer may have chosen a longer chain)
MIN_RUN = 2  # a list patch reuses at least this many items of the old list, else the list is written anew

Codec = Callable[[Any], Any]


def _ident(value: Any) -> Any:
    return value


def same(a: Any, b: Any) -> bool:
    """JSON equality that keeps types apart (`1`, `1.0` and `True` differ) and dict order counts."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and list(a) == list(b) and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def _leaf(value: Any, encode: Codec) -> Any:
    out = encode(value)
    if isinstance(out, dict) and any(isinstance(k, str) and k.startswith("$") for k in out):
        return {"$v": out}  # it would read as a patch form
    return out


def diff(old: Any, new: Any, encode: Codec = _ident) -> Any:
    """The patch that turns `old` into `new` (call only when they differ; see `same`)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return _diff_dict(old, new, encode)
    if isinstance(old, list) and isinstance(new, list):
        return _diff_list(old, new, encode)
    return _leaf(new, encode)


def _diff_list(old: list, new: list, encode: Codec) -> Any:
    """A run of the old list kept (appends, a sliding window), or, for a list of the same length,
    its changed items patched in place (ranked rows whose scores moved), whichever is smaller."""
    options = []
    run = _list_run(old, new)
    if run is not None:
        at, start, end = run
        options.append({"$t": [[encode(v) for v in new[:at]], start, end, [encode(v) for v in new[at + end - start:]]]})
        if 2 * (end - start) >= len(new):
            return options[0]
    if len(old) == len(new):
        options.append({"$e": [[i, diff(a, b, encode)] for i, (a, b) in enumerate(zip(old, new)) if not same(a, b)]})
    options.append(_leaf(new, encode))
    return min(options, key=lambda o: len(canonical_json(o))) if len(options) > 1 else options[0]


def _diff_dict(old: dict, new: dict, encode: Codec) -> Any:
    kept = [k for k in old if k in new]
    if kept + [k for k in new if k not in old] != list(new):
        return _leaf(new, encode)  # reordered keys: the dict is written anew
    changed = {k: (diff(old[k], v, encode) if k in old else _leaf(v, encode))
               for k, v in new.items() if k not in old or not same(old[k], v)}
    patch: dict[str, Any] = {"$o": changed}
    removed = [k for k in old if k not in new]
    if removed:
        patch["$r"] = removed
    return patch


def _item_key(item: Any) -> Any:
    return item if isinstance(item, str) else (type(item).__name__, canonical_json(item))


def _list_run(old: list, new: list) -> tuple[int, int, int] | None:
    """`(at, start, end)`: `new[at:]` starts with `old[start:end]`, the first run of at least `MIN_RUN`
    items `new` keeps from `old` (None when there is none)."""
    if len(old) < MIN_RUN or len(new) < MIN_RUN:
        return None
    where: dict[Any, int] = {}
    for i, item in enumerate(old):
        where.setdefault(_item_key(item), i)
    for at, item in enumerate(new):
        start = where.get(_item_key(item))
        if start is None or not same(old[start], item):
            continue
        end = start + 1
        while end < len(old) and at + end - start < len(new) and same(old[end], new[at + end - start]):
            end += 1
        if end - start >= MIN_RUN:
            return at, start, end
    return None


def apply(old: Any, patch: Any, decode: Codec = _ident) -> Any:
    """`new` from `old` and `diff(old, new)`."""
    if isinstance(patch, dict) and len(patch) in (1, 2):
        if "$o" in patch and isinstance(old, dict):
            changes, removed = patch["$o"], set(patch.get("$r", ()))
            out = {k: (apply(v, changes[k], decode) if k in changes else v) for k, v in old.items() if k not in removed}
            out.update((k, _leaf_back(v, decode)) for k, v in changes.items() if k not in old)
            return out
        if len(patch) == 1 and "$t" in patch and isinstance(old, list):
            head, start, end, tail = patch["$t"]
            return [decode(v) for v in head] + old[start:end] + [decode(v) for v in tail]
        if len(patch) == 1 and "$e" in patch and isinstance(old, list):
            out = list(old)
            for i, item in patch["$e"]:
                out[i] = apply(old[i], item, decode)
            return out
    return _leaf_back(patch, decode)


def _leaf_back(value: Any, decode: Codec) -> Any:
    if isinstance(value, dict) and len(value) == 1 and "$v" in value:
        return decode(value["$v"])
    if isinstance(value, dict) and len(value) in (1, 2) and ("$o" in value or "$t" in value or "$e" in value):
        raise ValueError(f"a patch form {sorted(value)} where a value was expected (its old value is missing)")
    return decode(value)


class RecordChain:
    """Records as chains of content-addressed nodes (see the module docstring); the writer's and the reader's side.

    A node is a blob `{"value": encoded}` (a key: the record whole, through `encode`, so big strings
    and long lists are pieces shared with other keys) or `{"base": ref, "patch": patch}` (the record
    is the base node's record with the patch applied). `put(value, scope)` writes one node and returns
    its reference: a patch on the scope's last record while the chain is shorter than `MAX_DEPTH` and
    the patch is at most `MAX_PATCH` bytes, else a key. The last record of each scope is remembered
    in a bounded LRU; a scope of None, or a process that has not written the scope yet (another
    replica, a restart), writes a key: correct, only larger. A reader needs nothing but the store.
    """

    def __init__(self, put_piece: Callable[[Any], str], get_piece: Callable[[str], Any], encode: Codec,
                 decode: Codec, *, leaf: Codec | None = None, scopes: int = 64):
        self._put, self._get, self._encode, self._decode = put_piece, get_piece, encode, decode
        self._leaf = leaf or encode  # for the values of a patch: pieces a later call would not share stay inline
        self._last = Lru(scopes)  # scope -> (node ref, its record, chain depth)
        # node ref -> its record as JSON text (a node never changes: it is named by its content), so a
        # reader going through a session's calls (list, timeline, report) reads each node once; text, so
        # no caller can change what the next one gets
        self._read = Lru(1024, max_weight=READ_CACHE_CHARS, weigh=lambda ref, text: len(text))

    def clear(self) -> None:
        self._last.clear()
        self._read.clear()

    def put(self, value: Any, scope: tuple | None, **fields: Any) -> str:
        """Store `value` (plain JSON) as one node (with `fields`, e.g. a layout number); its reference."""
        last = self._last.get(scope) if scope is not None else None
        node, depth = None, 0
        if last is not None:
            ref, old, depth = last
            if same(old, value):
                return ref
            if depth < MAX_DEPTH:
                patch = diff(old, value, self._leaf)
                if len(canonical_json(patch)) <= MAX_PATCH:
                    node, depth = {"base": ref, "patch": patch}, depth + 1
        if node is None:
            node, depth = {"value": self._encode_key(value)}, 0
        ref = self._put({**fields, **node})
        if scope is not None:
            self._last.put(scope, (ref, value, depth))
        return ref

    def _encode_key(self, value: Any) -> Any:
        """A key keeps what is small in its own node (one blob, compressed whole); a list or map over
        `KEY_INLINE` bytes is a chunk tree (shared with the keys before it), a big string a blob."""
        if isinstance(value, dict) and not any(isinstance(k, str) and k.startswith("$") for k in value):
            return {k: self._encode_key(v) for k, v in value.items()}
        if isinstance(value, (list, dict)) and len(canonical_json(value)) > KEY_INLINE:
            return self._encode(value)
        return self._leaf(value)

    def get(self, ref: str, node: dict[str, Any] | None = None) -> Any:
        """The record a node holds (`node`: its content, when the caller has read it already)."""
        chain: list[tuple[str, Any]] = []  # (ref, patch) from this node back to one known or whole
        at = ref
        while True:
            known = self._read.get(at)
            if known is not None:
                value = json.loads(known)
                break
            node = self._get(at) if node is None else node
            if "base" not in node:
                value = self._decode(node["value"])
                self._read.put(at, json.dumps(value))
                break
            if len(chain) >= MAX_READ_DEPTH:
                raise ValueError(f"record {ref} is a chain of more than {MAX_READ_DEPTH} nodes")
            chain.append((at, node["patch"]))
            at, node = node["base"], None
        for at, patch in reversed(chain):
            value = apply(value, patch, self._decode)
            self._read.put(at, json.dumps(value))
        return value
