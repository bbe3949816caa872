"""The core data model of a model request, independent of ADK and google-genai types.

Why our own types: the pipeline must be pure, hashable and testable without an agent, and a
request must serialise to one canonical JSON form so a checksum means "byte for byte the same".
Parts we do not understand travel as `OpaquePart` (their JSON), so conversion is lossless.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator, Literal, Union

Role = Literal["user", "model"]


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8 kept as is (large values in slices: `json_text`)."""
    return json_text(value, sort_keys=True)


def json_text(value: Any, *, sort_keys: bool = False, indent: int | None = None) -> str:
    """`json.dumps(value, sort_keys=..., indent=..., ensure_ascii=False, default=str)`, compact when `indent` is
    None. A value holding more than `SLICE_CHARS` characters is encoded a piece at a time, each piece at most that
    long, to the same text: one `json.dumps` of a 50 MB tool result holds the interpreter lock for about a
    second, and the event loop with it."""
    if within_chars(value, SLICE_CHARS):
        return _dumps(value, sort_keys, indent)
    return "".join(_pieces(value, sort_keys, indent, 0))


SLICE_CHARS = 1 << 20  # characters one C call over a huge text may take (the interpreter lock is held meanwhile)


def _dumps(value: Any, sort_keys: bool, indent: int | None) -> str:
    return json.dumps(value, sort_keys=sort_keys, indent=indent, separators=(",", ":") if indent is None else None,
                      ensure_ascii=False, default=str)


def within_chars(value: Any, budget: int) -> bool:
    """Whether `value` holds at most `budget` characters, counting a string by its length, a number by its longest
    form and anything else as 8 (stops once over): a walk whose cost is bounded by `budget`, not by the value."""
    return _room_after(value, budget) >= 0


