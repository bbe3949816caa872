"""Conversion between google-genai / ADK request types and the core data model.

Lossless by construction: a part the core does not interpret is carried as its JSON dump and
rebuilt with `model_validate`, so rewriting a request never loses a thought signature or a file
reference.
"""

from __future__ import annotations

from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from ..pipeline.cache import current_memo, memo_scope
from ..pipeline.incremental import extended, note_prefix
from ..content import _split_extra, Blob, FunctionCall, FunctionResponse, Message, ModelRequest, OpaquePart, Part, TextPart, ToolSpec

__all__ = ["to_message", "to_content", "request_from_llm", "apply_request", "llm_request_from", "agent_model",
           "final_response", "answer_text"]


_INNER = {"function_call": ("name", "args", "id"), "function_response": ("name", "response", "id")}


def _to_part(part: types.Part) -> Part:
    # Field presence straight from __dict__: a pydantic dump of every part of every request
    # would dominate the cost of packing a long session.
    keys = {k for k, v in part.__dict__.items() if v is not None}
    if keys == {"text"}:
        return TextPart(part.text or "")
    if "function_call" in keys or "function_response" in keys:
        return _call_or_response(part, keys)
    if "text" in keys and keys <= {"text", "thought_signature"} and not part.thought:
        return TextPart(part.text or "", {"thought_signature": _dump(part)["thought_signature"]})
    if keys == {"inline_data"} and part.inline_data and part.inline_data.data is not None and not part.inline_data.display_name:
        return Blob(part.inline_data.mime_type or "application/octet-stream", part.inline_data.data)
    return OpaquePart(_dump(part))


def _dump(part: types.Part) -> dict[str, Any]:
    return part.model_dump(mode="json", exclude_none=True)


def _call_or_response(part: types.Part, keys: "set[str]") -> Part:
    """A call or a response, keeping whatever rides with it (a thinking model's thought signature,
    a multimodal response's parts) so pairing still sees the call and nothing is lost."""
    main = "function_call" if "function_call" in keys else "function_response"
    x = getattr(part, main)
    inner_rest = any(v is not None for k, v in x.__dict__.items() if k not in _INNER[main])
    extra = _split_extra(_dump(part), main, _INNER[main]) if (len(keys) > 1 or inner_rest) else None
    if main == "function_call":
        return FunctionCall(x.name or "", dict(x.args or {}), x.id, extra)
    return FunctionResponse(x.name or "", dict(x.response or {}), x.id, extra)


def _from_part(part: Part) -> types.Part:
    if isinstance(part, (TextPart, FunctionCall, FunctionResponse)) and part.extra:
        data = part.to_json()
        data.get("function_call", {}).pop("arg_order", None)  # ours: the args dict itself is in that order
        return types.Part.model_validate(data)
    if isinstance(part, TextPart):
        return types.Part(text=part.text)
    if isinstance(part, FunctionCall):
        return types.Part(function_call=types.FunctionCall(name=part.name, args=part.args, id=part.id))
    if isinstance(part, FunctionResponse):
        return types.Part(function_response=types.FunctionResponse(name=part.name, response=part.response, id=part.id))
    if isinstance(part, Blob):
        return types.Part(inline_data=types.Blob(mime_type=part.mime_type, data=part.data))
    return types.Part.model_validate(part.raw)


# The memo below rests on one fact: ADK rebuilds each request with shallow copies of the session's
# contents (new Content and Part objects), so the payloads inside — text strings, argument and
# response dicts, thought signatures — are the same objects from call to call. A new invocation
# starts from a deep copy of the session (InMemorySessionService): the dicts are new, but their
# strings and bytes are the same objects still (a deep copy shares immutable leaves). So a payload
# is keyed by its structure with its string leaves by identity, and the entry holds those leaves
# (their ids cannot be reused while it lives).

PartSignature = tuple  # (kind "t"/"c"/"r", payload, payload key, name, id, thought, thought_signature bytes)
_SCALARS = (int, float, bool, type(None))


