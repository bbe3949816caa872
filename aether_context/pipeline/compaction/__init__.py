"""The compaction policy, in one folder: a policy change touches this folder and the profile.

- When it triggers: `trigger.compaction_trigger` (the verbatim conversation over its room, too many
  turns, or asked for by `packer.compact`; or the earlier payloads give way to their user messages
  instead); the room comes from `allocate.room`, the thresholds from the profile's `conversation`.
- Where it cuts: `policy.plan_compaction` (the newest turns that fit the target, the tail kept, the
  request pinned) and `policy.compaction_boundaries` (the boundary for the block's room).
- The block: `policy.compaction_block` (CONVERSATION SO FAR: the opening request, the running summary,
  fold lines, KNOWN VALUES) within the shares of `policy._block_caps`.
- Known values: `known_values` (the newest compacted turns' values, merged, none the verbatim turns show).
"""

from .known_values import known_values, known_values_of, turn_text, visible_words
from .trigger import Trigger, compaction_trigger
from .policy import (BLOCK_HEADER, CompactedReader, Compaction, CompactionBlock, compact, compacted_reader,
                     compaction_block, compaction_boundaries, compaction_events, plan_compaction, plan_values, verbatim_zone)

__all__ = ["BLOCK_HEADER", "CompactedReader", "Compaction", "CompactionBlock", "compact", "compacted_reader",
           "compaction_block", "compaction_boundaries", "compaction_events", "plan_compaction", "plan_values", "verbatim_zone",
           "known_values", "known_values_of", "turn_text", "visible_words", "Trigger", "compaction_trigger"]
