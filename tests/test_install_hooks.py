"""`install_context_pack`: one call puts every hook on an agent and its sub-agents."""

from __future__ import annotations

from aether_context import install_context_pack
from aether_context.retrieval import HashingEmbedder
from aether_context.testing import call

from conftest import make_runner, new_session, run_turn, scripted_agent


async def test_installs_on_the_tree_once(memory_store_url):
    seen = []

    def mine(*, callback_context, llm_request):  # a callback the user had: it keeps running, after ours
        seen.append(callback_context.agent_name)

    child, _ = scripted_agent([call("lookup", key="a"), "child done"], name="child")
    root, _ = scripted_agent([call("transfer_to_agent", agent_name="child")], name="root",
                             sub_agents=[child], before_model_callback=mine)
    packer = install_context_pack(root, store=memory_store_url, window_tokens=8000, embedder=HashingEmbedder())
    assert install_context_pack(root, store=memory_store_url) is packer  # a second call changes nothing
    assert isinstance(root.before_model_callback, list) and root.before_model_callback[1] is mine
    assert getattr(root.before_model_callback[0], "packer") is packer
    assert child.before_model_callback.packer is packer
    for field in ("after_model_callback", "after_tool_callback", "on_model_error_callback", "on_tool_error_callback"):
        assert getattr(child, field) is not None and getattr(root, field) is not None

    runner = make_runner(root)
    session = await new_session(runner)
    events = await run_turn(runner, session, "look up a")
    assert events[-1].content.parts[0].text == "child done"
    agents = [r.manifest.agent for r in packer.recent]
    assert agents == ["root", "child", "child"] and not any(r.manifest.error for r in packer.recent)
    assert seen == ["root"]
    # a sub-agent added later joins the same packer; the others keep their hooks
    late, _ = scripted_agent(["late"], name="late")
    root.sub_agents.append(late)
    before = root.before_model_callback
    assert install_context_pack(root) is packer and late.before_model_callback.packer is packer
    assert root.before_model_callback is before
    # the sub-agent's model response events carry their pack
    assert all(e.custom_metadata["aether_context"]["pack_id"].startswith("pk_")
               for e in events if e.author == "child" and e.content and e.content.role == "model")


def test_store_and_profile_from_the_environment(monkeypatch, tmp_path):
    """`adk web --extra_plugins aether_context.ContextPackPlugin` builds the plugin without arguments."""
    from aether_context import ContextPackPlugin, context_pack_callback

    monkeypatch.setenv("AETHER_CONTEXT_STORE", str(tmp_path / "env-packs"))
    monkeypatch.setenv("AETHER_CONTEXT_PROFILE", "research")
    plugin = ContextPackPlugin(name="aether_context.ContextPackPlugin", embedder=HashingEmbedder())
    assert plugin.packer.profile.name == "research" and plugin.packer.store.url == str(tmp_path / "env-packs")
    cb = context_pack_callback(embedder=HashingEmbedder())
    assert cb.packer.profile.name == "research"
    given = ContextPackPlugin(store="memory://given", profile="default", embedder=HashingEmbedder())
    assert given.packer.profile.name == "default" and given.packer.store.url == "memory://given"  # arguments win
