"""Per-session state has one owner and one limit: the packer's slots, keyed by (app, user,
session, agent). A released or aged-out slot takes its retrieval indexes and shown pack with it;
a lone surrogate in a tool output packs, and so does every later call of the session."""

from __future__ import annotations

from aether_context import ContextPackPlugin

from conftest import make_runner, new_session, run_turn, scripted_agent


def _namespaces(packer, app: str) -> set[str]:
    """This app's sessions with a retrieval index (the default retriever is shared by the process)."""
    return {key[0] for key in packer.retriever._indexes if key[0].startswith(app + "/")}


async def test_slots_age_out_with_their_indexes(memory_store_url):
    agent, llm = scripted_agent(["ok"] * 20, tools=())
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=16_000)
    packer = plugin.packer
    packer.slots.limit = 3
    runner = make_runner(agent, plugins=[plugin], app_name="slots-app")
    ids = []
    for i in range(5):
        sid = await new_session(runner, user_id=f"user-{i}")
        ids.append(sid)
        await run_turn(runner, sid, f"remember the figure {i} for the report", user_id=f"user-{i}")
    keys = list(packer.slots)
    assert len(keys) == 3 and [k[1] for k in keys] == ["user-2", "user-3", "user-4"]
    assert all(packer.slots[k].shown is not None for k in keys)  # the shown pack lives in the slot
    assert _namespaces(packer, "slots-app") and _namespaces(packer, "slots-app") <= {"/".join(k) for k in keys}  # evicted sessions' indexes went with them
    app = runner.app_name
    packer.release(app, "user-4", ids[4])
    assert len(packer.slots) == 2 and not any(ns.startswith(f"{app}/user-4/") for ns in _namespaces(packer, app))


async def test_a_lone_surrogate_in_a_tool_output_packs(memory_store_url):
    from aether_context.testing import call

    def read_notes(path: str) -> dict:
        """Read a notes file."""
        return {"path": path, "text": "broken emoji \ud83d here " + "and the quarterly figures " * 30}

    agent, llm = scripted_agent([call("read_notes", path="n.txt"), "read it", "ok", "ok"], tools=[read_notes])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=16_000)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "read the notes")
    await run_turn(runner, sid, "what do the quarterly figures say?")
    plugin.packer.store.flush()
    manifests = [r.manifest for r in plugin.packer.recent]
    assert len(manifests) == 3 and all(m.error is None for m in manifests)
    assert plugin.packer.store.stats().get("failed", 0) == 0
    assert any(f == "unicode_repaired: read_notes: 1" for m in manifests for f in m.flags)  # repaired and counted
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=sid)
    stored = [p.function_response.response for e in session.events for p in (e.content.parts if e.content else ())
              if p.function_response is not None]
    assert "broken emoji \ufffd here" in stored[0]["text"]  # the session holds the repaired result
