"""The recall tool at the edge: bad arguments, failing stores, exact read-back, size bounds, replicas."""

from __future__ import annotations

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService, InMemorySessionService
from google.genai import types

from aether_context import ContextPackPlugin
from aether_context.adk.offload import _read
from aether_context.store import PackStore
from aether_context.testing import ScriptedLlm, call

from conftest import offloaded_uri

ODD = "".join(f"row {i}\tsep\u2028x\u2029y\x1c{{\"k\": [1, 2.50, \"\\u00e9\"]}}\x85end\r\n" for i in range(300))
LONG_LINE = "z" * 50_000


def odd_text() -> str:
    """Return text with unusual separators."""
    return ODD


def long_line() -> str:
    """Return one very long line."""
    return LONG_LINE



def _runner(turns, store, *, tool=odd_text, session_service=None, artifact_service=None, originals=None):
    llm = ScriptedLlm(turns=turns)
    agent = LlmAgent(name="agent", model=llm, instruction="Work.", tools=[tool])
    plugin = ContextPackPlugin(store=store, window_tokens=16_000)
    if originals:
        plugin.packer.gateway.originals = originals
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]),
                    session_service=session_service or InMemorySessionService(),
                    artifact_service=artifact_service if artifact_service is not None else InMemoryArtifactService())
    return llm, plugin, runner


async def _turn(runner, session_id, text="go"):
    events = []
    async for ev in runner.run_async(user_id="u", session_id=session_id,
                                     new_message=types.Content(role="user", parts=[types.Part(text=text)])):
        events.append(ev)
    return events


def _recalls(events) -> list[dict]:
    return [r.response for ev in events for r in ev.get_function_responses() if r.name == "read_artifact"]


BAD = [
    ({"uri": 123}, "uri must be"), ({"uri": None}, "uri must be"), ({"uri": ""}, "uri must be"),
    ({"start_line": "abc"}, "start_line must be a whole number"), ({"max_lines": 2.5}, "max_lines must be a whole number"),
    ({"start_line": -3}, "start_line must be >= 1"), ({"max_lines": 0}, "max_lines must be >= 1"),
    ({"start_line": True}, "start_line must be a whole number"), ({"start_char": -1}, "start_char must be >= 0"),
    ({"search": 5}, "search must be text"), ({"uri": "s3://bucket/x"}, "not an artifact URI"),
    ({"uri": "artifact://app/u/SESSION/tool_output/missing.txt#v0"}, "not found"),
    ({"uri": "artifact://app/u/other-session/x.txt"}, "refused"),
    ({"uri": "artifact://app/u/SESSION/" + "x" * 100_000}, "uri must be"),  # a huge argument: a short error
]


async def test_every_bad_argument_gets_an_error_result(tmp_path):
    def script(i, args):
        def turn(req):
            good = offloaded_uri(req)
            full = {"uri": good, **args}
            if isinstance(full["uri"], str) and "SESSION" in full["uri"]:
                full["uri"] = full["uri"].replace("SESSION", good.split("/")[4])
            return call("read_artifact", **full)
        return turn

    turns = [call("odd_text")] + [script(i, args) for i, (args, _) in enumerate(BAD)] + ["done"]
    llm, plugin, runner = _runner(turns, str(tmp_path / "packs"))
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    got = _recalls(await _turn(runner, session.id))
    assert len(got) == len(BAD)
    for (args, expected), response in zip(BAD, got):
        assert expected in response.get("error", ""), (args, response)
        assert len(str(response)) < 1_000  # an error result stays small whatever the argument


class FailingStore(PackStore):
    def get_artifact(self, *args, **kwargs):
        raise OSError(5, "Input/output error")


async def test_a_failing_store_gives_an_error_result(tmp_path):
    store = FailingStore(str(tmp_path / "packs"))
    turns = [call("odd_text"), lambda req: call("read_artifact", uri=offloaded_uri(req)), "done"]
    llm, plugin, runner = _runner(turns, store, originals="store")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    got = _recalls(await _turn(runner, session.id))
    assert "could not be read" in got[0]["error"] and "Input/output error" in got[0]["error"]


