"""Goal recitation and failure evidence through a real ADK Runner."""

from __future__ import annotations

from aether_context.content import canonical_json

import re

from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.artifacts import InMemoryArtifactService
from google.adk.memory import InMemoryMemoryService
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from aether_context import ContextPackPlugin, TokenCounter, load_profile, set_task
from aether_context.adk import request_from_llm
from aether_context.content import TextPart
from aether_context.testing import ScriptedLlm, call

COUNTER = TokenCounter()
GOAL = "Fix the failing date parser test in utils/dates.py"


def run_tests(path: str) -> dict:
    """Run the tests of a file."""
    return {"returncode": 0, "output": f"ran tests in {path}: 3 passed"}


def read_secret(path: str) -> dict:
    """Read a protected file."""
    return {"error": f"PermissionError: [Errno 13] Permission denied: '{path}'"}


async def _run(turns, tools, texts=("start",), profile="default"):
    llm = ScriptedLlm(turns=turns)
    agent = LlmAgent(name="fixer", model=llm, instruction="Fix bugs.", tools=tools)
    plugin = ContextPackPlugin(store="memory://agent-loop", window_tokens=32_000, profile=profile)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService(),
                    artifact_service=InMemoryArtifactService(), memory_service=InMemoryMemoryService())
    state: dict = {}
    set_task(state, goal=GOAL, step="Reproduce the failure", acceptance=["test passes", "no other test breaks"],
             plan=[("Reproduce the failure", True), ("Fix the parser", False), "Run the whole suite"])
    session = await runner.session_service.create_session(app_name="app", user_id="u", state=state)
    for text in texts:
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            pass
    return plugin, llm


def _statuses(message) -> list[str]:
    return [p.text for p in message.parts if isinstance(p, TextPart) and p.text.startswith("STATUS")]


async def test_recitation_rides_at_the_end_capped_and_kept_as_sent():
    """The status is the final part of the user's message on the first call; inside the tool loop a
    later status rides after ADK's function response (its parts[0] unchanged), and every status is
    re-sent where it was sent by every later call of the invocation (append-only)."""
    turns = [[types.Part(text="Running the date parser test."), call("run_tests", path="utils/dates.py")]] * 6 + ["fixed"]
    plugin, llm = await _run(turns, [run_tests])
    sent = [request_from_llm(r) for r in llm.requests]
    first = sent[0].messages[-1]
    assert plugin.packer.recent[0].manifest.recited  # always on the first call
    status = first.parts[-1]
    assert first.role == "user" and not first.responses and _statuses(first) == [status.text]
    assert status.text.startswith("STATUS — goal: " + GOAL)
    assert "progress 1/3; next: Fix the parser" in status.text
    assert "open: test passes; no other test breaks" in status.text
    assert COUNTER.count_text(status.text) <= 500
    kept = [status.text]
    for req, record in zip(sent[1:], list(plugin.packer.recent)[1:]):
        last = req.messages[-1]
        assert last.responses and last.parts[0] == last.responses[0]  # ADK's function response comes first
        if record.manifest.recited:
            assert len(last.parts) == 2 and _statuses(last) == [last.parts[-1].text]
            kept.append(last.parts[-1].text)
        else:
            assert len(last.parts) == 1
        assert [s for m in req.messages for s in _statuses(m)] == kept  # every earlier status where it was sent
        assert req.messages[len(sent[0].messages) - 1] == first
    assert 1 < len(kept) < len(sent)  # recited again in the loop, not on every call
    for before, after in zip(sent, sent[1:]):
        assert after.messages[:len(before.messages)] == before.messages


def _recital_count(plugin) -> int:
    return sum(r.manifest.recited for r in plugin.packer.recent)


