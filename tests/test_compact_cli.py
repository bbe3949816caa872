"""`aether-context compact`: ask a stored session to compact at its next call (the session service `adk web
--session_service_uri` would open: SqliteSessionService for sqlite://, DatabaseSessionService for SQLAlchemy URLs)."""

from __future__ import annotations

import asyncio

import pytest

from aether_context.cli import main
from aether_context.cli.compact import COMPACT_STATE_KEY, session_service




async def _create(db: str):
    service = session_service(db)
    session = await service.create_session(app_name="app", user_id="u", state={"keep": 1})
    await _close(service)
    return session


async def _get(db: str, session_id: str):
    service = session_service(db)
    stored = await service.get_session(app_name="app", user_id="u", session_id=session_id)
    await _close(service)
    return stored


async def _close(service) -> None:
    close = getattr(service, "close", None)
    if close is not None and asyncio.iscoroutine(done := close()):
        await done


@pytest.mark.parametrize("scheme", ["sqlite", "sqlite+aiosqlite"])
def test_compact_sets_the_state_key(tmp_path, capsys, scheme):
    if scheme != "sqlite":
        pytest.importorskip("sqlalchemy")  # ADK's DatabaseSessionService: google-adk[db]
    db = f"{scheme}:///{tmp_path}/sessions.db"
    session = asyncio.run(_create(db))

    assert main(["compact", "--db", db, "app", "u", session.id]) == 0
    assert "compaction requested" in capsys.readouterr().out

    stored = asyncio.run(_get(db, session.id))
    assert stored.state[COMPACT_STATE_KEY] is True and stored.state["keep"] == 1
    assert stored.events[-1].actions.state_delta == {COMPACT_STATE_KEY: True}
    assert stored.events[-1].content is None  # nothing the model would read as a turn

    assert main(["compact", "--db", db, "app", "u", "no-such-session"]) == 2
    assert "no session app/u/no-such-session" in capsys.readouterr().err


def test_the_next_call_compacts_and_records_why(tmp_path, capsys):
    """End to end: a stored session, the CLI verb, then the session's next model call is a recorded compaction."""
    from google.adk.agents import LlmAgent
    from google.adk.apps.app import App
    from google.adk.runners import Runner
    from google.genai import types

    from aether_context import ContextPackPlugin
    from aether_context.retrieval import HashingEmbedder
    from aether_context.testing import ScriptedLlm

    db = f"sqlite:///{tmp_path}/sessions.db"
    answers = [f"answer {i}: " + "detail " * 60 for i in range(4)]

    async def turns(texts, session_id=None):
        service = session_service(db)
        plugin = ContextPackPlugin(store=str(tmp_path / "packs"), window_tokens=32_000, embedder=HashingEmbedder())
        agent = LlmAgent(name="a", model=ScriptedLlm(turns=list(answers)), instruction="Answer.")
        runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=service)
        if session_id is None:
            session_id = (await service.create_session(app_name="app", user_id="u")).id
        for text in texts:
            async for _ in runner.run_async(user_id="u", session_id=session_id,
                                            new_message=types.Content(role="user", parts=[types.Part(text=text)])):
                pass
        plugin.packer.store.flush()
        await _close(service)
        return session_id, [r.manifest for r in plugin.packer.recent]

    session_id, before = asyncio.run(turns(["one", "two", "three"]))
    assert not any(m.compaction for m in before)
    assert main(["compact", "--db", db, "app", "u", session_id]) == 0
    _, after = asyncio.run(turns(["four"], session_id))
    assert after[0].compaction and "asked for" in after[0].compaction["reason"]
    assert asyncio.run(_get(db, session_id)).state[COMPACT_STATE_KEY] is False  # done, and cleared
