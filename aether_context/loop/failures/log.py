"""The failure log: a bounded, JSON-serialisable record of failed tool calls, and the patterns in it.

Why: agents in long sessions retry the same broken action, chase a cascade of errors that share one
root cause, or keep hitting the same class of problem. `FailureLog.analyze` finds repeats, systemic
tool+category failures, cascades and clusters, so the pack can warn before the next attempt.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from .categorize import Category, categorize_failure
from .detect import assertion_details, digest_args, evidence_lines, first_error_line, mentioned_file

__all__ = ["WarningKind", "FailureRecord", "FailureWarning", "FailureAnalysis", "FailureSettings", "FailureLog"]

logger = logging.getLogger(__name__)

WarningKind = Literal["repeat", "systemic", "cascade", "cluster"]
_KIND_ORDER = {"repeat": 0, "systemic": 1, "cascade": 2, "cluster": 3}


@dataclass(frozen=True)
class FailureRecord:
    """One failed tool call, reduced to what helps the next model call avoid it."""

    turn: int
    tool: str
    args_digest: str
    category: Category
    message: str
    file: str | None = None
    uri: str | None = None
    timestamp: float | None = None
    causes: tuple[str, ...] = ()  # the output's other failure lines (chained causes, other tests, counts), nearest last
    details: tuple[str, ...] = ()  # the assertion details under the message (pytest's `E` lines), as printed

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["causes"] = list(self.causes)
        data["details"] = list(self.details)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FailureRecord":
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["causes"] = tuple(values.get("causes") or ())
        values["details"] = tuple(values.get("details") or ())
        return cls(**values)


@dataclass(frozen=True)
class FailureWarning:
    """A pattern across failures worth telling the model about (rendered first)."""

    kind: WarningKind
    message: str
    count: int
    turns: tuple[int, ...]
    tool: str | None = None
    category: Category | None = None
    file: str | None = None


@dataclass(frozen=True)
class FailureAnalysis:
    """The warnings for one model call; `evicted` counts failures dropped from the bounded log."""

    current_turn: int
    total_failures: int
    evicted: int
    warnings: tuple[FailureWarning, ...] = ()


class FailureSettings(BaseModel):
    """Thresholds for failure tracking; defaults follow what helps agents in practice."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_records: int = Field(50, ge=1, description="Failures kept; the oldest are evicted (and counted).")
    repeat_threshold: int = Field(3, ge=2, description="Warn when the same tool + arguments failed this often.")
    cluster_threshold: int = Field(5, ge=2, description="Warn when this many recent failures share a category.")
    cluster_window: int = Field(10, ge=2, description="How many most recent failures a cluster is looked for in.")
    cascade_window_turns: int = Field(2, ge=0, description="Max turn gap between links of a cascade.")
    cascade_min_downstream: int = Field(2, ge=1, description="Failures after the root needed to call it a cascade.")
    systemic_threshold: int = Field(3, ge=2, description="Distinct turns in which one tool + category must fail.")
    stale_after_turns: int = Field(20, ge=1, description="Patterns whose last failure is older than this are dropped.")
    message_max_chars: int = Field(2_000, ge=20, description="Error lines are kept whole, as printed; only a line "
                                                             "longer than this (a dumped value) is cut.")
    max_causes: int = Field(2, ge=0, description="Other failure lines of the same output kept with a failure (the "
                                                 "chained cause, other failing tests, the final counts), nearest last.")


