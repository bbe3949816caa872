"""The properties bench/fuzz_requests.py checks on every call: what the pack sends against ADK's request.

- orphans: a function response without its call right before it, or a call without its responses;
- lost or reordered: every message the pack sends (its own payload, CONVERSATION SO FAR and STATUS
  aside) is one of ADK's, in ADK's order, with the same parts in the same order (calls, thought
  signatures, files, code, images byte for byte; a tool result may be compacted, a text cut with a
  marker, an old image replaced by its artifact citation); what it does not send is the oldest
  history or loop turns (folded into the payload) or the user's request (carried in the payload
  with its images and files), never a message between kept ones;
- framework tools: ADK's own tools and the recall tool still declared, built-in tools unchanged.
"""

from __future__ import annotations

from typing import Any

from aether_context.adk.collect import FRAMEWORK_TOOL_NAMES
from aether_context.adk.offload import RECALL_TOOL_NAME
from aether_context.content import Blob, FunctionCall, FunctionResponse, Message, ModelRequest, OpaquePart, TextPart
from aether_context.pipeline.render import PAYLOAD_HEADER

__all__ = ["check_call", "orphans"]

CUT_MARKS = ("[middle cut by aether-context", " tokens omitted]…")  # a text cut middle-out says so


def _part_key(p: Any) -> tuple:
    if isinstance(p, TextPart):
        return ("text", repr(getattr(p, "extra", None)))
    if isinstance(p, FunctionCall):
        return ("call", p.name, p.id, repr(sorted(p.args.items())), repr(getattr(p, "extra", None)))
    if isinstance(p, FunctionResponse):
        return ("response", p.name, p.id)
    if isinstance(p, Blob):
        return ("blob", p.mime_type, p.data)
    return ("opaque", repr(sorted(p.raw.items())) if isinstance(p, OpaquePart) else repr(p))


def _same_parts(a: Message, b: Message) -> bool:
    """`b` sends `a`'s parts, in order: text verbatim or cut with a marker, tool results possibly compacted."""
    if a.role != b.role or len(a.parts) != len(b.parts):
        return False
    for x, y in zip(a.parts, b.parts):
        if _decayed_attachment(x, y):
            continue
        if _part_key(x) != _part_key(y):
            return False
        if isinstance(x, TextPart) and x.text != y.text and not any(mark in y.text for mark in CUT_MARKS):
            return False
    return True


def _decayed_attachment(x: Any, y: Any) -> bool:
    """An older image the pack replaced by its citation (decay: the bytes stay one recall away)."""
    inline = isinstance(x, Blob) or (isinstance(x, OpaquePart) and "inline_data" in x.raw)
    return inline and isinstance(y, TextPart) and " attachment from turn " in y.text and "artifact://" in y.text


OWN_BLOCKS = (PAYLOAD_HEADER, "STATUS", "CONVERSATION SO FAR", "FAILURES SINCE THE PACK", "CONTEXT PRESSURE")
# what the pack itself writes as user text: its blocks, the closing STATUS and the in-loop notes


def _is_own_text(p: Any) -> bool:
    return isinstance(p, TextPart) and p.text.lstrip().startswith(OWN_BLOCKS)


def _is_ours(m: Message) -> bool:
    return m.role == "user" and bool(m.parts) and _is_own_text(m.parts[0])


def _without_own_tail(m: Message) -> Message:
    """A user message with the pack's STATUS appended as a trailing part, without it."""
    parts = list(m.parts)
    while len(parts) > 1 and m.role == "user" and _is_own_text(parts[-1]):
        parts.pop()
    return m if len(parts) == len(m.parts) else Message(m.role, tuple(parts))


def orphans(messages: "tuple[Message, ...]") -> list[str]:
    """Responses without their call right before them; calls whose responses do not follow."""
    problems = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.calls:
            pending = list(m.calls)
            j = i + 1
            while j < len(messages) and messages[j].only_responses:
                for r in messages[j].responses:
                    hit = next((c for c in pending if (r.id is not None and c.id == r.id)), None) or \
                        next((c for c in pending if c.name == r.name), None)
                    if hit is None:
                        problems.append(f"response {r.name} at {j} answers no call of message {i}")
                    else:
                        pending.remove(hit)
                j += 1
            if pending:
                problems.append(f"call {pending[0].name} at {i} has no response")
            i = j
            continue
        if m.responses:
            problems.append(f"response {m.responses[0].name} at {i} without its call")
        i += 1
    return problems


