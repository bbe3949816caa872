"""Make each packed call visible where ADK users already look: `adk web` events and OpenTelemetry spans.

The model response event gets `custom_metadata["aether_context"]` (ADK persists it on the Event, so
`adk web` and the sessions API show it). In traces, each pack is a child span `aether_context.pack`
(its duration is the packing time) with the numbers as `aether.*` attributes, and the span current
in the model callbacks gets the same attributes plus one `aether_context.pack` span event per call:
that span is ADK's `call_llm` under the legacy telemetry schema (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1),
and the agent's `invoke_agent` span under ADK 2.13's default schema, which has no per-call span (so
there the attributes describe the agent's latest call and the events list every call).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

from ..pipeline.record import Manifest
from ..report.calls import compaction_reason, tokens_without_plugin

__all__ = ["METADATA_KEY", "SPAN_NAME", "pack_metadata", "annotate_response", "annotate_span", "pack_span"]

METADATA_KEY = "aether_context"
SPAN_NAME = "aether_context.pack"
_tracer = trace.get_tracer("aether_context")


def pack_span():
    """A child span around one pack, under whatever span ADK made current for the model call."""
    return _tracer.start_as_current_span(SPAN_NAME)


def pack_metadata(manifest: Manifest, uri: str) -> dict[str, Any]:
    """The few numbers that tie an event or a span to its pack (JSON-safe, flat)."""
    meta: dict[str, Any] = {
        "pack_id": manifest.pack_id,
        "manifest_uri": uri,
        "profile": manifest.profile,
        "tokens_sent": manifest.tokens_after,
        "tokens_without_plugin": tokens_without_plugin(manifest),
        "window": manifest.window,
        "prefix_tokens": manifest.prefix_tokens,
        "calibration": manifest.calibration,
        "truncations": len(manifest.truncation_events),
        "truncated_layers": sorted({str(e.get("layer", "")) for e in manifest.truncation_events}),
    }
    if compaction_reason(manifest):
        meta["compaction"] = compaction_reason(manifest)
    if manifest.cache_break:
        meta["cache_break"] = str(manifest.cache_break.get("block", ""))
    if manifest.error:
        meta["error"] = manifest.error[:300]
    return meta


def annotate_response(llm_response: Any, meta: dict[str, Any]) -> None:
    """Attach the pack's numbers to the model response; ADK copies them onto the persisted Event."""
    current = dict(llm_response.custom_metadata or {})
    current[METADATA_KEY] = meta
    llm_response.custom_metadata = current


def _attributes(meta: dict[str, Any]) -> dict[str, Any]:
    return {f"aether.{k}": [str(x) for x in v] if isinstance(v, list) else v for k, v in meta.items()}


def annotate_span(meta: dict[str, Any], span: Any = None, *, event: bool = False) -> None:
    """Set `aether.*` attributes on `span` (default: the current one), and a span event if asked."""
    span = span or trace.get_current_span()
    if not span.is_recording():
        return
    attributes = _attributes(meta)
    span.set_attributes(attributes)
    if event:
        span.add_event(SPAN_NAME, attributes)
