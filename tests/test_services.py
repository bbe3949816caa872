"""The plugin on real services: ADK's `DatabaseSessionService` on PostgreSQL and the pack store on an
S3-compatible server (moto) through s3fs, as `adk api_server` replicas run in production.

`make test-services` (or `bash .ci/services run make test`, which `.ci/run` does) starts both on 127.0.0.1
and sets AETHER_TEST_PG_URL and AETHER_TEST_S3_ENDPOINT. Without them these tests skip; under CI they fail,
so CI cannot pass without the services. Each test gets its own databases and buckets.

The agent, tools, scripted model and user turns are `test_replicas`' (there on sqlite and a folder, in
one process); here the replicas are processes (`services_replica.py`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from google.adk.platform.time import reset_time_provider, set_time_provider
from google.adk.sessions import DatabaseSessionService

from aether_context.store import PackStore

from aether_context import ContextPackPlugin
from aether_context.errors import ManifestError, StoreError
from aether_context.testing import call

from conftest import make_runner, new_session, run_turn, scripted_agent
from services_replica import _cited, _recalls
from test_replicas import CLOCK0, USER_TURNS, _llm, _replica, _script

PG_ENV, S3_ENV = "AETHER_TEST_PG_URL", "AETHER_TEST_S3_ENDPOINT"
ROOT = Path(__file__).resolve().parent.parent
GOAL = {"aether:goal": "Audit the billing service"}


def _service(name: str, what: str) -> str:
    value = os.environ.get(name, "")
    if value:
        return value
    reason = f"{name} is not set ({what}): run `make test-services`, or `bash .ci/services run make test`"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}. Under CI the service tests must run, not skip.", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
async def databases():
    """A factory of fresh PostgreSQL databases (URLs for `DatabaseSessionService`), dropped afterwards."""
    import asyncpg
    from sqlalchemy.engine import make_url

    base = make_url(_service(PG_ENV, "postgresql+asyncpg://user@127.0.0.1:PORT/DB, for ADK's DatabaseSessionService"))
    dsn = base.set(drivername="postgresql").render_as_string(hide_password=False)
    made: list[str] = []

    async def new(name: str) -> str:
        db = f"aether_{name}_{uuid.uuid4().hex[:8]}"
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{db}"')
        finally:
            await conn.close()
        made.append(db)
        return base.set(database=db).render_as_string(hide_password=False)

    yield new
    conn = await asyncpg.connect(dsn)
    try:
        for db in made:
            await conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture
def s3_options() -> dict:
    """s3fs settings for the S3 server (moto takes any key)."""
    endpoint = _service(S3_ENV, "http://127.0.0.1:PORT of an S3-compatible server such as moto_server")
    return {"endpoint_url": endpoint, "key": "aether-test", "secret": "aether-test"}


@pytest.fixture
def buckets(s3_options):
    """A factory of fresh buckets (`s3://` URLs), emptied and removed afterwards."""
    import s3fs

    fs = s3fs.S3FileSystem(**s3_options, use_listings_cache=False)
    made: list[str] = []

    def new(name: str) -> str:
        bucket = f"aether-{name}-{uuid.uuid4().hex[:8]}"
        fs.mkdir(bucket)
        made.append(bucket)
        return f"s3://{bucket}"

    yield new
    for bucket in made:
        fs.rm(bucket, recursive=True)


@pytest.fixture
def session_clock():
    """The replicas' session clock (`services_replica`): CLOCK0 plus a tenth of the real time elapsed."""
    start = time.time()
    set_time_provider(lambda: CLOCK0 + (time.time() - start) / 10)
    yield start
    reset_time_provider()


async def _create_session(db_url: str, session_id: str) -> None:
    service = DatabaseSessionService(db_url=db_url)
    await service.create_session(app_name="app", user_id="u", session_id=session_id, state=GOAL)
    await service.close()


async def _stored_events(db_url: str, session_id: str) -> list:
    """The session's events as a fresh service (another process) reads them."""
    service = DatabaseSessionService(db_url=db_url)
    session = await service.get_session(app_name="app", user_id="u", session_id=session_id)
    await service.close()
    return session.events


