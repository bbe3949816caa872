"""Stage 2 — allocate: split the window between layers.

Floors first (System, Task, Tools, Slack as fractions of the window); the remainder
`R = window − floors` goes to Evidence, Memory and Conversation in proportion to weights
`base + Σ coefficient · signal`. Then `distribute` turns nominal shares into budgets given what
each layer actually needs: what a layer leaves unused flows to the layers that still want more,
so no budget sits idle while something is being dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import BudgetError
from ..profile import BudgetProfile

__all__ = ["Signals", "Allocation", "allocate", "allocate_around_conversation", "distribute", "FIXED_LAYERS",
           "FLEX_LAYERS", "LAYERS"]

FIXED_LAYERS = ("system", "task", "tools")
FLEX_LAYERS = ("evidence", "memory", "conversation")
LAYERS = ("system", "task", "tools", "evidence", "memory", "conversation", "slack")


@dataclass(frozen=True)
class Signals:
    """Task signals that move the flexible weights (recorded in the manifest for tuning)."""

    checklist_evidence_ratio: float = 0.0
    expected_tool_calls: float = 0.0
    risk_weight: float = 0.0
    retrieval_hit_rate: float = 0.0
    similarity: float = 0.0
    freshness: float = 0.0
    unresolved_questions: float = 0.0
    dialogue_depth: float = 0.0

    def to_json(self) -> dict[str, float]:
        return {k: round(float(v), 6) for k, v in self.__dict__.items()}


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


def _weights(profile: BudgetProfile, s: Signals) -> dict[str, float]:
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
    weights = _weights(profile, signals)
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
    budgets = {**shares, "conversation": flexible - sum(shares.values())}
    for k in FIXED_LAYERS:
        budgets[k] = int(fixed_used.get(k, 0))
    return Allocation(window=window, floors=base.floors, weights=base.weights, remainder=base.remainder,
                      nominal=base.nominal, budgets=budgets, slack=base.slack, signals=signals,
                      demands={k: int(demands.get(k, 0)) for k in FLEX_LAYERS})
