"""Two replicas over one sqlite session database build the requests one process would, byte for byte.

Each replica is its own Runner, plugin and in-memory artifact service (as two `adk api_server`
processes would be); they share a `DatabaseSessionService` file and the pack store folder, and
take turns serving the invocations of one session: a tool loop, an error result, compactions, a
recitation, calibration from reported usage and a recall of an offloaded original.
"""

from __future__ import annotations

import time
from dataclasses import replace

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.memory import InMemoryMemoryService
from google.adk.platform.time import reset_time_provider, set_time_provider
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService

from aether_context import ContextPackPlugin
from aether_context.adk.convert import request_from_llm
from aether_context.adk.session_state import CALIBRATION_STATE_KEY, StateRecords, pack_state_key, read_pack
from aether_context.store import PackStore
from aether_context.pipeline.build import request_tokens
from aether_context.store import PackStore
from aether_context.testing import ScriptedLlm, call
from aether_context.tokens import TokenCounter

from conftest import fetch_page, grep_logs, lookup, make_runner, new_session, run_turn

COUNTER = TokenCounter()
USER_TURNS = ["Audit the billing service pages and logs.", "Check the config key for retries.",
              "Fetch the status and incident pages.", "What did the first page say about refunds?",
              "Fetch the archive pages too.", "Summarise what you found."]
CLOCK0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC, the start of a minute


def open_file(path: str) -> dict:
    """Open a file of the project."""
    return {"error": f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'"}


def _recall_or_answer(req):
    """Read back an original the request cites, else answer."""
    for content in req.contents:
        for part in content.parts or []:
            response = part.function_response.response if part.function_response else None
            if response and "artifact_uri" in response:
                return call("read_artifact", uri=response["artifact_uri"])
    return "Nothing to recall."


def _script() -> list:
    return [
        call("fetch_page", url="https://billing/a"), call("fetch_page", url="https://billing/b"),
        call("grep_logs", pattern="refund"), "Pages a and b read; logs grepped.",
        call("open_file", path="conf/retries.yaml"), call("lookup", key="retries"), "Retries: see lookup.",
        call("fetch_page", url="https://billing/status"), call("fetch_page", url="https://billing/incidents"),
        "Status and incidents read.",
        _recall_or_answer, "Refunds are covered above.",
        call("fetch_page", url="https://billing/archive1"), call("fetch_page", url="https://billing/archive2"),
        "Archive read.",
        "Summary: pages, logs, config and archive reviewed.",
    ]


def _llm() -> ScriptedLlm:
    """The scripted model, reporting 15 % more prompt tokens than our estimate (calibration on)."""
    return ScriptedLlm(turns=_script(),
                       prompt_token_counter=lambda r: int(1.15 * request_tokens(request_from_llm(r), COUNTER)))


def _replica(llm: ScriptedLlm, db_url: str, store: "str | PackStore") -> tuple[Runner, ContextPackPlugin]:
    agent = LlmAgent(name="auditor", model=llm, instruction="Audit carefully.",
                     tools=[fetch_page, grep_logs, lookup, open_file])
    plugin = ContextPackPlugin(store=store, window_tokens=3_000)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]),
                    session_service=DatabaseSessionService(db_url=db_url),
                    artifact_service=InMemoryArtifactService(), memory_service=InMemoryMemoryService())
    return runner, plugin


async def _run(tmp_path, name: str, replicas: int) -> tuple[list[str], list, list, dict]:
    """Run the session's user turns, invocation i on replica i % replicas; the requests' checksums.

    The session's clock starts at the same minute in every run (`CLOCK0`, then the real time elapsed):
    Memory lines are dated to the minute from the events' times, so two runs on the wall clock differed
    whenever a minute ended between them."""
    start = time.time()
    set_time_provider(lambda: CLOCK0 + time.time() - start)
    try:
        return await _run_clocked(tmp_path, name, replicas)
    finally:
        reset_time_provider()


