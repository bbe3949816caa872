"""Redaction of what the pack itself renders: Evidence, Memory, FAILURES, the compaction block
(opening request, fold lines, known values), offloaded results' compact forms, recovery packs.

The store's own redaction (blobs, manifests) is covered by test_store_safety; here each secret shape
is followed from a tool output, a note or a memory hit into the rendered pack, the manifest's
`redacted_in_pack` count, and the store. ADK's own verbatim turns are not rewritten.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from aether_context import ContextPackPlugin
from aether_context.pipeline import TaskSpec, build_pack
from aether_context.pipeline.inputs import EvidenceItem, MemoryItem
from aether_context.profile import load_profile
from aether_context.store import PackStore
from aether_context.testing import call

from conftest import call_msg, history_turns, make_inputs, make_runner, new_session, resp_msg, run_turn, \
    scripted_agent, text_msg, tool_spec
from test_store_safety import CORE, SECRETS, _store_text

DEFAULT = load_profile("default")
OFF = DEFAULT.override(name="no-redaction", redaction={"enabled": False})
TASK = TaskSpec(goal="Write the report", acceptance=("cites sources",), step="gather")


def _inputs(secret: str, **kwargs):
    """A session whose tool output, note, memory hit and evidence all carry `secret`."""
    history = [text_msg("user", "check the deployment config"), call_msg("search", q="config"),
               resp_msg("search", result=f"config dump:\n{secret}\nend of dump"), *history_turns(6)]
    evidence = [EvidenceItem("ev-config", f"deploy settings: {secret}", uri="artifact://app/u/s1/cfg.txt",
                             source="artifact", timestamp=1_600_000_000.0)]
    memory = [MemoryItem("m-config", f"the deployment config holds {secret}", timestamp=1_650_000_000.0),
              MemoryItem("note-1", f"note: rotated credentials {secret}", timestamp=1_650_000_100.0, source="note")]
    inputs = make_inputs(history, "summarise the deployment config and its settings", task=TASK,
                         evidence=evidence, memory=memory, tools=[tool_spec("search")])
    return replace(inputs, **kwargs) if kwargs else inputs


def _pack_authored(pack) -> str:
    """The text the pack wrote: the compaction block and the payload (ADK's own turns left out)."""
    state = pack.state
    out = [state.block_text, state.payload_text]
    last = pack.request.messages[-1]
    if pack.manifest.recited:
        out.append(last.parts[-1].text or "")
    return "\n".join(out)


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_secret_shape_is_masked_in_the_rendered_pack(counter, kind):
    pack = build_pack(_inputs(SECRETS[kind]), DEFAULT, counter=counter, window=16_000)
    authored = _pack_authored(pack)
    assert "EVIDENCE" in authored and "MEMORY" in authored
    assert CORE[kind] not in authored and "[REDACTED:" in authored
    assert pack.manifest.redacted_in_pack >= 2  # the evidence line and the memory lines


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_secret_shape_is_masked_in_the_compaction_block(counter, kind):
    inputs = _inputs(SECRETS[kind], compact=True)
    messages = inputs.request.messages
    messages = messages[:-1] + tuple(history_turns(30, big=120, seed=3)) + messages[-1:]  # enough to fold
    inputs = replace(inputs, request=replace(inputs.request, messages=messages), request_index=len(messages) - 1)
    pack = build_pack(inputs, DEFAULT, counter=counter, window=4_000)
    block = pack.state.block_text
    assert block.startswith("CONVERSATION SO FAR") and pack.manifest.compaction is not None
    assert CORE[kind] not in block  # masked, or not carried into the block at all
    assert pack.manifest.redacted_in_pack == block.count("[REDACTED:") + pack.state.payload_text.count("[REDACTED:")


def test_the_users_own_message_and_kept_turns_are_not_rewritten(counter):
    secret = SECRETS["openai_key"]
    inputs = _inputs(secret)
    inputs = replace(inputs, request=replace(inputs.request, messages=inputs.request.messages[:-1]
                                             + (text_msg("user", f"use {secret} to deploy"),)))
    pack = build_pack(inputs, DEFAULT, counter=counter, window=16_000)
    payload = pack.state.payload_text
    assert payload.endswith(f"use {secret} to deploy")  # USER REQUEST stays verbatim
    assert payload.count(secret) == 1
    tool_turn = pack.request.messages[2]
    assert secret in str(tool_turn.to_json())  # ADK's verbatim tool result goes as ADK built it


def test_a_secret_the_user_typed_reaches_every_later_call(file_store_url):
    """The payload kept as sent is read back from the store, which masks it: the user's message in it is
    taken from ADK's message again, so the model keeps the secret and the cached prefix stays as sent,
    in the same invocation (a tool call) and in the next one."""
    import asyncio

    from aether_context import set_task
    from aether_context.adk.convert import request_from_llm

    said = "my password is swordfish123, remember it"

    async def run():
        agent, llm = scripted_agent([call("lookup", key="db"), "noted", "it is swordfish123"])
        plugin = ContextPackPlugin(store=PackStore(file_store_url), window_tokens=16_000)
        runner = make_runner(agent, plugins=[plugin])
        state: dict = {}
        set_task(state, goal="Help with the database")
        sid = await new_session(runner, state=state)
        await run_turn(runner, sid, said)
        await run_turn(runner, sid, "what is my password?")
        return llm, plugin

    llm, plugin = asyncio.run(run())
    requests = [request_from_llm(r) for r in llm.requests]
    assert len(requests) == 3 and requests[0].messages[0].text.startswith("CONTEXT PACK")
    for earlier, later in zip(requests, requests[1:]):
        assert later.messages[:len(earlier.messages)] == earlier.messages
        assert later.messages[0].parts[0].text.endswith(said)
    for r in list(plugin.packer.recent)[1:]:
        assert r.manifest.cache_break is None


def test_a_secret_in_the_task_is_masked_from_the_first_call(file_store_url):
    """GOAL, ACCEPTANCE and STATUS are the pack's own text: sent masked from the first call on, as the store keeps
    them, so the calls that read them back send the same bytes (before: raw first, masked later, a break)."""
    import asyncio

    from aether_context import set_task
    from aether_context.adk.convert import request_from_llm

    async def run():
        agent, llm = scripted_agent([call("lookup", key="db"), "rotated", "done"])
        plugin = ContextPackPlugin(store=PackStore(file_store_url), window_tokens=16_000)
        runner = make_runner(agent, plugins=[plugin])
        state: dict = {}
        set_task(state, goal="Rotate DB_PASSWORD=hunter2xyz9 on prod", acceptance=["say the password is rotated"])
        sid = await new_session(runner, state=state)
        await run_turn(runner, sid, "rotate it please")
        await run_turn(runner, sid, "and now?")
        return llm, plugin

    llm, plugin = asyncio.run(run())
    requests = [request_from_llm(r) for r in llm.requests]
    assert all("hunter2xyz9" not in str(r.to_json()) for r in requests)
    assert "GOAL: Rotate DB_PASSWORD=[REDACTED:" in requests[0].messages[0].text
    for earlier, later in zip(requests, requests[1:]):
        assert later.messages[:len(earlier.messages)] == earlier.messages
    assert all(r.manifest.cache_break is None for r in list(plugin.packer.recent)[1:])


def test_only_a_masked_copy_of_the_users_message_is_restored():
    from aether_context.content import Message, TextPart
    from aether_context.pipeline.render import REQUEST_HEADER, verbatim_request

    said = "key sk-abc and pin 1234 end"
    user = Message("user", (TextPart(said),))
    kept = f"CONTEXT PACK\nGOAL: g\n{REQUEST_HEADER}\n"
    assert verbatim_request(kept + "key [REDACTED:openai] and pin [REDACTED:pin] end", user) == kept + said
    for other in ("key [REDACTED:x] and pin 99 end", "another message", said + " more",
                  "[REDACTED:x]" + said):
        assert verbatim_request(kept + other, user) == kept + other  # not a masked copy of this message
    assert verbatim_request("no request section", user) == "no request section"
    pasted = Message("user", (TextPart(f"see {REQUEST_HEADER}\nold [REDACTED:x] text"),))
    assert verbatim_request(kept + pasted.text, pasted) == kept + pasted.text
    # the store's free-text rule can take the header's first word for a password ("... password is\nUSER")
    goal = "CONTEXT PACK\nGOAL: find out what the admin password is\n"
    stored = goal + REQUEST_HEADER.replace("USER", "[REDACTED:password]", 1) + "\nkey [REDACTED:openai] and pin 1234 end"
    assert verbatim_request(stored, user) == goal + f"{REQUEST_HEADER}\n{said}"
    hostile = kept + "[REDACTED:" * 30_000 + "x"  # no closing bracket: each mask is bounded, so this stays linear
    assert verbatim_request(hostile, user) == hostile


def test_redaction_off_renders_as_is(counter):
    secret = SECRETS["aws_access_key"]
    pack = build_pack(_inputs(secret), OFF, counter=counter, window=16_000)
    assert secret in pack.state.payload_text and pack.manifest.redacted_in_pack == 0
    custom = DEFAULT.override(name="custom", redaction={"patterns": [r"EMP-\d{6}"]})
    pack = build_pack(_inputs("badge EMP-123456"), custom, counter=counter, window=16_000)
    assert "EMP-123456" not in pack.state.payload_text and "[REDACTED:custom]" in pack.state.payload_text


def test_the_failures_section_is_masked(counter):
    secret = SECRETS["url_password"]
    failures = {"records": [{"turn": 3, "tool": "db_query", "args_digest": "x", "message": f"cannot connect to {secret}",
                             "category": "network", "timestamp": 1.0}], "evicted": 0}
    inputs = replace(_inputs("nothing secret here"), failures=failures)
    pack = build_pack(inputs, DEFAULT, counter=counter, window=16_000)
    assert "FAILURES" in pack.state.payload_text
    assert CORE["url_password"] not in pack.state.payload_text


@pytest.mark.parametrize("kind", ["openai_key", "aws_access_key", "bearer_token", "private_key", "url_password",
                                  "password_json"])
def test_pack_and_store_through_adk(file_store_url, kind):
    """A tool prints a secret in a large output: the compact form, the pack and the store mask it."""
    import asyncio

    secret = SECRETS[kind]

    def read_config(path: str) -> dict:
        """Read a configuration file."""
        lines = [f"setting_{i} = value {i} for the staging deployment" for i in range(400)]
        lines[1] = secret
        return {"path": path, "content": "\n".join(lines)}

    async def run():
        agent, llm = scripted_agent([call("read_config", path="/etc/app.env"), "done", "ok"],
                                    tools=[read_config])
        store = PackStore(file_store_url)
        plugin = ContextPackPlugin(store=store, window_tokens=16_000)
        runner = make_runner(agent, plugins=[plugin])
        sid = await new_session(runner)
        await run_turn(runner, sid, "read the staging config")
        await run_turn(runner, sid, "what did it say?")
        store.flush()
        return llm, plugin, store

    llm, plugin, store = asyncio.run(run())
    sent = [str(r.model_dump()) for r in llm.requests]
    assert all(CORE[kind] not in s for s in sent[1:])  # the compact form replaced the original in the session
    assert any("[REDACTED:" in s for s in sent[1:])
    flags = [f for r in plugin.packer.recent for f in r.manifest.flags]
    assert any(f.startswith("redacted_in_offload: read_config") for f in flags)
    assert CORE[kind] not in _store_text(store)


def test_a_recovery_repack_is_masked_too(counter):
    from aether_context.adk.recovery import recovery_pack
    from aether_context.testing import TokenLimitError

    secret = SECRETS["github_token"]
    pack = recovery_pack(_inputs(secret), DEFAULT, 16_000, TokenLimitError(20_000, 16_000), counter=counter)
    authored = _pack_authored(pack)
    assert "EVIDENCE" in authored and CORE["github_token"] not in authored and pack.manifest.redacted_in_pack >= 1
