"""Trajectory replay: ADK's own context features vs aether-context on real agent runs, side by side.

Every dev mini-swe-agent run (SWE-bench Verified, 42) and tau-bench airline episode (100) is replayed
through an unmodified ADK 2.13 `Runner` (`bench/trajectories.py`: a scripted `BaseLlm` returns the
recorded assistant turns, recorded tools return the recorded outputs) under each system and window:

1. ``none``        no plugin (ADK's request as built from the session);
2. ``adk_filter``  ADK `ContextFilterPlugin(num_invocations_to_keep=3)` — it counts *invocations*, so it
                   cannot cut inside one long invocation (a mini-swe-agent run is one invocation);
3. ``adk_compact`` ADK `EventsCompactionConfig(token_threshold=0.7·W, event_retention_size=6)` on the App,
                   with a deterministic extractive `BaseEventsSummarizer` (no model call);
4. ``aether``      `ContextPackPlugin(profile=..., window_tokens=W, store=<temp dir>)`, offload on (default);
                   profile ``coding_agent`` for mini-swe-agent, ``default`` for tau-bench;
5. ``aether_nocache`` the same with `cache: {stable_prefix: false}` (every call packed from scratch), to show
                   what cache discipline buys; not checked against the targets.

Systems that do not depend on the window (1, 2) run once and are scored against each window.
Metrics are computed uniformly, on the requests the model received (after every plugin):
tokens (aether_context `TokenCounter` over `request_from_llm(request)` + `request_tokens`), calls over
the window, the prefix-stable share between consecutive calls, and retention (edited files, recent
errors, task statement). For the aether-context systems also the agent loop: cache breaks per run (from
the manifests), tokens of the closing STATUS recitation, and failure-evidence recall (recorded
tracebacks found in the pack's FAILURES SO FAR section over the next 10 calls). See REPORT below for
the exact definitions.

Writes the "trajectories" section of docs/benchmarks.md (`report_sections.py`; the rest of the file is
left alone) and the long per-miss diagnosis to docs/benchmarks_trajectories_diagnosis.md.

Usage (from the repository root)::

    .venv/bin/python bench/trajectory_replay.py --data ../shared/datasets            # everything
    .venv/bin/python bench/trajectory_replay.py --data ../shared/datasets --quick    # 10 runs + 20 episodes
    .venv/bin/python bench/trajectory_replay.py --limit 5 --systems none,aether --windows 8000 --no-write
    # an aether-context variant (profile override as JSON), added as one more system:
    .venv/bin/python bench/trajectory_replay.py --variant 'no-offload={"offload": {"enabled": false}}'

Adding a system: append a `System` to `SYSTEMS` (or build one with `aether_system(...)`); adding a
column: add a `Column` to `COLUMNS` (a function of the `Score` of one system × window × dataset).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime as dt
import json
import logging
import math
import os
import re
import shlex
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the library's embedding model comes from a package: never download
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from measure import RequestShape, prefix_share  # noqa: E402
from report_sections import DEFAULT_FILE, machine, mean, pct, write_section  # noqa: E402
from trajectories import DEFAULT_DATA, ModelCall, Trajectory, load_mini_swe, load_tau_airline, replay  # noqa: E402

from google.adk.apps.app import EventsCompactionConfig  # noqa: E402
from google.adk.apps.base_events_summarizer import BaseEventsSummarizer  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions, EventCompaction  # noqa: E402
from google.adk.plugins.base_plugin import BasePlugin  # noqa: E402
from google.adk.plugins.context_filter_plugin import ContextFilterPlugin  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.genai import types  # noqa: E402

from aether_context import ContextPacker, ContextPackPlugin, ModelRequest, PackStore, TokenCounter, load_profile  # noqa: E402
from aether_context.adk import request_from_llm  # noqa: E402
from aether_context.content import FunctionCall, FunctionResponse, TextPart, canonical_json  # noqa: E402

PROFILE_FOR = {"mini-swe-agent": "coding_agent", "tau-bench-airline": "default"}
NO_CACHE_KEY = "aether_nocache"
FILTER_KEEP = 3  # ContextFilterPlugin(num_invocations_to_keep=...)
COMPACT_THRESHOLD = 0.70  # EventsCompactionConfig.token_threshold as a share of the window
COMPACT_RETENTION = 6  # EventsCompactionConfig.event_retention_size (raw events kept after a compaction)
TASK_CHARS = 200  # the task counts as present when its first 200 characters appear verbatim
ERROR_CHARS = 200  # an error line is compared on its first 200 characters
LAST_ERRORS = 5
RELEVANT_CALLS = 10  # a traceback stays relevant for this many model calls after its output
EVIDENCE_CHARS = 80  # ... and counts as shown when its exception line's first 80 characters are there
SUBMIT_MARK = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

# Targets for aether-context at 8K.
TARGET_WINDOW = 8000
T_FILES = 0.95
T_ERRORS = 1.0
T_TASK = 1.0
T_LAST_FIFTH = 0.30
T_PREFIX = 0.80


# --------------------------------------------------------------------------- small helpers
def share(num: int, den: int) -> float:
    return num / den if den else math.nan


def fmt_pct(x: float, digits: int = 0) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:.{digits}f} %"


def fmt_int(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.0f}"


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def string_leaves(value: Any) -> Iterable[str]:
    """Every string inside a JSON-like value (dict keys excluded)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from string_leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from string_leaves(v)


def part_texts(part: Any) -> list[str]:
    """The searchable text of one request part: its raw strings and, for calls/responses, its JSON."""
    if isinstance(part, TextPart):
        return [part.text]
    if isinstance(part, FunctionCall):
        return [part.name, *string_leaves(part.args), canonical_json(part.args)]
    if isinstance(part, FunctionResponse):
        return [part.name, *string_leaves(part.response), canonical_json(part.response)]
    return [canonical_json(part.to_json())]


_TEXT_CACHE: dict[int, tuple[ModelRequest, str]] = {}


def request_text(req: ModelRequest) -> str:
    """All text of a request: system instruction, tool declarations, every part (raw strings + JSON)."""
    hit = _TEXT_CACHE.get(id(req))
    if hit is not None and hit[0] is req:
        return hit[1]
    text = _request_text(req)
    _TEXT_CACHE[id(req)] = (req, text)
    return text


def _request_text(req: ModelRequest) -> str:
    chunks = [req.system_instruction, *(canonical_json(t.declaration) for t in req.tools)]
    for m in req.messages:
        for p in m.parts:
            chunks.extend(part_texts(p))
    return "\n".join(chunks)


# --------------------------------------------------------------------------- what each trajectory should keep
_TRACEBACK = "Traceback (most recent call last)"
_FILE_LINE = re.compile(r'^File ".*", line \d+')  # a traceback frame, or the header of a SyntaxError report
_EXC_LINE = re.compile(r"^(?:E\s+)?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::\s.*)?)$")
_PLAIN_ERROR = re.compile(r"^(Error:\s*\S.*)$")
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)


def error_lines(output: str) -> list[str]:
    """Error lines of one tool output, in order.

    Python traceback last lines `XxxError: msg` / `XxxException: msg` (dotted names allowed), counted
    where the output holds a `Traceback (most recent call last)` or a `File "...", line N` frame before
    them (a SyntaxError report has no Traceback header) or pytest marks them
    (`E   XxxError: ...`), and any line starting `Error:` (tau-bench tools). ANSI colours removed,
    whitespace stripped, pytest's `E ` prefix dropped.
    """
    out = []
    seen_tb = False
    for raw in strip_ansi(output).splitlines():
        line = raw.strip()
        if _TRACEBACK in line or _FILE_LINE.match(line):
            seen_tb = True
            continue
        m = _PLAIN_ERROR.match(line)
        if m:
            out.append(m.group(1))
            continue
        m = _EXC_LINE.match(line)
        if m and (seen_tb or line.startswith("E ")):
            out.append(m.group(1))
    return out


def decisive_exception(output: str) -> Optional[str]:
    """The exception line a Python traceback ends with, or None when the output holds no traceback.

    Only the last `Traceback (most recent call last)` counts (a chained traceback names its causes
    first; the crash is the last one), and only exception lines after it, not `Error:` lines.
    """
    text = strip_ansi(output)
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return None
    lines = [e for e in error_lines(text[at:]) if not _PLAIN_ERROR.match(e)]
    return lines[-1] if lines else None