def _room_after(value: Any, budget: int) -> int:
    """`budget` less the characters `value` holds (as `within_chars` counts them); negative once over."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            budget -= len(v)
        elif isinstance(v, float):
            budget -= 24  # the longest repr of a float
        elif isinstance(v, int):
            budget -= 8 + v.bit_length() // 3  # about its digits, without writing them
        else:
            budget -= 8
        if budget < 0:
            return budget
        if isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, (list, tuple)):
            todo.extend(v)
    return budget


def _pieces(value: Any, sort_keys: bool, indent: int | None, level: int) -> Any:
    """`_dumps(value)` at nesting `level` as pieces: containers opened by hand, small parts and string slices
    encoded whole (a part's own line breaks indented to its level: JSON strings hold none)."""
    splittable = (isinstance(value, (str, list, tuple))
                  or isinstance(value, dict) and all(isinstance(k, str) for k in value))
    if not splittable or not value or within_chars(value, SLICE_CHARS):
        text = _dumps(value, sort_keys, indent)  # other keys or objects: json's own conversion, whole
        yield text.replace("\n", "\n" + " " * (indent * level)) if indent and level else text
        return
    if isinstance(value, str):  # escaping is per character: the slices' bodies join to the whole's
        yield '"'
        for start in range(0, len(value), SLICE_CHARS):
            yield _dumps(value[start:start + SLICE_CHARS], False, None)[1:-1]
        yield '"'
        return
    inner = "" if indent is None else "\n" + " " * (indent * (level + 1))
    close = "" if indent is None else "\n" + " " * (indent * level)
    is_dict = isinstance(value, dict)
    items = [(k, value[k]) for k in (sorted(value) if sort_keys else value)] if is_dict else [(None, v) for v in value]
    yield "{" if is_dict else "["
    run: list[tuple[Any, Any]] = []  # consecutive small items, encoded together (one call for many rows)
    room, done = SLICE_CHARS, 0
    for key, item in items:
        left = _room_after(item, room)
        if left < 0 and run:
            yield from _run_text(run, done, is_dict, sort_keys, indent, level)
            done, run, room = done + len(run), [], SLICE_CHARS
            left = _room_after(item, room)
        if left >= 0:
            run.append((key, item))
            room = left
            continue
        label = "" if key is None else _dumps(key, False, None) + (":" if indent is None else ": ")
        yield ("," if done else "") + inner + label
        yield from _pieces(item, sort_keys, indent, level + 1)
        done += 1
    if run:
        yield from _run_text(run, done, is_dict, sort_keys, indent, level)
    yield close + ("}" if is_dict else "]")


def _run_text(run: list[tuple[Any, Any]], done: int, is_dict: bool, sort_keys: bool, indent: int | None,
              level: int) -> Iterator[str]:
    """Consecutive items of a container at `level`, as its own encoding writes them: one `_dumps` of just
    these items, without its brackets (after `done` items, with the comma before)."""
    text = _dumps(dict(run) if is_dict else [v for _, v in run], sort_keys, indent)
    if indent and level:
        text = text.replace("\n", "\n" + " " * (indent * level))
    tail = 1 if indent is None else 2 + max(0, indent * level)  # the bracket, after its line break and indent
    yield ("," if done else "") + text[1:-tail]


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def response_digest(response: Any, canonical: str | None = None) -> str:
    """Key of a tool response (as sent: non-dict results are wrapped as ADK does), for URI lookups. `canonical`:
    the dict's `canonical_json`, when the caller has made it already (a huge result is not encoded twice)."""
    if not isinstance(response, dict):
        return sha256_hex(canonical_json({"result": response}))[:20]
    return sha256_hex(canonical if canonical is not None else canonical_json(response))[:20]


def _with_extra(main: str, inner: dict[str, Any], extra: "dict[str, Any] | None") -> dict[str, Any]:
    """A part's JSON: its interpreted field, plus what rides with it (`extra`, in google-genai's own
    JSON shape: `thought_signature` beside it, a call's or response's other fields under its key)."""
    if not extra:
        return {main: inner}
    data = dict(extra)
    data[main] = {**extra[main], **inner} if main in extra else inner
    return data


def _split_extra(data: dict[str, Any], main: str, known: tuple[str, ...]) -> "dict[str, Any] | None":
    """The inverse of `_with_extra`: everything in a part's JSON that is not an interpreted field."""
    extra = {k: v for k, v in data.items() if k != main}
    inner = data[main]
    if isinstance(inner, dict):
        rest = {k: v for k, v in inner.items() if k not in known}
        if rest:
            extra[main] = rest
    return extra or None


@dataclass(frozen=True)
class TextPart:
    """Text, with what Gemini attaches to it when thinking (`extra`: its thought signature), kept
    so the part goes back exactly as the model wrote it."""

    text: str
    extra: "dict[str, Any] | None" = None

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, **(self.extra or {})}


@dataclass(frozen=True)
class FunctionCall:
    """A tool call. `extra` holds the rest of the part as google-genai JSON (a thinking model's
    `thought_signature`, which must go back with the call, or a call's streaming fields)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    extra: "dict[str, Any] | None" = None

    def to_json(self) -> dict[str, Any]:
        inner: dict[str, Any] = {"name": self.name, "args": self.args, "id": self.id}
        order = list(self.args)
        if order != sorted(order, key=str):
            # Canonical JSON sorts keys, but fold lines and references read arguments in the call's
            # order: recorded with it, a re-pack from the store renders the same text.
            inner["arg_order"] = order
        return _with_extra("function_call", inner, self.extra)


@dataclass(frozen=True)
class FunctionResponse:
    """A tool result. `extra`: the rest of the part (e.g. a multimodal response's `parts`)."""

    name: str
    response: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    extra: "dict[str, Any] | None" = None

    @cached_property
    def key(self) -> str:
        """`response_digest` of the payload: how its saved original's URI is looked up."""
        return response_digest(self.response)

    def to_json(self) -> dict[str, Any]:
        return _with_extra("function_response", {"name": self.name, "response": self.response, "id": self.id}, self.extra)


@dataclass(frozen=True)
class Blob:
    """Inline binary data (images, audio); counted with a fixed per-item estimate."""

    mime_type: str
    data: bytes

    def to_json(self) -> dict[str, Any]:
        return {"inline_data": {"mime_type": self.mime_type, "data": base64.b64encode(self.data).decode("ascii")}}


@dataclass(frozen=True)
class OpaquePart:
    """A part kind the pipeline does not interpret (file_data, code execution, thoughts...)."""

    raw: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"opaque": self.raw}