def _leaf_key(value: Any, held: list) -> Any:
    """`value`'s structure, with strings and bytes by identity (appended to `held`) and numbers by
    value; equal keys mean equal values. None for anything else (not memoised)."""
    if isinstance(value, (str, bytes)):
        held.append(value)
        return id(value)
    if isinstance(value, _SCALARS):
        return (type(value).__name__, value)
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            key = _leaf_key(v, held)
            if key is None or not isinstance(k, str):
                return None
            items.append((k, key))
        return ("d", tuple(items))
    if isinstance(value, (list, tuple)):
        keys = tuple(_leaf_key(v, held) for v in value)
        return None if any(k is None for k in keys) else ("l", type(value).__name__, keys)
    return None


def _only_fields(part: types.Part, expected: int) -> bool:
    """Whether exactly `expected` fields of the part are set (defaults are None)."""
    if len(part.__pydantic_fields_set__) == expected:
        return True
    return sum(v is not None for v in part.__dict__.values()) == expected  # e.g. validated from a full dump


def _part_signature(part: types.Part, held: list) -> PartSignature | None:
    """A part's kind, its payload (object and key) and what rides with it: a call's name and id, and
    the `thought` flag and `thought_signature` Gemini attaches when thinking. None for any other part
    (it is converted every time)."""
    d = part.__dict__
    thought, signature = d["thought"], d["thought_signature"]
    if not _only_fields(part, 1 + (thought is not None) + (signature is not None)):
        return None
    if d["text"] is not None:
        held.append(d["text"])
        return ("t", d["text"], id(d["text"]), None, None, thought, signature)
    fc, fr = d["function_call"], d["function_response"]
    x, kind, payload = (fc, "c", fc.args) if fc is not None else (fr, "r", fr.response if fr is not None else None)
    if payload is None:
        return None
    key = _leaf_key(payload, held)
    return None if key is None else (kind, payload, key, x.name, x.id, thought, signature)


def _same_part(part: types.Part, sig: PartSignature) -> bool:
    """`_part_signature(part)` would equal `sig` (payloads by identity, else by leaf key), without building it."""
    d = part.__dict__
    if sig[0] == "t":
        if d["text"] is not sig[1]:
            return False
    else:
        x = d["function_call"] if sig[0] == "c" else d["function_response"]
        if x is None or x.name != sig[3] or x.id != sig[4]:
            return False
        payload = x.args if sig[0] == "c" else x.response
        if payload is not sig[1] and (payload is None or _leaf_key(payload, []) != sig[2]):
            return False
    thought, signature = sig[5], d["thought_signature"]
    return (d["thought"] == thought and signature is sig[6]
            and _only_fields(part, 1 + (thought is not None) + (signature is not None)))


def to_message(content: types.Content) -> Message:
    """Convert one content; with the call's memo, conversions are memoised by payload (a long session's
    history would otherwise be converted and hashed again on every call)."""
    cache = current_memo()
    parts = content.parts or ()
    role = "model" if content.role == "model" else "user"
    held: list = []
    sigs = [_part_signature(p, held) for p in parts] if cache is not None else [None]
    if any(sig is None for sig in sigs):
        return Message(role, tuple(_to_part(p) for p in parts))
    key = (role, *[(sig[0], *sig[2:]) for sig in sigs])
    hit = cache.lookup("message", key)
    if hit is not None:
        return hit[1]
    message = Message(role, tuple(_to_part(p) for p in parts))
    cache.put("message", key, (held, message))  # the leaves held: their ids cannot be reused
    return message


def _signature(content: types.Content) -> "tuple[str, tuple[PartSignature, ...]] | None":
    """A content's role and part signatures; None if a part is not reusable. A signature holds its
    payloads, whose leaves its keys name by identity."""
    sigs = tuple(_part_signature(p, []) for p in content.parts or ())
    return None if any(sig is None for sig in sigs) else (content.role, sigs)  # type: ignore[return-value]


def _unchanged(content: types.Content, sig: "tuple[str, tuple[PartSignature, ...]] | None") -> bool:
    """`_signature(content) == sig`, payloads by identity, without building it."""
    if sig is None or content.role != sig[0]:
        return False
    parts = content.parts or ()
    if len(parts) != len(sig[1]):
        return False
    for p, s in zip(parts, sig[1]):
        if not _same_part(p, s):
            return False
    return True