def recorded_tracebacks(traj: Trajectory) -> tuple[list[tuple[int, str]], int]:
    """(turn, decisive exception line) for every recorded tool output that holds a Python traceback,
    and how many traceback outputs end in a line the extraction does not read (e.g. `ImproperlyConfigured: …`)."""
    out, unread = [], 0
    for i, turn in enumerate(traj.turns):
        for c in turn.calls:
            text = "\n".join(string_leaves(c.output))
            line = decisive_exception(text)
            if line:
                out.append((i, line))
            elif _TRACEBACK in text:
                unread += 1
    return out, unread


@dataclass
class Facts:
    """What a trajectory's context should keep, from the recording alone (system-independent)."""

    task: str  # first TASK_CHARS characters of the task statement
    edited_files: list[str]  # files touched by the final diff (mini-swe-agent)
    errors: list[str]  # last LAST_ERRORS distinct error lines before the final call, oldest first
    error_turn: dict[str, int]  # error line -> turn index whose output last held it
    submit_call: Optional[int]  # call index that issued the submit command (its request precedes the diff output)
    n_calls: int
    turn_message: list[int]  # turn index -> index of its model message in the request contents (aether's "[turn N]")
    turn_first_call: list[int]  # turn index -> index of its first tool call among all the run's calls
    tracebacks: list[tuple[int, str]] = field(default_factory=list)  # (turn, exception line) per traceback output
    tracebacks_unread: int = 0  # traceback outputs whose exception line the extraction does not read (not scored)


def trajectory_facts(traj: Trajectory) -> Facts:
    turns = traj.turns
    task = traj.invocations[0].user[:TASK_CHARS].strip()  # edge whitespace is not content
    turn_message: list[int] = []
    turn_first_call: list[int] = []
    msg = calls = 0
    for inv in traj.invocations:
        msg += 1  # the user message
        for turn in inv.turns:
            turn_message.append(msg)
            turn_first_call.append(calls)
            calls += len(turn.calls)
            msg += 2 if turn.calls else 1  # the model message, then the merged tool responses
    files: list[str] = []
    for a, b in _DIFF_FILE.findall(traj.meta.get("submission") or ""):
        if b not in files:
            files.append(b)
    found: list[tuple[str, int]] = []
    submit = None
    for i, turn in enumerate(turns[:-1]):  # the outputs that exist before the final call
        for c in turn.calls:
            if SUBMIT_MARK in json.dumps(c.args):
                submit = i
            for text in string_leaves(c.output):
                found.extend((e, i) for e in error_lines(text))
    last: list[str] = []
    error_turn: dict[str, int] = {}
    for e, i in reversed(found):
        key = e[:ERROR_CHARS]
        if key not in error_turn:
            error_turn[key] = i
            last.append(key)
        if len(last) == LAST_ERRORS:
            break
    tracebacks, unread = recorded_tracebacks(traj)
    return Facts(task=task, edited_files=files, errors=list(reversed(last)), error_turn=error_turn,
                 submit_call=submit, n_calls=len(turns), turn_message=turn_message,
                 turn_first_call=turn_first_call, tracebacks=tracebacks, tracebacks_unread=unread)


# --------------------------------------------------------------------------- measuring each request
@dataclass
class CallRow:
    index: int
    invocation: int
    tokens: int
    prefix_share: Optional[float]  # identical leading tokens / previous request's tokens
    task_present: bool
    plugins_s: Optional[float] = None
    max_message: int = 0  # tokens of the largest message of the request
    status_tokens: int = 0  # tokens of the closing STATUS message (0: none)
    in_failures: frozenset[int] = frozenset()  # relevant tracebacks (indexes into Facts.tracebacks) in FAILURES SO FAR
    in_status: frozenset[int] = frozenset()  # ... in the closing STATUS message


class RequestMeter:
    """Runs inside the model call (untimed): measures the request the model received.

    Keeps the final request (and the submit call's request) for the retention checks; reports each
    request's token count back as the model's `prompt_token_count` (what ADK's compaction reads).
    """

    def __init__(self, counter: TokenCounter, facts: Facts, *, capture_pack: bool = False):
        self.counter = counter
        self.facts = facts
        self.capture_pack = capture_pack
        self.fold_lines: dict[int, str] = {}  # aether "[turn N]" -> the last fold/summary line seen for it
        self._pack_seen: set[str] = set()
        self.rows: list[CallRow] = []
        self.final: Optional[ModelRequest] = None
        self.submit: Optional[ModelRequest] = None
        self._prev: Optional[RequestShape] = None
        self._tokens_by_request: dict[int, int] = {}
        self._task_in: dict[str, bool] = {}
        self._failures_of: dict[str, str] = {}  # pack message digest -> its FAILURES SO FAR section
        task = facts.task
        self._task_forms = [task, json.dumps(task, ensure_ascii=False)[1:-1]] if task else []

    def _has_task(self, texts: Iterable[str]) -> bool:
        return any(form in t for t in texts for form in self._task_forms)

    def __call__(self, call: ModelCall, llm_request: Any) -> None:
        req = request_from_llm(llm_request)
        counter = self.counter
        shape = RequestShape.of(req, counter)
        msgs, total = shape.messages, shape.total
        ratio = prefix_share(self._prev, shape) if self._prev is not None else None
        self._prev = shape
        present = not self._task_forms or self._has_task([req.system_instruction])
        if not present:
            for m in req.messages:
                hit = self._task_in.get(m.digest)
                if hit is None:
                    hit = self._has_task(t for p in m.parts for t in part_texts(p))
                    self._task_in[m.digest] = hit
                if hit:
                    present = True
                    break
        if self.capture_pack:
            for m in req.messages:
                if m.digest in self._pack_seen:
                    continue
                self._pack_seen.add(m.digest)
                for p in m.parts:
                    if isinstance(p, TextPart) and PAYLOAD_HEADER in p.text:
                        for k, line in _FOLD_LINE.findall(p.text):
                            self.fold_lines[int(k)] = line
        row = CallRow(call.index, call.invocation, total, ratio, present, max_message=max((t for _, t in msgs), default=0))
        if self.capture_pack:
            self._agent_loop_sections(row, req, msgs)
        self.rows.append(row)
        self._tokens_by_request[id(llm_request)] = total
        self.final = req
        if self.facts.submit_call is not None and call.index == self.facts.submit_call:
            self.submit = req

    def _agent_loop_sections(self, row: CallRow, req: ModelRequest, msgs: Sequence[tuple[str, int]]) -> None:
        """Recitation tokens, and which of the recent tracebacks this request shows, and where."""
        status = req.messages[-1] if req.messages else None
        status_text = ""
        if status is not None and status.role == "user" and status.text.startswith("STATUS"):
            row.status_tokens, status_text = msgs[-1][1], status.text
        section = next((self._failures(m) for m in req.messages
                        if m.role == "user" and m.text.startswith(PAYLOAD_HEADER)), "")
        relevant = [(j, line[:EVIDENCE_CHARS]) for j, (turn, line) in enumerate(self.facts.tracebacks)
                    if 1 <= row.index - turn <= RELEVANT_CALLS]
        row.in_failures = frozenset(j for j, key in relevant if key in section)
        row.in_status = frozenset(j for j, key in relevant if key in status_text)

    def _failures(self, pack: Any) -> str:
        hit = self._failures_of.get(pack.digest)
        if hit is None:
            hit = self._failures_of[pack.digest] = failures_section(pack.text)
        return hit

    def prompt_tokens(self, llm_request: Any) -> int:
        return self._tokens_by_request.pop(id(llm_request), 0)


_FOLD_LINE = re.compile(r"^- \[turn (\d+)\] (.*)$", re.M)
PAYLOAD_HEADER = "CONTEXT PACK"  # the user message holding the pack's sections starts with this line
FAILURES_HEADER = "FAILURES SO FAR"
_SECTION_HEAD = re.compile(r"^[A-Z][A-Z0-9 ()/-]*:$")  # `ACCEPTANCE:`, `USER REQUEST (VERBATIM):`, ...


def failures_section(pack_text: str) -> str:
    """The FAILURES SO FAR section of a pack's text: from its header line to the next section header."""
    lines = pack_text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(FAILURES_HEADER)), None)
    if start is None:
        return ""
    end = next((j for j in range(start + 1, len(lines)) if _SECTION_HEAD.match(lines[j].strip())), len(lines))
    return "\n".join(lines[start:end])


