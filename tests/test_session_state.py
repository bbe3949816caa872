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


async def test_a_packs_record_writes_run_while_the_model_works(memory_store_url):
    """The records a pack points at are written while the model answers (here each write waits until the model
    has the request), and are in the store by the time ADK records the pointers: a replica reads them."""
    import time

    from aether_context.adk.session_state import pack_state_key
    from aether_context.store import PackStore

    agent, llm = scripted_agent(["first answer", "second answer"], tools=())
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=16_000)
    store = plugin.packer.store
    written, model_first = [], []
    put_pieces = store.put_pieces

    def waiting_put_pieces(pieces):  # on a worker thread
        deadline = time.monotonic() + 10
        while len(llm.requests) <= len(written) and time.monotonic() < deadline:
            time.sleep(0.005)
        model_first.append(len(llm.requests) > len(written))
        put_pieces(pieces)
        written.append(len(pieces))

    store.put_pieces = waiting_put_pieces
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    for text in ("what is the capital of France?", "and of Spain?"):
        await run_turn(runner, sid, text)
        assert not plugin.packer.slots[next(iter(plugin.packer.slots))].writes  # awaited before the answer
    assert len(model_first) == 2 and all(model_first)
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=sid)
    pointer = session.state[pack_state_key(agent.name)]
    assert PackStore(memory_store_url).get_record(pointer["ref"])["pack_id"]  # what another replica reads


async def test_a_failed_record_write_is_reported_and_the_run_goes_on(memory_store_url, caplog):
    """A record the store could not write: the call's answer goes on, the log and the next manifest say so."""
    agent, llm = scripted_agent(["first answer", "second answer"], tools=())
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=16_000)
    store = plugin.packer.store
    put_pieces, failures = store.put_pieces, [1]

    def failing_put_pieces(pieces):
        if failures:  # the first pack's records: a piece the store cannot write
            failures.pop()
            pieces = [(pieces[0][0], None)]
        put_pieces(pieces)

    store.put_pieces = failing_put_pieces
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "what is the capital of France?")
    await run_turn(runner, sid, "and of Spain?")
    first, second = (r.manifest for r in plugin.packer.recent)
    assert first.error is None and second.error is None
    assert any(f.startswith("store_write_failed: 1 write(s), last a session record: TypeError") for f in second.flags)
    assert "1 record write(s) failed: TypeError" in caplog.text
