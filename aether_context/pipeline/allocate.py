"""allocate: split the window between layers.

Slack (the output reserve) is set aside first. System, Task and Tools take what they measure:
their floors only set the nominal split (`R = window − floors` to Evidence, Memory and Conversation
by weights `base + Σ coefficient · signal`) and the `BudgetError` check; the conversation takes
what its kept turns need first (`allocate_around_conversation`). Then `distribute` turns nominal shares into budgets given what
each layer actually needs: what a layer leaves unused flows to the layers that still want more,
so no budget sits idle while something is being dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ..content import canonical_json
from ..errors import BudgetError
from ..profile import BudgetProfile
from ..tokens import TokenCounting, lines_count
from .incremental import turns_tokens
from .render import payload_message, render_payload
from .status import recitation_reserve
from .types import Candidates, Prepared, Signals, Verbatim

if TYPE_CHECKING:
    from .inputs import PackInputs, PackState

__all__ = ["Signals", "Allocation", "allocate", "allocate_around_conversation", "distribute", "FIXED_LAYERS",
           "FLEX_LAYERS", "LAYERS", "flex_weights", "Room", "room", "allocate_pack", "conversation_tokens",
           "status_reserve", "LAYER_OVERHEAD", "lines_demand"]

LAYER_OVERHEAD = 12  # tokens of a payload section's header (Evidence, Memory)
STATUS_SHARE = 0.15  # the most of the room left beside the head and the frame held back for the closing status

FIXED_LAYERS = ("system", "task", "tools")
FLEX_LAYERS = ("evidence", "memory", "conversation")
LAYERS = ("system", "task", "tools", "evidence", "memory", "conversation", "slack")


@dataclass(frozen=True)
class Allocation:
    """Budgets in tokens. `fixed_used` is what System/Task/Tools actually take (never truncated)."""

    window: int
    floors: dict[str, int]
    weights: dict[str, float]
    remainder: int
    nominal: dict[str, int]  # remainder shares before demand-driven flow
    budgets: dict[str, int]  # final per-layer budgets (flex layers after flow)
    slack: int
    signals: Signals
    demands: dict[str, int] = field(default_factory=dict)  # what each flexible layer would use uncut

    @property
    def pack_limit(self) -> int:
        """The most the request may hold: the window less the output reserve."""
        return self.window - self.slack

    def to_json(self) -> dict[str, Any]:
        return {
            "window": self.window, "floors": self.floors, "weights": {k: round(v, 6) for k, v in self.weights.items()},
            "remainder": self.remainder, "nominal": self.nominal, "budgets": self.budgets, "slack": self.slack,
            "signals": self.signals.to_json(), "demands": self.demands,
        }


def flex_weights(profile: BudgetProfile, s: Signals) -> dict[str, float]:
    """The flexible layers' weights for these signals: base plus each signal times its coefficient."""
    w = profile.weights
    raw = {
        "evidence": w.evidence.base + w.evidence.checklist_evidence_ratio * s.checklist_evidence_ratio
        + w.evidence.expected_tool_calls * s.expected_tool_calls + w.evidence.risk_weight * s.risk_weight,
        "memory": w.memory.base + w.memory.retrieval_hit_rate * s.retrieval_hit_rate
        + w.memory.similarity * s.similarity + w.memory.freshness * s.freshness,
        "conversation": w.conversation.base + w.conversation.unresolved_questions * s.unresolved_questions
        + w.conversation.dialogue_depth * s.dialogue_depth,
    }
    return {k: max(0.0, v) for k, v in raw.items()}


def distribute(total: int, weights: Mapping[str, float], demands: Mapping[str, int]) -> dict[str, int]:
    """Water-filling: split `total` by weight, capping each layer at its demand and re-sharing the rest.

    Integer results, deterministic, and `sum(result) <= total`. A layer with zero weight still
    receives budget once the weighted layers are satisfied, so nothing is wasted.
    """
    names = sorted(demands)
    out = {k: 0 for k in names}
    left = total
    active = [k for k in names if demands[k] > 0]
    while left > 0 and active:
        wsum = sum(weights.get(k, 0.0) for k in active)
        shares = {k: (weights.get(k, 0.0) / wsum if wsum > 0 else 1.0 / len(active)) for k in active}
        grant = {k: int(left * shares[k]) for k in active}
        if not any(grant.values()):  # rounding dust: give it to the heaviest unmet layer
            k = max(active, key=lambda a: (shares[a], a))
            grant = {k: left}
        for k, g in grant.items():
            g = min(g, demands[k] - out[k])
            out[k] += g
            left -= g
        active = [k for k in active if out[k] < demands[k]]
    return out


