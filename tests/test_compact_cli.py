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