def _manifest_uri(event) -> str | None:
    """The manifest of the model call that made `event` (shown on the model's response event)."""
    return ((event.custom_metadata or {}).get("aether_context") or {}).get("manifest_uri")


def _all_manifests(store_url: str, options: dict) -> tuple[set[str], list]:
    """Every manifest in the bucket, read and verified by a fresh store; the ones that failed."""
    errors: list = []
    found = PackStore(store_url, storage_options=options, background=False).list_manifests(errors=errors)
    return set(found), errors


async def test_a_tool_loop_on_postgres_and_s3(databases, buckets, s3_options, session_clock):
    db_url, store_url = await databases("loop"), buckets("loop") + "/packs"
    llm = _llm()
    store = PackStore(store_url, storage_options=s3_options)
    runner, plugin = _replica(llm, db_url, store)
    await runner.session_service.create_session(app_name="app", user_id="u", session_id="s1", state=GOAL)
    events = []
    for text in USER_TURNS[:4]:  # fetches, an error, more fetches, a recall
        events += await run_turn(runner, "s1", text)
    store.flush()
    await runner.close()
    assert store.stats().get("failed", 0) == 0 and store.stats()["manifests"] == len(llm.requests) == 12
    cited = {uri for r in llm.requests for uri in _cited(r)}
    assert cited  # large results were offloaded; the originals are in the bucket
    assert store.fs.find(f"{store.root}/artifacts")
    recalls = _recalls(events)
    assert recalls and recalls[0]["uri"] in cited and recalls[0]["response"]["lines"]
    assert "error" not in recalls[0]["response"]
    found, errors = _all_manifests(store_url, s3_options)  # what another process finds in the bucket
    assert found == {r.uri for r in plugin.packer.recent} and not errors
    stored = await _stored_events(db_url, "s1")
    assert {ev.id for ev in events} <= {ev.id for ev in stored}
    assert {_manifest_uri(ev) for ev in stored} - {None} == found  # each call's event names its manifest


class _SlowStore(PackStore):
    """A store whose files take 50 ms each to write, as a remote bucket's would."""

    def _write(self, rel: str, data: bytes) -> None:
        time.sleep(0.05)
        super()._write(rel, data)


async def test_a_durable_call_is_in_the_store_before_its_answer_is_recorded(tmp_path):
    """No services needed: with `durable=True` the tool the model called (run after ADK recorded the model's
    answer) finds that call's manifest readable by another store. Without it, this fails: the call's files
    are still queued behind the slow writes."""
    url = f"file://{tmp_path}/packs"
    plugin = ContextPackPlugin(store=_SlowStore(url), durable=True)
    readable = []

    def check(key: str) -> dict:
        """Look up a fact."""
        try:
            PackStore(url, background=False).load_manifest(plugin.packer.recent[-1].uri)
            readable.append(True)
        except (ManifestError, StoreError):
            readable.append(False)
        return {"key": key}

    agent, _ = scripted_agent([call("check", key="a"), call("check", key="b"), "done"], tools=[check])
    runner = make_runner(agent, plugins=[plugin])
    await run_turn(runner, await new_session(runner), "check twice")
    assert readable == [True, True]
    await runner.close()


