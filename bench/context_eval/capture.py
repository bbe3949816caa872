"""What reached the model, call by call: the scripted model hands each request it receives to a `Capture`.

A `Capture` runs inside the model call (`ReplayLlm`'s `prompt_token_counter`), so it sees the very
`LlmRequest` the model gets after every plugin and ADK processor. Per call it keeps the shape
(tokens, block digests: enough for prefix, cache and checksum figures), the shared prefix with the
previous call, the aether-context manifest's cache-break fields when a packer is there, and the
request's full text where a workload needs it. It reports the token count back as the model's
`prompt_token_count` (what ADK's token-threshold compaction reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from aether_context import ModelRequest, TokenCounter
from aether_context.content import Message
from aether_context.adk import request_from_llm
from measure import RequestShape, request_text, shared_prefix_tokens

__all__ = ["CallRecord", "Capture", "RunRecord", "ADDED_LAYERS"]

ADDED_LAYERS = ("memory", "evidence")  # layers whose content the request ADK built does not hold


@dataclass
class CallRecord:
    index: int
    invocation: int
    tokens: int
    checksum: str
    shared: int  # leading tokens identical to the previous call's request (0 for the first call)
    previous_tokens: int  # the previous call's tokens (0 for the first call)
    previous_last: int  # tokens of the previous call's last message (0 for the first call)
    new_invocation: bool  # the first call of an invocation after the first
    head_changed: bool = False  # the system instruction or the tools differ from the previous call's
    compactions: int = 0  # ADK compaction events in the session when the call was made
    cache_break: Optional[dict] = None  # the manifest's cache_break (aether-context)
    compaction: Any = None  # the manifest's `compaction` field, when the package records one
    pack_error: Optional[str] = None  # the manifest's fail-open error
    packed: bool = False  # an aether-context manifest was read for this call
    added: int = 0  # tokens of Memory and Evidence in the pack (material the session's request lacked)
    warned: bool = False  # the pack's FAILURES section carries a warning (a repeat, cluster or cascade of failures)
    last_digest: str = ""  # the last content (compared with no plugin's same call: ADK's own last content)
    last_first_part: str = ""  # the last content's role and first part only (what a callback reading parts[0] sees)
    last_is_response: bool = False  # the last content holds a function response

    @property
    def broke(self) -> bool:
        """The previous request is not a prefix of this one (the cache re-processes from the break)."""
        return self.index > 0 and self.shared < self.previous_tokens

    @property
    def broke_before_last(self) -> bool:
        """A break that reaches before the previous request's last message (not only a closing block replaced)."""
        return self.index > 0 and self.shared < self.previous_tokens - self.previous_last


@dataclass
class RunRecord:
    """One replayed run: its calls, the texts kept, errors."""

    run_id: str
    calls: list[CallRecord] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)  # call index -> full request text (where wanted)
    final_text: str = ""
    wall_s: float = 0.0
    error: Optional[str] = None
    truncated: bool = False


class Capture:
    """Measures each request the model receives; `want_text(i)` says which calls keep their full text."""

    def __init__(self, counter: TokenCounter, run_id: str, *, want_text: Callable[[int], bool] = lambda i: False,
                 packer: Any = None):
        self.counter, self.want_text, self.packer = counter, want_text, packer
        self.record = RunRecord(run_id)
        self._prev: Optional[RequestShape] = None
        self._prev_invocation = 0
        self._last: Optional[ModelRequest] = None

    def __call__(self, call: Any, llm_request: Any) -> None:
        req = request_from_llm(llm_request)
        shape = RequestShape.of(req, self.counter)
        prev = self._prev
        rec = CallRecord(index=call.index, invocation=call.invocation, tokens=shape.total, checksum=shape.checksum,
                         shared=shared_prefix_tokens(prev, shape) if prev else 0,
                         previous_tokens=prev.total if prev else 0,
                         previous_last=prev.messages[-1][1] if prev and prev.messages else 0,
                         new_invocation=call.index > 0 and call.invocation != self._prev_invocation,
                         compactions=getattr(call, "compactions", 0), head_changed=bool(prev) and prev.head != shape.head)
        self._manifest_fields(rec)
        rec.warned = rec.packed and any(_failure_warning(m.text) for m in req.messages if m.role == "user")
        if req.messages:
            last = req.messages[-1]
            rec.last_digest, rec.last_first_part = last.digest, Message(last.role, last.parts[:1]).digest
            rec.last_is_response = bool(last.responses)
        self._prev, self._prev_invocation, self._last = shape, call.invocation, req
        self.record.calls.append(rec)
        if self.want_text(call.index):
            self.record.texts[call.index] = request_text(req)

    def _manifest_fields(self, rec: CallRecord) -> None:
        if self.packer is None or not self.packer.recent:
            return
        manifest = self.packer.recent[-1].manifest
        rec.packed = True
        layers = manifest.layer_budgets or {}
        rec.added = sum(layers[name].used for name in ADDED_LAYERS if name in layers)
        rec.cache_break = manifest.cache_break
        rec.compaction = getattr(manifest, "compaction", None)
        rec.pack_error = manifest.error

    def prompt_tokens(self, llm_request: Any) -> int:
        return self.record.calls[-1].tokens if self.record.calls else 0

    def finish(self) -> RunRecord:
        """Keep the final request's text (every workload scores the last call)."""
        if self._last is not None:
            self.record.final_text = request_text(self._last)
        self._last = None
        return self.record


def _failure_warning(text: str) -> bool:
    """A FAILURES SO FAR section with a warning line ("  ! ..."): the pack's analysis of the failure log
    (the same call failing repeatedly, a cluster, a cascade), which no request ADK builds holds."""
    if "FAILURES SO FAR" not in text:
        return False
    section = text.split("FAILURES SO FAR", 1)[1]
    return any(line.startswith("  ! ") for line in section.splitlines()[1:] if line.startswith("  "))
