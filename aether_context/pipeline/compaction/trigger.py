"""When the conversation compacts: over its room, too many verbatim turns, or asked for.

Before compacting, a call whose earlier payloads (kept as sent) overflow the room may replace them by
their user messages instead: a break at the oldest payload rather than at the head.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...profile import BudgetProfile
from ...tokens import TokenCounting
from ..allocate import conversation_tokens
from ..incremental import turn_tokens
from ..types import Prepared, Verbatim

ASKED = "asked for (packer.compact)"
OVER = "conversation over its room"


@dataclass(frozen=True)
class Trigger:
    reason: str | None  # why this call compacts; None: it does not
    replace_payloads: bool  # the earlier payloads as sent give way to their user messages (no compaction)


def compaction_trigger(profile: BudgetProfile, counter: TokenCounting, *, asked: bool, sent: Prepared,
                       plain: Prepared, zone: Verbatim, conversation_cap: int) -> Trigger:
    """Decide for one call. `sent` holds earlier invocations' requests as sent, `plain` as ADK has them."""
    max_turns = profile.conversation.max_verbatim_turns
    too_many = max_turns is not None and len(zone.kept(sent.turns)) > max_turns
    over = conversation_tokens(sent, zone, counter) > conversation_cap - headroom(profile, sent, zone, counter)
    replace = over and sent is not plain and _replace_pays(profile, sent, plain, zone, conversation_cap, counter)
    if asked:
        return Trigger(ASKED, replace)
    return Trigger(OVER if (over and not replace) or too_many else None, replace)


def headroom(profile: BudgetProfile, prepared: Prepared, zone: Verbatim, counter: TokenCounting) -> int:
    """Room a loop that has compacted keeps free for its next turns (`conversation.headroom_turns` of its
    largest verbatim turn), so it settles lower. Before a first compaction nothing is kept free: a session
    that ends before its room is full never compacts."""
    n = profile.conversation.headroom_turns if zone.through > 0 else 0
    return n * max((turn_tokens(t, counter) for t in zone.kept(prepared.turns)), default=0) if n else 0


def _replace_pays(profile: BudgetProfile, sent: Prepared, plain: Prepared, zone: Verbatim, conversation_cap: int,
                  counter: TokenCounting) -> bool:
    """Replacing the payloads beats compacting when the plain history fits and leaves at least as much room
    free as the replacement re-processes (the turns from the first payload on); else both are paid."""
    cap = conversation_cap - headroom(profile, plain, zone, counter)
    redone = sum(turn_tokens(t, counter) for t in zone.kept(plain.turns) if t.start >= min(sent.restored))
    return cap - conversation_tokens(plain, zone, counter) >= redone
