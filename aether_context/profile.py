"""Budget profiles: how a window is split between layers, validated when loaded.

A profile is YAML (built-in ones ship in `aether_context/profiles/`). Floors reserve fixed shares
of the window for System, Task, Tools and Slack; the remainder is split between Evidence, Memory
and Conversation by weights of the form `base + Σ coefficient · signal`.

Usage::

    profile = load_profile("research")            # a built-in name
    profile = load_profile("profiles/mine.yaml")  # or a path
    profile = profile.override(window_tokens=32_000)
"""

from __future__ import annotations

import math
import reprlib
import types as pytypes
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ProfileError
from .loop.failures import FailureSettings
from .loop.recitation import RecitationSettings
from .redact import RedactionSettings
from .retrieval import RetrievalSettings

__all__ = [
    "BudgetProfile", "Floors", "EvidenceWeights", "MemoryWeights", "ConversationWeights", "Weights",
    "TaskSettings", "CacheSettings", "ConversationSettings", "SelectionSettings", "MemorySelection", "OffloadSettings", "PruningSettings", "DecaySettings",
    "RecoverySettings", "FailureEvidenceSettings", "VariationSettings", "RedactionSettings", "ToolSettings",
    "PressureSettings", "AcceptanceSettings", "load_profile",
    "builtin_profiles", "MIN_REMAINDER", "MAX_SLACK",
]

MIN_REMAINDER = 0.2  # floors must leave at least this share of the window to evidence, memory and conversation
MAX_SLACK = 0.5  # the output reserve never takes more than half the window
MAX_ALIASES = 100  # YAML aliases in one profile: enough for sharing, too few for an alias bomb
MAX_ERROR_CHARS = 4000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Floors(_Strict):
    """Fractions of the window. Slack is set aside; System, Task and Tools take what they measure, their floors
    only set the nominal split of the rest and the `BudgetError` check."""

    system: float = Field(0.06, ge=0, le=1, description="Stable prefix: system instruction and pack contract.")
    task: float = Field(0.06, ge=0, le=1, description="Goal, step, acceptance checklist, constraints, user request.")
    tools: float = Field(0.04, ge=0, le=1, description="Declarations of the step's tools.")
    slack: float = Field(0.12, ge=0, le=MAX_SLACK, description="Output reserve; never sent as text, never lent out.")


class EvidenceWeights(_Strict):
    """Evidence weight = base + coefficients · signals."""

    base: float = Field(0.40, ge=0)
    checklist_evidence_ratio: float = Field(0.10, description="Per unit of the share of checklist items needing evidence (0..1).")
    expected_tool_calls: float = Field(0.01, description="Per tool call the step expects.")
    risk_weight: float = Field(0.05, description="Per unit of the step's risk (0..1).")


class MemoryWeights(_Strict):
    """Memory weight = base + coefficients · signals."""

    base: float = Field(0.20, ge=0)
    retrieval_hit_rate: float = Field(0.05, description="Per unit of the share of memory candidates that matched (0..1).")
    similarity: float = Field(0.05, description="Per unit of the mean query similarity of the best hits (0..1).")
    freshness: float = Field(0.02, description="Per unit of freshness of the hits (1 = now, 0 = old).")


class ConversationWeights(_Strict):
    """Conversation weight = base + coefficients · signals."""

    base: float = Field(0.40, ge=0)
    unresolved_questions: float = Field(0.02, description="Per open question in the recent turns.")
    dialogue_depth: float = Field(0.002, description="Per turn sent verbatim (compacted turns are not counted).")


class Weights(_Strict):
    evidence: EvidenceWeights = EvidenceWeights()
    memory: MemoryWeights = MemoryWeights()
    conversation: ConversationWeights = ConversationWeights()