def _samples(n: int) -> list[int]:
    """Where a grown history is checked against the last request: the last content it had, then
    back at doubling steps, and the first (about log2(n) positions, the newest most densely)."""
    out, i, step = [], n - 1, 1
    while i > 0:
        out.append(i)
        i, step = i - step, step * 2
    return out + [0]


def _unchanged_prefix(contents: "list[types.Content]", sigs: list, msgs: list, grown: bool) -> int:
    """How many leading contents are unchanged since the last request of the conversation.

    When the session's events only `grown` (`EventTimes.only_grew`), what ADK builds only grows or
    changes at its end, so finding the last request's contents at sampled positions (about log2(n))
    means they all are there; a sample matches by payload object, else by value. Otherwise every
    content is compared in order, up to the first that changed."""
    n = len(sigs)
    if grown and n <= len(contents) and all(_unchanged(contents[i], sigs[i]) or to_message(contents[i]) == msgs[i]
                                  for i in _samples(n)):
        return n
    same = 0
    for c, sig in zip(contents, sigs):
        if not _unchanged(c, sig):
            break
        same += 1
    return same


def _messages(contents: "list[types.Content]", grown: bool = False,
              scope: Any = None) -> tuple[Message, ...]:
    """All contents converted. With the call's memo, the leading contents unchanged since the last request
    of the same conversation (`_unchanged_prefix`) take its messages without being keyed one by one."""
    cache = current_memo()
    if not contents:
        return ()
    first = _signature(contents[0]) if cache is not None else None
    if first is None or not first[1]:
        return tuple(to_message(c) for c in contents)
    key = (scope, first[0], first[1][0][2])  # the first payload's key: checked below, its leaves held by the entry
    run = cache.lookup("run", key)
    same = _unchanged_prefix(contents, run[0], run[1], grown) if run is not None else 0
    fresh = [_signature(c) for c in contents[same:]]
    msgs = (run[1][:same] if run is not None else ()) + tuple(to_message(c) for c in contents[same:])
    # a slot's own list is cut and extended in place (a slot packs one call at a time); without a slot
    # (the recovery and failure paths) the entry may be another conversation's: copied
    sigs: list = (run[0] if scope is not None else run[0][:same]) if run is not None else []
    sigs[same:] = fresh
    cache.put("run", key, (sigs, msgs))
    if run is not None and same == len(run[1]):  # the passes over the messages need not compare them again
        note_prefix(run[1], msgs, same)
    return msgs


def to_content(message: Message) -> types.Content:
    return types.Content(role=message.role, parts=[_from_part(p) for p in message.parts])


def _system_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, types.Content):
        return "\n".join(p.text for p in (value.parts or []) if p.text)
    if isinstance(value, types.Part):
        return value.text or ""
    if isinstance(value, list):
        return "\n".join(_system_text(v) for v in value)
    return str(value)


def request_from_llm(llm_request: LlmRequest, grown: bool = False,
                     scope: Any = None) -> ModelRequest:
    """The core view of an ADK request: system text, messages, function tools, other tools.

    The call's memo (the packer's) makes converting an unchanged history nearly free; without it every
    content is converted (same result). `grown`: the session's events only grew since the last
    request of `scope` (one agent of one session; `EventTimes.only_grew`), so a sampled check of
    the history against that request is enough."""
    specs: list[ToolSpec] = []
    other: list[dict[str, Any]] = []
    for tool in llm_request.config.tools or []:
        if not isinstance(tool, types.Tool):
            other.append({"callable": getattr(tool, "__name__", repr(tool))})
            continue
        for fd in tool.function_declarations or []:
            specs.append(ToolSpec(fd.name or "", fd.model_dump(mode="json", exclude_none=True)))
        rest = tool.model_dump(mode="json", exclude_none=True, exclude={"function_declarations"})
        if rest:
            other.append(rest)
    return ModelRequest(
        model=llm_request.model or "",
        system_instruction=_system_text(llm_request.config.system_instruction),
        messages=_messages(llm_request.contents, grown, scope),
        tools=tuple(specs),
        other_tools=tuple(other),
    )


