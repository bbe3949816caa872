"""The typed inputs of one pack (the ADK edge fills them: `adk/collect.py`), gathered before any decision.

The ADK edge (`aether_context.adk.collect`) fills `PackInputs` from the request, the session,
state, memory and artifacts; everything after this stage is a pure function of `PackInputs`
(and the previous call's `PackState`), which is what makes a pack replayable byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from ..content import Message, ModelRequest, canonical_json, sha256_hex

__all__ = ["TaskSpec", "EvidenceItem", "MemoryItem", "PackInputs", "PackState", "Turn", "turn_start", "group_turns"]


@dataclass(frozen=True)
class TaskSpec:
    """The current goal and step. Empty fields are allowed but reported in the manifest."""

    goal: str = ""
    step: str = ""
    acceptance: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    tools: tuple[str, ...] | None = None  # None: the step does not restrict tools
    expected_tool_calls: int = 0
    risk: float = 0.0
    evidence_needed: tuple[str, ...] = ()  # checklist items that need evidence
    plan: tuple[tuple[str, bool], ...] = ()  # (step, done) — progress for the recitation block
    done: tuple[str, ...] = ()  # acceptance items already met
    opening_request: str = ""  # the session's first user message: the task when no goal was set

    def to_json(self) -> dict[str, Any]:
        return {
            "goal": self.goal, "step": self.step, "acceptance": list(self.acceptance),
            "constraints": list(self.constraints), "tools": None if self.tools is None else list(self.tools),
            "expected_tool_calls": self.expected_tool_calls, "risk": self.risk,
            "evidence_needed": list(self.evidence_needed), "plan": [list(p) for p in self.plan],
            "done": list(self.done), "opening_request": self.opening_request,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TaskSpec":
        return cls(
            goal=d.get("goal", ""), step=d.get("step", ""), acceptance=tuple(d.get("acceptance", ())),
            constraints=tuple(d.get("constraints", ())),
            tools=None if d.get("tools") is None else tuple(d["tools"]),
            expected_tool_calls=int(d.get("expected_tool_calls", 0)), risk=float(d.get("risk", 0.0)),
            evidence_needed=tuple(d.get("evidence_needed", ())),
            plan=tuple((str(p[0]), bool(p[1])) for p in d.get("plan", ())), done=tuple(d.get("done", ())),
            opening_request=d.get("opening_request", ""),
        )


@dataclass(frozen=True)
class EvidenceItem:
    """A piece of evidence: a short summary in the prompt, the original behind `uri`."""

    id: str
    summary: str
    uri: str = ""
    source: str = "state"
    timestamp: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "summary": self.summary, "uri": self.uri, "source": self.source, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "EvidenceItem":
        return cls(d["id"], d["summary"], d.get("uri", ""), d.get("source", "state"), d.get("timestamp"))


@dataclass(frozen=True)
class MemoryItem:
    """A remembered fact (memory service hit or a note in state), with when it was recorded."""

    id: str
    text: str
    timestamp: float | None = None
    source: str = "memory"
    rank: int = 0  # position in the source's own ranking

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "timestamp": self.timestamp, "source": self.source, "rank": self.rank}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "MemoryItem":
        return cls(d["id"], d["text"], d.get("timestamp"), d.get("source", "memory"), int(d.get("rank", 0)))


@dataclass(frozen=True)
class PackState:
    """What one call leaves for the next call of the same invocation (cache stability).

    Within an invocation the pack payload and the folding point are frozen, so later calls
    append to the earlier request instead of rewriting it.
    """

    invocation_id: str = ""
    agent: str = ""
    payload_text: str = ""
    kept_history_turns: int = 0
    summary: dict[str, Any] = field(default_factory=dict)  # RunningSummary JSON after this call
    message_digests: tuple[str, ...] = ()
    head_digest: str = ""  # system instruction + tools
    system_digest: str = ""
    tools_digest: str = ""
    payload_index: int = -1  # position of the Pack Payload among the messages
    head_tokens: int = 0
    pack_id: str = ""
    pruned: tuple[int, ...] = ()  # turn starts whose tool outputs were cleared (they stay cleared)
    merged_lines: tuple[str, ...] = ()  # fold lines this call merged into the running summary
    call_index: int = 0  # model calls of this agent in this session, counting from 0
    last_recited: int = -1  # call index of the last recitation block
    failures_shown: int = 0  # failures logged when the payload (and its FAILURES SO FAR) was built
    compacted_through: int = 0  # turns starting before this message index are compacted (except `pinned`)
    pinned: tuple[int, ...] = ()  # request messages before `compacted_through` still sent verbatim
    block_text: str = ""  # the compaction block (CONVERSATION SO FAR), frozen until the next compaction
    boundary_digest: str = ""  # digest of the message at `compacted_through`: a rewritten history resets
    compactions: int = 0  # compactions so far in this session and agent
    pins_opening: bool = False  # the compaction block pins the opening request
    values_tokens: int = 0  # tokens of the block's KNOWN VALUES (they share Memory's room)
    evidence_ids: tuple[str, ...] = ()  # Evidence items in the payload as sent
    memory_ids: tuple[str, ...] = ()  # Memory items in the payload as sent
    payload_tokens: int = 0  # tokens of the payload message as sent (0: the user's message went as it is)
    tool_names: tuple[str, ...] = ()  # the tools this call declared
    sent_tokens: int = 0  # tokens of the request as sent (head and messages)
    statuses: tuple[tuple[int, str, str], ...] = ()  # statuses kept as sent: (message index, its digest, text)
    evidence_marks: tuple[str, ...] = ()  # per `evidence_ids`: digest of the item's summary and URI (version)
    # earlier invocations' requests as sent: (index, ADK's digest, payload text, texts riding on it); see as_sent
    sent_requests: tuple[tuple[int, str, str, tuple[str, ...]], ...] = ()
    # the session clock the payload's Evidence and Memory were ranked at: the calls that keep the payload
    # as sent rank at it too (their ranking is then the one the payload was built from; 0: unknown)
    ranked_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "invocation_id": self.invocation_id, "agent": self.agent, "payload_text": self.payload_text,
            "kept_history_turns": self.kept_history_turns, "summary": self.summary, "message_digests": list(self.message_digests),
            "head_digest": self.head_digest,
            "system_digest": self.system_digest, "tools_digest": self.tools_digest, "payload_index": self.payload_index,
            "head_tokens": self.head_tokens, "pack_id": self.pack_id, "pruned": list(self.pruned),
            "merged_lines": list(self.merged_lines), "call_index": self.call_index, "last_recited": self.last_recited,
            "failures_shown": self.failures_shown, "compacted_through": self.compacted_through,
            "pinned": list(self.pinned), "block_text": self.block_text, "boundary_digest": self.boundary_digest,
            "compactions": self.compactions, "pins_opening": self.pins_opening, "values_tokens": self.values_tokens,
            "evidence_ids": list(self.evidence_ids), "memory_ids": list(self.memory_ids),
            "payload_tokens": self.payload_tokens, "tool_names": list(self.tool_names),
            "sent_tokens": self.sent_tokens,
            "statuses": [list(s) for s in self.statuses], "evidence_marks": list(self.evidence_marks),
            "sent_requests": [[i, dg, t, list(x)] for i, dg, t, x in self.sent_requests],
            "ranked_at": self.ranked_at,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PackState":
        """Reads every version written so far (manifests of older releases lack the newer fields)."""
        message_tokens = tuple(int(t) for t in d.get("message_tokens", ()))  # manifests before sent_tokens
        head_tokens = int(d.get("head_tokens", 0))
        return cls(
            invocation_id=str(d["invocation_id"]), agent=str(d["agent"]), payload_text=str(d.get("payload_text", "")),
            kept_history_turns=d.get("kept_history_turns", 0), summary=d.get("summary") or {},
            message_digests=tuple(str(x) for x in d.get("message_digests", ())),
            head_digest=d.get("head_digest", ""),
            system_digest=d.get("system_digest", ""), tools_digest=d.get("tools_digest", ""),
            payload_index=d.get("payload_index", -1),
            head_tokens=head_tokens, pack_id=d.get("pack_id", ""), pruned=tuple(d.get("pruned", ())),
            merged_lines=tuple(d.get("merged_lines", ())), call_index=d.get("call_index", 0),
            last_recited=d.get("last_recited", -1), failures_shown=d.get("failures_shown", 0),
            compacted_through=d.get("compacted_through", 0), pinned=tuple(d.get("pinned", ())),
            block_text=d.get("block_text", ""), boundary_digest=d.get("boundary_digest", ""),
            compactions=d.get("compactions", 0), pins_opening=d.get("pins_opening", False),
            values_tokens=int(d.get("values_tokens", 0)),
            evidence_ids=tuple(d.get("evidence_ids", ())), memory_ids=tuple(d.get("memory_ids", ())),
            payload_tokens=d.get("payload_tokens", 0), tool_names=tuple(d.get("tool_names", ())),
            sent_tokens=int(d.get("sent_tokens", head_tokens + sum(message_tokens))),
            statuses=tuple((int(i), str(dg), str(t)) for i, dg, t in d.get("statuses", ())),
            evidence_marks=tuple(d.get("evidence_marks", ())),
            sent_requests=tuple((int(i), str(dg), str(t), tuple(map(str, x))) for i, dg, t, x in d.get("sent_requests", ())),
            ranked_at=float(d.get("ranked_at", 0.0)),
        )


@dataclass(frozen=True)
class PackInputs:
    """Everything a pack is built from. `request` is the request as ADK built it."""

    request: ModelRequest
    request_index: int | None  # index in request.messages of the user message that started the invocation
    task: TaskSpec = TaskSpec()
    evidence: tuple[EvidenceItem, ...] = ()
    memory: tuple[MemoryItem, ...] = ()
    instruction_indices: tuple[int, ...] = ()  # dynamic-instruction messages (static_instruction mode)
    app_name: str = ""
    user_id: str = ""
    session_id: str = ""
    invocation_id: str = ""
    agent: str = ""
    now: float = 0.0
    previous: PackState | None = None
    uris: dict[str, str] = field(default_factory=dict)  # response/blob digest -> artifact URI of the original
    summary: dict[str, Any] = field(default_factory=dict)  # the running summary kept in session state
    calibration: float = 1.0  # the model's reported prompt tokens / our estimate, smoothed (see calibrate)
    failures: dict[str, Any] = field(default_factory=dict)  # the session's FailureLog (JSON)
    message_times: tuple[float | None, ...] = ()  # per request message: its event's timestamp (None: unknown)
    compact: bool = False  # a manual compaction was asked for (packer.compact)
    # the recall tool is declared: a compaction block may cite originals (else its fold lines name no URI, so
    # a compaction does not make the tools change, which would re-process the whole request)
    cite_originals: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = self.to_json_shallow()
        data["request"] = self.request.to_json()
        return data

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PackInputs":
        return cls(
            request=ModelRequest.from_json(d["request"]), request_index=d["request_index"],
            task=TaskSpec.from_json(d["task"]), evidence=tuple(EvidenceItem.from_json(e) for e in d["evidence"]),
            memory=tuple(MemoryItem.from_json(m) for m in d["memory"]),
            instruction_indices=tuple(d.get("instruction_indices", ())), app_name=d["app_name"],
            user_id=d["user_id"], session_id=d["session_id"], invocation_id=d["invocation_id"], agent=d["agent"],
            now=d["now"], previous=None if d["previous"] is None else PackState.from_json(d["previous"]),
            uris=d.get("uris", {}), summary=d.get("summary") or {}, calibration=float(d.get("calibration", 1.0)), failures=d.get("failures") or {},
            message_times=tuple(d.get("message_times", ())), compact=bool(d.get("compact", False)),
            cite_originals=bool(d.get("cite_originals", True)), extra=d.get("extra", {}),
        )

    def to_json_without_request(self) -> dict[str, Any]:
        data = self.to_json_shallow()
        data.pop("request")
        return data

    def to_json_shallow(self) -> dict[str, Any]:
        """`to_json` with the request left as the object (callers store or hash it their own way)."""
        return {
            "request": self.request, "request_index": self.request_index, "task": self.task.to_json(),
            "evidence": [e.to_json() for e in self.evidence], "memory": [m.to_json() for m in self.memory],
            "instruction_indices": list(self.instruction_indices), "app_name": self.app_name,
            "user_id": self.user_id, "session_id": self.session_id, "invocation_id": self.invocation_id,
            "agent": self.agent, "now": self.now,
            "previous": None if self.previous is None else self.previous.to_json(), "uris": self.uris,
            "summary": self.summary, "calibration": self.calibration, "failures": self.failures,
            "message_times": list(self.message_times), "compact": self.compact,
            "cite_originals": self.cite_originals, "extra": self.extra,
        }

    @property
    def digest(self) -> str:
        """Identity of the inputs: the request's checksum and everything else as canonical JSON."""
        return sha256_hex(self.request.checksum + canonical_json(self.to_json_without_request()))