class ConversationSettings(_Strict):
    """How history is kept: verbatim while the request fits; one compaction under pressure."""

    tail_turns: int = Field(6, ge=1, description=(
        "The minimum verbatim tail: a compaction keeps at least this many newest turns (a message, or a call with "
        "its responses) while they leave room, beside the block, for `growth_turns` more. A floor, not a cap."))
    growth_turns: int = Field(2, ge=0, description=(
        "Turns of room the minimum tail leaves after a compaction; each compaction re-processes the tail, so "
        "a larger value makes compactions rarer in long tool loops."))
    compact_to: float = Field(0.5, gt=0, le=1, description=(
        "When the conversation outgrows its room, compact it in one step down to this share of that room, so "
        "the following calls (and invocations) append without rewriting the prefix (cache stability)."))
    growth_share: float = Field(0.25, ge=0, lt=1, description=(
        "Share of the flexible room Evidence and Memory leave free at an invocation's start, so the turns it "
        "appends (answers, tool calls) fit without a new compaction; none when the step declares no tools."))
    headroom_turns: int = Field(0, ge=0, description=(
        "After a compaction, compact again once fewer than this many turns as large as the largest verbatim one fit in "
        "the room: a tool loop's requests then settle lower between compactions. 0: only when over the room."))
    max_turn_tokens: int = Field(4000, ge=64, description="A single kept turn above this is cut middle-out (a truncation event).")
    max_verbatim_turns: int | None = Field(None, ge=1, description=(
        "At most this many turns verbatim (tail + this invocation's tool turns); None: as many as fit."))


class TaskSettings(_Strict):
    """The Task layer: what stands in for the goal when the app never sets one."""

    pin_opening_request: bool = Field(True, description=(
        "With no goal in state, keep the session's first user message in the Task layer once it has left "
        "the verbatim history, so the task is never folded away."))
    opening_max_tokens: int = Field(1500, ge=16, description="The pinned opening request is cut middle-out to this.")
    opening_max_share: float = Field(0.15, gt=0, le=1, description="... and to this share of the window.")


class CacheSettings(_Strict):
    """Cache discipline: later calls of an invocation append to the earlier request."""

    stable_prefix: bool = Field(True, description=(
        "Freeze the Pack Payload and folding point within an invocation (rebuild only when the grown "
        "request no longer fits). Off: every call is packed from scratch (for comparison only)."))


class SelectionSettings(_Strict):
    """Top-k limits for the retrieved layers; the token budget still applies."""

    top_k: int | None = Field(None, ge=1, description=(
        "Optional cap on the number of items; by default the layer's budget alone decides, filled by score."))
    item_max_tokens: int = Field(300, ge=16, description="An item's summary is cut to this many tokens.")


class MemorySelection(SelectionSettings):
    """Memory's limits: its lines are shorter than Evidence's by default (as `default.yaml` says)."""

    item_max_tokens: int = Field(200, ge=16, description="An item's summary is cut to this many tokens.")


class OffloadSettings(_Strict):
    """Tool results are saved whole to the artifact store when they return; big ones are replaced
    in the session by a compact form plus their `artifact://` URI."""

    enabled: bool = Field(True, description="Save tool results and compact the large ones.")
    save_min_tokens: int = Field(200, ge=0, description="Results at least this big are saved, so later folds can cite them.")
    threshold_tokens: int = Field(1500, ge=16, description="Results above this are replaced by their compact form.")
    min_threshold_tokens: int = Field(300, ge=16, description="The threshold never tightens below this.")
    budget_share: float = Field(0.25, gt=0, le=1, description=(
        "The threshold tightens to this share of the conversation budget still free after the last call."))
    compact_max_tokens: int = Field(400, ge=32, description="Size cap of the compact form.")


class PruningSettings(_Strict):
    """Old tool outputs beyond a protected recent amount are cleared to a placeholder with their URI."""

    enabled: bool = Field(True, description="Clear old tool outputs when it reclaims enough.")
    protect_tokens: int = Field(40_000, ge=0, description="The most recent tool output tokens that are never cleared.")
    minimum_tokens: int = Field(20_000, ge=0, description="Only clear when this many tokens are reclaimed at once.")


