"""Records stored as a key plus a patch (`store.delta`): a session's store stays near its own size,
any replica reads any record, and stores written before (layout 2) still load."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from google.genai import types

from aether_context import ContextPackPlugin
from aether_context.pipeline import MemoryItem, TaskSpec, build_pack
from aether_context.profile import load_profile
from aether_context.replay import repack, replay
from aether_context.store import PackStore
from aether_context.store.delta import apply, diff, same
from aether_context.testing import call

from conftest import call_msg, filler, make_inputs, make_runner, new_session, resp_msg, run_turn, scripted_agent, tool_spec

FIXTURE = Path(__file__).parent / "fixtures" / "store_layout2"
# the checksums the layout-2 code recorded for the fixture's three calls (oldest first)
FIXTURE_CHECKSUMS = {
    "pk_60cf2092aad551a62fe67314": "sha256:e367de8c6d0489fe021477988131952c1dfc8bb3535a61064f2457b50cf5550b",
    "pk_f10a55e1d8e0ae3b769dce2a": "sha256:59fdfe9cb4353362db8b6844cacff388693f571b14f3a986587a082bfb652203",
    "pk_ac185d30ce0fb92302a22d5f": "sha256:f61b963c6d387495a041ae663e53cf8d5b33eff4a3818fb7a450a50d632b7fea",
}


def run_command(cmd: str) -> dict:
    """Run a shell command in the repository; returns its output."""
    return {"cmd": cmd, "output": "\n".join(filler(12, seed=len(cmd) * 7 + i) for i in range(2))}


def _files_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


async def test_a_session_store_stays_within_twice_its_events(tmp_path):
    """From its first call, a tool loop's whole store (records, keys, blobs, offloads) against ADK's
    JSON of the session's events: the issue's target is at most 2x."""
    turns = [call("run_command", cmd=f"grep -n step{i} src/") for i in range(60)] + ["All steps checked."]
    agent, _ = scripted_agent(turns, tools=[run_command], instruction="Check each step.")
    root = tmp_path / "packs"
    plugin = ContextPackPlugin(store=str(root), window_tokens=8_000)
    runner = make_runner(agent, plugins=[plugin])
    sid = await new_session(runner)
    await run_turn(runner, sid, "Check every step of the build and report what fails.")
    plugin.packer.store.flush()
    session = await runner.session_service.get_session(app_name=runner.app_name, user_id="u", session_id=sid)
    await runner.close()
    events = sum(len(e.model_dump_json(exclude_none=True).encode()) for e in session.events)
    assert len(plugin.packer.recent) > 0 and len(session.events) > 100
    assert _files_bytes(root) <= 2 * events, (_files_bytes(root), events)  # the target
    # key + patch records gave 1.0x here; since session state holds pointers, each call also writes its pack
    # record's changed pieces (the state that used to ride in the events' deltas): 1.8x measured
    assert _files_bytes(root) <= 1.9 * events, (_files_bytes(root), events)


def _calls(counter, n: int):
    """`n` packs of one invocation, each call two messages longer than the one before."""
    history, pack = [], None
    for i in range(12):
        history += [call_msg("search", q=f"q{i}"), resp_msg("search", result=filler(30, i))]
    for i in range(n):
        history = history + [call_msg("search", q=f"more{i}"), resp_msg("search", result=filler(30, 100 + i))]
        inputs = make_inputs(history, "summarise the sources", task=TaskSpec(goal="Write the report"),
                             tools=[tool_spec("search")], previous=pack.state if pack else None,
                             memory=[MemoryItem("m1", "the owner is Bob", timestamp=1_700_000_000.0)])
        pack = build_pack(inputs, load_profile("default"), counter=counter, window=2_500)
        yield pack


def reader_node(store: PackStore, uri: str) -> dict:
    """The record chain node a manifest file names."""
    return store._get_piece(json.loads(store.read_bytes(store.rel_from_uri(uri)))["record"])


def test_a_replica_reads_records_another_process_chained(counter, tmp_path):
    url = str(tmp_path / "packs")
    writers = [PackStore(url, background=False), PackStore(url, background=False)]
    packs, uris = [], []
    for i, pack in enumerate(_calls(counter, 8)):
        packs.append(pack)
        uris.append(writers[i // 4].save(pack))  # calls 0-3 by one process, 4-7 by another
    nodes = [reader_node(writers[0], u) for u in uris]
    assert sum("base" in n for n in nodes) >= 4  # most calls wrote a patch on the call before
    reader = PackStore(url, background=False)  # a third process: it saw none of the calls
    for pack, uri in zip(packs, uris):
        manifest = reader.load_manifest(uri)
        assert manifest == pack.manifest.model_copy(update={"request_ref": manifest.request_ref,
                                                            "inputs_ref": manifest.inputs_ref})
        assert replay(uri, store=reader) == pack.request
        assert reader.get_inputs(manifest.inputs_ref) == pack.inputs


def test_a_layout_2_store_still_loads(tmp_path):
    """A store written before key + patch records (tests/fixtures/store_layout2) loads, replays and re-packs."""
    root = tmp_path / "old"
    shutil.copytree(FIXTURE, root)
    store = PackStore(str(root), background=False)
    uris = store.list_manifests()
    assert sorted(u.split("/")[-2] for u in uris) == sorted(FIXTURE_CHECKSUMS)
    for uri in uris:
        manifest = store.load_manifest(uri)
        assert manifest.checksum == FIXTURE_CHECKSUMS[manifest.pack_id] and manifest.schema_version == 2
        assert replay(uri, store=store).checksum == manifest.checksum
        inputs = store.get_inputs(manifest.inputs_ref)
        assert inputs.session_id == "s1" and len(inputs.request.messages) > 40
    last = next(u for u in uris if "pk_ac185d30ce0fb92302a22d5f" in u)  # the third call
    result = repack(last, "default", store=store)  # today's code over the recorded inputs: the same twice
    assert result.pack.request.checksum == repack(last, "default", store=store).pack.request.checksum
    assert result.original.pack_id == "pk_ac185d30ce0fb92302a22d5f" and result.pack.request.messages
    uri = store.save(result.pack)  # the old store takes new (layout 3) records beside its own
    assert replay(uri, store=PackStore(str(root), background=False)) == result.pack.request


def _value(rng: random.Random, depth: int = 0):
    if depth > 3 or rng.random() < 0.3:
        return rng.choice([0, 1, 1.0, True, None, "", "a", "$o", "x" * 40])
    if rng.random() < 0.5:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {rng.choice(["a", "b", "c", "$o", "$t", "$v"]): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _changed(rng: random.Random, value):
    if isinstance(value, list):
        if value and rng.random() < 0.3:  # the same length, items changed in place (the `$e` form)
            return [_changed(rng, v) if rng.random() < 0.3 else v for v in value]
        out = value[rng.randint(0, len(value)):] if value and rng.random() < 0.3 else list(value)
        return ([_value(rng)] if rng.random() < 0.3 else []) + out + ([_value(rng)] if rng.random() < 0.5 else [])
    if isinstance(value, dict):
        out = {k: (_changed(rng, v) if rng.random() < 0.4 else v) for k, v in value.items() if rng.random() > 0.1}
        if rng.random() < 0.3:
            out[rng.choice("abz$")] = _value(rng)
        return out
    return _value(rng)


def test_a_patch_gives_back_the_value_exactly():
    """`apply(old, diff(old, new)) == new`, types and key order included, through JSON."""
    rng = random.Random(17)
    for _ in range(3000):
        old = _value(rng)
        new = _changed(rng, old)
        if not same(old, new):
            patch = json.loads(json.dumps(diff(old, new)))
            assert same(apply(json.loads(json.dumps(old)), patch), new), (old, new, patch)
