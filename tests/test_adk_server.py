"""The plugin served by ADK's own FastAPI server (`adk api_server --extra_plugins ...`): each packed call
shows up on its model response event (`custom_metadata`) and on ADK's call_llm span (`aether.*`)."""

from __future__ import annotations

import textwrap

import pytest
from fastapi.testclient import TestClient
from google.adk.cli.fast_api import get_fast_api_app
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aether_context.store import PackStore

AGENT = textwrap.dedent('''
    from google.adk.agents import LlmAgent
    from aether_context.testing import ScriptedLlm, call

    def lookup(key: str) -> dict:
        """Look a key up."""
        return {"key": key, "value": "v-" + key * 50}

    root_agent = LlmAgent(name="helper", model=ScriptedLlm(model="gemini-2.5-flash", turns=[call("lookup", key="k"), "done: v-k"]),
                          instruction="Answer with the lookup tool.", tools=[lookup])
''')


@pytest.fixture
def spans():
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # first in this process: install an SDK provider
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


@pytest.mark.parametrize("schema", ["2", "1"])
def test_pack_metadata_on_events_and_spans(tmp_path, monkeypatch, spans, schema):
    monkeypatch.setenv("ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN", schema)
    name = f"packed_app_v{schema}"  # a module of its own: the loaded agent (and its script) is cached
    (tmp_path / "agents" / name).mkdir(parents=True)
    (tmp_path / "agents" / name / "__init__.py").write_text("from . import agent\n")
    (tmp_path / "agents" / name / "agent.py").write_text(AGENT)
    store_url = f"file://{tmp_path}/packs"
    monkeypatch.setenv("AETHER_CONTEXT_STORE", store_url)
    monkeypatch.setenv("AETHER_CONTEXT_PROFILE", "research")
    monkeypatch.syspath_prepend(str(tmp_path / "agents"))
    app = get_fast_api_app(agents_dir=str(tmp_path / "agents"), web=False, host="127.0.0.1",
                           session_service_uri="memory://", artifact_service_uri="memory://",
                           extra_plugins=["aether_context.ContextPackPlugin"])
    with TestClient(app, base_url="http://127.0.0.1") as client:
        session = client.post(f"/apps/{name}/users/u/sessions").json()
        events = client.post("/run", json={
            "app_name": name, "user_id": "u", "session_id": session["id"],
            "new_message": {"role": "user", "parts": [{"text": "what is k?"}]}}).json()
        stored = client.get(f"/apps/{name}/users/u/sessions/{session['id']}").json()["events"]

    model_events = [e for e in events if e["author"] == "helper"
                    and any("functionCall" in p or "text" in p for p in e["content"]["parts"])]
    assert len(model_events) == 2
    metas = [e["customMetadata"]["aether_context"] for e in model_events]
    for meta in metas:
        assert meta["pack_id"].startswith("pk_") and meta["profile"] == "research"
        assert meta["manifest_uri"].startswith(store_url) and meta["manifest_uri"].endswith("/manifest.json")
        assert 0 < meta["tokens_sent"] and meta["tokens_without_plugin"] > 0
        assert {"window", "prefix_tokens", "calibration", "truncations"} <= set(meta)
    assert metas[0]["pack_id"] != metas[1]["pack_id"]
    # ADK persists the metadata with the event: the session API (what adk web reads) has it too.
    persisted = [e["customMetadata"]["aether_context"]["pack_id"] for e in stored if "customMetadata" in e]
    assert persisted == [m["pack_id"] for m in metas]
    # The manifest named on the event is in the store the environment chose.
    store = PackStore(store_url, background=False)
    assert store.load_manifest(metas[-1]["manifest_uri"]).pack_id == metas[-1]["pack_id"]

    ours = [s for s in spans.get_finished_spans() if s.name == "aether_context.pack"]
    assert [s.attributes["aether.pack_id"] for s in ours] == [m["pack_id"] for m in metas]
    for span, meta in zip(ours, metas):
        assert span.attributes["aether.manifest_uri"] == meta["manifest_uri"]
        assert span.attributes["aether.tokens_sent"] == meta["tokens_sent"]
        assert span.attributes["aether.tokens_without_plugin"] == meta["tokens_without_plugin"]
    by_id = {s.context.span_id: s for s in spans.get_finished_spans()}
    parents = [by_id[s.parent.span_id] for s in ours]
    if schema == "1":  # legacy schema: one call_llm span per model call carries its own pack
        assert [p.name for p in parents] == ["call_llm", "call_llm"]
        assert [p.attributes["aether.pack_id"] for p in parents] == [m["pack_id"] for m in metas]
    else:  # default schema: the agent span carries the latest call, and one event per call
        assert [p.name for p in parents] == ["invoke_agent helper"] * 2 and parents[0] is parents[1]
        assert parents[0].attributes["aether.pack_id"] == metas[-1]["pack_id"]
        assert [e.attributes["aether.pack_id"] for e in parents[0].events
                if e.name == "aether_context.pack"] == [m["pack_id"] for m in metas]
    assert all(p.attributes["aether.response_annotated"] is True for p in parents)