class DecaySettings(_Strict):
    """Progressive history decay: full (verbatim) → fold (one line per turn) → summary (one running summary)."""

    fold_max_tokens: int = Field(800, ge=0, description="Cap of the fold zone; older fold lines move into the summary.")
    summary_max_tokens: int = Field(500, ge=0, description="Hard cap of the running summary.")
    values_max_tokens: int = Field(800, ge=0, description=(
        "Cap of KNOWN VALUES in the compaction block: ids and values the compacted turns carried."))
    image_keep_turns: int = Field(2, ge=0, description="Inline images older than this many turns become a one-line description + URI.")
    summarizer: Literal["extractive", "llm"] = Field("extractive", description=(
        "extractive: deterministic, no model; llm: the plugin's summarizer model with a handoff prompt."))
    summary_timeout_seconds: float = Field(30.0, gt=0, le=3600, description=(
        "Most seconds an LLM summary may take after a model call; past it the extractive summary stays "
        "(flag summary_timeout in the next manifest) and the run goes on."))


class RecoverySettings(_Strict):
    """What to do when the model rejects a request as too long: repack hard and retry once."""

    enabled: bool = Field(True, description="Retry once with an aggressive repack.")
    keep_tool_results: int = Field(3, ge=1, description="Recent tool results kept verbatim in the retry.")
    max_result_tokens: int = Field(1000, ge=64, description="Each kept tool result is cut to this.")
    window_factor: float = Field(0.7, gt=0, le=1, description="The retry packs for this share of the limit the model reported.")


class FailureEvidenceSettings(_Strict):
    """The FAILURES SO FAR section: tool failures of the session, categorised and analysed."""

    enabled: bool = Field(True, description="Record tool failures and show the section.")
    max_tokens: int = Field(400, ge=32, description="Hard cap of the section (part of the never-truncated Task layer).")
    errors_as_results: bool = Field(False, description=(
        "A tool that raises answers the model with {'error': ...} and the run goes on (the failure is recorded). "
        "Off: ADK's behaviour, the exception ends the run (and the record with it)."))
    log: FailureSettings = Field(default_factory=FailureSettings, description="Bound, repeat/cluster/cascade thresholds.")


class VariationSettings(_Strict):
    """Opt-in structural variation of the dynamic sections, and compact JSON for tool results."""

    enabled: bool = Field(False, description="Vary formatting of the recitation block (never the cached prefix).")
    seed: int = Field(0, description="Seed: the same seed and call give the same format.")
    compact_json: bool = Field(False, description="Re-serialise JSON tool results in their shortest faithful form.")


class ToolSettings(_Strict):
    """Many tools: rank the declarations per step (BM25, no model call) and declare the best ones."""

    rank_above: int | None = Field(24, ge=1, description=(
        "With more app tools than this and no step list (`aether:tools`), only the best `keep` are declared, "
        "plus ADK's own, the recall tool and every tool called in the invocation; None: declare all."))
    keep: int = Field(12, ge=1, description="How many ranked tools are declared at least.")
    share: float | None = Field(0.25, gt=0, le=1, description=(
        "Beyond `keep`, more ranked tools are declared while the declared tools' JSON stays within this share "
        "of all the tools' JSON; None: exactly `keep`."))

    @model_validator(mode="after")
    def _keep_below(self) -> "ToolSettings":
        if self.rank_above is not None and self.keep > self.rank_above:
            raise ValueError(f"tools.keep ({self.keep}) is above tools.rank_above ({self.rank_above}): ranking would "
                             f"leave nothing out; lower keep or raise rank_above")
        return self


class PressureSettings(_Strict):
    """The context-pressure warning in STATUS."""

    warn_share: float | None = Field(0.70, gt=0, le=1, description=(
        "When a request reaches this share of the window, STATUS says so (save notes or wrap up) and the "
        "manifest flags it (`context_pressure`); None: never."))


