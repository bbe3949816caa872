"""Work ahead: the KNOWN VALUES the next compaction will most likely plan, merged while the model answers.

A compaction merges the value sets of its newest compacted turns against the text it leaves verbatim
(`known_values`), starting from what the last merge of the conversation left in the `PackCache`
(`merged_values(since=)`, equal to a merge from scratch whatever it starts from); what it pays is the
change since then: the turns it folds (their values enter, their words leave the verbatim text), the
turns that arrived meanwhile (their words enter), several calls' worth. After each call's request has
gone out, the work ahead plans the values as a compaction would now, with the last compaction's target
(`plan_values`): the carry it leaves is a merge of nearly what the next compaction reads, which then
pays for the turn that arrived since, and reuses the render when its value sets are the same. A wrong
guess costs time only: the merge and the render give the same text from any carry.
"""

from __future__ import annotations

from dataclasses import replace

from ..profile import BudgetProfile
from ..tokens import TokenCounting
from .cache import PackCache
from .collect import PackInputs, Turn
from .conversation import Verbatim, compacted_reader, compaction_cuts, plan_values
from .prepare import Prepared

__all__ = ["values_ahead"]


def values_ahead(inputs: PackInputs, prepared: Prepared, zone: Verbatim, profile: BudgetProfile, *,
                 counter: TokenCounting, cache: PackCache) -> "tuple[Prepared, Verbatim] | None":
    """Plan the known values of the compaction of `prepared`'s turns (the zone `zone` as the call left it)
    that the next call would make if it added the turns guessed (`_next_turns`), with the target, ceiling and
    window of the conversation's last compaction, leaving its merges and renders in `cache`. Returns the
    turns with the guessed ones and the zone planned (what `memory_ahead` ranks for); None when the
    conversation has not compacted yet (nothing to plan with)."""
    turns = prepared.turns
    held = cache.lookup("compaction_target", id(turns[0])) if turns and zone.through > 0 else None
    if held is None or held[0] is not turns[0]:
        return None
    _, target, ceiling, window = held
    # the next call's turns, guessed as the last cycle again (`_next_turns`): they move the cut as the real
    # ones will, and their text joins what the compaction leaves verbatim (the words every turn shows stay put)
    ahead = replace(prepared, loop=(*prepared.loop, *_next_turns(turns)))
    cut_at = compaction_cuts(inputs, profile, zone, ahead.turns, counter, target, ceiling)
    planned = plan_values(inputs, profile, ahead, zone, compacted_reader(inputs, ahead, cache), target=target,
                          window=window, counter=counter, cache=cache, cut_at=cut_at)
    return ahead, planned[0]


_MAX_CYCLE = 6  # turns: the longest cycle guessed (a longer one is a shape the guess does not know)


def _shape(turn: Turn) -> tuple[str, bool]:
    return turn.messages[0].role, turn.is_tool_exchange


def _next_turns(turns: "tuple[Turn, ...]") -> "tuple[Turn, ...]":
    """What the next call adds, guessed from the newest turn: after a tool exchange, the loop's next
    exchange (one like it); after a message, the turns since the last one shaped like it (its role, and
    whether it is a tool exchange), i.e. a chat's model answer and next user message (one turn like the
    newest would leave the answer out: the cut then moves less than the real one, and the compaction pays
    the difference). Each is a copy placed after the newest."""
    newest = turns[-1]
    cycle = (newest,)
    if not newest.is_tool_exchange:
        for back in range(2, min(_MAX_CYCLE + 1, len(turns)) + 1):  # the turn `back` from the end, and after it
            if _shape(turns[-back]) == _shape(newest):
                cycle = turns[len(turns) - back + 1:]
                break
    start, out = newest.start + len(newest.messages), []
    for turn in cycle:
        out.append(Turn(start, turn.messages))
        start += len(turn.messages)
    return tuple(out)
