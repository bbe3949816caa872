"""Structural variation (opt-in) and compact JSON for injected context.

Why vary: a status block rendered identically on every call becomes wallpaper — models learn to skim
or parrot it. `StructuralVariation` picks, per (seed, call index), one of a few equivalent layouts, so
the same inputs always give the same bytes (replayable, testable) while consecutive calls differ.
It is off by default: disabled, it always returns the canonical layout, which keeps prompts
cache-friendly.

Why compact: tool results re-sent every turn cost tokens every turn. `compact_json` picks the shortest
of a few faithful encodings; `expand_compact_json` turns any of them back into the original value.

Usage::

    v = StructuralVariation(seed=7, enabled=True)
    v.format_progress(3, 5, call_index=2)          # e.g. "60%" or "[######....]" or "step 3 of 5"
    text = compact_json(rows, counter=counter)     # columns/rows form for a list of records
    assert expand_compact_json(text) == rows
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from .tokens import TokenCounting

__all__ = [
    "ProgressStyle", "ListStyle", "VariationStyle", "CANONICAL_STYLE", "StructuralVariation", "compact_json",
    "expand_compact_json", "columnarize", "decolumnarize", "format_progress", "format_list",
]

logger = logging.getLogger(__name__)

ProgressStyle = Literal["fraction", "percentage", "bar", "steps"]
ListStyle = Literal["bulleted", "numbered", "indented"]

PROGRESS_STYLES: tuple[ProgressStyle, ...] = ("fraction", "percentage", "bar", "steps")
SEPARATORS: tuple[str, ...] = ("---", "===", "***", "")
LIST_STYLES: tuple[ListStyle, ...] = ("bulleted", "numbered", "indented")
STATUS_LABELS: tuple[str, ...] = ("Status:", "Progress:", "Current state:")
BAR_WIDTH = 10


@dataclass(frozen=True)
class VariationStyle:
    """One concrete layout: the canonical one, or the one chosen for a call."""

    progress: ProgressStyle
    separator: str
    list_style: ListStyle
    status_label: str


CANONICAL_STYLE = VariationStyle("fraction", "---", "bulleted", "Status:")


def _pick(seed: int, call_index: int, dimension: str, options: Sequence[Any]) -> Any:
    # sha256 rather than random.Random or hash(): stable across processes, platforms and Python versions.
    digest = hashlib.sha256(f"{seed}:{call_index}:{dimension}".encode()).digest()
    return options[int.from_bytes(digest[:8], "big") % len(options)]


@dataclass(frozen=True)
class StructuralVariation:
    """Deterministic layout choice per (seed, call_index); canonical layout whenever disabled."""

    seed: int = 0
    enabled: bool = False

    def style(self, call_index: int) -> VariationStyle:
        if not self.enabled:
            return CANONICAL_STYLE
        return VariationStyle(
            progress=_pick(self.seed, call_index, "progress", PROGRESS_STYLES),
            separator=_pick(self.seed, call_index, "separator", SEPARATORS),
            list_style=_pick(self.seed, call_index, "list", LIST_STYLES),
            status_label=_pick(self.seed, call_index, "label", STATUS_LABELS),
        )

    def separator(self, call_index: int = 0) -> str:
        return self.style(call_index).separator

    def status_label(self, call_index: int = 0) -> str:
        return self.style(call_index).status_label

    def format_progress(self, done: int, total: int, call_index: int = 0) -> str:
        """`done` of `total` steps in this call's progress style (canonical: "3/5")."""
        return format_progress(done, total, self.style(call_index).progress)

    def format_list(self, items: Sequence[str], call_index: int = 0) -> str:
        """Items one per line in this call's list style (canonical: "- item")."""
        return format_list(items, self.style(call_index).list_style)


def format_progress(done: int, total: int, style: ProgressStyle = "fraction") -> str:
    """Progress in one style; `done` is clamped to [0, total], an unknown total (≤ 0) shows as "n/?"."""
    if total <= 0:
        return f"{done} steps done" if style == "steps" else f"{done}/?"
    done = max(0, min(done, total))
    if style == "percentage":
        return f"{math.floor(100 * done / total)}%"
    if style == "bar":
        filled = round(BAR_WIDTH * done / total)
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total}"
    if style == "steps":
        return f"step {done} of {total}"
    return f"{done}/{total}"


def format_list(items: Sequence[str], style: ListStyle = "bulleted") -> str:
    """Items one per line: "- a", "1. a" or four-space indented."""
    if style == "numbered":
        return "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))
    if style == "indented":
        return "\n".join(f"    {item}" for item in items)
    return "\n".join(f"- {item}" for item in items)


# --- compact JSON -------------------------------------------------------------------------------------

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


def compact_json(value: Any, counter: TokenCounting | None = None) -> str:
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
