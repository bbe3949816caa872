"""The systems compared in one run: no plugin, ADK's own context features, a sliding window, aether-context.

Each `System` turns (workload, window) into a `Setup`: fresh plugins, App options and extra agent
tools for one replay. The baselines are written here with ADK's public interfaces only:
`SlidingWindowPlugin` (the newest contents that fit window − 12 %), ADK `EventsCompactionConfig`
with a model-free extractive summarizer, ADK `PreloadMemoryTool`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from google.adk.apps.app import EventsCompactionConfig
from google.adk.apps.base_events_summarizer import BaseEventsSummarizer
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types

from aether_context import ContextPacker, ContextPackPlugin, TokenCounter
from aether_context.adk import request_from_llm
from aether_context.profile import load_profile
from measure import RequestShape, string_leaves

__all__ = ["System", "Setup", "SYSTEMS", "SlidingWindowPlugin", "ExtractiveEventsSummarizer", "by_key",
           "SLIDING_SLACK", "COMPACT_THRESHOLD", "COMPACT_RETENTION"]

SLIDING_SLACK = 0.12  # the sliding window keeps the newest contents that fit window × (1 − this)
COMPACT_THRESHOLD = 0.70  # EventsCompactionConfig.token_threshold as a share of the window
COMPACT_RETENTION = 6  # EventsCompactionConfig.event_retention_size


@dataclass
class Setup:
    """What one replay gets: plugins (fresh instances), App options, extra agent tools, the packer if any."""

    plugins: list[BasePlugin] = field(default_factory=list)
    app_options: dict[str, Any] = field(default_factory=dict)
    extra_tools: list[Any] = field(default_factory=list)
    packer: Optional[ContextPacker] = None


@dataclass(frozen=True)
class System:
    key: str
    label: str
    windowed: bool  # depends on the window (else run once and scored against every window)
    make: Callable[[str, Optional[int], dict], Setup]  # (profile, window, packers cache) -> Setup
    describe: Callable[[str, Optional[int]], str]
    packs: bool = False  # aether-context: manifests are read, determinism is checked


# --------------------------------------------------------------------------- sliding window
class SlidingWindowPlugin(BasePlugin):
    """Keeps the newest contents whose tokens, with the system instruction and tools, fit `budget`.

    Never starts the kept history with a function response (its call would be missing); always keeps
    the newest content.
    """

    def __init__(self, budget: int, counter: TokenCounter, *, name: str = "sliding_window"):
        super().__init__(name)
        self.budget, self.counter = budget, counter

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> None:
        req = request_from_llm(llm_request)
        if len(req.messages) != len(llm_request.contents):
            raise RuntimeError("sliding window: contents and converted messages differ in number")
        shape = RequestShape.of(req, self.counter)
        room = self.budget - shape.head_tokens
        keep = len(shape.messages)
        used = 0
        for i in range(len(shape.messages) - 1, -1, -1):
            used += shape.messages[i][1]
            if used > room and i < len(shape.messages) - 1:
                break
            keep = i
        while keep < len(req.messages) - 1 and req.messages[keep].only_responses:
            keep += 1
        llm_request.contents = llm_request.contents[keep:]
        return None


# --------------------------------------------------------------------------- ADK compaction: a model-free summarizer
class ExtractiveEventsSummarizer(BaseEventsSummarizer):
    """A deterministic `BaseEventsSummarizer` (ADK's interface: `maybe_summarize_events(*, events)`).

    One entry per event part: user text keeps its first 400 characters; model text, a tool call
    (name + JSON args) or a tool response keeps its first non-empty line, clipped to 160 characters.
    A previous summary in the range is carried over whole. At most `max_entries` entries: user
    the oldest other entries are dropped first, then the oldest requests. No model is called.
    """

    HEADER = "[summary of earlier events: first line of each, extractive]"

    def __init__(self, *, line_chars: int = 160, request_chars: int = 400, max_entries: int = 60):
        self.line_chars, self.request_chars, self.max_entries = line_chars, request_chars, max_entries
        self._entries: dict[str, list[tuple[bool, str]]] = {}  # summary text -> its entries (is_request, text)

    def _first_line(self, text: str) -> str:
        for line in text.splitlines():
            s = line.strip()
            if s and not re.fullmatch(r"</?\w+>(?:[^<]*</\w+>)?", s):
                return s[: self.line_chars]
        return ""

    def _part_entries(self, ev: Event, p: types.Part) -> list[tuple[bool, str]]:
        out: list[tuple[bool, str]] = []
        if p.text and p.text.startswith(self.HEADER):
            out.extend(self._entries.get(p.text, [(False, p.text[len(self.HEADER):].strip())]))
        elif p.text:
            if ev.author == "user":
                out.append((True, f"user: {p.text[: self.request_chars]}"))
            elif (line := self._first_line(p.text)):
                out.append((False, f"{ev.author}: {line}"))
        if p.function_call:
            args = json.dumps(p.function_call.args or {}, ensure_ascii=False)
            out.append((False, f"{ev.author} called {p.function_call.name}({args})"[: self.line_chars]))
        if p.function_response:
            resp = "\n".join(string_leaves(p.function_response.response or {}))
            out.append((False, f"{p.function_response.name} returned: {self._first_line(resp)}"))
        return out

    async def maybe_summarize_events(self, *, events: list[Event]) -> Optional[Event]:
        if not events:
            return None
        entries = [e for ev in events if ev.content and ev.content.parts for p in ev.content.parts
                   for e in self._part_entries(ev, p)]
        excess = max(0, len(entries) - self.max_entries)
        others = [i for i, (req, _) in enumerate(entries) if not req]
        requests = [i for i, (req, _) in enumerate(entries) if req]
        drop = set((others + requests)[:excess])  # the oldest other entries first, then the oldest requests
        entries = [e for i, e in enumerate(entries) if i not in drop]
        text = "\n".join([self.HEADER, *(t for _, t in entries)])
        self._entries[text] = entries
        compaction = EventCompaction(start_timestamp=events[0].timestamp, end_timestamp=events[-1].timestamp,
                                     compacted_content=types.Content(role="model", parts=[types.Part(text=text)]))
        return Event(author="user", actions=EventActions(compaction=compaction), invocation_id=Event.new_id())


# --------------------------------------------------------------------------- the systems
_COUNTER = TokenCounter()


def _none(profile: str, window: Optional[int], packers: dict) -> Setup:
    return Setup()


def _sliding(profile: str, window: Optional[int], packers: dict) -> Setup:
    return Setup(plugins=[SlidingWindowPlugin(int(window * (1 - SLIDING_SLACK)), _COUNTER)])


def _compaction(profile: str, window: Optional[int], packers: dict) -> Setup:
    cfg = EventsCompactionConfig(summarizer=ExtractiveEventsSummarizer(), token_threshold=int(COMPACT_THRESHOLD * window),
                                 event_retention_size=COMPACT_RETENTION)
    return Setup(app_options={"events_compaction_config": cfg})


def _preload(profile: str, window: Optional[int], packers: dict) -> Setup:
    return Setup(extra_tools=[PreloadMemoryTool()])


def _wait_for_dense(packer: ContextPacker, seconds: float = 120.0) -> None:
    """Measure the steady state: a fresh process ranks lexically until its embedding model is loaded
    (recorded as `dense_ranking_off` in the manifest); the benchmark waits for the model first."""
    import time

    deadline = time.monotonic() + seconds
    while packer.retriever.available() and not packer.retriever.ready() and time.monotonic() < deadline:
        time.sleep(0.2)


def _aether(profile: str, window: Optional[int], packers: dict) -> Setup:
    """One packer per (profile, window) serves every run of a pass (one app, many sessions), as in production."""
    packer = packers.get((profile, window))
    if packer is None:
        store = f"memory://aether-bench/{profile}-{window}"  # the same URL in every pass: URIs in requests match
        # What reaches the model must not depend on the machine's load or on what the process embedded before:
        # no pack fails open on its deadline, and every pack embeds what it ranks (no `embed_in_pack` bound: the
        # steady state, as `_wait_for_dense` waits for the model).
        steady = (load_profile(profile) if isinstance(profile, str) else profile).override(
            retrieval={"embed_in_pack": None})
        packer = packers[(profile, window)] = ContextPacker(profile=steady, window_tokens=window, store=store,
                                                            pack_timeout=600)
        _wait_for_dense(packer)
    packer.recent.clear()
    return Setup(plugins=[ContextPackPlugin(packer=packer)], packer=packer)


SYSTEMS: tuple[System, ...] = (
    System("none", "no plugin", False, _none, lambda p, w: "no plugin"),
    System("sliding", "sliding window", True, _sliding,
           lambda p, w: f"SlidingWindowPlugin(budget=int({w} × {1 - SLIDING_SLACK:.2f}))"),
    System("adk_compact", "ADK EventsCompaction", True, _compaction,
           lambda p, w: (f"EventsCompactionConfig(token_threshold={int(COMPACT_THRESHOLD * w)}, "
                         f"event_retention_size={COMPACT_RETENTION}, summarizer=ExtractiveEventsSummarizer())")),
    System("preload", "ADK PreloadMemoryTool", False, _preload, lambda p, w: "tools=[PreloadMemoryTool()]"),
    System("aether", "aether-context", True, _aether,
           lambda p, w: f"ContextPackPlugin(profile={p!r}, window_tokens={w}, store='memory://…')", packs=True),
)


def by_key(key: str) -> System:
    for s in SYSTEMS:
        if s.key == key:
            return s
    raise KeyError(f"unknown system {key!r}: choose from {', '.join(s.key for s in SYSTEMS)}")