class FailureLog:
    """Bounded, JSON-serialisable log of failures (oldest evicted first, evictions counted)."""

    def __init__(self, settings: FailureSettings | None = None, records: Sequence[FailureRecord] = (),
                 evicted: int = 0):
        self.settings = settings or FailureSettings()
        self._records: deque[FailureRecord] = deque()
        self.evicted = evicted
        for record in records:
            self.add_record(record)

    @property
    def records(self) -> tuple[FailureRecord, ...]:
        return tuple(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def add_record(self, record: FailureRecord) -> FailureRecord:
        self._records.append(record)
        while len(self._records) > self.settings.max_records:
            dropped = self._records.popleft()
            self.evicted += 1
            logger.debug("failure log full: evicted turn %d %s", dropped.turn, dropped.tool)
        return record

    def add(self, *, turn: int, tool: str, args: Mapping[str, Any] | None, error_text: str,
            uri: str | None = None, timestamp: float | None = None, category: Category | None = None) -> FailureRecord:
        """Record a failure from its raw error text; categorises it unless `category` is given."""
        message = first_error_line(error_text, self.settings.message_max_chars)
        details = assertion_details(error_text, self.settings.message_max_chars)
        causes = [ln for ln in evidence_lines(error_text, self.settings.message_max_chars)
                  if ln != message and ln not in details]
        record = FailureRecord(
            turn=turn, tool=tool, args_digest=digest_args(args),
            category=category or categorize_failure(error_text, tool), message=message,
            file=mentioned_file(error_text, args), uri=uri, timestamp=timestamp,
            causes=tuple(causes[-self.settings.max_causes:]) if self.settings.max_causes else (),
            details=tuple(details),
        )
        logger.debug("failure at turn %d: %s [%s] %s", turn, tool, record.category, record.message)
        return self.add_record(record)

    def analyze(self, current_turn: int) -> FailureAnalysis:
        """Repeats, systemic tool+category failures, cascades and category clusters that are still live."""
        return FailureAnalysis(current_turn=current_turn, total_failures=len(self._records) + self.evicted,
                               evicted=self.evicted,
                               warnings=_analyze(self.records, current_turn, self.settings))

    def to_json(self) -> dict[str, Any]:
        return {"settings": self.settings.model_dump(), "evicted": self.evicted,
                "records": [r.to_json() for r in self._records]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FailureLog":
        return cls(FailureSettings(**data.get("settings", {})),
                   [FailureRecord.from_json(r) for r in data.get("records", [])], int(data.get("evicted", 0)))


# --- analysis -----------------------------------------------------------------------------------------

def _analyze(records: tuple[FailureRecord, ...], current_turn: int, s: FailureSettings) -> tuple[FailureWarning, ...]:
    live = current_turn - s.stale_after_turns
    warnings: list[FailureWarning] = []

    actions: dict[tuple[str, str], list[FailureRecord]] = {}
    for r in records:
        actions.setdefault((r.tool, r.args_digest), []).append(r)
    for (tool, _digest), rs in actions.items():
        if len(rs) >= s.repeat_threshold and rs[-1].turn >= live:
            last = rs[-1]
            warnings.append(FailureWarning(
                "repeat", f"{tool} failed {len(rs)}x with the same arguments ({last.category}: {last.message}) "
                          "— do not retry it unchanged", len(rs), tuple(r.turn for r in rs), tool, last.category,
                last.file))

    systemic: dict[tuple[str, str], list[FailureRecord]] = {}
    for r in records:
        systemic.setdefault((r.tool, r.category), []).append(r)
    for (tool, category), rs in systemic.items():
        turns = sorted({r.turn for r in rs})
        if len(turns) >= s.systemic_threshold and len({r.args_digest for r in rs}) > 1 and turns[-1] >= live:
            warnings.append(FailureWarning(
                "systemic", f"{tool} keeps failing with {category} errors across {len(turns)} turns "
                            "— the approach, not the arguments, is the problem", len(rs), tuple(turns), tool,
                category))  # type: ignore[arg-type]

    warnings.extend(_cascades(records, live, s))

    recent = records[-s.cluster_window:]
    for category, count in sorted(Counter(r.category for r in recent).items()):
        if count >= s.cluster_threshold and category != "unknown":
            rs = [r for r in recent if r.category == category]
            if rs[-1].turn >= live:
                warnings.append(FailureWarning(
                    "cluster", f"{count} of the last {len(recent)} failures are {category} errors",
                    count, tuple(r.turn for r in rs), category=category))  # type: ignore[arg-type]

    warnings.sort(key=lambda w: (_KIND_ORDER[w.kind], -max(w.turns), w.tool or "", w.category or "", w.message))
    return tuple(warnings)


def _cascades(records: tuple[FailureRecord, ...], live: int, s: FailureSettings) -> list[FailureWarning]:
    """Chains of failures close in turns that share the root's category or a file with the chain."""
    ordered = sorted(range(len(records)), key=lambda i: (records[i].turn, i))
    used: set[int] = set()
    found: list[FailureWarning] = []
    for pos, root_i in enumerate(ordered):
        if root_i in used:
            continue
        root = records[root_i]
        chain = [root_i]
        files = {root.file} - {None}
        for j in ordered[pos + 1:]:
            r = records[j]
            if j in used:
                continue
            if r.turn - records[chain[-1]].turn > s.cascade_window_turns:
                break
            if r.category == root.category or (r.file is not None and r.file in files):
                chain.append(j)
                if r.file:
                    files.add(r.file)
        members = [records[i] for i in chain]
        single_action = len({(m.tool, m.args_digest) for m in members}) == 1  # that is a repeat, not a cascade
        if len(chain) - 1 >= s.cascade_min_downstream and not single_action and members[-1].turn >= live:
            used.update(chain)
            where = f" around {root.file}" if root.file else ""
            found.append(FailureWarning(
                "cascade", f"{len(chain)} related failures{where} since turn {root.turn}; root cause: "
                           f"{root.tool} [{root.category}] {root.message} — fix that first",
                len(chain), tuple(m.turn for m in members), root.tool, root.category, root.file))
    return found