async def test_drift_from_the_goal_raises_the_recitation_frequency():
    """The interval rule, where a status may go on every call (placement 'sticky_part')."""
    every_call = load_profile("default").override(recitation={"placement": "sticky_part"})
    on_track = [[types.Part(text="Checking the date parser test in utils/dates.py."), call("run_tests", path="utils/dates.py")]] * 12
    drifted = [[types.Part(text="Looking at the weather API pagination instead."), call("run_tests", path="weather/api.py")]] * 12
    p1, _ = await _run(on_track + ["done"], [run_tests], profile=every_call)
    p2, _ = await _run(drifted + ["done"], [run_tests], profile=every_call)
    assert _recital_count(p2) > _recital_count(p1), (_recital_count(p1), _recital_count(p2))


async def test_failures_are_recorded_categorised_and_shown():
    turns = [call("read_secret", path="/etc/shadow")] * 3 + ["giving up"]
    plugin, llm = await _run(turns, [read_secret], texts=("read the secret", "try again"))
    # the second invocation's payload carries the failures section with a repeat warning
    payloads = [m.text for r in llm.requests for m in request_from_llm(r).messages if m.text.startswith("CONTEXT PACK")]
    last_payload = payloads[-1]
    assert "FAILURES SO FAR" in last_payload
    assert "permission" in last_payload and "read_secret" in last_payload
    assert "repeat" in last_payload.lower() or "3" in last_payload
    # the next invocation's status lists the latest errors
    statuses = [s for r in llm.requests for s in _statuses(request_from_llm(r).messages[-1])]
    assert any("last errors:" in s and "Permission denied" in s for s in statuses)
    # one repeated failure is one entry in the status block, not three (a warning note may follow it)
    assert all(s.split("FAILURES SINCE THE PACK")[0].count("Permission denied") <= 1 for s in statuses)
    manifests = [r.manifest for r in plugin.packer.recent]
    assert manifests[-1].failures == 3 and manifests[0].failures == 0
    assert all(lb.dropped >= 0 for m in manifests for lb in m.layer_budgets.values())


async def test_a_new_failure_in_a_frozen_pack_is_shown_where_adk_put_it_and_listed_by_a_later_status():
    """The payload is frozen within an invocation (cache); a failure after it is in ADK's own function
    response on every later call, a later status of the loop lists it, and the next invocation shows it."""
    on_track = types.Part(text="Fix the failing date parser test in utils/dates.py: running the date parser test.")
    turns = [[on_track, call("run_tests", path="utils/dates.py")], [on_track, call("read_secret", path="/etc/shadow")]]
    turns += [[on_track, call("run_tests", path="utils/dates.py")]] * 6 + ["done", "ok"]
    plugin, llm = await _run(turns, [run_tests, read_secret], texts=("start", "go on"))
    sent = [request_from_llm(r) for r in llm.requests]
    records = list(plugin.packer.recent)
    loop = [i for i, r in enumerate(records) if r.manifest.invocation_id == records[0].manifest.invocation_id]
    for i in loop[2:]:  # every call of the invocation after the failed one
        assert records[i].manifest.reused_payload and records[i].manifest.cache_break is None
        assert any("Permission denied" in str(r.response) for m in sent[i].messages for r in m.responses)
        last = sent[i].messages[-1]
        assert last.responses and last.parts[0] == last.responses[0]  # ADK's own response first, notes after it
    for prev, cur in zip(loop[1:], loop[2:]):  # each request extends the one before
        assert sent[cur].messages[:len(sent[prev].messages)] == sent[prev].messages
    statuses = [s for i in loop for s in _statuses(sent[i].messages[-1])]
    assert any("last errors:" in s and "Permission denied" in s for s in statuses[1:])  # a later status lists it
    after = sent[loop[-1] + 1]  # the next invocation's first call still shows it
    assert any("Permission denied" in m.text + canonical_json([r.response for r in m.responses])
               for m in after.messages)