class SeededSessionService(InMemorySessionService):
    """ADK's in-memory sessions, with a session id derived from a seed instead of a random uuid4.

    Session ids end up in artifact URIs inside packed requests, and a random uuid tokenises to a
    varying number of tokens, which moves budget cuts between runs: a fixed id makes reruns identical.
    """

    def __init__(self, seed: str):
        super().__init__()
        self._seed = seed

    async def create_session(self, *, app_name: str, user_id: str, state: Optional[dict[str, Any]] = None,
                             session_id: Optional[str] = None) -> Any:
        session_id = session_id or str(uuid.uuid5(uuid.NAMESPACE_URL, f"aether-bench/{self._seed}"))
        return await super().create_session(app_name=app_name, user_id=user_id, state=state, session_id=session_id)


# --------------------------------------------------------------------------- ADK compaction: a model-free summarizer
class ExtractiveEventsSummarizer(BaseEventsSummarizer):
    """A deterministic `BaseEventsSummarizer` (ADK's interface: `maybe_summarize_events(*, events)`).

    One entry per event part: user text keeps its first 400 characters verbatim (the LLM summarizer's
    prompt asks it to "reiterate the user request"); model text, a tool call (name + JSON args) or a
    tool response keeps its first non-empty line (XML-ish tags skipped), clipped to 160 characters.
    When ADK seeds the range with the previous summary (token-threshold compaction does), that
    summary's entries are carried over whole. At most `max_entries` entries: user requests are kept,
    the oldest others dropped. Returns the compaction event as `LlmEventSummarizer` does.
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

    async def maybe_summarize_events(self, *, events: list[Event]) -> Optional[Event]:
        if not events:
            return None
        entries: list[tuple[bool, str]] = []
        for ev in events:
            if not ev.content or not ev.content.parts:
                continue
            for p in ev.content.parts:
                if p.text and p.text.startswith(self.HEADER):
                    entries.extend(self._entries.get(p.text, [(False, p.text[len(self.HEADER):].strip())]))
                elif p.text:
                    if ev.author == "user":
                        entries.append((True, f"user: {p.text[: self.request_chars]}"))
                    elif (line := self._first_line(p.text)):
                        entries.append((False, f"{ev.author}: {line}"))
                if p.function_call:
                    args = json.dumps(p.function_call.args or {}, ensure_ascii=False)
                    entries.append((False, f"{ev.author} called {p.function_call.name}({args})"[: self.line_chars]))
                if p.function_response:
                    resp = "\n".join(string_leaves(p.function_response.response or {}))
                    entries.append((False, f"{p.function_response.name} returned: {self._first_line(resp)}"))
        others = [i for i, (req, _) in enumerate(entries) if not req]
        drop = set(others[: max(0, len(entries) - self.max_entries)])
        entries = [e for i, e in enumerate(entries) if i not in drop]
        text = "\n".join([self.HEADER, *(t for _, t in entries)])
        self._entries[text] = entries
        compaction = EventCompaction(start_timestamp=events[0].timestamp, end_timestamp=events[-1].timestamp,
                                     compacted_content=types.Content(role="model", parts=[types.Part(text=text)]))
        return Event(author="user", actions=EventActions(compaction=compaction), invocation_id=Event.new_id())


# --------------------------------------------------------------------------- systems
@dataclass
class Setup:
    """What one replay of one trajectory gets: plugins (fresh instances), App options, and a finisher."""

    plugins: list[BasePlugin] = field(default_factory=list)
    app_options: dict[str, Any] = field(default_factory=dict)
    finish: Optional[Callable[[Any], dict[str, Any]]] = None  # ReplayResult -> extra per-run data
    capture_pack: bool = False  # keep the pack's fold / summary lines per turn (aether-context)


@dataclass
class System:
    key: str
    label: str
    windowed: bool  # depends on the window (else run once and scored against every window)
    make: Callable[["Workload", Optional[int], "Env"], Setup]
    describe: Callable[["Workload", Optional[int]], str]
    packs: bool = False  # an aether-context system: its manifests and pack sections are scored too
    targets: bool = False  # checked against the targets (and diagnosed); comparison-only systems are not


@dataclass
class Env:
    tmp: Path
    packers: dict[tuple[str, str, int], ContextPacker] = field(default_factory=dict)


def _none(w: "Workload", window: Optional[int], env: Env) -> Setup:
    return Setup()


def _filter(w: "Workload", window: Optional[int], env: Env) -> Setup:
    return Setup(plugins=[ContextFilterPlugin(num_invocations_to_keep=FILTER_KEEP)])


def _compaction(w: "Workload", window: Optional[int], env: Env) -> Setup:
    summarizer = ExtractiveEventsSummarizer()
    cfg = EventsCompactionConfig(summarizer=summarizer, token_threshold=int(COMPACT_THRESHOLD * window),
                                 event_retention_size=COMPACT_RETENTION)

    def finish(result: Any) -> dict[str, Any]:
        n = sum(1 for e in result.session.events if e.actions and e.actions.compaction)
        return {"compactions": n}

    return Setup(app_options={"events_compaction_config": cfg}, finish=finish)


def aether_system(key: str, label: str, *, overrides: Optional[dict[str, Any]] = None, targets: bool = True) -> System:
    """An aether-context system: `ContextPackPlugin` with the workload's profile (+ `overrides`).

    One `ContextPacker` per workload and window serves all its runs (one app process, one store in the
    temp dir); each replay gets a fresh plugin around it. Its manifests are kept for the diagnosis.
    """
    def make(w: "Workload", window: Optional[int], env: Env) -> Setup:
        pk = (key, w.name, window)
        packer = env.packers.get(pk)
        if packer is None:
            profile = load_profile(PROFILE_FOR[w.source])
            if overrides:
                profile = profile.override(**overrides)
            store = PackStore(str(env.tmp / f"{key}-{w.name}-{window}"))
            packer = ContextPacker(profile=profile, store=store, window_tokens=window)
            env.packers[pk] = packer
        packer.recent.clear()

        def finish(result: Any) -> dict[str, Any]:
            manifests = [r.manifest for r in packer.recent]
            responses = [p.function_response.response or {} for e in result.session.events if e.content and e.content.parts
                         for p in e.content.parts if p.function_response]
            return {"manifests": manifests, "session_responses": responses}

        return Setup(plugins=[ContextPackPlugin(packer=packer)], finish=finish, capture_pack=True)

    def describe(w: "Workload", window: Optional[int]) -> str:
        extra = f", overrides {json.dumps(overrides)}" if overrides else ""
        return f"ContextPackPlugin(profile={PROFILE_FOR[w.source]!r}, window_tokens={window}, store=<temp dir>){extra}"

    return System(key, label, True, make, describe, packs=True, targets=targets)


SYSTEMS: list[System] = [
    System("none", "no plugin", False, _none, lambda w, W: "no plugin"),
    System("adk_filter", f"ADK ContextFilterPlugin(keep={FILTER_KEEP})", False, _filter,
           lambda w, W: f"ContextFilterPlugin(num_invocations_to_keep={FILTER_KEEP})"),
    System("adk_compact", "ADK EventsCompaction", True, _compaction,
           lambda w, W: (f"EventsCompactionConfig(token_threshold={int(COMPACT_THRESHOLD * W)}, "
                         f"event_retention_size={COMPACT_RETENTION}, summarizer=ExtractiveEventsSummarizer())")),
    aether_system("aether", "aether-context"),
    # The same without cache discipline (every call packed from scratch): what the discipline buys.
    aether_system(NO_CACHE_KEY, "aether-context, no cache discipline", overrides={"cache": {"stable_prefix": False}},
                  targets=False),
]


# --------------------------------------------------------------------------- running
@dataclass
class Workload:
    name: str  # short: mini-swe / tau
    source: str  # Trajectory.source
    title: str
    trajectories: list[Trajectory]
    facts: dict[str, Facts]


@dataclass
class RunResult:
    traj_id: str
    rows: list[CallRow]
    final: Optional[ModelRequest]
    submit: Optional[ModelRequest]
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None
    fold_lines: dict[int, str] = field(default_factory=dict)


async def run_system(system: System, w: Workload, window: Optional[int], env: Env, counter: TokenCounter,
                     deadline_s: Optional[float]) -> list[RunResult]:
    out = []
    for traj in w.trajectories:
        facts = w.facts[traj.id]
        setup = system.make(w, window, env)
        meter = RequestMeter(counter, facts, capture_pack=setup.capture_pack)
        t0 = time.perf_counter()
        try:
            result = await replay(traj, plugins=setup.plugins, app_options=setup.app_options, keep_requests="none",
                                  on_request=meter, prompt_tokens=meter.prompt_tokens, deadline_s=deadline_s,
                                  session_service=SeededSessionService(traj.id))
        except Exception as e:  # a system that breaks a run is reported, not fatal
            out.append(RunResult(traj.id, meter.rows, meter.final, meter.submit, time.perf_counter() - t0,
                                 error=f"{type(e).__name__}: {e}"))
            continue
        for row, call in zip(meter.rows, result.calls):
            row.plugins_s = call.plugins_s
        extra = setup.finish(result) if setup.finish else {}
        if result.truncated:
            extra["truncated"] = True
        out.append(RunResult(traj.id, meter.rows, meter.final, meter.submit, result.wall_s, extra,
                             fold_lines=meter.fold_lines))
    return out


# --------------------------------------------------------------------------- scoring
@dataclass
class Score:
    system: System
    workload: Workload
    window: int
    runs: list[RunResult]
    base: Optional["Score"] = None  # the no-plugin score of the same workload and window

    # ---- tokens
    @property
    def tokens(self) -> list[int]:
        return [r.tokens for run in self.runs for r in run.rows]

    @property
    def last_fifth(self) -> list[int]:
        out = []
        for run in self.runs:
            n = len(run.rows)
            k = max(1, math.ceil(n / 5)) if n else 0
            out += [r.tokens for r in run.rows[n - k:]]
        return out

    @property
    def over(self) -> list[tuple[str, CallRow]]:
        return [(run.traj_id, r) for run in self.runs for r in run.rows if r.tokens > self.window]

    @property
    def prefix(self) -> list[float]:
        return [r.prefix_share for run in self.runs for r in run.rows if r.prefix_share is not None]

    # ---- retention
    def file_checks(self, at: str = "final") -> list[tuple[str, str, bool]]:
        """(run, file, named) for every edited file, in the final request (or the submit call's)."""
        memo = self.__dict__.setdefault("_memo", {})
        if ("files", at) not in memo:
            memo[("files", at)] = self._file_checks(at)
        return memo[("files", at)]

    def _file_checks(self, at: str) -> list[tuple[str, str, bool]]:
        out = []
        for run in self.runs:
            facts = self.workload.facts[run.traj_id]
            req = run.final if at == "final" else (run.submit or run.final)
            if not facts.edited_files or req is None:
                continue
            text = request_text(req)
            out += [(run.traj_id, f, f in text) for f in facts.edited_files]
        return out

    def error_checks(self) -> list[tuple[str, str, bool]]:
        memo = self.__dict__.setdefault("_memo", {})
        if "errors" not in memo:
            memo["errors"] = self._error_checks()
        return memo["errors"]

    def _error_checks(self) -> list[tuple[str, str, bool]]:
        out = []
        for run in self.runs:
            facts = self.workload.facts[run.traj_id]
            if not facts.errors or run.final is None:
                continue
            text = strip_ansi(request_text(run.final))
            out += [(run.traj_id, e, e in text) for e in facts.errors]
        return out

    def task_calls(self) -> tuple[int, int, int, int]:
        """(calls with the task, calls, runs with the task at every call, runs)."""
        calls = sum(r.task_present for run in self.runs for r in run.rows)
        n = sum(len(run.rows) for run in self.runs)
        full = sum(all(r.task_present for r in run.rows) for run in self.runs)
        return calls, n, full, len(self.runs)

    # ---- timing
    @property
    def run_wall(self) -> list[float]:
        return [run.wall_s for run in self.runs]

    @property
    def plugin_ms(self) -> list[float]:
        return [r.plugins_s * 1000 for run in self.runs for r in run.rows if r.plugins_s is not None]

    # ---- agent loop (aether-context systems: manifests and pack sections)
    def cache_breaks(self, *, new_invocations: bool) -> list[list[dict[str, Any]]]:
        """Per run, the manifests' cache breaks (a new invocation's first call only if asked)."""
        return [run_breaks(run, new_invocations=new_invocations) for run in self.runs]

    @property
    def status_tokens(self) -> list[int]:
        return [r.status_tokens for run in self.runs for r in run.rows]

    def evidence_pairs(self) -> list[tuple[str, int, int, bool, bool]]:
        """(run, traceback index, calls since its output, in FAILURES SO FAR, there or in STATUS) per relevant call.

        Rows are in call order (row k is call k); the output of turn t is first seen by call t + 1.
        """
        out = []
        for run in self.runs:
            for j, (turn, _) in enumerate(self.workload.facts[run.traj_id].tracebacks):
                for row in run.rows[turn + 1: turn + 1 + RELEVANT_CALLS]:
                    shown = j in row.in_failures
                    out.append((run.traj_id, j, row.index - turn, shown, shown or j in row.in_status))
        return out


def run_breaks(run: RunResult, *, new_invocations: bool) -> list[dict[str, Any]]:
    """Cache breaks in one run's manifests; a new invocation's first call has a fresh request by nature."""
    manifests = run.extra.get("manifests", [])
    out = []
    for prev, m in zip([None, *manifests], manifests):
        starts_invocation = prev is not None and prev.invocation_id != m.invocation_id
        if m.cache_break and (new_invocations or not starts_invocation):
            out.append(m.cache_break)
    return out


@dataclass
class Column:
    head: str
    cell: Callable[[Score], str]


def _ratio_cell(s: Score, value: float, base_value: float) -> str:
    if s.base is None or s.base is s or math.isnan(base_value) or not base_value:
        return fmt_int(value)
    return f"{fmt_int(value)} ({value / base_value * 100:.0f} %)"


def _checks_cell(checks: list[tuple[str, str, bool]]) -> str:
    if not checks:
        return "n/a"
    ok = sum(c[2] for c in checks)
    return f"{fmt_pct(share(ok, len(checks)), 1)} ({ok}/{len(checks)})"


def _task_cell(s: Score) -> str:
    calls, n, full, runs = s.task_calls()
    return f"{fmt_pct(share(calls, n), 1)} ({full}/{runs} runs)"


COLUMNS: list[Column] = [
    Column("calls", lambda s: str(len(s.tokens))),
    Column("prompt tokens / call: mean (vs none)", lambda s: _ratio_cell(s, mean(s.tokens), mean(s.base.tokens) if s.base else math.nan)),
    Column("p95", lambda s: fmt_int(pct(s.tokens, 95))),
    Column("mean, last fifth of each run (vs none)",
           lambda s: _ratio_cell(s, mean(s.last_fifth), mean(s.base.last_fifth) if s.base else math.nan)),
    Column("calls > W", lambda s: str(len(s.over))),
    Column("prefix-stable share, median", lambda s: fmt_pct(pct(s.prefix, 50), 1)),
    Column("edited files named, final call", lambda s: _checks_cell(s.file_checks("final"))),
    Column("… at the submit call", lambda s: _checks_cell(s.file_checks("submit"))),
    Column("last-5 errors kept", lambda s: _checks_cell(s.error_checks())),
    Column("task at call: calls (runs at every call)", _task_cell),
    Column("run wall s, median", lambda s: f"{pct(s.run_wall, 50):.2f}"),
    Column("plugins ms / call, median", lambda s: f"{pct(s.plugin_ms, 50):.1f}" if s.system.key != "none" else "–"),
]


def table(scores: list[Score]) -> str:
    head = "| system | " + " | ".join(c.head for c in COLUMNS) + " |"
    sep = "| --- |" + " --- |" * len(COLUMNS)
    rows = []
    for s in scores:
        label = s.system.label + ("" if s.system.windowed else " ¹")
        rows.append(f"| {label} | " + " | ".join(c.cell(s) for c in COLUMNS) + " |")
    return "\n".join([head, sep, *rows])


# --------------------------------------------------------------------------- agent loop: cache, recitation, failures
def md_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _median_mean(values: Sequence[float]) -> str:
    return "n/a" if not values else f"{pct(values, 50):.1f} / {mean(values):.2f}"


def _share_cell(flags: Iterable[bool]) -> str:
    xs = list(flags)
    return f"{fmt_pct(share(sum(xs), len(xs)), 1)} ({sum(xs)}/{len(xs)})" if xs else "n/a"


CACHE_HEAD = ["dataset", "W", "system", "calls", "prompt tokens / call, mean", "prefix-stable share: median (mean)",
              "cache breaks / run, median / mean", "… counting a new invocation's first call", "tokens re-processed / run, mean"]


def cache_cells(s: Score) -> list[str]:
    within = s.cache_breaks(new_invocations=False)
    every = s.cache_breaks(new_invocations=True)
    lost = [sum(b.get("tokens") or 0 for b in run) for run in within]
    return [str(len(s.tokens)), fmt_int(mean(s.tokens)), f"{fmt_pct(pct(s.prefix, 50), 1)} ({fmt_pct(mean(s.prefix), 1)})",
            _median_mean([len(b) for b in within]), _median_mean([len(b) for b in every]), fmt_int(mean(lost))]


RECITATION_HEAD = ["dataset", "W", "system", "calls with a STATUS message", "STATUS tokens / reciting call, mean",
                   "STATUS tokens / call, all calls, mean", "… as a share of the mean request"]


def recitation_cells(s: Score) -> list[str]:
    status = s.status_tokens
    reciting = [t for t in status if t]
    per_call = mean(status)
    return [f"{fmt_pct(share(len(reciting), len(status)), 1)} ({len(reciting)}/{len(status)})", fmt_int(mean(reciting)),
            f"{per_call:.1f}", fmt_pct(per_call / mean(s.tokens), 2)]


EVIDENCE_HEAD = ["dataset", "W", "system", "traceback outputs (runs); not read", "(traceback, call) pairs",
                 "recall in FAILURES SO FAR", "… at the very next call", "in FAILURES SO FAR or STATUS"]


def evidence_cells(s: Score) -> list[str]:
    pairs = s.evidence_pairs()
    outputs = {(tid, j) for tid, j, *_ in pairs}
    nxt = [p for p in pairs if p[2] == 1]
    unread = sum(s.workload.facts[run.traj_id].tracebacks_unread for run in s.runs)
    return [f"{len(outputs)} ({len({tid for tid, _ in outputs})} runs); {unread}", str(len(pairs)),
            _share_cell(p[3] for p in pairs), _share_cell(p[3] for p in nxt), _share_cell(p[4] for p in pairs)]


def agent_loop_tables(scored: Sequence[tuple["Workload", int, list[Score]]]) -> dict[str, str]:
    """The three tables of the agent-loop section, one row per aether-context system × dataset × window."""
    rows: dict[str, list[list[str]]] = {"cache": [], "recitation": [], "evidence": []}
    for w, window, scores in scored:
        for s in scores:
            if not s.system.packs:
                continue
            lead = [w.name, f"{window:,}", s.system.label]
            rows["cache"].append(lead + cache_cells(s))
            rows["recitation"].append(lead + recitation_cells(s))
            rows["evidence"].append(lead + evidence_cells(s))
    heads = {"cache": CACHE_HEAD, "recitation": RECITATION_HEAD, "evidence": EVIDENCE_HEAD}
    return {k: md_table(heads[k], v) if v else "(no aether-context system in this run)" for k, v in rows.items()}


# --------------------------------------------------------------------------- targets and diagnosis
@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def targets(s: Score) -> list[Check]:
    over = s.over
    files = s.file_checks("final")
    errs = s.error_checks()
    calls, n, full, runs = s.task_calls()
    lf, base_lf = mean(s.last_fifth), mean(s.base.last_fifth) if s.base else math.nan
    prefix = pct(s.prefix, 50)
    out = [Check("no call over the window", not over, f"{len(over)} of {len(s.tokens)} calls > {s.window}")]
    if files:
        fs = share(sum(c[2] for c in files), len(files))
        out.append(Check(f"edited files named in the final call ≥ {T_FILES:.0%}", fs >= T_FILES,
                         f"{fmt_pct(fs, 1)} ({sum(c[2] for c in files)}/{len(files)})"))
    if errs:
        es = share(sum(c[2] for c in errs), len(errs))
        out.append(Check(f"last-5 errors in the final call = {T_ERRORS:.0%}", es >= T_ERRORS,
                         f"{fmt_pct(es, 1)} ({sum(c[2] for c in errs)}/{len(errs)})"))
    ts = share(calls, n)
    out.append(Check(f"task statement at {T_TASK:.0%} of calls", ts >= T_TASK,
                     f"{fmt_pct(ts, 1)} of calls ({calls}/{n}); {full}/{runs} runs at every call"))
    r = lf / base_lf if base_lf else math.nan
    out.append(Check(f"tokens over the last fifth ≤ {T_LAST_FIFTH:.0%} of no plugin", r <= T_LAST_FIFTH,
                     f"{fmt_int(lf)} vs {fmt_int(base_lf)} = {fmt_pct(r, 1)}"))
    out.append(Check(f"median prefix-stable share ≥ {T_PREFIX:.0%}", prefix >= T_PREFIX, fmt_pct(prefix, 1)))
    return out


def _counts(items: Iterable[Any]) -> str:
    c = collections.Counter(items)
    return ", ".join(f"{k} ×{v}" for k, v in c.most_common())


def diagnose(s: Score, none: Score) -> list[str]:
    """Evidence for every miss of an aether-context score: which runs, which calls, what was lost where."""
    lines: list[str] = []
    w = s.workload
    runs = {r.traj_id: r for r in s.runs}
    traj_by_id = {t.id: t for t in w.trajectories}
    errors = [r for r in s.runs if r.error]
    if errors:
        lines.append("- replay errors: " + "; ".join(f"{r.traj_id}: {r.error}" for r in errors[:5]))

    # ---- over the window
    over = s.over
    if over:
        by_run = collections.defaultdict(list)
        for tid, row in over:
            by_run[tid].append(row)
        lines.append(f"- **calls over {s.window}**: {len(over)} in {len(by_run)} runs.")
        for tid, rows in sorted(by_run.items(), key=lambda kv: -len(kv[1]))[:8]:
            run = runs[tid]
            mans = run.extra.get("manifests", [])
            worst = max(rows, key=lambda r: r.tokens)
            m = mans[worst.index] if worst.index < len(mans) else None
            mdesc = ""
            if m is not None:
                lb = {k: v.used for k, v in m.layer_budgets.items()}
                mdesc = (f"; manifest: tokens_before {m.tokens_before:,}, tokens_after {m.tokens_after:,}, "
                         f"error {m.error!r}, layers used {lb}, "
                         f"events {_counts((e.get('layer'), e.get('action')) for e in m.truncation_events) or 'none'}")
            lines.append(f"  - {tid}: calls {[r.index for r in rows][:12]}{'…' if len(rows) > 12 else ''} of "
                         f"{len(run.rows)}; worst call {worst.index}: {worst.tokens:,} tokens{mdesc}")
        errs = [m for run in s.runs for m in run.extra.get("manifests", []) if m.error]
        if errs:
            lines.append(f"  - fail-open manifests (packing raised, the original request was sent): {len(errs)}; "
                         f"first: {errs[0].error[:300]!r}")

    # ---- edited files
    for at in ("final", "submit"):
        missed = [(tid, f) for tid, f, ok in s.file_checks(at) if not ok]
        if not missed:
            continue
        lines.append(f"- **edited files not named at the {at} call**: {len(missed)} of {len(s.file_checks(at))} "
                     f"({len({t for t, _ in missed})} runs). Per file: the turns that named it in the recording, "
                     f"then how many of those still name it in the session after offload, in a fold line, "
                     f"and the fate of the last mention.")
        stages: collections.Counter = collections.Counter()
        for tid, f in missed:
            run, facts, traj = runs[tid], w.facts[tid], traj_by_id[tid]
            trace = trace_item(f, run, facts, traj)
            stages[trace["stage"]] += 1
            req = run.final if at == "final" else (run.submit or run.final)
            base_name = f.rsplit("/", 1)[-1]
            lines.append(f"  - {tid}: `{f}` — {trace['text']}; basename `{base_name}` in the request: "
                         f"{base_name in (request_text(req) if req else '')}")
        lines.append("  - where they were lost: " + _counts(stages.elements()))
    uris = [u for run in s.runs for line in run.fold_lines.values() for u in _URI.findall(line)]
    if uris and any(not ok for _, _, ok in s.error_checks() + s.file_checks("submit")):
        counter = TokenCounter()
        sizes = [counter.count_text(" · " + u) for u in uris[:2000]]
        lines.append(f"- fold lines are capped at 72 tokens (`fold_turn`); the ` · artifact://…` suffix alone takes a median "
                     f"{pct(sizes, 50):.0f} tokens (max {max(sizes)}) of them, in {len(uris)} fold lines seen, which is why "
                     f"the arguments shrink to 12 characters (`bash(command=\"python repr…\")`) and outcomes to 32.")

    # ---- errors
    checks = s.error_checks()
    missed = [(tid, e) for tid, e, ok in checks if not ok]
    if missed:
        lines.append(f"- **recent errors missing from the final call**: {len(missed)} of {len(checks)} "
                     f"({len({t for t, _ in missed})} runs).")
        stages = collections.Counter()
        for tid, e in missed:
            run, facts, traj = runs[tid], w.facts[tid], traj_by_id[tid]
            text = strip_ansi(request_text(run.final)) if run.final else ""
            trace = trace_item(e, run, facts, traj, outputs_only=True)
            stages[trace["stage"]] += 1
            turn = facts.error_turn.get(e)
            lines.append(f"  - {tid}: `{e[:110]}` — last in the output of turn {turn} of {facts.n_calls} "
                         f"({facts.n_calls - 1 - (turn or 0)} calls before the final one, exit code "
                         f"{exit_code(traj, turn)}); {trace['text']}; its first 40 chars in the final request: "
                         f"{e[:40] in text}")
        lines.append("  - where they were lost: " + _counts(stages.elements()))
        causes = collections.Counter(fold_cause(e, runs[tid], w.facts[tid]) for tid, e in missed)
        lines.append("  - what the fold line of the error's last output said instead: "
                     + _counts(causes.elements()))
        sums = [summary_section(run.final, "Errors") for run in s.runs if run.final is not None]
        if sums:
            lines.append(f"  - the final requests' running-summary `Errors:` sections hold a median "
                         f"{pct([len(x) for x in sums], 50):.0f} entries (max {max(len(x) for x in sums)}); entries "
                         f"clipped with `…`: {sum(1 for x in sums for e in x if '…' in e.split(' (turn')[0])} of "
                         f"{sum(len(x) for x in sums)}")

    # ---- task
    miss_runs = [run for run in s.runs if not all(r.task_present for r in run.rows)]
    if miss_runs:
        n_calls = sum(not r.task_present for run in miss_runs for r in run.rows)
        lines.append(f"- **task statement missing**: {n_calls} calls in {len(miss_runs)} runs.")
        for run in miss_runs[:8]:
            absent = [r for r in run.rows if not r.task_present]
            invs = sorted({r.invocation for r in absent})
            traj = traj_by_id[run.traj_id]
            mans = run.extra.get("manifests", [])
            first = absent[0].index
            flags = mans[first].flags if first < len(mans) else []
            fold0 = run.fold_lines.get(0)
            lines.append(f"  - {run.traj_id}: calls {[r.index for r in absent][:12]} of {len(run.rows)} "
                         f"(invocations {invs} of {len(traj.invocations)}); task ({len(w.facts[run.traj_id].task)} chars): "
                         f"`{w.facts[run.traj_id].task[:110]}`; its line in the pack: "
                         + (f"`{fold0[:140]}`" if fold0 else "none") + f"; manifest flags {flags}")

    # ---- last fifth
    if s.base is not None:
        per = []
        for run in s.runs:
            b = none_run(none, run.traj_id)
            n, k = len(run.rows), max(1, math.ceil(len(run.rows) / 5))
            mine, theirs = mean(r.tokens for r in run.rows[n - k:]), mean(r.tokens for r in b.rows[len(b.rows) - k:])
            per.append((mine / theirs if theirs else math.nan, run.traj_id, mine, theirs))
        per.sort(key=lambda x: -x[0] if not math.isnan(x[0]) else 0)
        over30 = [p for p in per if p[0] > T_LAST_FIFTH]
        lines.append(f"- last fifth: {len(over30)} of {len(per)} runs above {T_LAST_FIFTH:.0%} of no plugin; "
                     f"median per-run ratio {fmt_pct(pct([p[0] for p in per if not math.isnan(p[0])], 50), 1)}; "
                     f"highest: " + ", ".join(f"{tid} {mine:,.0f}/{theirs:,.0f}" for _, tid, mine, theirs in per[:4]))
        heads = [m for run in s.runs for m in run.extra.get("manifests", [])[-1:]]
        if heads:
            lb = collections.defaultdict(list)
            for m in heads:
                for k, v in m.layer_budgets.items():
                    lb[k].append(v.used)
            lines.append("  - final call, median tokens used per layer: "
                         + ", ".join(f"{k} {pct(v, 50):,.0f}" for k, v in lb.items()))
            fixed = [sum(m.layer_budgets[k].used for k in ("system", "task", "tools") if k in m.layer_budgets)
                     for m in heads]
            base_lf = mean(s.base.last_fifth)
            lines.append(f"  - the never-truncated layers (system + task + tools) alone take a median {pct(fixed, 50):,.0f} "
                         f"tokens at the final call = {fmt_pct(pct(fixed, 50) / base_lf, 1)} of the no-plugin last-fifth "
                         f"mean ({fmt_int(base_lf)})")

    # ---- prefix
    low = [(run.traj_id, r) for run in s.runs for r in run.rows if r.prefix_share is not None and r.prefix_share < 0.8]
    if low:
        inv_starts = sum(1 for tid, r in low if r.index > 0 and runs[tid].rows[r.index - 1].invocation != r.invocation)
        lines.append(f"- prefix-stable share below 80 %: {len(low)} of {len(s.prefix)} calls "
                     f"({inv_starts} are the first call of a new invocation).")
        mans = [(tid, r, runs[tid].extra.get("manifests", [])) for tid, r in low]
        reasons = collections.Counter()
        for tid, r, ms in mans:
            m = ms[r.index] if r.index < len(ms) else None
            if m is None:
                continue
            reasons[("reused_payload" if m.reused_payload else "payload rebuilt")
                    + (", " + "/".join(sorted({e.get("action", "?") for e in m.truncation_events})) if m.truncation_events else "")] += 1
        if reasons:
            lines.append("  - their manifests: " + ", ".join(f"{k} ×{v}" for k, v in reasons.most_common(6)))
    return lines


def none_run(none: Score, tid: str) -> RunResult:
    return next(r for r in none.runs if r.traj_id == tid)


_URI = re.compile(r"artifact://\S+")


def fold_cause(error: str, run: RunResult, facts: Facts) -> str:
    """Why the fold line of an error's last output does not carry it."""
    turn = facts.error_turn.get(error)
    line = run.fold_lines.get(facts.turn_message[turn]) if turn is not None else None
    if line is None:
        return "no fold line seen for that turn"
    if error in line:
        return "named in the fold line (lost later, in the summary)"
    if 'artifact_uri="' in line:
        return "offloaded output folded as JSON `ok: artifact_uri=…` (exit code and error lost)"
    if re.search(r"→ exit 0\b", line):
        return "exit code 0: outcome = first output line, error ignored"
    if re.search(r"→ exit -?[1-9]\d*: ", line):
        return "exit ≠ 0: error line clipped to ~25 characters or another line picked"
    return "other outcome text"


def exit_code(traj: Trajectory, turn: Optional[int]) -> str:
    if turn is None:
        return "?"
    for c in traj.turns[turn].calls:
        m = re.search(r"<returncode>(-?\d+)</returncode>", json.dumps(c.output))
        if m:
            return m.group(1)
    return "n/a"


def summary_section(req: Optional[ModelRequest], name: str) -> list[str]:
    """Entries of one section (`Errors`, `Files`, ...) of the running summary in a packed request."""
    if req is None:
        return []
    for m in req.messages:
        for p in m.parts:
            if isinstance(p, TextPart) and PAYLOAD_HEADER in p.text:
                m2 = re.search(rf"^{name}:\n((?:- .*\n?)*)", p.text, re.M)
                return [ln[2:] for ln in m2.group(1).splitlines()] if m2 else []
    return []


def trace_item(item: str, run: RunResult, facts: Facts, traj: Trajectory, *, outputs_only: bool = False) -> dict[str, str]:
    """Follow one item (a file name, an error line) through aether-context's stages for one run.

    Recording: the turns whose model text, call args or tool output hold it (`outputs_only`: outputs).
    Offload: of those turns, the ones whose session form still holds it (model text/args are never
    offloaded; a tool output may have been replaced by its compact form). Fold: the ones whose fold or
    summary line (as last seen in any request of the run) holds it. The stage is where it was lost.
    """
    responses = run.extra.get("session_responses", [])
    turns = []
    survived = []
    for i, turn in enumerate(traj.turns[:-1]):
        own = "" if outputs_only else turn.text + json.dumps([c.args for c in turn.calls], ensure_ascii=False)
        outputs = [strip_ansi(t) for c in turn.calls for t in string_leaves(c.output)]
        if item not in own and not any(item in o for o in outputs):
            continue
        turns.append(i)
        k = facts.turn_first_call[i]
        session = [strip_ansi(t) for r in responses[k:k + len(turn.calls)] for t in string_leaves(r)]
        if item in own or any(item in t for t in session):
            survived.append(i)
    folded = [i for i in turns if item in run.fold_lines.get(facts.turn_message[i], "")]
    partial = [i for i in turns if i not in folded and item[:40] in run.fold_lines.get(facts.turn_message[i], "")]
    if not turns:
        stage = "never in the recording"
    elif not survived:
        stage = "offload (compact form dropped it)"
    elif not folded and not partial:
        stage = "fold (no fold line named it)"
    elif not folded:
        stage = "fold (fold line clipped it)"
    else:
        stage = "summary (fold line named it, later merged out)"
    last = turns[-1] if turns else None
    last_desc = ""
    if last is not None:
        k = facts.turn_first_call[last]
        forms = responses[k:k + len(traj.turns[last].calls)]
        offloaded = any("original_tokens" in r for r in forms)
        holds = any(item in strip_ansi(t) for r in forms for t in string_leaves(r))
        fold = run.fold_lines.get(facts.turn_message[last])
        last_desc = (f"; last mention turn {last} ([turn {facts.turn_message[last]}]): output "
                     f"{'offloaded to a compact form' if offloaded else 'kept as is'} (holds it: {holds}), fold line "
                     + (f"`{fold[:150]}`" if fold else "never seen"))
    text = (f"in the recording at turns {turns[-6:]}{'…' if len(turns) > 6 else ''} ({len(turns)}); after offload "
            f"{len(survived)}; named in fold lines {len(folded)} (clipped {len(partial)}){last_desc}")
    return {"stage": stage, "text": text}


# --------------------------------------------------------------------------- main
def library_version() -> str:
    """The aether-context code measured: git commit, plus the files of aether_context/ changed since it."""
    import subprocess

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    head = git("log", "-1", "--format=%h %cd %s", "--date=format:%Y-%m-%d %H:%M") or "unknown"
    dirty = [ln[3:] for ln in git("status", "--porcelain", "--", "aether_context").splitlines() if ln.strip()]
    return f"commit `{head[:110]}`" + (f", with uncommitted changes in {', '.join(dirty)}" if dirty else "")


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help="shared datasets folder (default: %(default)s, from the repo root)")
    ap.add_argument("--quick", action="store_true", help="a subset: 10 mini-swe-agent runs + 20 tau-bench episodes")
    ap.add_argument("--limit", type=int, default=None, help="at most this many runs of each dataset")
    ap.add_argument("--windows", default="8000,32000", help="window sizes, comma-separated (default: %(default)s)")
    ap.add_argument("--systems", default=None, help="system keys, comma-separated (default: all); 'none' is always run")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                    help="add an aether-context system with a profile override, e.g. 'no-offload={\"offload\": {\"enabled\": false}}'")
    ap.add_argument("--datasets", default="mini-swe,tau", help="mini-swe, tau or both (default: %(default)s)")
    ap.add_argument("--deadline", type=float, default=None, help="seconds allowed per replay (default: none)")
    ap.add_argument("--out", default=DEFAULT_FILE,
                    help="benchmarks file whose 'trajectories' section gets the report, relative to the repo root")
    ap.add_argument("--diagnosis-out", default="docs/benchmarks_trajectories_diagnosis.md",
                    help="the per-miss diagnosis (long), written whole, relative to the repo root")
    ap.add_argument("--no-write", action="store_true", help="print only; write neither file")
    return ap.parse_args(argv)