class AcceptanceSettings(_Strict):
    """Acceptance gating: the final answer checked against the open acceptance items; one repair pass."""

    gate: bool = Field(False, description=(
        "Check each final answer against the open acceptance items (model-free rules); if some are unmet, "
        "ask the agent's model once more, naming them, and send that answer instead (once per invocation)."))
    judge: bool = Field(False, description=(
        "Ask the agent's model which items the answer misses; its verdict replaces the rules' (timeout or error: "
        "the answer stands)."))
    judge_timeout_seconds: float = Field(10.0, gt=0, description="Seconds the judge may take.")


# Inside a pack, embeddings are computed a few at a time on the model call's path: short inputs
# and one thread keep that fast and steady (the retrieval benchmark has the quality cost).
PACK_RETRIEVAL_DEFAULTS: dict[str, Any] = {"embedding_max_seq_length": 128, "embedding_threads": 1}


class BudgetProfile(_Strict):
    """A named budget policy. Every field has a default, so a YAML file may set only what it changes."""

    name: str = "custom"
    description: str = ""
    window_tokens: int | None = Field(None, gt=0, description="Overrides the model registry's window.")
    floors: Floors = Floors()
    weights: Weights = Weights()
    task: TaskSettings = TaskSettings()
    conversation: ConversationSettings = ConversationSettings()
    cache: CacheSettings = CacheSettings()
    evidence: SelectionSettings = SelectionSettings()
    memory: MemorySelection = MemorySelection()
    offload: OffloadSettings = OffloadSettings()
    pruning: PruningSettings = PruningSettings()
    decay: DecaySettings = DecaySettings()
    recovery: RecoverySettings = RecoverySettings()
    recitation: RecitationSettings = RecitationSettings()
    failures: FailureEvidenceSettings = FailureEvidenceSettings()
    variation: VariationSettings = VariationSettings()
    retrieval: RetrievalSettings = RetrievalSettings(**PACK_RETRIEVAL_DEFAULTS)
    redaction: RedactionSettings = RedactionSettings()
    tools: ToolSettings = ToolSettings()
    pressure: PressureSettings = PressureSettings()
    acceptance: AcceptanceSettings = AcceptanceSettings()

    @field_validator("retrieval", mode="before")
    @classmethod
    def _pack_retrieval_defaults(cls, value: Any) -> Any:
        """A profile that sets some retrieval keys keeps the pack's embedding defaults for the rest."""
        return {**PACK_RETRIEVAL_DEFAULTS, **value} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _floors_fit(self) -> "BudgetProfile":
        f = self.floors
        total = f.system + f.task + f.tools + f.slack
        if total > 1 - MIN_REMAINDER + 1e-9:
            raise ValueError(
                f"floors add up to {total:.2f} of the window (system {f.system}, task {f.task}, tools {f.tools}, "
                f"slack {f.slack}); they must leave at least {MIN_REMAINDER:.0%} to evidence, memory and "
                f"conversation: lower them so their sum is at most {1 - MIN_REMAINDER:.2f}"
            )
        return self

    def override(self, **changes: Any) -> "BudgetProfile":
        """A copy with top-level fields (or nested dicts) replaced and re-validated."""
        data = self.model_dump()
        _deep_update(data, changes)
        return _validate(data, source=f"override of {self.name!r}")


def _deep_update(base: dict, changes: dict) -> None:
    for key, value in changes.items():
        if isinstance(value, BaseModel):
            value = value.model_dump()
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = value


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 60, 60, 4, 4, 2


def _shown(value: Any) -> str:
    """A bounded echo of user input (an alias bomb must not become a 34 MB message)."""
    return _REPR.repr(value)