# ------------------------------------------------------------------------ replica processes
class _Process:
    """A replica process (`services_replica.py`), asked one turn at a time."""

    def __init__(self, db_url: str, store_url: str, options: dict, start: float, log: Path):
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "services_replica.py"), db_url, store_url, json.dumps(options),
             repr(start)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("w"), text=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))})

    def ask(self, session: str, text: str, cursor: int, mark: int = 0) -> dict | None:
        """The turn's answer; None when `mark` was reached and the process killed there (SIGKILL)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"session": session, "text": text, "cursor": cursor, "mark": mark}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if mark and line.strip() == "MARK":
            os.kill(self.proc.pid, signal.SIGKILL)
            assert self.proc.wait(timeout=30) == -signal.SIGKILL
            return None
        if not line:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"replica process ended (exit code {self.proc.wait()}):\n{tail}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def _drive(replicas: list[_Process], session: str, turns: list[int], cursors: dict[int, int]) -> list[dict]:
    """User turns `turns` of `test_replicas`, the k-th on replica k % len(replicas); each answer with `served_by`."""
    answers = []
    for k, i in enumerate(turns):
        answer = replicas[k % len(replicas)].ask(session, USER_TURNS[i], cursors.get(i, 0))
        cursors[i + 1] = answer["cursor"]
        answers.append({**answer, "served_by": k % len(replicas)})
    return answers


def _saved_by(answers: list[dict]) -> dict[str, int]:
    """Which replica offloaded each original: the first to cite it (its tool call ran there)."""
    saved: dict[str, int] = {}
    for a in answers:
        for uris in a["cited"]:
            for uri in uris:
                saved.setdefault(uri, a["served_by"])
    return saved


async def test_two_replica_processes_share_one_database_and_bucket(databases, buckets, s3_options, session_clock,
                                                                    tmp_path):
    """Two replica processes alternating the turns of one session send the requests one process sends, byte for
    byte; a recall is answered by the replica that did not save the original; killing one mid-turn (SIGKILL, its
    writes in flight) loses no finished call (its event in the session and its manifest in the bucket, with
    `durable=True`), and the other replica goes on with the session."""
    one_db, two_db = await databases("one"), await databases("two")
    one_store, two_store = buckets("one") + "/packs", buckets("two") + "/packs"
    for db, session in ((one_db, "s1"), (two_db, "s1"), (two_db, "k1")):
        await _create_session(db, session)  # creates ADK's tables before the replicas share them
    procs = [_Process(one_db, one_store, s3_options, session_clock, tmp_path / "one.log"),
             _Process(two_db, two_store, s3_options, session_clock, tmp_path / "two-a.log"),
             _Process(two_db, two_store, s3_options, session_clock, tmp_path / "two-b.log")]
    watchdog = threading.Timer(600, lambda: [p.proc.kill() for p in procs])
    watchdog.start()
    try:
        turns = list(range(len(USER_TURNS)))
        cursors: dict[int, int] = {}
        one = _drive(procs[:1], "s1", turns, cursors)
        two = _drive(procs[1:], "s1", turns, dict(cursors))
        checksums = lambda answers: [c for a in answers for c in a["checksums"]]  # noqa: E731
        assert len(checksums(one)) == len(_script()) and checksums(two) == checksums(one)
        assert all(a["failed"] == 0 for a in one + two)
        saved = _saved_by(two)
        recalls = [(r, a["served_by"]) for a in two for r in a["recalls"]]
        assert recalls and all(r["response"].get("lines") and "error" not in r["response"] for r, _ in recalls)
        assert all(saved[r["uri"]] != served for r, served in recalls)  # answered on the other replica
        found, errors = _all_manifests(two_store, s3_options)
        assert found == {m for a in two for m in a["manifests"]} and not errors

        # session k1: replica a serves turns 0 and 1, replica b 2 (killed at its second model call, after the
        # first call's offload and with its records being written), then replica a the recall turn
        answered = _drive(procs[1:], "k1", [0, 1], dict(cursors))
        assert procs[2].ask("k1", USER_TURNS[2], cursors[2], mark=2) is None
        answered.append({**procs[1].ask("k1", USER_TURNS[3], cursors[3]), "served_by": 0})
        assert answered[-1]["recalls"] and all("error" not in r["response"] for r in answered[-1]["recalls"])
        found_after, errors = _all_manifests(two_store, s3_options)
        assert not errors  # no manifest half-written
        assert {m for a in answered for m in a["manifests"]} <= found_after  # every answered call's manifest
        stored = await _stored_events(two_db, "k1")
        assert {ev for a in answered for ev in a["events"]} <= {ev.id for ev in stored}  # and its events
        recorded = {_manifest_uri(ev) for ev in stored} - {None}  # every call whose answer the session holds...
        assert recorded <= found_after  # ...has its manifest in the bucket, the killed turn's finished call too
        assert recorded - {m for a in answered for m in a["manifests"]}  # (the kill came after one)
    finally:
        watchdog.cancel()
        for p in procs:
            p.close()
