"""What a pack shows on its response event and span: flat, JSON-safe numbers, the failure when packing failed."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aether_context.adk.telemetry import METADATA_KEY, annotate_response, annotate_span, pack_metadata
from aether_context.pipeline.record import Manifest


def _manifest(**update) -> Manifest:
    base = dict(pack_id="pk_x", model="gemini-2.5-flash", window=8000, profile="default", profile_digest="sha256:0",
                layer_budgets={}, checksum="sha256:1", tokens_before=900, tokens_after=700, prefix_tokens=500,
                truncation_events=[{"layer": "conversation", "action": "fold", "reason": "r", "ids": ["t1"],
                                    "tokens_before": 10, "tokens_after": 2}])
    base.update(update)
    return Manifest(**base)


def test_metadata_falls_back_and_names_what_happened():
    meta = pack_metadata(_manifest(), "memory://s/app/u/s/pk_x/manifest.json")
    assert meta["tokens_without_plugin"] == 900  # no tokens_without_plugin recorded: the request as received
    assert meta["truncations"] == 1 and meta["truncated_layers"] == ["conversation"]
    assert "compaction" not in meta and "error" not in meta and "cache_break" not in meta
    meta = pack_metadata(_manifest(tokens_without_plugin=50_000, compaction={"reason": "asked for"},
                                   cache_break={"block": "tools"}, error="BudgetError: too small"), "u")
    assert meta["tokens_without_plugin"] == 50_000 and meta["compaction"] == "asked for"
    assert meta["cache_break"] == "tools" and meta["error"].startswith("BudgetError")


def test_span_attributes_and_event():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    meta = pack_metadata(_manifest(), "u")
    with provider.get_tracer("t").start_as_current_span("call_llm") as span:
        annotate_span(meta, span, event=True)
    (finished,) = exporter.get_finished_spans()
    assert finished.attributes["aether.pack_id"] == "pk_x"
    assert tuple(finished.attributes["aether.truncated_layers"]) == ("conversation",)
    assert finished.events[0].name == "aether_context.pack" and finished.events[0].attributes["aether.tokens_sent"] == 700


def test_response_keeps_other_metadata():
    from google.adk.models.llm_response import LlmResponse

    response = LlmResponse(custom_metadata={"mine": 1})
    annotate_response(response, {"pack_id": "pk_x"})
    assert response.custom_metadata == {"mine": 1, METADATA_KEY: {"pack_id": "pk_x"}}
