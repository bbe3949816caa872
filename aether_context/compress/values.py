"""Known values: the identifiers and values a turn carried, kept after the turn itself is folded.

Why: an agent reads a reservation id in a tool result, a user id in a user message, and uses them
as arguments several calls later. Folding turns the result into one line and the value is gone,
so the model guesses or asks again. Here every source (a tool call with its result, a user or
model text) yields its values as `field=value,...` pairs; sources merge across turns (`value_merge`:
the newest result of the same call replaces the older one, a value already shown by a newer source
is not repeated) and render as a compact `KNOWN VALUES:` block, one short line per source, within a cap.

Usage::

    sets = [extract_values(tool="get_user_details", args={"user_id": "mia_li_3668"}, result=user, turn=3),
            extract_values(text="My reservation ID is YAX4DR.", turn=4)]
    block = render_values(merge_values(sets), max_tokens=300, counter=counter)  # merge_values from value_merge
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..content import FunctionCall, Message, canonical_json
from ..tokens import lines_count
from ._fit import ELLIPSIS, TokenCounterLike, as_count, safe_end
from ._value_forms import compact_form, parameter_names, text_fields

__all__ = ["ValueSet", "extract_values", "values_from_messages", "render_values", "render_call",
           "argument_order", "parameter_names"]

_MAX_VALUE_CHARS = 80  # longer strings are prose, not values
_MAX_LEAVES = 400  # per source: a huge result keeps its first values, not all of them
_ARG_CHARS = 40  # per argument in a source label
_FIRST_VALUES = 6  # values per field every source gets before any field gets all of its values
_ALL = 1 << 30
_MIN_ROOM = 4  # tokens: the shortest line (`- f()`) costs about this
_MAX_TRIED = 64  # lines tried kept per source (one render tries at most two per field, and its label)
# Fields whose values are identifiers or values an agent types back: kept first when room is short.
_ID_FIELD = re.compile(r"(?:^|[._])(?:id|ids|number|code|key|email|name|dob|date|uuid|ref|amount|total|balance|"
                       r"path|file|url|ids|emails|codes|dates|amounts|paths|urls|names|keys)$|_id$|Id$", re.I)
_ID_ARG = re.compile(r"(?:^|_)(?:id|ids|number|code|key|uuid|ref)$|Id$", re.I)
_IDLIKE = re.compile(r"^(?=.*[A-Za-z])(?=.*\d)[\w.@+-]{3,}$|^[A-Z][A-Z0-9]{2,11}$")  # letters and digits, or a code
_WORD = re.compile(r"[\w.@+-]*\w")  # a whole token of a text, as values are written
_ID_KEY = re.compile(r"^[A-Za-z][\w-]*\d{3,}$|^(?=.*\d)[A-Z0-9]{5,12}$")  # a dict key that is an id

@dataclass(frozen=True)
class ValueSet:
    """The values of one source: a tool call (its label holds the arguments) or a user/model text."""

    source: str
    turn: int
    fields: tuple[tuple[str, tuple[str, ...]], ...]
    call: bool = False  # a tool call: its label (name and arguments) is worth showing alone

    def values(self) -> list[str]:
        return [v for _, vs in self.fields for v in vs]

    @property
    def derived(self) -> bool:
        """A model's own text: its values mostly repeat what it read from the user or a tool."""
        return not self.call and self.source.startswith("model ")


def extract_values(*, tool: str | None = None, args: Mapping[str, Any] | None = None, result: Any = None,
                   text: str | None = None, role: str = "user", turn: int = 0) -> ValueSet | None:
    """The values of a tool call and its result (`tool`, `args`, `result`), or of a `text` said by `role`.

    A result's scalar leaves become `path=value` fields (list items joined, dict keys that are ids
    listed under their parent); a text's identifiers, codes, dates, amounts, names, paths, emails and
    quoted strings become fields by kind. None when there is nothing to keep.
    """
    if tool is not None:
        fields = _result_fields(result)
        return ValueSet(render_call(tool, args or {}), turn, fields, call=True)
    if text is None:
        raise ValueError("extract_values needs `tool` (a call and its result) or `text`")
    fields = text_fields(text)
    return ValueSet(f"{role} (turn {turn})", turn, fields) if fields else None


def structured_result(result: Any) -> bool:
    """Whether a tool result is structured data: a JSON object or array (ADK's envelope unwrapped)
    made mostly of values, not of prose (a command's `{"returncode": 0, "output": "..."}` is prose).
    Its values, not its first characters, then say what it held."""
    parsed = _parse(result)
    if not isinstance(parsed, (Mapping, list)):
        return False
    prose = sum(len(leaf) for leaf in _string_leaves(parsed) if len(leaf) > _MAX_VALUE_CHARS)
    return prose * 2 < len(canonical_json(parsed))


