"""Compact JSON: the shortest faithful encoding of a JSON tool result, and its inverse.

Why: tool results re-sent every turn cost tokens every turn. `compact_json` picks the shortest of a
few faithful encodings (minified JSON, a columns/rows table for lists of same-keyed records,
`key=value` lines for a flat record); `expand_compact_json` turns any of them back into the value.

Usage::

    text = compact_json(rows, counter=counter)     # columns/rows form for a list of records
    assert expand_compact_json(text) == rows
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ._fit import TextCounting

__all__ = ["compact_json", "expand_compact_json", "columnarize", "decolumnarize"]

logger = logging.getLogger(__name__)

_TABLE_KEYS = frozenset({"columns", "rows"})


def _minified(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _is_record_list(value: Any) -> bool:
    """At least two dicts with identical key sets (non-empty): worth a columns/rows table."""
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(v, dict) for v in value):
        return False
    keys = set(value[0])
    return bool(keys) and all(set(v) == keys for v in value[1:])


def _is_table(value: Any) -> bool:
    """The shape `decolumnarize` expands: exactly {columns: [unique str], rows: [[...] x len(columns)] x >=2}."""
    if not isinstance(value, dict) or set(value) != _TABLE_KEYS:
        return False
    columns, rows = value["columns"], value["rows"]
    return (isinstance(columns, list) and bool(columns) and all(isinstance(c, str) for c in columns)
            and len(set(columns)) == len(columns) and isinstance(rows, list) and len(rows) >= 2
            and all(isinstance(r, list) and len(r) == len(columns) for r in rows))


def columnarize(value: Any) -> Any:
    """Every list of same-keyed dicts, at any depth, as {"columns": [...], "rows": [[...], ...]}."""
    if isinstance(value, dict):
        return {k: columnarize(v) for k, v in value.items()}
    if isinstance(value, list):
        if _is_record_list(value):
            columns = sorted(value[0])
            return {"columns": columns, "rows": [[columnarize(r[c]) for c in columns] for r in value]}
        return [columnarize(v) for v in value]
    return value


def decolumnarize(value: Any) -> Any:
    """Inverse of `columnarize`."""
    if _is_table(value):
        return [{c: decolumnarize(cell) for c, cell in zip(value["columns"], row)} for row in value["rows"]]
    if isinstance(value, dict):
        return {k: decolumnarize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decolumnarize(v) for v in value]
    return value


def _has_table_lookalike(value: Any) -> bool:
    if _is_table(value):
        return True
    if isinstance(value, dict):
        return any(_has_table_lookalike(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_table_lookalike(v) for v in value)
    return False


def _json_value(text: str) -> tuple[bool, Any]:
    """Strict JSON (no NaN/Infinity), used identically when writing and reading `key=value` lines."""
    def reject(name: str) -> Any:
        raise ValueError(name)

    try:
        return True, json.loads(text, parse_constant=reject)
    except ValueError:
        return False, None


def _kv_lines(value: Any) -> str | None:
    """`key=value` lines for a non-empty dict; strings bare when they cannot be mistaken for JSON."""
    if not isinstance(value, dict) or not value:
        return None
    lines = []
    for key in sorted(value):
        if (not isinstance(key, str) or not key or "=" in key or "\n" in key or "\r" in key
                or key[0] in '{["' or key != key.strip()):
            return None
        item = value[key]
        bare = (isinstance(item, str) and item and item == item.strip() and "\n" not in item
                and "\r" not in item and not _json_value(item)[0])
        lines.append(f"{key}={item if bare else _minified(item)}")
    return "\n".join(lines)


def compact_json(value: Any, counter: TextCounting | None = None) -> str:
    """The shortest faithful encoding of a JSON value: minified JSON, a columns/rows table, or key=value lines.

    Length is measured in tokens with `counter`, else in characters; ties keep the earlier candidate, so
    the result is never longer than minified JSON. `expand_compact_json` restores the value (dict key
    order aside). Values that already contain a columns/rows-shaped dict get minified JSON only.
    """
    plain = _minified(value)
    candidates = [plain]
    if not _has_table_lookalike(value):
        table = columnarize(value)
        forms = [value] if table == value else [value, table]
        candidates.extend(_minified(f) for f in forms[1:])
        candidates.extend(kv for kv in map(_kv_lines, forms) if kv is not None)
    measure = counter.count_text if counter is not None else len
    best = min(enumerate(candidates), key=lambda c: (measure(c[1]), c[0]))[1]
    logger.debug("compact_json: %d candidates, %d -> %d chars", len(candidates), len(plain), len(best))
    return best


def expand_compact_json(text: str) -> Any:
    """The value that `compact_json` encoded as `text` (any of its forms)."""
    ok, parsed = _json_value(text)
    if not ok:
        parsed = {}
        for line in text.split("\n"):
            key, sep, raw = line.partition("=")
            if not sep:
                raise ValueError(f"not a compact_json encoding: line {line[:60]!r} has no '='")
            is_json, item = _json_value(raw)
            parsed[key] = item if is_json else raw
    return decolumnarize(parsed)