def evenly(items: list[Any], n: int) -> list[Any]:
    if n >= len(items):
        return items
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)] if n > 1 else items[:1]


def build_workloads(args: argparse.Namespace) -> list[Workload]:
    data = Path(args.data)
    wanted = {d.strip() for d in args.datasets.split(",")}
    out = []
    if "mini-swe" in wanted:
        runs = load_mini_swe(data)
        runs = evenly(runs, 10) if args.quick else runs
        runs = runs[: args.limit] if args.limit else runs
        out.append(Workload("mini-swe", "mini-swe-agent", "mini-swe-agent (SWE-bench Verified, Gemini 3 Pro)", runs,
                            {t.id: trajectory_facts(t) for t in runs}))
    if "tau" in wanted:
        eps = load_tau_airline(data)
        eps = evenly(eps, 20) if args.quick else eps
        eps = eps[: args.limit] if args.limit else eps
        out.append(Workload("tau", "tau-bench-airline", "tau-bench airline (gpt-4o)", eps,
                            {t.id: trajectory_facts(t) for t in eps}))
    return out


def select_systems(args: argparse.Namespace) -> list[System]:
    systems = list(SYSTEMS)
    for spec in args.variant:
        name, _, js = spec.partition("=")
        systems.append(aether_system(f"aether:{name}", f"aether-context [{name}]", overrides=json.loads(js)))
    if args.systems:
        keep = {k.strip() for k in args.systems.split(",")} | {"none"}
        systems = [s for s in systems if s.key in keep or s.key.startswith("aether:")]
    return systems


