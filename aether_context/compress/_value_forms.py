"""The forms values are read from: an offloaded result's compact form, the parameters tools declare,
and short field names.

Why: an offloaded result keeps only its compact form in the session (`key: value` lines and
`key=value` items beside shape notes and its URI); what a tool takes as arguments says which
result fields an agent types back; and a field's full path (`flights.flight_number`) costs tokens
that its last name says as well.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping

__all__ = ["compact_form", "parameter_names", "short_fields"]

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
        elif isinstance(node, list):
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