def _tools_config(request: ModelRequest) -> list[types.Tool] | None:
    tools: list[types.Tool] = []
    if request.tools:
        tools.append(types.Tool(function_declarations=[types.FunctionDeclaration.model_validate(t.declaration) for t in request.tools]))
    tools.extend(types.Tool.model_validate(o) for o in request.other_tools if "callable" not in o)
    return tools or None


def apply_request(llm_request: LlmRequest, request: ModelRequest, *, declared: "set[str]",
                  added: "dict[str, Any] | None" = None, original: "ModelRequest | None" = None,
                  scope: Any = None) -> None:
    """Rewrite `llm_request` in place to send `request` (the only place a request is mutated).

    `declared` are the function names the original request declared: those not kept by the pack
    leave `tools_dict` too; anything else there (not a declared function) is left alone. `added`
    are tools the pack itself declares (the recall tool), by name. `original` is the core view of
    `llm_request` as it came in: messages the pack left unchanged go out as ADK's own Content objects
    (found by digest: the newest content of each; with the call's memo and the slot `scope`, the positions by
    digest are carried from the slot's last call over the same history).
    """
    # Everything is built before anything is assigned: a failure leaves the request as it came in.
    keep = {t.name for t in request.tools}
    kept = _kept(request, original, llm_request.contents, scope) \
        if original is not None else {}
    contents = [kept.get(m.digest) or to_content(m) for m in request.messages]
    had_callables = [t for t in (llm_request.config.tools or []) if not isinstance(t, types.Tool)]
    tools = (_tools_config(request) or []) + had_callables or None
    tools_dict = {k: v for k, v in llm_request.tools_dict.items() if k in keep or k not in declared}
    tools_dict.update({name: tool for name, tool in (added or {}).items() if name in keep})
    llm_request.contents = contents
    llm_request.config.system_instruction = request.system_instruction
    llm_request.config.tools = tools
    llm_request.tools_dict = tools_dict


def _kept(request: ModelRequest, original: ModelRequest, contents: "list[types.Content]",
          scope: Any) -> "dict[str, types.Content]":
    """ADK's content for each message of `request` that `original` holds (by digest, the newest)."""
    def feed(state: "tuple[dict[str, int], int]", more: tuple) -> "tuple[dict[str, int], int]":
        # grown in place, never copied: only this slot's entry holds it (a slot packs one call at a time),
        # and `extended` feeds it only messages that follow the ones it has read
        where, n = state
        where.update([(m.digest, n + i) for i, m in enumerate(more)])  # listed first: a failure leaves it as it was
        return where, n + len(more)

    with memo_scope(current_memo() if scope is not None else None):  # positions are carried per slot only
        where, _ = extended(("positions", scope), original.messages, lambda: ({}, 0), feed)
    return {m.digest: contents[where[m.digest]] for m in request.messages if m.digest in where}


def llm_request_from(request: ModelRequest) -> LlmRequest:
    """A fresh `LlmRequest` carrying `request` (for replaying a recorded call against a model)."""
    config = types.GenerateContentConfig(system_instruction=request.system_instruction, tools=_tools_config(request))
    return LlmRequest(model=request.model, contents=[to_content(m) for m in request.messages], config=config)


def agent_model(ctx: Any) -> BaseLlm:
    """The model of the agent whose callback `ctx` is (a callback or tool context)."""
    return ctx.get_invocation_context().agent.canonical_model


async def final_response(model: BaseLlm, request: LlmRequest) -> LlmResponse | None:
    """The last response of a direct call to `model` (no plugins, no streaming): the plugin's own calls (LLM
    summary, acceptance judge and repair, HyDE) go straight to the model, as ADK's own summarizer does."""
    final = None
    async for response in model.generate_content_async(request, stream=False):
        final = response
    return final


def answer_text(response: LlmResponse | None) -> str | None:
    """The text of a final answer (no function call; thoughts left out), None for anything else."""
    parts = (response.content.parts or []) if response is not None and response.content else []
    if any(p.function_call for p in parts):
        return None
    return "".join(p.text for p in parts if p.text and not p.thought) or None
