"""The packer's per-session slots: what one process keeps for one (app, user, session, agent).

One owner, one limit: the slots live in one bounded LRU (`SessionSlots`), released when a session
ends (`release`) or aged out when it is the least recently used. Nothing in a slot changes a
request: everything that does lives in session state (`session_state`).
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from .event_times import EventTimes

if TYPE_CHECKING:
    from google.adk.models.llm_request import LlmRequest

    from ..pipeline.build import ContextPack

__all__ = ["MAX_SESSIONS", "SessionSlot", "SessionSlots", "SlotKey", "slot_key"]

MAX_SESSIONS = 4096  # session slots kept in memory; the least recently used is released first

SlotKey = tuple[str, str, str, str]


@dataclass
class SessionSlot:
    """What the packer keeps in process for one (app, user, session, agent): this call's pack and memos.

    Nothing here changes a request: the previous call's state is read from the session each call.
    """

    last: "ContextPack | None" = None  # this call's pack, until the model answers (usage, summary refresh)
    times: EventTimes | None = None  # memo of event digests (derived from the session)
    artifacts: dict = field(default_factory=dict)  # artifact descriptions by (session, file), with their version
    memory: dict = field(default_factory=dict)  # the memory service's last answer, for the calls of one invocation
    shown: dict | None = None  # the last pack's metadata, shown on the model's response (plugin.py)
    locks: dict = field(default_factory=dict)  # event loop -> the asyncio.Lock serialising this slot's packs
    request: "LlmRequest | None" = None  # acceptance.gate: the packed request of the call in flight
    repaired: str = ""  # acceptance.gate: the invocation that had its one repair pass

    def lock(self) -> asyncio.Lock:
        """This slot's lock on the running loop (an asyncio.Lock belongs to one loop)."""
        loop = asyncio.get_running_loop()
        found = self.locks.get(loop)
        if found is None:
            self.locks.clear()  # a slot lives on one loop at a time; an old loop's lock is dead
            found = self.locks[loop] = asyncio.Lock()
        return found





def slot_key(app: str, user: str, session: str, agent: str) -> SlotKey:
    return (app, user, session, agent)


class SessionSlots:
    """The bounded LRU of slots; `on_release` runs for every slot that goes (released or aged out)."""

    def __init__(self, limit: int = MAX_SESSIONS, on_release: Callable[[SlotKey], None] = lambda key: None):
        self.limit = limit
        self._on_release = on_release
        self._slots: collections.OrderedDict[SlotKey, SessionSlot] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def __iter__(self):
        return iter(self._slots)

    def __getitem__(self, key: SlotKey) -> SessionSlot:
        return self._slots[key]

    def values(self):
        return self._slots.values()

    def get(self, key: SlotKey) -> SessionSlot:
        """The slot for `key`, made on first use; the least recently used goes when over the limit."""
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = SessionSlot()
            while len(self._slots) > self.limit:
                self._on_release(self._slots.popitem(last=False)[0])
        self._slots.move_to_end(key)
        return slot

    def release(self, app: str, user: str, session: str) -> None:
        """Forget every agent's slot of a session."""
        for key in [k for k in self._slots if k[:3] == (app, user, session)]:
            del self._slots[key]
            self._on_release(key)