def _string_leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _string_leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _string_leaves(item)


def result_values(tool: str, args: Mapping[str, Any], result: Any, max_tokens: int, counter: TokenCounterLike) -> str:
    """A call's result as `field=values …` within `max_tokens`, identifiers first, then the values agents
    type back: its KNOWN VALUES line without the call's label ("" when no field fits)."""
    vs = extract_values(tool=tool, args=args, result=result)
    line = render_values([vs], max_tokens, counter, title="VALUES:").partition("\n")[2] if vs is not None else ""
    return line.partition(" → ")[2]


def argument_order(args: Mapping[str, Any]) -> list[str]:
    """Identifier arguments first (`user_id`, `flight_number`, ...), then the rest, each group sorted by name.

    The order the model wrote its arguments in never changes a rendering (re-packing gives the same
    bytes), and when a line is clipped the identifiers are what stays.
    """
    return sorted((str(k) for k in args), key=lambda k: (not _ID_ARG.search(k), k))


def values_from_messages(messages: Iterable[tuple[int, Message]]) -> list[ValueSet]:
    """The value sets of `(turn, message)` pairs in order: texts by role, each call with its response.

    A response is paired with its call by id, else with the latest unanswered call of the same name;
    a call not answered yet gives a set with its arguments only (its response, later, replaces it).
    """
    sets: list[ValueSet] = []
    open_calls: list[FunctionCall] = []
    for turn, message in messages:
        if message.text.strip():
            found = extract_values(text=message.text, role=message.role, turn=turn)
            if found is not None:
                sets.append(found)
        for call in message.calls:
            open_calls.append(call)
            sets.append(extract_values(tool=call.name, args=call.args, turn=turn))  # type: ignore[arg-type]
        for response in message.responses:
            call = _pop_call(open_calls, response.id, response.name)
            args = call.args if call is not None else {}
            sets.append(extract_values(tool=response.name, args=args, result=response.response,  # type: ignore[arg-type]
                                       turn=turn))
    return sets


def _pop_call(calls: list[FunctionCall], call_id: str | None, name: str) -> FunctionCall | None:
    for i in range(len(calls) - 1, -1, -1):
        if (call_id and calls[i].id == call_id) or (not call_id and calls[i].name == name):
            return calls.pop(i)
    for i in range(len(calls) - 1, -1, -1):  # ids that do not match: fall back to the name
        if calls[i].name == name:
            return calls.pop(i)
    return None


def render_call(tool: str, args: Mapping[str, Any], max_chars: int = _ARG_CHARS) -> str:
    """`name(k=v, ...)` in `argument_order`, values in canonical JSON (bare when unambiguous)."""
    parts = []
    for key in argument_order(args):
        value = args[key]
        rendered = value if isinstance(value, str) and _bare(value) else canonical_json(value)
        parts.append(f"{key}={_clip(rendered, max_chars)}")
    return f"{tool}({', '.join(parts)})"


def render_values(sets: Iterable[ValueSet], max_tokens: int, counter: TokenCounterLike, *,
                  title: str = "KNOWN VALUES:", params: frozenset[str] = frozenset(),
                  memo: "dict[int, tuple] | None" = None, fields: "dict[tuple, int] | None" = None) -> str:
    """`title` then one line per source, newest first: `- source → field=v1,v2 …`, within `max_tokens`.

    Room goes first to every source's identifiers (ids, codes, emails), then to the values agents type
    back (names, dates, amounts, paths), then to the rest; in each, newest source first, the first few
    values of every field before all the values of any. A text source with nothing left
    to show is omitted; a tool call keeps at least its label (its arguments) while room allows.
    `memo` (read and filled) keeps each source's ranked fields and the tokens of the lines tried for it, for a
    later render with the same `params` and counter (a merge keeps most sources, and each tries the same lines
    again), `fields` each field's rank by its name and values (a source merged again keeps most of its fields).
    """
    count = as_count(counter)
    sets = [vs for vs in sets if vs.fields or vs.call]
    if max_tokens <= 0 or not sets or count(title) > max_tokens:
        return ""
    ranks = _Ranks(sets, params, memo, fields)
    fill = _Fill(sets, ranks, count, max_tokens - count(title))
    for rank in range(4):
        for limit in (_FIRST_VALUES, _ALL):
            if rank == 0 and limit == _FIRST_VALUES:
                fill.fill(ranks.first(), rank, limit)
            elif rank == 3 and limit == _ALL:  # a call with nothing else to show: its arguments, with the room left
                calls = (k for k, vs in enumerate(sets) if vs.call and ranks.ranked[k] is not None)
                fill.fill(sorted({*ranks.by_rank[3], *calls}), rank, limit, labels=True)
            else:
                fill.fill(ranks.by_rank[rank], rank, limit)
    lines = [_line(vs, fill.shown.get(k, _NONE)) for k, vs in enumerate(sets) if fill.cost[k]]
    while lines and lines_count(counter, count)("\n".join([title, *lines])) > max_tokens:  # not quite additive
        lines.pop()
    return "\n".join([title, *lines]) if lines else ""