async def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    t_start = time.perf_counter()
    info = machine()
    version = library_version()
    os.chdir(ROOT)
    windows = [int(x) for x in args.windows.split(",") if x.strip()]
    workloads = build_workloads(args)
    systems = select_systems(args)
    counter = TokenCounter()
    print(f"# trajectory replay — {info}", flush=True)
    for w in workloads:
        print(f"{w.title}: {len(w.trajectories)} runs, {sum(t.model_calls for t in w.trajectories)} model calls", flush=True)

    results: dict[tuple[str, str, Optional[int]], list[RunResult]] = {}
    walls: dict[tuple[str, str, Optional[int]], float] = {}
    with tempfile.TemporaryDirectory(prefix="aether-traj-") as tmp:
        env = Env(Path(tmp))
        for w in workloads:
            for system in systems:
                for window in (windows if system.windowed else [None]):
                    t0 = time.perf_counter()
                    results[(w.name, system.key, window)] = await run_system(system, w, window, env, counter, args.deadline)
                    walls[(w.name, system.key, window)] = time.perf_counter() - t0
                    print(f"  {w.name} / {system.label}" + (f" @ {window}" if window else "")
                          + f": {walls[(w.name, system.key, window)]:.0f} s", flush=True)
        for p in env.packers.values():
            p.store.flush()

    # ---- scores
    sections: list[str] = []
    checks_out: list[str] = []
    diag_out: list[str] = []
    settings_out: list[str] = []
    scored: list[tuple[Workload, int, list[Score]]] = []
    for w in workloads:
        for window in windows:
            base = Score(SYSTEMS[0], w, window, results[(w.name, "none", None)])
            base.base = base
            scores = []
            for system in systems:
                runs = results[(w.name, system.key, window if system.windowed else None)]
                scores.append(base if system.key == "none" else Score(system, w, window, runs, base))
            sections.append(f"### {w.title}, W = {window:,}\n\n{table(scores)}")
            scored.append((w, window, scores))
            for s in scores:
                if s.system.targets:
                    checks = targets(s)
                    if window == TARGET_WINDOW:
                        checks_out.append(f"**{s.system.label}, {w.title}, W = {window:,}**")
                        checks_out += [f"- {'PASS' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in checks]
                    if window == TARGET_WINDOW or any(not c.ok for c in checks[:1]):
                        d = diagnose(s, base)
                        if d:
                            diag_out.append(f"**{s.system.label}, {w.title}, W = {window:,}**")
                            diag_out += d
                if s.over and not s.system.packs:
                    big = [r.max_message for _, r in s.over]
                    sections[-1] += (f"\n\n{s.system.label}: {len(s.over)} calls > W in {len({t for t, _ in s.over})} runs; "
                                     f"the largest single message of those requests: median {pct(big, 50):,.0f} tokens, "
                                     f"{sum(b > window for b in big)} of them alone exceed W.")
                extra = [r.extra.get("compactions") for r in s.runs if "compactions" in r.extra]
                if extra:
                    sections[-1] += (f"\n\n{s.system.label}: {sum(extra)} compaction events in "
                                     f"{sum(1 for x in extra if x)} of {len(extra)} runs.")
        for system in systems:
            for window in (windows if system.windowed else [None]):
                settings_out.append(f"- {w.name} / {system.label}: `{system.describe(w, window or windows[0])}`"
                                    + ("" if system.windowed else " (window-independent: run once)"))
    total = time.perf_counter() - t_start
    argv_list = list(argv) if argv is not None else sys.argv[1:]
    command = "bench/trajectory_replay.py " + " ".join(shlex.quote(a) for a in argv_list)
    wall_lines = [f"{k[0]} / {k[1]}{' @ ' + str(k[2]) if k[2] else ''} {v:.0f} s" for k, v in walls.items()]
    out, diag_path = ROOT / args.out, ROOT / args.diagnosis_out
    diagnosis = "\n".join(diag_out) or "(nothing missed)"
    loop_tables = agent_loop_tables(scored)
    date = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    report = REPORT.format(
        date=date, command=command.strip(), machine=info,
        version=version,
        runtime=total, n_runs=", ".join(f"{len(w.trajectories)} {w.title}" for w in workloads),
        windows=", ".join(f"{x:,}" for x in windows), settings="\n".join(settings_out),
        tables="\n\n".join(sections), checks="\n".join(checks_out) or "(no aether-context run at 8K)",
        diagnosis_link=os.path.relpath(diag_path, out.parent), walls="; ".join(wall_lines),
        cache_table=loop_tables["cache"], recitation_table=loop_tables["recitation"],
        evidence_table=loop_tables["evidence"], relevant=RELEVANT_CALLS, evidence_chars=EVIDENCE_CHARS,
        filter_keep=FILTER_KEEP, threshold=COMPACT_THRESHOLD, retention=COMPACT_RETENTION,
        task_chars=TASK_CHARS, error_chars=ERROR_CHARS,
    )
    diagnosis_doc = DIAGNOSIS.format(date=date, command=command.strip(), report=os.path.relpath(out, diag_path.parent),
                                     diagnosis=diagnosis)
    print(report)
    print(diagnosis_doc)
    if not args.no_write:
        write_section(out, "trajectories", report)
        diag_path.parent.mkdir(parents=True, exist_ok=True)
        diag_path.write_text(diagnosis_doc, encoding="utf-8")
        print(f"wrote the 'trajectories' section of {out} and {diag_path}")
    return 0


REPORT = """\
# Benchmark: trajectory replay — ADK context features vs aether-context

Date: {date}. Command (from the repository root): `.venv/bin/python {command}`.
Machine: {machine}. Runtime {runtime:.0f} s (per system: {walls}).
aether-context measured: {version} (read when the run started).

**Setup.** {n_runs}, replayed through an unmodified ADK 2.13 `Runner` by `bench/trajectories.py`: a scripted
`BaseLlm` returns the recorded assistant turns (so every system replays the same session; the model does not react to
what it is sent) and recorded tools return the recorded outputs. The model reports each request's token count as
`usage_metadata.prompt_token_count` (what ADK's token-threshold compaction reads). Windows W: {windows}.
A mini-swe-agent run is ONE invocation (one task message, then the whole tool loop); a tau-bench episode starts an
invocation per user message.

Systems:
{settings}

- ADK `ContextFilterPlugin` keeps the last {filter_keep} *invocations*: inside one invocation (every mini-swe-agent run)
  it does nothing, by design; on tau-bench it drops whole early invocations, including the first user message.
- ADK `EventsCompactionConfig`: token-threshold compaction before a request when the last reported prompt tokens
  reach {threshold:.0%} of W, keeping the last {retention} raw events; the summarizer is `ExtractiveEventsSummarizer`
  (this file): user text's first 400 characters verbatim, the first line (160 characters) of every other event part,
  the previous summary carried over, at most 60 entries. No model is called.
- ¹ window-independent systems run once; their rows are the same run scored against each W.
- "aether-context, no cache discipline" is the same plugin and profile with `cache: {{stable_prefix: false}}`: every
  call is packed from scratch. It is there for the comparison in "Agent loop" below, not checked against the targets.

**Metrics** (on the request the model received, after every plugin; identical code for every system):
- tokens: `aether_context.tokens.TokenCounter` (cl100k) over `request_from_llm(request)` with `request_tokens`
  (system instruction + tool declarations + messages). "last fifth": the last ⌈n/5⌉ calls of each run, pooled.
  "(vs none)": share of the no-plugin value.
- calls > W: requests whose token count exceeds W.
- prefix-stable share: per call with a previous call in the same run, the tokens of the previous request that are an
  identical prefix of this one (system instruction + tools as one block, then messages in order compared by the
  canonical-JSON digest of `request_from_llm(r).messages[i]`) over the previous request's tokens; median over calls.
- retention, on the full text of the request (system instruction, tool declarations, every text part, function-call
  args and function responses as raw strings and as JSON):
  (a) files of the run's final diff (`diff --git a/X b/X` in `info.submission`, mini-swe-agent only) named (substring)
  in the final call's request. Note: in these recordings the last tool output before the final call IS that diff
  (`echo {{SUBMIT}} && git diff --cached`), so the column "… at the submit call" also scores the request of the call
  that issued the submit command (before the diff exists), which tests whether the files stayed referenced;
  (b) the last 5 distinct error lines of the run's tool outputs before the final call — Python traceback last lines
  `XxxError: …` / `XxxException: …` (after `Traceback (most recent call last)` or a `File "…", line N` frame in the
  same output, or pytest's `E   ` lines) and lines starting `Error:` — first {error_chars} characters present verbatim (ANSI colours removed) in the
  final call's request;
  (c) the task statement (mini-swe-agent: the first user message; tau-bench: the episode's first user message) counts
  as present at a call when its first {task_chars} characters appear verbatim in that request.
- timing (shared machine: medians): wall seconds per run; all plugins' before_model time per call.

## Results

{tables}

## Agent loop: cache discipline, recitation, failure evidence

Measured on the aether-context systems, on the same requests as above. "dataset" is the workload (mini-swe:
mini-swe-agent, tau: tau-bench airline).

**Cache discipline.** Prefix-stable share as in the tables above (median, then mean, over calls with a previous call).
Cache breaks come from the manifests the plugin recorded for each call (`ContextPacker.recent`): a call whose
`manifest.cache_break` is set, i.e. whose request is not the previous request plus appended messages (the system
instruction, the tools or an earlier message changed). Counted per run; the first call of a new invocation (its
manifest's `invocation_id` differs from the previous call's) is left out in the first count, since the user's new
message opens a new payload by design, and included in the second. Re-processed tokens: the break's `tokens` (the
previous request's tokens after the common prefix), summed per run, new invocations left out.

{cache_table}

**Recitation overhead.** Tokens (`TokenCounter.count_message`, with the per-message overhead) of the closing STATUS
message: the request's last message when it is a user message whose text starts with "STATUS". Per reciting call, over
all calls, and that per-call mean over the mean prompt tokens per call.

{recitation_table}

**Failure-evidence recall.** Each recorded tool output holding a Python traceback (`Traceback (most recent call
last)`) contributes its decisive exception line: the last exception line after the last traceback header, found by
the error-line extraction of "last-5 errors" (pytest's `E ` dropped, `Error:` lines not counted). It is relevant to the
next {relevant} model calls after that output (fewer at the end of a run). Recall = share of (traceback, relevant call)
pairs whose exception line's first {evidence_chars} characters appear in that call's FAILURES SO FAR section: in the
user message starting "CONTEXT PACK", from the line starting "FAILURES SO FAR" to the next section header line
(`ACCEPTANCE:`, `USER REQUEST (VERBATIM):`). "at the very next call": the pairs one call after the output. The last
column also accepts the closing STATUS message (its "last errors"). "not read": traceback outputs whose last traceback
ends in an exception the extraction does not recognise (a class not named `…Error`/`…Exception`, e.g. Django's
`ImproperlyConfigured`); they are not scored. tau-bench tools report errors as `Error: …` lines, not tracebacks, so it
has no pairs.

{evidence_table}

## Targets (aether-context at W = 8,000)

{checks}

## Diagnosis of the misses

Per miss, the evidence from the replay (which runs, which calls, where the item was lost): [{diagnosis_link}]({diagnosis_link}).
""".replace("{{SUBMIT}}", SUBMIT_MARK)

DIAGNOSIS = """# Trajectory replay: diagnosis of the misses (evidence from the replay)

Written by the run of {date} (`.venv/bin/python {command}`) whose figures are in the "trajectories" section of
[{report}]({report}); the targets are listed there. One block per aether-context system, dataset and window checked.

{diagnosis}
"""


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
