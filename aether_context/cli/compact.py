"""Manual compaction of a stored session: an ADK event whose state delta asks for it.

The plugin reads the state key at the session's next model call (`ContextPacker.compact` sets the same
key from Python), compacts the conversation and records why in that call's manifest; the flag is
cleared then. This only writes the request.
"""

from __future__ import annotations

import asyncio
import os
import time

from ..adk.session_state import COMPACT_STATE_KEY
from ..errors import StoreError

__all__ = ["COMPACT_STATE_KEY", "request_compaction", "session_service"]


def session_service(uri: str):
    """The session service `adk web --session_service_uri URI` would use (sqlite://, postgresql://, ...);
    other SQLAlchemy URLs (e.g. sqlite+aiosqlite://) go to ADK's DatabaseSessionService."""
    from google.adk.cli.service_registry import get_service_registry

    service = get_service_registry().create_session_service(uri)
    if service is None:
        from google.adk.sessions import DatabaseSessionService

        service = DatabaseSessionService(uri)
    return service


async def _append(db_url: str, app: str, user: str, session_id: str) -> str:
    from google.adk.events import Event, EventActions

    service = session_service(db_url)
    try:
        session = await service.get_session(app_name=app, user_id=user, session_id=session_id)
        if session is None:
            raise StoreError(f"no session {app}/{user}/{session_id} in {db_url}: check the app, user and session id")
        event = Event(invocation_id=Event.new_id(), author="user", timestamp=time.time(),
                      actions=EventActions(state_delta={COMPACT_STATE_KEY: True}))
        await service.append_event(session, event)
        return event.id
    finally:
        close = getattr(service, "close", None)
        if close is not None and asyncio.iscoroutine(done := close()):
            await done


def _check_sqlite_file(db_url: str) -> None:
    """A sqlite URL must name an existing file: opening a missing one would create an empty database."""
    scheme, sep, rest = db_url.partition(":///")
    if not sep or not scheme.split("+", 1)[0] == "sqlite":
        return
    path = rest.split("?", 1)[0]
    if path in ("", ":memory:"):
        raise StoreError(f"{db_url!r} names no database file: give the sessions database, e.g. sqlite:///sessions.db")
    if not os.path.isfile(path):
        raise StoreError(f"no database file {path!r} for {db_url!r}: check the path (the one given to "
                         "`adk web --session_service_uri`); nothing was created")


def request_compaction(db_url: str, app: str, user: str, session_id: str) -> str:
    """Append the compaction request to the session in `db_url`; returns the event id."""
    _check_sqlite_file(db_url)
    try:
        return asyncio.run(_append(db_url, app, user, session_id))
    except ImportError as e:
        raise StoreError(f"{e} (the compact verb needs ADK's database sessions: pip install 'google-adk[db]')") from e