def run_script(path: str) -> dict:
    """Run a Python script (its traceback is long: the shell result is offloaded)."""
    frames = "".join(f'  File "/repo/pkg/mod{i}.py", line {i + 10}, in step{i}\n    step{i + 1}()\n' for i in range(60))
    return {"output": "<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n" + frames
            + "sqlite3.OperationalError: no such table: app_book\n\nThe above exception was the direct cause of "
            "the following exception:\n\nTraceback (most recent call last):\n" + frames
            + "django.db.utils.OperationalError: no such table: app_book\n</output>"}


async def test_a_failure_inside_an_offloaded_result_is_shown_with_its_cause_and_uri():
    """The offloaded result's compact form shows the failure, its cause and the original's URI; the
    FAILURES SO FAR section would only repeat them, so the pack leaves it out (issue 11: pay only for
    what helps) while the failing turn is still sent."""
    turns = [call("run_script", path="reproduce.py"), "next", "done"]
    plugin, llm = await _run(turns, [run_script], texts=("run it", "and now?"))
    sent = request_from_llm(llm.requests[-1])
    text = "\n".join(m.text + " ".join(canonical_json(r.response) for r in m.responses) for m in sent.messages)
    assert "django.db.utils.OperationalError: no such table: app_book" in text
    assert "sqlite3.OperationalError: no such table: app_book" in text
    assert re.search(r"artifact://app/u/[^\s\"]+/tool-output/run_script-", text)
    assert "FAILURES SO FAR" not in text
    assert plugin.packer.recent[-1].manifest.failures == 1  # recorded in the session's failure log


FIXTURE_REPO = __import__("pathlib").Path(__file__).parent / "fixtures" / "coderepo"


async def test_the_repo_map_reaches_the_request_as_evidence(tmp_path):
    from aether_context import CodeContextProvider
    from aether_context.providers.code import CodeContextSettings

    (tmp_path / ".gitignore").write_text("vendor/\n")
    for rel in ("shop/main.py", "shop/models.py", "web/src/api/client.ts", "vendor/lib.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((FIXTURE_REPO / rel).read_text() if (FIXTURE_REPO / rel).exists() else "X = 1\n")
    provider = CodeContextProvider(tmp_path, CodeContextSettings(max_tokens=1500))
    llm = ScriptedLlm(turns=["looked"])
    agent = LlmAgent(name="coder", model=llm, instruction="Code.")
    plugin = ContextPackPlugin(store="memory://code-ctx", window_tokens=32_000, evidence_providers=[provider])
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=types.Content(
            role="user", parts=[types.Part(text="Why does shop/main.py crash when getUser fails?")])):
        pass
    payload = request_from_llm(llm.requests[0]).messages[-1].text
    assert "[code:shop/main.py] shop/main.py (named in the task):" in payload
    assert "web/src/api/client.ts (repo map #" in payload and "async function getUser(id: number)" in payload
    assert "vendor/lib.py" not in payload
    code_items = [s for s in plugin.packer.recent[0].manifest.selected["evidence"] if s["id"].startswith("code:")]
    assert {i["id"] for i in code_items} == {"code:shop/main.py", "code:shop/models.py", "code:web/src/api/client.ts"}
    assert all(item["source"] == "code" for item in code_items)


async def test_a_sync_evidence_provider_never_runs_on_the_event_loop():
    """A provider may index a repository on its first call (seconds): it runs on a worker thread, and one
    past its deadline leaves this call without its items instead of holding the run."""
    import threading
    import time

    from aether_context.adk.collect import _provided
    from aether_context.pipeline.inputs import EvidenceItem, TaskSpec
    from aether_context.providers import EvidenceRequest

    threads = []

    def provider(request):
        threads.append(threading.current_thread())
        return [EvidenceItem(id="ev-1", summary="found", source="code")]

    llm = ScriptedLlm(turns=["ok"])
    plugin = ContextPackPlugin(store="memory://providers", window_tokens=32_000, evidence_providers=[provider])
    runner = Runner(app=App(name="app", root_agent=LlmAgent(name="a", model=llm, instruction="Answer."),
                            plugins=[plugin]), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=types.Content(
            role="user", parts=[types.Part(text="What was found?")])):
        pass
    assert threads and threading.main_thread() not in threads
    assert "found" in request_from_llm(llm.requests[0]).messages[-1].text

    def slow(request):
        time.sleep(1.0)
        return []

    ask = EvidenceRequest(task=TaskSpec(), user_request="q", recent_texts=())
    assert await _provided(slow, ask, 0.05) is None