def _is_request(m: Message) -> bool:
    return m.role == "user" and bool(m.text) and not m.responses and not m.text.startswith("For context:")


def _unsent_problems(orig: ModelRequest, matched: "set[int]", payloads: "list[Message]") -> list[str]:
    """ADK messages the pack did not send must be folded history or loop turns (the oldest of each,
    summarised in the compaction block; a user's request may stay pinned before them), or a user's
    request (carried in a payload: this invocation's, or an earlier one kept as it was sent): never a hole
    between kept messages."""
    n = len(orig.messages)
    carried = [k for k in range(n) if k not in matched and orig.messages[k].role == "user" and orig.messages[k].text
               and any(orig.messages[k].text in payload.text
                       and [p for p in orig.messages[k].parts if not isinstance(p, TextPart)]
                       == [p for p in payload.parts if not isinstance(p, TextPart)] for payload in payloads)]
    matched = set(matched) | set(carried[:-1])  # earlier requests inside their payloads as sent
    r = carried[-1] if carried else n
    problems = []
    for lo, hi in ((0, r), (r + 1, n)):
        # a user's request may stay pinned verbatim while the turns after it are compacted: the request
        # of an invocation compacted inside its own tool loop stays where it was sent (cache prefix)
        kept = [k for k in range(lo, hi) if k in matched and not _is_request(orig.messages[k])]
        holes = [k for k in range(lo, hi) if k not in matched and kept and k > kept[0]]
        if holes:
            m = orig.messages[holes[0]]
            problems.append(f"lost: message {holes[0]} ({m.role} {[_part_key(p)[0] for p in m.parts]}) dropped between kept ones")
    return problems


def check_call(orig: ModelRequest, orig_tools: "set[str]", sent: ModelRequest, sent_tools: "set[str]") -> list[str]:
    """The problems of one call: ADK's request `orig` against what the pack sent (`*_tools`: tools_dict names)."""
    problems = [f"orphan: {p}" for p in orphans(tuple(_without_own_tail(m) for m in sent.messages))]
    if orphans(orig.messages):
        problems = []  # ADK's own request already had one: not ours to judge
    # lost or reordered: the pack's messages are ADK's, in ADK's order, with their parts
    kept = [_without_own_tail(m) for m in sent.messages if not _is_ours(m)]
    # earlier invocations' payloads stay as they were sent (issue 11): one per request at most
    payloads = [m for m in sent.messages if m.role == "user" and m.text.startswith(PAYLOAD_HEADER)]
    if len(payloads) > sum(1 for m in orig.messages if _is_request(m)):
        problems.append(f"payload: {len(payloads)} pack payloads")
    j, matched = len(orig.messages) - 1, []
    for m in reversed(kept):  # from the newest: the pack keeps the newest turns, ADK may repeat a message
        while j >= 0 and not _same_parts(orig.messages[j], m):
            j -= 1
        if j < 0:
            problems.append(f"lost: sent message not in ADK's request (or out of order): {m.role} "
                            f"{[_part_key(p)[0] for p in m.parts]} {m.text[:40]!r}")
            return problems
        matched.append(j)
        j -= 1
    problems += _unsent_problems(orig, set(matched), payloads)
    # framework tools stay declared (and executable), built-in tools configured
    declared = {t.name for t in sent.tools}
    needed = {t.name for t in orig.tools} & FRAMEWORK_TOOL_NAMES
    if RECALL_TOOL_NAME in declared | sent_tools:  # the recall tool, once the pack offers it
        needed.add(RECALL_TOOL_NAME)
    for name in sorted(needed):
        if name not in declared or name not in sent_tools:
            problems.append(f"framework tool missing: {name} ({'not declared' if name not in declared else 'not in tools_dict'})")
    if list(orig.other_tools) != list(sent.other_tools):
        problems.append("built-in tools changed")
    return problems
