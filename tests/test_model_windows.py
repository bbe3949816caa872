"""Model names as apps spell them resolve to the model behind them; unknown ones warn once and pack."""

from __future__ import annotations

import logging

import pytest

from aether_context import ContextPackPlugin
from aether_context.testing import ScriptedLlm
from aether_context.errors import AetherContextError, WindowError
from aether_context.windows import (DEFAULT_WINDOW, OLLAMA_DEFAULT_CONTEXT, REGISTRY, context_window,
                                    lookup_window, normalise_model_name, window_flag)

from conftest import lookup, make_runner, new_session, run_turn


@pytest.mark.parametrize("model, window", [
    ("azure/gpt-4o", 128_000),
    ("azure/gpt-4.1-mini", 1_047_576),
    ("bedrock/anthropic.claude-3-haiku-20240307-v1:0", 200_000),
    ("bedrock/us.anthropic.claude-3-5-sonnet-20241022-v2:0", 200_000),
    ("bedrock/converse/meta.llama3-1-70b-instruct-v1:0", 131_072),
    ("bedrock/amazon.nova-pro-v1:0", 300_000),
    ("vertex_ai/gemini-2.5-pro", 1_048_576),
    ("vertex_ai/claude-3-5-sonnet-v2@20241022", 200_000),
    ("projects/my-proj/locations/us-central1/publishers/google/models/gemini-2.5-pro", 1_048_576),
    ("projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4@20250514", 200_000),
    ("openrouter/anthropic/claude-3.5-sonnet", 200_000),
    ("openrouter/meta-llama/llama-3.3-70b-instruct", 131_072),
    ("openrouter/google/gemini-2.5-flash", 1_048_576),
    ("groq/llama-3.3-70b-versatile", 131_072),
    ("groq/openai/gpt-oss-120b", 131_072),
    ("mistral/mistral-large-latest", 131_072),
    ("deepseek/deepseek-chat", 128_000),
    ("deepseek/deepseek-reasoner", 128_000),
    ("anthropic/claude-3-haiku-20240307", 200_000),
    ("claude-3-haiku-20240307", 200_000),
    ("openai/gpt-4o-mini", 128_000),
    ("gemini/gemini-2.0-flash", 1_048_576),
    ("gemini-flash-latest", 1_048_576),
    ("gemini-flash-lite-latest", 1_048_576),
    ("gpt-4.5-preview", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4-0613", 8_192),
    ("o1-mini", 128_000),
    ("o1", 200_000),
    ("o3-mini", 200_000),
    ("gpt-5-chat-latest", 128_000),
    ("gemini-2.5-flash", 1_048_576),
    ("models/gemini-2.5-flash", 1_048_576),
    ("gemini-2.5-pro-preview-06-05", 1_048_576),
    ("gemini/gemini-2.0-flash-001", 1_048_576),
    ("vertex_ai/gemini-1.5-pro-002", 2_097_152),
    ("gemini-3-pro-preview", 1_048_576),
    ("gpt-4o", 128_000),
    ("gpt-4.1-mini", 1_047_576),
    ("gpt-4", 8_192),
    ("gpt-4-turbo-2024-04-09", 128_000),
    ("gpt-5", 400_000),
    ("claude-sonnet-4-20250514", 200_000),
    ("anthropic/claude-opus-4-1", 200_000),
    ("claude-3-5-haiku-latest", 200_000),
    ("  Models/Gemini-2.5-Flash  ", 1_048_576),
])
def test_model_names_resolve(model, window):
    assert context_window(model) == window
    assert window_flag(model) is None


@pytest.mark.parametrize("model", ["ollama_chat/llama3.1", "ollama/qwen2.5:7b"])
def test_ollama_routes_get_the_servers_default(model):
    assert context_window(model) == OLLAMA_DEFAULT_CONTEXT
    assert "num_ctx" in window_flag(model)
    assert window_flag(model, 65_536) is None and context_window(model, 65_536) == 65_536


def test_every_registry_entry_names_its_source():
    listing = [(prefix, window, source) for prefix, (window, source) in sorted(REGISTRY.items())]
    for prefix, window, source in listing:
        assert window > 0 and source.strip(), prefix
        assert lookup_window(prefix) == window, prefix
    print("\n".join(f"{p:24} {w:>10,}  {s}" for p, w, s in listing))


def test_longest_prefix_wins():
    assert context_window("gpt-4") == 8_192
    assert context_window("gpt-4o") == 128_000
    assert context_window("gpt-4.1") == 1_047_576


def test_prefixes_are_stripped_repeatedly():
    assert normalise_model_name("openai/models/GPT-4o") == "gpt-4o"
    assert normalise_model_name("vertex_ai/google/gemini-2.5-pro") == "gemini-2.5-pro"


def test_override_wins():
    assert context_window("gemini-2.5-flash", 32_000) == 32_000
    assert context_window("totally-unknown", 4_096) == 4_096
    assert context_window(None, 10_000) == 10_000


@pytest.mark.parametrize("model", ["totally-unknown-model", "", None, "scripted-model"])
def test_unknown_model_is_an_error_only_when_strict(model):
    with pytest.raises(WindowError) as info:
        context_window(model, strict=True)
    message = str(info.value)
    assert "window_tokens" in message and "unknown context window" in message
    assert isinstance(info.value, AetherContextError)
    assert context_window(model) == DEFAULT_WINDOW


async def test_unknown_model_warns_once_and_packs(memory_store_url, caplog):
    from google.adk.agents import LlmAgent

    caplog.set_level(logging.WARNING, logger="aether_context")
    llm = ScriptedLlm(model="azure/my-company-deployment", turns=["one", "two", "three"])
    agent = LlmAgent(name="agent", model=llm, instruction="Answer.", tools=[lookup])
    plugin = ContextPackPlugin(store=memory_store_url)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    for text in ("first", "second", "third"):
        await run_turn(runner, sid, text)
    plugin.packer.store.flush()
    warnings = [r for r in caplog.records if "my-company-deployment" in r.getMessage()]
    assert len(warnings) == 1 and "window_tokens=" in warnings[0].getMessage()
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)
    assert all(r.exc_info is None for r in caplog.records)
    manifests = [r.manifest for r in plugin.packer.recent]
    assert len(manifests) == 3 and not any(m.error for m in manifests)
    assert all(m.window == DEFAULT_WINDOW for m in manifests)
    assert all(any(f.startswith(f"window_default:{DEFAULT_WINDOW}") for f in m.flags) for m in manifests)
