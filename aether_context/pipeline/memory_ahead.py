"""Work ahead: Memory ranked for the compaction the next call would make, while the model answers.

Inside a tool loop a compaction keeps the payload as sent (`build._plan`, held) and ranks Memory once,
for the zone it keeps, at the clock the payload was ranked at: the query is the invocation's request and
the pool the documents of the compacted turns. Once the work ahead has planned the next compaction's cut
(`values_ahead`), all of that is known: ranked now, the compaction finds its search kept (the retriever
keeps each index's last searches by pool, clock and the documents the exclusion took out), and costs
lookups instead of adding the folded turns to the index and ranking them. A wrong guess costs time only:
the index is left holding the pool ranked ahead, a call that repeats an earlier search (a payload kept as
sent) gets it back without syncing the index back, and any other search ranks its own pool as an index
built for it alone would.
"""

from __future__ import annotations

from ..profile import BudgetProfile
from ..tokens import TokenCounting
from .cache import PackCache
from .collect import PackInputs, PackState
from .conversation import Verbatim
from .prepare import Prepared
from .retrieve import Retriever
from .select import select

__all__ = ["memory_ahead"]


def memory_ahead(inputs: PackInputs, prepared: Prepared, zone: Verbatim, state: PackState, profile: BudgetProfile,
                 *, counter: TokenCounting, retriever: Retriever, cache: PackCache) -> bool:
    """Rank Evidence and Memory as a compaction to `zone` (planned on `prepared`'s turns) would with the
    payload `state` left held; False when that compaction would not hold it: payloads are not kept as sent,
    this one has no clock of its own, or the cut stops short of this invocation's request (a compaction that
    does not pin it rebuilds the payload, ranked at the next call's own clock, unknown yet)."""
    if (not profile.cache.stable_prefix or not state.ranked_at
            or inputs.request_index not in zone.pinned):  # a cut short of the request rebuilds the payload
        return False
    compacted, kept = zone.split(prepared.turns)
    select(inputs, profile, counter=counter, retriever=retriever, conversation=prepared.conversation,
           compacted=compacted, kept=kept, cache=cache, now=state.ranked_at)
    return True
