"""prepare (timed under collect): the request's messages as turns, after the repairs every call applies.

Orphaned responses rewritten as text, old inline images decayed, old tool outputs pruned to their
URI, and the per-turn cap. What each repair touched is a `TruncationEvent`.
"""

from __future__ import annotations

from ..profile import BudgetProfile
from ..tokens import TokenCounting
from .inputs import PackInputs, Turn
from .decay import decay_images, prune_tool_outputs
from .fit import TruncationEvent, bounded_turns, repair_orphans
from .select import split_conversation
from .types import Conversation, Prepared, TurnsByStart

__all__ = ["Prepared", "TurnsByStart", "prepare"]


def prepare(inputs: PackInputs, profile: BudgetProfile, counter: TokenCounting) -> Prepared:
    """Orphan repair, image decay, pruning of old tool outputs and the per-turn cap."""
    conv, turns, n_hist, events = _unpruned(inputs, profile)
    same_invocation = inputs.previous is not None and inputs.previous.invocation_id == inputs.invocation_id
    already = frozenset(inputs.previous.pruned) if inputs.previous else frozenset()
    pruned: frozenset[int] = already
    if profile.pruning.enabled:
        turns, pruned, fresh = prune_tool_outputs(turns, protect_tokens=profile.pruning.protect_tokens,
                                                  minimum_tokens=profile.pruning.minimum_tokens, uris=inputs.uris,
                                                  already=already, counter=counter, consider_new=not same_invocation)
        if fresh:
            events.append(TruncationEvent("conversation", "compress", "old tool outputs cleared to their URI (pruning)",
                                          tuple(f"turn-{k}" for k in fresh)))
    originals = TurnsByStart(tuple(turns))
    turns, cuts = bounded_turns(tuple(turns), profile.conversation.max_turn_tokens, counter)
    events.extend(cuts)
    prepared = Prepared(conv, turns[:n_hist], turns[n_hist:], pruned, originals, tuple(events))
    prepared.__dict__["turns"] = turns  # `Prepared.turns` as it is already joined, not a third copy of the history
    return prepared


def _unpruned(inputs: PackInputs, profile: BudgetProfile
              ) -> "tuple[Conversation, tuple[Turn, ...], int, list[TruncationEvent]]":
    """The conversation, its turns with orphans repaired and old images decayed (not pruned yet), how many
    of them are history, and the events."""
    conv = split_conversation(inputs)
    history, orphan_h = repair_orphans(conv.history)
    loop, orphan_l = repair_orphans(conv.loop)
    events: list[TruncationEvent] = [*orphan_h, *orphan_l]
    # like pruning, images age only at a new invocation: an image's age counts the turns before this
    # invocation's request, never its tool loop, so every call of one invocation (the first one too,
    # whatever its loop or previous state) describes the same images and the sent (cached) prefix stays
    keep = profile.decay.image_keep_turns + len(loop)
    turns, images = decay_images(history + loop, keep, inputs.uris)
    if images:
        events.append(TruncationEvent("conversation", "compress", "old inline images replaced by a description + URI", images))
    return conv, tuple(turns), len(history), events