def _numeric(annotation: Any) -> bool:
    """True for int/float fields (also inside Optional), never for bool ones."""
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) in (typing.Union, pytypes.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(args) and all(a in (int, float) for a in args)
    return False


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _type_problems(model: type[BaseModel], data: Any, path: str, problems: list[str]) -> None:
    """Booleans or strings given for numbers, and non-finite numbers: pydantic's lax mode takes
    `true` as 1 and `"5"` as 5, and floats accept inf/nan; a budget must not."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            continue
        where = f"{path}{key}"
        if _numeric(field.annotation) and value is not None:
            if isinstance(value, bool):
                problems.append(f"{where}: a number is required, got {_shown(value)} (YAML reads true, false, yes, no, "
                                "on and off as booleans): write a number, e.g. 0.1 or 400")
            elif isinstance(value, str):
                problems.append(f"{where}: a number is required, got {_shown(value)}: write it without quotes, e.g. 0.1 or 400")
            elif isinstance(value, float) and not math.isfinite(value):
                problems.append(f"{where}: must be a finite number, got {value}: use a real value")
        sub = _model_of(field.annotation)
        if sub is not None:
            _type_problems(sub, value, where + ".", problems)


def _validate(data: Any, *, source: str) -> BudgetProfile:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: a profile must be a YAML mapping, got {type(data).__name__}")
    problems: list[str] = []
    _type_problems(BudgetProfile, data, "", problems)
    typed = {p.split(":", 1)[0] for p in problems}  # keys already reported (pydantic's lax mode may pass them)
    try:
        profile = BudgetProfile.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"])
            value = err.get("input")
            if key in typed:
                continue
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key {key[:200]!r}: remove it or fix its spelling")
            elif key and isinstance(value, bool) and err["type"] == "string_type":
                problems.append(f"{key[:200]}: text is required, got {value} (YAML reads true, false, yes, no, on "
                                "and off as booleans): put it in quotes")
            elif key and not isinstance(value, dict):
                problems.append(f"{key[:200]}: {err['msg']} (got {_shown(value)})")
            elif key:  # a check over a whole section: its input holds defaults the file never wrote
                problems.append(f"{key[:200]}: {err['msg'].removeprefix('Value error, ')}")
            else:
                problems.append(err["msg"].removeprefix("Value error, "))
        raise _error(source, problems) from None  # pydantic's own text would echo the whole input
    if problems:
        raise _error(source, problems)
    return profile


def _error(source: str, problems: list[str]) -> ProfileError:
    text = f"{source[:300]}: " + "; ".join(problems[:20])
    if len(problems) > 20:
        text += f"; and {len(problems) - 20} more problems"
    return ProfileError(text[:MAX_ERROR_CHARS])


class _ProfileLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and more than MAX_ALIASES aliases."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_ALIASES} aliases (*name): refused (an alias bomb?); write the values out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: SafeLoader reports it below
                continue
            if duplicate:
                raise yaml.YAMLError(f"duplicate key {_shown(key)} (line {key_node.start_mark.line + 1}): keep one of them")
        return super().construct_mapping(node, deep=deep)


def _parse(text: str, source: str) -> Any:
    loader = _ProfileLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise ProfileError(f"{source[:300]}: not valid YAML: {str(e)[:1000]}") from None
    finally:
        loader.dispose()


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped with the package."""
    folder = resources.files("aether_context") / "profiles"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: "str | Path | BudgetProfile | None" = None) -> BudgetProfile:
    """Load a built-in profile by name, or a YAML file by path; `None` gives `default`."""
    if isinstance(name_or_path, BudgetProfile):
        return name_or_path
    name = str(name_or_path or "default")
    path = Path(name)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ProfileError(f"profile file {name!r} not found")
        text = path.read_text(encoding="utf-8")
        source = str(path)
    else:
        resource = resources.files("aether_context") / "profiles" / f"{name}.yaml"
        if not resource.is_file():
            raise ProfileError(f"unknown profile {name!r}: use one of {builtin_profiles()} or a path to a YAML file")
        text = resource.read_text(encoding="utf-8")
        source = f"built-in profile {name!r}"
    return _validate(_parse(text, source), source=source)