async def test_the_original_reads_back_exactly(tmp_path):
    turns = [call("odd_text"), lambda req: call("read_artifact", uri=offloaded_uri(req), max_lines=400), "done"]
    llm, plugin, runner = _runner(turns, str(tmp_path / "packs"))
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    got = _recalls(await _turn(runner, session.id))[0]
    assert got["total_lines"] == 300 and got["lines"] + "\n" == ODD  # \r\n, \u2028, \x85 and JSON text unchanged


async def test_a_reply_is_bounded_by_size_and_continues(tmp_path):
    def next_piece(req):
        return call("read_artifact", uri=offloaded_uri(req), start_line=1, start_char=16_000)

    turns = [call("long_line"), lambda req: call("read_artifact", uri=offloaded_uri(req)), next_piece, "done"]
    llm, plugin, runner = _runner(turns, str(tmp_path / "packs"), tool=long_line)
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    first, second = _recalls(await _turn(runner, session.id))
    assert len(first["lines"]) == 16_000 and first["next_start_char"] == 16_000 and first["line_chars"] == 50_000
    assert second["lines"] == LONG_LINE[16_000:32_000]


def test_read_bounds_lines_by_characters():
    text = "\n".join("x" * 100 for _ in range(1000))
    out = _read(text, 1, 400, "", 5_000)
    assert out["end_line"] == 49 and out["next_start_line"] == 50 and len(out["lines"]) <= 5_000
    hits = _read(text, 1, 400, "x", 5_000)
    assert hits["truncated"] and len(hits["lines"]) <= 5_000 and hits["matches"] == 1000


@pytest.mark.parametrize("originals, recalled", [("auto", True), ("adk", False)])
async def test_a_second_replica_recalls_an_original(tmp_path, originals, recalled):
    """Durable sessions (sqlite) with per-replica in-memory artifact services: originals go to the pack store."""
    db = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    store = str(tmp_path / "packs")
    one_llm, one, runner_a = _runner([call("odd_text"), "saved"], store, originals=originals,
                                     session_service=DatabaseSessionService(db_url=db))
    session = await runner_a.session_service.create_session(app_name="app", user_id="u")
    await _turn(runner_a, session.id, "read the data")
    await runner_a.close()
    turns = [lambda req: call("read_artifact", uri=offloaded_uri(req), search="row 299"), "done"]
    _, two, runner_b = _runner(turns, store, session_service=DatabaseSessionService(db_url=db))  # a new process
    got = _recalls(await _turn(runner_b, session.id, "what was in row 299?"))[0]
    await runner_b.close()
    if recalled:
        assert got["matches"] == 1 and got["lines"].startswith("300: row 299\t")
    else:  # an explicit opt-in to the per-process service: the other replica cannot see the original
        assert "not found" in got["error"]


KEY = "AKIAIOSFODNN7QX3PL2M"


def env_dump() -> str:
    """Return a long config dump with a cloud key in it."""
    return "\n".join(f"setting_{i} = value {i}" for i in range(300)) + f"\nAWS_ACCESS_KEY_ID={KEY}\n"


async def test_offloaded_originals_are_masked(tmp_path):
    turns = [call("env_dump"), lambda req: call("read_artifact", uri=offloaded_uri(req), search="AWS_ACCESS"), "done"]
    llm, plugin, runner = _runner(turns, str(tmp_path / "packs"), tool=env_dump, originals="store")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    got = _recalls(await _turn(runner, session.id))[0]
    assert got["lines"] == "301: AWS_ACCESS_KEY_ID=[REDACTED:aws_access_key]"
    plugin.packer.store.flush()
    store = plugin.packer.store
    stored = [store.get_blob(p.name) if p.parent.parent.name == "blobs" else p.read_bytes()
              for p in (tmp_path / "packs").rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert stored and not any(KEY.encode() in b for b in stored)
