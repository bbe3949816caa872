"""Tolerant JSON parsing for what models actually write.

Why: models wrap JSON in code fences, leave trailing commas, use single quotes, or bury an object in
a sentence. Strict `json.loads` runs first (fast path, exact semantics); only when it fails do we
look for the JSON inside the text and hand it to the `json_repair` library rather than growing our
own repair rules.

Usage::

    parse_json_loose('Sure! ```json\\n{"a": 1,}\\n```')   # -> {"a": 1}
    parse_json_loose("no json here")                      # raises JSONNotFoundError
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import json_repair

from ..errors import AetherContextError

__all__ = ["JSONNotFoundError", "parse_json_loose", "json_candidates"]

logger = logging.getLogger(__name__)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)
_CLOSERS = {"{": "}", "[": "]"}


class JSONNotFoundError(AetherContextError, ValueError):
    """The text holds nothing that parses or repairs into JSON."""


def _balanced_from(text: str, start: int) -> str | None:
    """The balanced object/array starting at `start`, aware of quoted strings; None if unclosed."""
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            continue
        if ch in "\"'":
            # An apostrophe inside a word ("don't") is prose, not a string delimiter.
            if ch == "'" and i > start and text[i - 1].isalnum():
                continue
            quote = ch
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return text[start: i + 1]
    return None


def json_candidates(text: str, max_fragments: int = 20) -> list[str]:
    """Substrings worth trying, best first: fenced blocks, balanced fragments, then an unclosed tail."""
    found: list[str] = []

    def keep(candidate: str) -> None:
        candidate = candidate.strip()
        if candidate and candidate not in found:
            found.append(candidate)

    for m in _FENCE.finditer(text):
        keep(m.group(2))
    first_open = None
    i, attempts = 0, 0
    while i < len(text) and attempts < max_fragments:
        if text[i] in _CLOSERS:
            first_open = i if first_open is None else first_open
            attempts += 1
            fragment = _balanced_from(text, i)
            if fragment is not None:
                keep(fragment)
                i += len(fragment)
                continue
        i += 1
    if first_open is not None:
        keep(text[first_open:])  # truncated output: json_repair can close it
    return found


def _strict(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def parse_json_loose(text: str) -> Any:
    """Parse JSON from model output: strict first, then fenced/embedded fragments repaired.

    Raises `JSONNotFoundError` (a `ValueError`) when no object, array or bare JSON value is found.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_json_loose expects str, got {type(text).__name__}")
    ok, value = _strict(text)
    if ok:
        return value
    candidates = json_candidates(text)
    fenced = {m.group(2).strip() for m in _FENCE.finditer(text)}
    for candidate in candidates:  # pass 1: something already valid wins over anything repaired
        ok, value = _strict(candidate)
        if ok and (isinstance(value, (dict, list)) or candidate in fenced):
            return value
    for candidate in candidates:
        try:
            repaired = json_repair.loads(candidate, skip_json_loads=True)
        except Exception as e:  # json_repair is best effort; one bad candidate must not end the search
            logger.debug("json_repair failed on a candidate of %d chars: %s", len(candidate), e, exc_info=True)
            continue
        if isinstance(repaired, (dict, list)) and (repaired or _looks_empty_container(candidate)):
            logger.debug("repaired JSON from a %d-char candidate", len(candidate))
            return repaired
    raise JSONNotFoundError(f"no JSON object or array found in text starting {text[:60]!r}")


def _looks_empty_container(candidate: str) -> bool:
    return re.fullmatch(r"\{\s*\}|\[\s*\]", candidate.strip()) is not None