Part = Union[TextPart, FunctionCall, FunctionResponse, Blob, OpaquePart]


def part_from_json(data: dict[str, Any]) -> Part:
    if "text" in data:
        return TextPart(data["text"], {k: v for k, v in data.items() if k != "text"} or None)
    if "function_call" in data:
        d = data["function_call"]
        args = d.get("args") or {}
        if d.get("arg_order"):
            args = {k: args[k] for k in d["arg_order"] if k in args} | args
        return FunctionCall(d["name"], args, d.get("id"),
                            _split_extra(data, "function_call", ("name", "args", "id", "arg_order")))
    if "function_response" in data:
        d = data["function_response"]
        return FunctionResponse(d["name"], d.get("response") or {}, d.get("id"),
                                _split_extra(data, "function_response", ("name", "response", "id")))
    if "inline_data" in data:
        d = data["inline_data"]
        return Blob(d["mime_type"], base64.b64decode(d["data"]))
    if "opaque" in data:
        return OpaquePart(data["opaque"])
    raise ValueError(f"unknown part shape with keys {sorted(data)}")


@dataclass(frozen=True)
class Message:
    """One entry of `contents`: a role and its parts, with a stable content digest."""

    role: Role
    parts: tuple[Part, ...]

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "parts": [p.to_json() for p in self.parts]}

    @cached_property
    def digest(self) -> str:
        return sha256_hex(canonical_json(self.to_json()))

    @cached_property
    def text(self) -> str:
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @cached_property
    def calls(self) -> tuple[FunctionCall, ...]:
        return tuple(p for p in self.parts if isinstance(p, FunctionCall))

    @cached_property
    def responses(self) -> tuple[FunctionResponse, ...]:
        return tuple(p for p in self.parts if isinstance(p, FunctionResponse))

    @cached_property
    def blobs(self) -> tuple["Blob", ...]:
        return tuple(p for p in self.parts if isinstance(p, Blob))

    @cached_property
    def only_responses(self) -> bool:
        """Function responses and nothing but (no text, no calls): a tool-result message."""
        return bool(self.parts) and len(self.responses) == len(self.parts)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Message":
        return cls(role=data["role"], parts=tuple(part_from_json(p) for p in data["parts"]))


def user_text(text: str) -> Message:
    return Message("user", (TextPart(text),))


@dataclass(frozen=True)
class ToolSpec:
    """A function declaration as JSON (name, description, parameters), in canonical form."""

    name: str
    declaration: dict[str, Any]

    @cached_property
    def declaration_json(self) -> str:
        """The declaration's canonical JSON (what its tokens are counted from), serialised once: every
        call counts the head of several requests that share these tools."""
        return canonical_json(self.declaration)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "declaration": self.declaration}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ToolSpec":
        return cls(data["name"], data["declaration"])


@dataclass(frozen=True)
class ModelRequest:
    """What one model call sends: the Context Pack in wire-neutral form.

    `other_tools` holds non-function tools (built-in search, code execution) untouched.
    """

    model: str
    system_instruction: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    other_tools: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "system_instruction": self.system_instruction,
            "messages": [m.to_json() for m in self.messages],
            "tools": [t.to_json() for t in self.tools],
            "other_tools": list(self.other_tools),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ModelRequest":
        return cls(
            model=data["model"],
            system_instruction=data["system_instruction"],
            messages=tuple(Message.from_json(m) for m in data["messages"]),
            tools=tuple(ToolSpec.from_json(t) for t in data["tools"]),
            other_tools=tuple(data.get("other_tools", ())),
        )

    def head_json(self) -> dict[str, Any]:
        """Everything but the messages (model, system instruction, tools)."""
        return {"model": self.model, "system_instruction": self.system_instruction,
                "tools": [t.to_json() for t in self.tools], "other_tools": list(self.other_tools)}

    @cached_property
    def checksum(self) -> str:
        """`sha256:` of the canonical request: its head JSON and the sha256 of each message, in order.

        Hashing messages by their own digests (cached per message) keeps the checksum exact while a
        long session's history is not re-serialised on every call.
        """
        return "sha256:" + sha256_hex(canonical_json({"head": self.head_json(), "messages": [m.digest for m in self.messages]}))
