"""The forms values are read from: an offloaded result's compact form, the parameters tools declare,
short field names, and the values a free text names.

Why: an offloaded result keeps only its compact form in the session (`key: value` lines and
`key=value` items beside shape notes and its URI); what a tool takes as arguments says which
result fields an agent types back; and a field's full path (`flights.flight_number`) costs tokens
that its last name says as well.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping

__all__ = ["compact_form", "parameter_names", "short_fields", "text_fields"]

# In an offloaded result's compact form: its URI and the key lists that describe a shape (`{status, date}`).
_SHAPE_NOTES = re.compile(r"artifact://\S+|\{\w+(?:, \w+)*\}|\[\d+ items[^\]\n]*\]|\(\d+ keys\)|… \d+ more \w+")
_KEY_LINE = re.compile(r"^([A-Za-z_][\w.]*): (.+)$")  # `key: value` in a compact form
_PAIR = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)=(\"(?:[^\"\\]|\\.)*\"|\{\S*\}|\[\S*\]|[^\s\"]+)")  # `key=value`

_GENERIC_NAMES = frozenset({"id", "ids", "name", "names", "value", "values", "type", "key", "keys", "amount", "code",
                            "number", "date", "dates", "status", "total"})


def _short_name(path: str) -> str:
    """A field's last name (`flights.flight_number` → `flight_number`), with its parent when the last says
    little alone (`payment_history.amount`); `*` (a key that is an id) is skipped."""
    names = [n for n in path.split(".") if n != "*"] or [path]
    keep = 2 if len(names) > 1 and names[-1].lower() in _GENERIC_NAMES else 1
    return ".".join(names[-keep:])


def short_fields(fields: tuple[tuple[str, tuple[str, ...]], ...]) -> list[tuple[str, tuple[str, ...]]]:
    """The fields under their short names, where no other field of the source has the same one
    (`prices.economy` and `available_seats.economy` keep their paths)."""
    short = [_short_name(name) for name, _ in fields]
    return [(s if short.count(s) == 1 else name.replace(".*", ""), values) for s, (name, values) in zip(short, fields)]


def parameter_names(declarations: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Every parameter name of these tool declarations (nested ones too): a result field of the same
    name holds what the agent may pass back (`flight_number`, `payment_id`, `cabin`)."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            props = node.get("properties")
            if isinstance(props, Mapping):
                names.update(str(k) for k in props)
            for item in node.values():
                walk(item)
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item)

    for declaration in declarations:
        walk(declaration)
    return frozenset(names)


def compact_form(result: Any) -> tuple[dict[str, list[Any]], str] | None:
    """An offloaded result's compact form as fields (its `key: value` lines and `key=value` items) and
    the prose left, without the shape notes and the URI; None for any other result."""
    while isinstance(result, Mapping) and len(result) == 1 and next(iter(result)) in ("result", "output"):
        result = next(iter(result.values()))
    if not (isinstance(result, Mapping) and isinstance(result.get("summary"), str) and "artifact_uri" in result):
        return None
    fields: dict[str, list[Any]] = {}
    prose = []
    for line in _SHAPE_NOTES.sub(" ", result["summary"]).splitlines():
        line = re.sub(r"^\d+\.\s", "", line.strip())
        keyed = _KEY_LINE.match(line)
        pairs = _PAIR.findall(line) or ([keyed.groups()] if keyed else [])
        for key, value in pairs:
            fields.setdefault(key, []).append(_loads(value))
        if not pairs:
            prose.append(line)
    return fields, "\n".join(prose)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


_MAX_TEXT_CHARS = 20_000  # of a text source: values named past this are rarely typed back
# Values in free text: what an agent later types back as an argument.
_TEXT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("emails", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")),
    ("urls", re.compile(r"\bhttps?://[^\s<>\"')\]]+")),
    ("ids", re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\b[a-z]+\d+[a-z\d]*\b")),
    ("codes", re.compile(r"\b(?=[A-Z0-9]*[A-Z])[A-Z0-9]{3,12}\b")),
    ("dates", re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|"
                         r"Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?\b")),
    ("amounts", re.compile(r"[$€£]\s?\d[\d,]*(?:\.\d+)?|\b\d[\d,]*(?:\.\d+)? ?(?:USD|EUR|dollars?|euros?)\b")),
    ("numbers", re.compile(r"(?<![\w.$€£-])\d{3,}(?:\.\d+)?(?![\w.-])")),
    ("paths", re.compile(r"(?<![\w/.-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:py|js|ts|json|ya?ml|toml|md|"
                         r"txt|csv|sh|go|rs|java|c|h|cpp|html|css|sql)\b")),
    ("names", re.compile(r"\b(?:name is|named|called)\s+([A-Z][\w'-]*(?: [A-Z][\w'-]*){0,2})")),
    ("names", re.compile(r"\b[A-Z][a-z]+(?:[ -](?:[A-Z][a-z]+|[A-Z]'[A-Z][a-z]+)){1,2}\b")),
    ("quoted", re.compile(r"\"([^\"\n]{2,40})\"|(?<!\w)'([^'\n]{2,40})'(?!\w)|`([^`\n]{2,40})`")),
)


def text_fields(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The values a free text names, by kind (`_TEXT_PATTERNS`), each once, in order of appearance."""
    found: dict[str, list[str]] = {}
    taken: list[tuple[int, int]] = []
    text = text[:_MAX_TEXT_CHARS]
    for name, regex in _TEXT_PATTERNS:
        for m in regex.finditer(text):
            value = next((g for g in m.groups() if g), None) if m.groups() else m.group(0)
            if not value or any(s <= m.start() < e for s, e in taken):
                continue
            taken.append(m.span())
            values = found.setdefault(name, [])
            value = value.strip().rstrip(".,;:")
            if value and value not in values:
                values.append(value)
    return tuple((name, tuple(values)) for name, values in found.items() if values)
