"""Work ahead: the KNOWN VALUES the next compaction will most likely plan, merged while the model answers.

A compaction merges the value sets of its newest compacted turns against the text it leaves verbatim
(`known_values`), starting from what the last merge of the conversation left in the `PackCache`
(`merged_values(since=)`, equal to a merge from scratch whatever it starts from); what it pays is the
change since then: the turns it folds (their values enter, their words leave the verbatim text), several
calls' worth. The text it merges against leaves out the step its call added (`conversation.newest_step`),
so it is known once the previous call's request has gone out: the work ahead then plans the values as the
next call's compaction would, with the last compaction's target and the last step guessed again, and the
two steps before it when their sizes put the cut elsewhere (`plan_values`; the carry keeps up to four merges).
When the cut falls where a guessed step put it and the room gives the same target, the compaction finds its
merge and render done; otherwise it merges again what the turns folded past the guess
change. A wrong guess costs time only: the merge and the render give the same text from any carry.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..profile import BudgetProfile
from ..tokens import TokenCounting
from .cache import PackCache
from .collect import PackInputs, Turn
from .conversation import BLOCK_SHARE, Verbatim, compacted_reader, compaction_cuts, newest_step, plan_values
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

    def plan(guess: "tuple[Turn, ...]") -> "tuple[Prepared, Callable]":
        ahead = replace(prepared, loop=(*prepared.loop, *guess))
        return ahead, compaction_cuts(inputs, profile, zone, ahead.turns, counter, target, ceiling)
    # the next call's turns, guessed as one of the last steps again (`_next_turns`): they move the cut as a step
    # of their size will, and the values are merged against the turns before them, as the real ones' will be. The
    # newest step's guess is planned last (its merge leads the carry); the others only for a cut of their own
    guesses = _next_turns(turns)
    likely, likely_cut = plan(guesses[0])
    room = int(target * BLOCK_SHARE)
    cuts = {likely_cut(room)}
    for guess in guesses[1:]:
        ahead, cut_at = plan(guess)
        cut = cut_at(room)
        if cut not in cuts:
            cuts.add(cut)
            plan_values(inputs, profile, ahead, zone, compacted_reader(inputs, ahead, cache), target=target,
                        window=window, counter=counter, cache=cache, cut_at=cut_at)
    planned = plan_values(inputs, profile, likely, zone, compacted_reader(inputs, likely, cache), target=target,
                          window=window, counter=counter, cache=cache, cut_at=likely_cut)
    return likely, planned[0]


_GUESSES = 3  # steps the next one is guessed like: the newest and the ones before it


def _next_turns(turns: "tuple[Turn, ...]") -> "tuple[tuple[Turn, ...], ...]":
    """What the next call adds, guessed as one of the conversation's last steps again (`newest_step`: after a
    tool exchange, the loop's next exchange; after a message, a chat's model answer and next user message),
    the newest first, each a copy placed after the newest turn. A compaction's values are merged against the
    turns before its own newest step, so a guess of the right shape and size plans exactly what it will; the
    steps before the newest give the sizes a step has taken lately."""
    start, guesses, end = turns[-1].start + len(turns[-1].messages), [], len(turns)
    while end > 0 and len(guesses) < _GUESSES:
        k = newest_step(turns[:end])
        at, out = start, []
        for turn in turns[end - k:end]:
            out.append(Turn(at, turn.messages))
            at += len(turn.messages)
        guesses.append(tuple(out))
        end -= k
    return tuple(guesses)
