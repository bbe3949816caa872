"""Stage 6 — record: the manifest, the audit receipt of one model call.

A manifest says what was sent and why: budgets and the signals behind them, what each layer
used, every truncation, the artifact URIs cited, and the checksum of the exact request. It
points (by content hash) to the stored request and the pre-pack inputs, so the call can be
rebuilt byte for byte and re-packed under another profile.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Manifest", "LayerUsage", "SCHEMA_VERSION"]

SCHEMA_VERSION = 2


class LayerUsage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    demand: int = Field(0, description="Tokens the layer would use uncut (flexible layers).")
    budget: int = Field(description="Tokens the allocator granted (fixed layers: what they need).")
    used: int = Field(description="Tokens the layer takes in the sent request.")
    items: int = Field(0, description="Items (lines, turns, tools) kept.")
    dropped: int = Field(0, description="Items dropped or folded away.")


class Manifest(BaseModel):
    """One model call. `checksum` is `sha256:` of the canonical request JSON."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    pack_id: str
    model: str
    window: int
    profile: str
    profile_digest: str
    app_name: str = ""
    user_id: str = ""
    session_id: str = ""
    invocation_id: str = ""
    agent: str = ""
    created_at: float = 0.0
    layer_budgets: dict[str, LayerUsage]
    allocation: dict[str, Any] = Field(default_factory=dict, description="Floors, weights, signals, nominal shares.")
    truncation_events: list[dict[str, Any]] = Field(default_factory=list)
    artifact_uris: list[str] = Field(default_factory=list)
    selected: dict[str, list[dict[str, Any]]] = Field(default_factory=dict, description="Per layer: kept item ids and scores.")
    flags: list[str] = Field(default_factory=list, description="Task problems (missing goal/acceptance, unknown tools...).")
    evidence_needed: list[str] = Field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0
    prefix_tokens: int = Field(0, description="Leading tokens equal to the previous call's request.")
    previous_tokens: int = 0
    previous_pack_id: str = ""
    reused_payload: bool = Field(False, description="The payload was kept from the previous call of this invocation.")
    block_hashes: dict[str, str] = Field(default_factory=dict, description="sha256 of each stable block: system, tools, payload.")
    cache_break: dict[str, Any] | None = Field(None, description=(
        "When the request is not the previous one plus appended messages: the first block that changed "
        "(system_instruction, tools, or messages[i] with its kind) and the tokens to re-process."))
    compaction: dict[str, Any] | None = Field(None, description=(
        "Set when this call compacted the conversation: why, where the verbatim zone now starts, how many turns "
        "left it, tokens before and after."))
    tokens_without_plugin: int = Field(0, description=(
        "What ADK would have sent without the plugin: its request with offloaded tool results at full size."))
    calibration: float = Field(1.0, description="Correction applied to our token estimates (model count / estimate).")
    packed_for: int = Field(0, description="The window in our tokenizer's units after calibration.")
    recited: bool = Field(False, description="A goal recitation block closes this request.")
    failures: int = Field(0, description="Tool failures the session had recorded when this call was packed.")
    tools: list[str] = Field(default_factory=list)
    checksum: str
    request_ref: str = Field("", description="Content hash of the stored request.")
    inputs_ref: str = Field("", description="Content hash of the stored pre-pack inputs.")
    redacted_in_pack: int = Field(0, description=(
        "Masked secrets in the text the pack wrote into this request (compaction block, Evidence, Memory, "
        "failures, status); ADK's own verbatim turns are not rewritten."))
    error: str | None = Field(None, description="Set when packing failed and the original request was sent (fail-open).")