async def test_compact_json_tool_results_are_faithful_and_shorter():
    from aether_context import load_profile
    from aether_context.compress.compact_json import expand_compact_json

    rows = [{"flight": f"HAT{i:03d}", "origin": "JFK", "destination": "SFO", "status": "available", "price": 100 + i}
            for i in range(30)]

    def search_flights(origin: str) -> dict:
        """Search flights."""
        return {"flights": rows}

    llm = ScriptedLlm(turns=[call("search_flights", origin="JFK"), "found"])
    agent = LlmAgent(name="agent", model=llm, instruction="Book.", tools=[search_flights])
    profile = load_profile("default").override(variation={"compact_json": True}, offload={"enabled": False})
    plugin = ContextPackPlugin(store="memory://compact-json", window_tokens=32_000, profile=profile)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id,
                                    new_message=types.Content(role="user", parts=[types.Part(text="flights from JFK")])):
        pass
    sent = [r for m in request_from_llm(llm.requests[1]).messages for r in m.responses][0].response
    compact = sent["result_compact_json"]
    assert expand_compact_json(compact) == {"flights": rows}
    import json
    assert COUNTER.count_text(compact) < 0.8 * COUNTER.count_text(json.dumps({"flights": rows}, separators=(",", ":")))


def explode(path: str) -> dict:
    """A tool that raises."""
    raise FileNotFoundError(f"[Errno 2] No such file or directory: '{path}'")


async def test_tool_exceptions_become_recorded_error_results_when_asked():
    from aether_context import context_pack_callback, load_profile
    from aether_context.adk.session_state import FAILURES_STATE_KEY

    profile = load_profile("default").override(failures={"errors_as_results": True})
    cb = context_pack_callback(store="memory://agent-loop-cb", window_tokens=32_000, profile=profile)
    llm = ScriptedLlm(turns=[call("explode", path="missing.txt"), "stopped"])
    agent = LlmAgent(name="fixer", model=llm, instruction="Fix bugs.", tools=[explode], before_model_callback=cb,
                     after_tool_callback=cb.after_tool, on_tool_error_callback=cb.on_tool_error)
    runner = Runner(app=App(name="app", root_agent=agent), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id,
                                    new_message=types.Content(role="user", parts=[types.Part(text="go")])):
        pass
    session = await runner.session_service.get_session(app_name="app", user_id="u", session_id=session.id)
    records = (await cb.packer.records.get(session.state, FAILURES_STATE_KEY))["records"]
    assert [(r["tool"], r["category"]) for r in records] == [("explode", "not_found")]
    # the model saw the error as the tool's result, and the run went on to its answer
    sent = request_from_llm(llm.requests[1])
    responses = [r.response for m in sent.messages for r in m.responses]
    assert len(responses) == 1 and "FileNotFoundError" in str(responses[0])
    assert len(llm.requests) == 2


async def test_without_the_switch_a_tool_exception_ends_the_run_as_in_adk():
    import pytest

    llm = ScriptedLlm(turns=[call("explode", path="missing.txt"), "stopped"])
    agent = LlmAgent(name="fixer", model=llm, instruction="Fix bugs.", tools=[explode])
    plugin = ContextPackPlugin(store="memory://agent-loop-raise", window_tokens=32_000, profile="default")
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text="go")])):
            pass
    assert len(llm.requests) == 1