async def _run_clocked(tmp_path, name: str, replicas: int) -> tuple[list[str], list, list, dict]:
    llm = _llm()
    db_url = f"sqlite+aiosqlite:///{tmp_path / (name + '.db')}"
    pairs = [_replica(llm, db_url, str(tmp_path / (name + "-packs"))) for _ in range(replicas)]
    await pairs[0][0].session_service.create_session(app_name="app", user_id="u", session_id="s1",
                                                     state={"aether:goal": "Audit the billing service"})
    events = []
    for i, text in enumerate(USER_TURNS):
        events += await run_turn(pairs[i % replicas][0], "s1", text)
    session = await pairs[0][0].session_service.get_session(app_name="app", user_id="u", session_id="s1")
    assert all(CLOCK0 <= ev.timestamp < CLOCK0 + 60 for ev in session.events)  # the run's clock dated them
    manifests = [r.manifest for _, plugin in pairs for r in plugin.packer.recent]
    for runner, plugin in pairs:
        plugin.packer.store.flush()
        await runner.close()
    return [request_from_llm(r).checksum for r in llm.requests], manifests, events, session.state


async def test_alternating_replicas_send_the_requests_one_process_sends(tmp_path):
    one, one_manifests, _, one_state = await _run(tmp_path, "one", replicas=1)
    two, two_manifests, events, two_state = await _run(tmp_path, "two", replicas=2)
    assert len(one) == len(two) == len(_script())
    assert two == one  # every request byte-identical
    # the session exercised what moves a request: compaction, recitation, a failure, calibration, a recall
    assert any(m.compaction for m in one_manifests) and any(m.recited for m in one_manifests)
    assert any(m.failures for m in one_manifests) and max(m.calibration for m in one_manifests) > 1.1
    recalls = [r.response for ev in events for r in ev.get_function_responses() if r.name == "read_artifact"]
    assert recalls and all("error" not in r and r["lines"] for r in recalls)
    # the same receipts too: what the previous call left (prefix reuse, cache breaks) and the calibration
    receipts = lambda ms: sorted((m.checksum, m.prefix_tokens, m.previous_tokens, str(m.cache_break),  # noqa: E731
                                  m.calibration, m.recited, m.failures, m.reused_payload) for m in ms)
    assert receipts(two_manifests) == receipts(one_manifests)
    assert two_state[CALIBRATION_STATE_KEY] == one_state[CALIBRATION_STATE_KEY]
    async def same(state, name):  # the stored pack, ids and the session's clock aside (ADK draws invocation ids at random)
        records = StateRecords(PackStore(str(tmp_path / (name + "-packs"))))
        return replace((await read_pack(records, state, "auditor")).state, invocation_id="", pack_id="", ranked_at=0.0)
    assert await same(two_state, "two") == await same(one_state, "one")


async def test_a_corrupt_or_unknown_pack_record_is_ignored_with_a_flag(tmp_path):
    for bad in ({"v": 99, "state": {}}, {"v": 1, "state": {"agent": 3}, "texts": "x"}, "garbage",
                {"v": 2, "ref": "0" * 64}, {"v": 2, "ref": "../../etc/passwd"}):
        llm = ScriptedLlm(turns=["ok"])
        runner, plugin = _replica(llm, f"sqlite+aiosqlite:///{tmp_path / 'bad.db'}", str(tmp_path / "packs"))
        sid = f"s{abs(hash(str(bad)))}"
        await runner.session_service.create_session(app_name="app", user_id="u", session_id=sid,
                                                    state={pack_state_key("auditor"): bad})
        await run_turn(runner, sid, "hello")
        manifest = plugin.packer.recent[-1].manifest
        assert manifest.error is None and any(f.startswith("pack_state_ignored") for f in manifest.flags)
        session = await runner.session_service.get_session(app_name="app", user_id="u", session_id=sid)
        stored = await read_pack(plugin.packer.records, session.state, "auditor")
        assert stored.state is not None  # replaced by this call's state
        await runner.close()