def allocate(profile: BudgetProfile, window: int, signals: Signals, fixed_used: Mapping[str, int],
             demands: Mapping[str, int]) -> Allocation:
    """Budgets for one call.

    `fixed_used` are the measured sizes of System, Task and Tools (never truncated: a layer larger
    than its floor takes the excess from the remainder); `demands` what Evidence, Memory and
    Conversation would use uncut.
    """
    f = profile.floors
    floors = {
        "system": int(window * f.system), "task": int(window * f.task), "tools": int(window * f.tools),
        "slack": int(window * f.slack),
    }
    remainder = window - sum(floors.values())
    if remainder < 0:
        raise BudgetError(f"floors ({sum(floors.values())} tokens) exceed the window ({window}): split the step or lower the floors")
    weights = flex_weights(profile, signals)
    wsum = sum(weights.values()) or 1.0
    nominal = {k: int(remainder * weights[k] / wsum) for k in FLEX_LAYERS}
    # What the pack may spend on flexible layers: window less slack less what fixed layers really use.
    fixed_total = sum(fixed_used.get(k, 0) for k in FIXED_LAYERS)
    flexible = window - floors["slack"] - fixed_total
    if flexible < 0:
        raise BudgetError(
            f"system, task and tools need {fixed_total} tokens but only {window - floors['slack']} fit beside "
            f"the {floors['slack']}-token output reserve: split the step (fewer tools, shorter task) or use a larger window"
        )
    budgets = distribute(flexible, weights, {k: max(0, int(demands.get(k, 0))) for k in FLEX_LAYERS})
    # Layers that were satisfied keep their demand; any remaining room stays with conversation,
    # which is where growth (the next tool result) happens.
    spare = flexible - sum(budgets.values())
    budgets["conversation"] += spare
    for k in FIXED_LAYERS:
        budgets[k] = int(fixed_used.get(k, 0))
    return Allocation(window=window, floors=floors, weights=weights, remainder=remainder, nominal=nominal,
                      budgets=budgets, slack=floors["slack"], signals=signals)


def allocate_around_conversation(profile: BudgetProfile, window: int, signals: Signals, fixed_used: Mapping[str, int],
                                 demands: Mapping[str, int], *, guaranteed: int, growth: int) -> Allocation:
    """Budgets when the conversation is already decided (verbatim zone chosen by the conversation policy).

    The conversation takes its demand; Evidence and Memory share what is left by weight and demand,
    keeping `growth` tokens free for the turns this invocation will append, but never less than their
    `guaranteed` share. What they leave stays with the conversation.
    """
    base = allocate(profile, window, signals, fixed_used, {k: 0 for k in FLEX_LAYERS})
    flexible = base.budgets["conversation"]  # everything flexible, before any demand
    conversation = min(flexible, max(0, int(demands.get("conversation", 0))))
    left = flexible - conversation
    retrieved = min(left, max(guaranteed, left - growth))
    shares = distribute(retrieved, base.weights, {k: max(0, int(demands.get(k, 0))) for k in ("evidence", "memory")})
    # Evidence is what the app chose to show: the growth reserve never squeezes it out while room is left.
    shares["evidence"] = min(max(shares["evidence"], min(int(demands.get("evidence", 0)), left - shares["memory"])),
                             left - shares["memory"])
    budgets = {**shares, "conversation": flexible - sum(shares.values())}
    for k in FIXED_LAYERS:
        budgets[k] = int(fixed_used.get(k, 0))
    return Allocation(window=window, floors=base.floors, weights=base.weights, remainder=base.remainder,
                      nominal=base.nominal, budgets=budgets, slack=base.slack, signals=signals,
                      demands={k: int(demands.get(k, 0)) for k in FLEX_LAYERS})


# --- one call's room around the conversation -----------------------------------------------------

@dataclass(frozen=True)
class Room:
    """The token room of one call: what the pack may spend beside ADK's own head and the frame."""

    limit: int  # window less the output reserve
    head: int  # system instruction, tools, dynamic instructions
    frame: int  # the payload without Evidence and Memory (or the user's message as it is)
    reserve: int  # kept free for the closing status
    conversation_cap: int  # the most the conversation may take before it is compacted

    @property
    def flexible(self) -> int:
        return max(0, self.limit - self.head - self.frame - self.reserve)