@dataclass(frozen=True)
class Turn:
    """An atomic unit of history: one message, or a model call with the responses to its calls.

    Cutting history only between turns is what guarantees no function response is ever sent
    without its call (Gemini rejects that).
    """

    start: int  # index of the first message in the message list it was grouped from
    messages: tuple[Message, ...]

    @property
    def is_tool_exchange(self) -> bool:
        return any(m.calls for m in self.messages)

    @property
    def is_orphan_response(self) -> bool:
        """Function responses whose call is not in this turn (e.g. cut by an earlier compaction)."""
        return bool(self.messages[0].responses) and not any(m.calls for m in self.messages)


# A turn's start: the order of every turn sequence, so the key to bisect them by (C-level, no call per turn).
turn_start = attrgetter("start")


def group_turns(messages: "tuple[Message, ...] | list[Message]", offset: int = 0) -> list[Turn]:
    """Group messages into turns: a model message with calls takes the response messages after it
    until each call has its response.

    A response answers the pending call with its id when both carry ids (session events do), else
    the first pending call of its name: ADK strips ids from the request, so position and name are
    all a request may have.
    """
    turns: list[Turn] = []
    i, n = 0, len(messages)
    while i < n:
        msg = messages[i]
        group = [msg]
        if msg.calls:
            pending = list(msg.calls)
            j = i + 1
            while j < n and pending and messages[j].only_responses:
                for r in messages[j].responses:
                    _answer(pending, r)
                group.append(messages[j])
                j += 1
            i = j
        else:
            i += 1
        turns.append(Turn(start=offset + (i - len(group)), messages=tuple(group)))
    return turns


def _answer(pending: "list", response: Any) -> None:
    """Remove the call `response` answers from `pending` (by id, else by name)."""
    if response.id is not None:
        for k, c in enumerate(pending):
            if c.id == response.id:
                del pending[k]
                return
    for k, c in enumerate(pending):
        if c.name == response.name and (c.id is None or response.id is None):
            del pending[k]
            return