async def test_state_holds_pointers_and_the_delta_stays_small(tmp_path):
    """Session state holds references into the store, never content: a call's delta is a few hundred bytes
    however long the session, and the pack's texts (payload, block) are not in it."""
    import json

    llm = ScriptedLlm(turns=[call("fetch_page", url="https://billing/a"), call("lookup", key="b"), "done"])
    runner, plugin = _replica(llm, f"sqlite+aiosqlite:///{tmp_path / 'w.db'}", str(tmp_path / "packs"))
    await runner.session_service.create_session(app_name="app", user_id="u", session_id="s",
                                                state={"aether:goal": "Audit the billing service"})
    for text in USER_TURNS[:3]:
        events = await run_turn(runner, "s", text)
        deltas = [{k: v for k, v in (ev.actions.state_delta or {}).items() if k.startswith("aether:")}
                  for ev in events]
        assert any(pack_state_key("auditor") in d for d in deltas)
        assert all(len(json.dumps(d)) <= 1024 for d in deltas), deltas
        assert not any("GOAL" in json.dumps(d) for d in deltas)  # the payload text lives in the store
    session = await runner.session_service.get_session(app_name="app", user_id="u", session_id="s")
    stored = await read_pack(plugin.packer.records, session.state, "auditor")
    assert stored.state is not None and "Audit the billing service" in stored.state.payload_text
    await runner.close()


async def test_a_written_pack_reads_back_as_the_state_the_next_call_sees():
    from aether_context.adk.session_state import carried_state, write_pack
    from aether_context.pipeline.inputs import PackState

    full = PackState(invocation_id="e-1", agent="a", payload_text="TASK\nGOAL: x", summary={"text": "s"},
                     message_digests=("a" * 64, "b" * 64), head_tokens=3, sent_tokens=15,
                     merged_lines=("l",), call_index=4, last_recited=2, compacted_through=3, pinned=(0,),
                     block_text="CONVERSATION SO FAR", evidence_ids=("e",), tool_names=("read_artifact",))
    store = PackStore("memory://written-pack")
    state: dict = {}
    await write_pack(StateRecords(store), state, "a", carried_state(full), 120)
    stored = await read_pack(StateRecords(store), state, "a")  # another process: read from the store
    assert stored.state == carried_state(full) and stored.free_conversation == 120 and not stored.flags
    assert set(state[pack_state_key("a")]) == {"v", "ref", "free_conversation"}
    state[pack_state_key("a")] = {**state[pack_state_key("a")], "ref": "f" * 64}  # a record the store lacks
    missing = await read_pack(StateRecords(store), state, "a")
    assert missing.state is None and missing.flags


def test_originals_choice_reaches_the_gateway(tmp_path):
    plugin = ContextPackPlugin(store=str(tmp_path / "p"), originals="adk")
    assert plugin.packer.gateway.originals == "adk"


async def test_a_flag_left_before_the_first_pack_reaches_the_first_manifest(memory_store_url):
    """A flag left while the agent has no pack record yet (before its first pack, or after packing
    failed open) is kept, reported by the next manifest once, then consumed."""
    from aether_context.adk.session_state import flag_next_call

    def note_before_packing(callback_context):
        if "ref" not in (callback_context.state.get(pack_state_key("noter")) or {}):
            flag_next_call(callback_context.state, "noter", "summary_failed: before any pack")

    agent = LlmAgent(name="noter", model=ScriptedLlm(turns=["first", "second"]), instruction="Answer.",
                     before_agent_callback=note_before_packing)
    plugin = ContextPackPlugin(store=memory_store_url)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "hello")
    await run_turn(runner, sid, "again")
    first, second = [r.manifest for r in plugin.packer.recent]
    assert "summary_failed: before any pack" in first.flags
    assert "summary_failed: before any pack" not in second.flags
    assert not any(f.startswith("pack_state_ignored") for f in first.flags + second.flags)


async def test_flags_without_a_pack_record_are_kept():
    from aether_context.adk.session_state import flag_next_call

    state: dict = {}
    flag_next_call(state, "a", "one")
    flag_next_call(state, "a", "two")
    stored = await read_pack(StateRecords(PackStore("memory://flags")), state, "a")
    assert stored.flags == ("one", "two") and stored.state is None