_Ranked = "tuple[tuple[int, tuple[tuple[int, int], ...]], ...]"  # a source's fields by rank: (rank, ((field, values),))
_NONE: "dict[int, int]" = {}  # never written: what a source shows before its first line


class _Fill:
    """A render's lines so far: values shown per field of each source shown, the tokens of each line
    (0: not shown), the room left. Few objects per source: collections were a good part of a render."""

    def __init__(self, sets: "list[ValueSet]", ranks: "_Ranks", count: "Callable[[str], int]", room: int) -> None:
        self.sets, self.ranked, self.tried, self.count, self.room = sets, ranks.ranked, ranks.tried, count, room
        self.shown: dict[int, dict[int, int]] = {}  # per source shown: field index -> values shown
        self.cost = [0] * len(sets)

    def fill(self, todo: "Iterable[int]", rank: int, limit: int, labels: bool = False) -> None:
        """One pass: each source in `todo`, in order, shows its fields of `rank` at `limit` values (with
        `labels`, a call shown with none keeps its label); a line that would not fit stays as it was."""
        for k in todo:
            if self.room < _MIN_ROOM:
                break  # no field or label fits in what is left
            for r, fields in self.ranked[k]:  # type: ignore[union-attr]
                if r == rank:
                    for f, n in fields:
                        shown = self.shown.get(k, _NONE)
                        if shown.get(f, 0) < min(limit, n):
                            self._attempt(k, {**shown, f: limit})
            if labels and not self.cost[k] and self.sets[k].call:
                self._attempt(k, _NONE)

    def _attempt(self, k: int, shown: "dict[int, int]") -> None:
        tried, key = self.tried[k], frozenset(shown.items())
        tokens = tried.get(key)
        if tokens is None:
            if len(tried) > _MAX_TRIED:  # renders at many caps: a source's lines tried, afresh
                tried.clear()
            tokens = tried[key] = self.count(_line(self.sets[k], shown))
        grown = tokens + 1 - self.cost[k]
        if grown <= self.room:
            self.room -= grown
            self.cost[k] += grown
            self.shown[k] = shown


class _Ranks:
    """The sources' fields by rank (`_field_rank`), each ranked when the first pass reaches it (a render
    whose room runs out early stops every later pass there too), kept in `memo` by source (the same
    object) with the tokens of the lines tried for it, for a later render with the same `params` and
    counter: a merge keeps most sources, and ranking and counting were most of a render."""

    def __init__(self, sets: "list[ValueSet]", params: frozenset[str], memo: "dict[int, tuple] | None",
                 fields: "dict[tuple, int] | None" = None) -> None:
        self.sets, self.params, self.memo = sets, params, memo
        self.fields = fields if fields is not None else {}
        self.names: dict[str, int] = {}
        self.ranked: "list[_Ranked | None]" = [None] * len(sets)
        self.tried: "list[dict[frozenset, int] | None]" = [None] * len(sets)  # per source: each line tried, its tokens
        self.by_rank: "tuple[list[int], ...]" = ([], [], [], [])  # the sources with fields of each rank

    def first(self) -> "Iterator[int]":
        """The sources with identifiers, ranking every source on the way."""
        for k, vs in enumerate(self.sets):
            ranked, self.tried[k] = self._ranked(vs)
            self.ranked[k] = ranked
            for r, _ in ranked:
                self.by_rank[r].append(k)
            if ranked and ranked[0][0] == 0:
                yield k

    def _ranked(self, vs: ValueSet) -> "tuple[_Ranked, dict[frozenset, int]]":
        """A source's fields by rank, and the tokens of the lines tried for it (filled by `_Fill`)."""
        held = self.memo.get(id(vs)) if self.memo is not None else None
        if held is not None and held[0] is vs:
            return held[1], held[2]
        known, by_rank = self.fields, {}
        for at, field in enumerate(vs.fields):
            rank = known.get(field)
            if rank is None:
                rank = self._rank(field)
            by_rank.setdefault(rank, []).append((at, len(field[1])))
        out = tuple((rank, tuple(by_rank[rank])) for rank in sorted(by_rank))
        tried: dict[frozenset, int] = {}
        if self.memo is not None:
            self.memo[id(vs)] = (vs, out, tried)
        return out, tried

    def _rank(self, field: "tuple[str, tuple[str, ...]]") -> int:
        self.fields[field] = rank = _field_rank(*field, self.params, self.names)
        return rank