def conversation_tokens(prepared: "Prepared", zone: "Verbatim", counter: TokenCounting) -> int:
    """What the conversation takes with this verbatim zone: its block and the turns it keeps (the block
    by its lines when the counter can: a new block keeps most of the last one's lines)."""
    block = lines_count(counter, counter.count_text)(zone.block) + 4 if zone.block else 0
    return block + turns_tokens(zone.kept(prepared.turns), counter)


def status_reserve(inputs: "PackInputs", profile: BudgetProfile, zone: "Verbatim", failures: str, room: int) -> int:
    """Room for the closing status, only when one can be due (a goal, a compaction, failures).

    At most `STATUS_SHARE` of `room` (what is left beside the head and the frame): in a small window
    a full status reserve would starve the conversation on every call for a block that is due on
    some; a status that does not fit waits for the next call.
    """
    due = inputs.task.goal or inputs.task.step or zone.through > 0 or failures
    return min(recitation_reserve(profile), int(max(0, room) * STATUS_SHARE)) if due else 0


def _frame_tokens(inputs: "PackInputs", cands: "Candidates", frozen: "PackState | None", failures: str,
                  counter: TokenCounting) -> int:
    """The payload without Evidence and Memory: what the call sends whatever the budgets."""
    if frozen is not None:
        return frozen.payload_tokens
    request = cands.conversation.request
    message = payload_message(render_payload(inputs.task, request, (), (), failures).sent_text(), request)
    return counter.count_message(message) if message is not None else 0


def lines_demand(lines) -> int:
    """What a layer's lines take in the payload: each line and its newline, and the section header."""
    return sum(ln.tokens + 1 for ln in lines) + LAYER_OVERHEAD if lines else 0


def room(inputs: "PackInputs", profile: BudgetProfile, window: int, cands: "Candidates", zone: "Verbatim",
         frozen: "PackState | None", failures: str, counter: TokenCounting, *, memory_wanted: bool = False) -> Room:
    """Room for the flexible layers, and the conversation's share of it before a compaction.

    The conversation yields to Evidence and Memory only their weighted share of the room, and
    only when they have something to send: a chat that fits goes out whole. The compaction block's
    KNOWN VALUES are recollections of compacted turns, as Memory's lines are: they take Memory's
    share first, so the conversation does not compact again to make room for the same turns twice
    (at a small window, every new invocation did).
    """
    limit = window - int(window * profile.floors.slack)
    head = counter.count_text(inputs.request.system_instruction) \
        + sum(counter.count_text(t.declaration_json) for t in cands.tools) \
        + sum(counter.count_text(canonical_json(t)) for t in inputs.request.other_tools) \
        + sum(counter.count_message(m) for m in cands.conversation.instructions)
    frame = _frame_tokens(inputs, cands, frozen, failures, counter)
    reserve = status_reserve(inputs, profile, zone, failures, limit - head - frame)
    flexible = max(0, limit - head - frame - reserve)
    if frozen is not None:  # Evidence and Memory are frozen inside the payload (counted in the frame)
        return Room(limit, head, frame, reserve, flexible)
    weights = {k: max(1e-6, w) for k, w in flex_weights(profile, cands.signals).items()}
    wanted = {"evidence": sum(ln.tokens + 1 for ln in cands.evidence),
              "memory": flexible if memory_wanted else sum(ln.tokens + 1 for ln in cands.memory)}
    share = sum(w for k, w in weights.items() if k == "conversation" or wanted.get(k, 0) > 0) or 1.0
    given = {k: min(wanted[k], int(flexible * weights[k] / share)) for k in wanted}
    given["memory"] = max(0, given["memory"] - zone.values_tokens)  # the block's values bring compacted turns back
    return Room(limit, head, frame, reserve, max(0, flexible - sum(given.values())))


def allocate_pack(profile: BudgetProfile, window: int, space: Room, cands: "Candidates", conversation: int,
                  *, memory: int | None = None) -> Allocation:
    """Evidence and Memory get what the conversation (`conversation` tokens) leaves, less room for
    this invocation to grow: none when the step declares no tools (the model's answer ends the
    invocation, nothing is appended to it). `memory` replaces Memory's demand (how much it could get
    with more lines)."""
    fixed_used = {"system": space.head, "task": space.frame + space.reserve, "tools": 0}
    demands = {"evidence": lines_demand(cands.evidence),
               "memory": lines_demand(cands.memory) if memory is None else memory, "conversation": conversation}
    guaranteed = max(0, space.flexible - space.conversation_cap)
    growth = int(space.flexible * profile.conversation.growth_share) if cands.tools else 0
    return allocate_around_conversation(profile, window, cands.signals, fixed_used, demands,
                                        guaranteed=guaranteed, growth=growth)