def _field_rank(name: str, values: tuple[str, ...], params: frozenset[str] = frozenset(),
                names: "dict[str, int] | None" = None) -> int:
    """0 identifiers (ids, codes, emails), 1 fields named like a tool's parameter, 2 other typed-back
    values (names, dates, amounts, paths), 3 the rest. `names` keeps what each name alone says (a
    render ranks many fields of few names)."""
    by_name = names.get(name) if names is not None else None
    if by_name is None:
        by_name = _name_rank(name, params)
        if names is not None:
            names[name] = by_name
    return 0 if by_name == 0 or all(_IDLIKE.match(v) for v in values) else by_name


def _name_rank(name: str, params: frozenset[str]) -> int:
    """A field's rank by its name alone (0 when the name says identifier)."""
    if _ID_ARG.search(name) or name.lower().endswith(("email", "emails", "ids", "codes")):
        return 0
    if name.rsplit(".", 1)[-1] in params:
        return 1
    return 2 if _ID_FIELD.search(name) else 3


def _line(vs: ValueSet, shown: Mapping[int, int]) -> str:
    parts = []
    for f in sorted(shown):
        name, values = vs.fields[f]
        more = len(values) - shown[f]
        parts.append(f"{name}={','.join(values[:shown[f]])}" + (f",…+{more}" if more > 0 else ""))
    return f"- {vs.source} → {' '.join(parts)}" if parts else f"- {vs.source}"


def _result_fields(result: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    collected: dict[str, list[str]] = {}
    budget = [_MAX_LEAVES]
    compact = compact_form(result)
    if compact is None:
        _walk(_parse(result), "", collected, budget)
    else:  # an offloaded result: the values its compact form still shows
        _walk(compact[0], "", collected, budget)
        for name, values in text_fields(compact[1]):
            for value in values:
                _add(collected, name, value, budget)
    return tuple((name, tuple(values)) for name, values in collected.items())


def _parse(result: Any) -> Any:
    """ADK's `{"result": x}` envelope unwrapped, an offloaded result read from its compact form; JSON parsed."""
    while isinstance(result, Mapping) and len(result) == 1 and next(iter(result)) in ("result", "output"):
        result = next(iter(result.values()))
    if isinstance(result, Mapping) and isinstance(result.get("summary"), str) and "artifact_uri" in result:
        result = result["summary"]
    if isinstance(result, str) and result.strip()[:1] in ("{", "["):
        try:
            return json.loads(result)
        except ValueError:
            return result
    return result


def _walk(value: Any, path: str, out: dict[str, list[str]], budget: list[int]) -> None:
    if budget[0] <= 0:
        return
    if isinstance(value, Mapping):  # keys in sorted order: a stored (key-sorted) result renders the same
        for key, item in sorted(value.items(), key=lambda kv: str(kv[0])):
            key = str(key)
            if _ID_KEY.match(key):  # an id used as a key (`credit_card_4421486`): list it, walk its value as `*`
                _add(out, path or "keys", key, budget)
                _walk(item, f"{path}.*" if path else "*", out, budget)
            else:
                _walk(item, f"{path}.{key}" if path else key, out, budget)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _walk(item, path, out, budget)
    elif isinstance(value, str):
        if len(value) <= _MAX_VALUE_CHARS and value.strip():
            _add(out, path or "value", value.strip(), budget)
        else:  # prose inside a result: keep the values it names
            for name, values in text_fields(value):
                for v in values:
                    _add(out, f"{path}.{name}" if path else name, v, budget)
    elif value is not None and not isinstance(value, bool):
        _add(out, path or "value", canonical_json(value), budget)


def _add(out: dict[str, list[str]], name: str, value: str, budget: list[int]) -> None:
    values = out.setdefault(name, [])
    if value not in values:
        values.append(value)
        budget[0] -= 1


def _bare(value: str) -> bool:
    return bool(value) and value == value.strip() and not re.search(r"[\s,=()\"]", value)


def _clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[: safe_end(text, max(0, max_chars - 1))].rstrip() + ELLIPSIS
