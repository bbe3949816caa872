"""Pack store (memory:// and file://) and replay / re-pack of recorded calls."""

from __future__ import annotations

import json

import fsspec
import pytest

from aether_context.errors import ManifestError, StoreError
from aether_context.pipeline import EvidenceItem, MemoryItem, TaskSpec, build_pack
from aether_context.profile import load_profile
from aether_context.replay import RepackResult, repack, replay, store_for_uri
from aether_context.store import PackStore

from conftest import call_msg, filler, history_turns, make_inputs, resp_msg, text_msg, tool_spec

DEFAULT = load_profile("default")
TASK = TaskSpec(goal="Write the report", acceptance=("cites sources",), step="gather")


def _pack(counter, history=None, loop=(), previous=None, window=16_000, request="summarise the sources"):
    history = history_turns(6) if history is None else history
    return build_pack(
        make_inputs(history, request, loop, task=TASK, tools=[tool_spec("search")], previous=previous,
                    evidence=[EvidenceItem("ev1", "revenue grew 12%", uri="artifact://app/u/s1/r.txt")],
                    memory=[MemoryItem("m1", "the owner is Bob", timestamp=1_700_000_000.0)]),
        DEFAULT, counter=counter, window=window)


def _blob_files(store: PackStore) -> list[str]:
    return [p for p in store.fs.find(f"{store.root}/blobs") if "/.tmp-" not in p]


@pytest.fixture(params=["memory", "file", "path"])
def store_url(request, memory_store_url, tmp_path):
    if request.param == "memory":
        return memory_store_url
    if request.param == "file":
        return f"file://{tmp_path}/packs"
    return str(tmp_path / "plain" / "packs")


# ------------------------------------------------------------------------------------------------
# save and replay
# ------------------------------------------------------------------------------------------------


def test_replay_gives_the_sent_request(counter, store_url):
    pack = _pack(counter)
    store = PackStore(store_url, background=False)
    uri = store.save(pack)
    assert uri.endswith(f"/app/u/s1/analyst/{pack.manifest.pack_id}/manifest.json")
    request = replay(uri)
    assert request.checksum == pack.manifest.checksum == pack.request.checksum
    assert request == pack.request
    assert replay(uri, store=store) == pack.request


def test_manifest_round_trip_with_refs(counter, store_url):
    pack = _pack(counter)
    store = PackStore(store_url, background=False)
    uri = store.save(pack)
    manifest = store.load_manifest(uri)
    assert manifest.request_ref and manifest.inputs_ref
    assert manifest.model_copy(update={"request_ref": "", "inputs_ref": ""}) == pack.manifest
    assert store.get_inputs(manifest.inputs_ref) == pack.inputs
    assert store.list_manifests() == [uri]
    assert store.list_manifests("app", "u", "s1") == [uri]
    assert store.list_manifests("other") == []


def test_store_for_uri_finds_the_store(counter, memory_store_url):
    store = PackStore(memory_store_url, background=False)
    uri = store.save(_pack(counter))
    found = store_for_uri(uri)
    assert found.url == memory_store_url
    with pytest.raises(ManifestError, match="not a manifest URI"):
        store_for_uri(memory_store_url + "/app/u/s1/analyst/x/other.json")
    with pytest.raises(ManifestError):
        store_for_uri("manifest.json")


def test_unsafe_path_segments_are_escaped(counter, memory_store_url):
    from dataclasses import replace

    pack = _pack(counter)
    manifest = pack.manifest.model_copy(update={"app_name": "my app/../x", "user_id": "", "session_id": "a:b"})
    store = PackStore(memory_store_url, background=False)
    uri = store.save(replace(pack, manifest=manifest))
    assert "/my=20app=2F..=2Fx/=/a=3Ab/" in uri
    assert replay(uri).checksum == pack.manifest.checksum


# ------------------------------------------------------------------------------------------------
# integrity
# ------------------------------------------------------------------------------------------------


def _saved(counter, url):
    store = PackStore(url, background=False)
    pack = _pack(counter)
    uri = store.save(pack)
    return store, pack, uri, store.rel_from_uri(uri)


@pytest.mark.parametrize("field, value", [
    ("created_at", 1.0), ("invocation_id", "other"), ("pack_id", "pk_other"), ("record", "0" * 64),
])
def test_tampered_manifest(counter, store_url, field, value):
    store, _, uri, rel = _saved(counter, store_url)
    data = json.loads(store.read_bytes(rel))
    assert data[field] != value
    data[field] = value
    with store.fs.open(store._path(rel), "wb") as f:
        f.write(json.dumps(data).encode())
    with pytest.raises(ManifestError, match="modified"):
        replay(uri)
    with pytest.raises(ManifestError):
        store.load_manifest(uri)


def test_manifest_without_integrity(counter, memory_store_url):
    store, _, uri, rel = _saved(counter, memory_store_url)
    data = json.loads(store.read_bytes(rel))
    del data["integrity"]
    with store.fs.open(store._path(rel), "wb") as f:
        f.write(json.dumps(data).encode())
    with pytest.raises(ManifestError, match="integrity"):
        replay(uri)


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.0])
def test_truncated_manifest(counter, store_url, keep):
    store, _, uri, rel = _saved(counter, store_url)
    raw = store.read_bytes(rel)
    with store.fs.open(store._path(rel), "wb") as f:
        f.write(raw[: int(len(raw) * keep)])
    with pytest.raises(ManifestError):
        replay(uri)


def test_missing_manifest(counter, memory_store_url):
    store, pack, uri, rel = _saved(counter, memory_store_url)
    with pytest.raises(ManifestError, match="not found"):
        replay(uri.replace(pack.manifest.pack_id, "pk_missing"))


def test_corrupted_blob(counter, store_url):
    store, pack, uri, _ = _saved(counter, store_url)
    digest = pack.request.messages[-1].digest
    path = store._path(f"blobs/{digest[:2]}/{digest}")
    with store.fs.open(path, "rb") as f:
        good = f.read()
    with store.fs.open(path, "wb") as f:
        f.write(good + b" ")  # one byte more: the content no longer matches its hash
    with pytest.raises(ManifestError, match="corrupt"):
        replay(uri)


def test_corrupted_request_record(counter, store_url):
    store, _, uri, _ = _saved(counter, store_url)
    ref = store.load_manifest(uri).request_ref
    with store.fs.open(store._path(f"blobs/{ref[:2]}/{ref}"), "wb") as f:
        f.write(b'{"head": "x", "messages": []}')
    with pytest.raises(ManifestError):
        replay(uri)


def test_missing_blob(counter, memory_store_url):
    store, pack, uri, _ = _saved(counter, memory_store_url)
    digest = pack.request.messages[0].digest
    store.fs.rm(store._path(f"blobs/{digest[:2]}/{digest}"))
    with pytest.raises(ManifestError, match="not found"):
        replay(uri)


def test_uri_outside_the_store_is_refused(counter, memory_store_url, tmp_path):
    store, pack, uri, _ = _saved(counter, memory_store_url)
    with pytest.raises(StoreError, match="outside"):
        store.load_manifest("memory://elsewhere/app/u/s1/pk/manifest.json")
    with pytest.raises(StoreError, match="outside"):
        replay(f"file://{tmp_path}/app/u/s1/pk/manifest.json", store=store)
    with pytest.raises(StoreError, match="escapes"):
        store.load_manifest(memory_store_url + "/../other/app/u/s1/pk/manifest.json")
    with pytest.raises(StoreError):
        store.rel_from_uri(memory_store_url + "-sibling/app/u/s1/pk/manifest.json")


def test_replay_of_a_failure_manifest(counter, memory_store_url):
    pack = _pack(counter)
    failed = pack.manifest.model_copy(update={"error": "BudgetError: too big", "pack_id": "err_1"})
    store = PackStore(memory_store_url, background=False)
    uri = store.save_manifest(failed)
    assert store.load_manifest(uri).error == "BudgetError: too big"
    with pytest.raises(ManifestError, match="records no request"):
        replay(uri)
    with pytest.raises(ManifestError, match="records no inputs"):
        repack(uri, "research")


# ------------------------------------------------------------------------------------------------
# repack
# ------------------------------------------------------------------------------------------------


def test_repack_under_another_profile(counter, store_url):
    store, pack, uri, _ = _saved(counter, store_url)
    result = repack(uri, "research", counter=counter)
    assert isinstance(result, RepackResult)
    assert result.original.checksum == pack.manifest.checksum
    assert result.pack.manifest.profile == "research"
    assert result.diff["profile"] == ["default", "research"]
    assert result.diff["checksum_changed"] is (result.pack.request.checksum != pack.request.checksum)
    assert set(result.diff["layers"]) == set(pack.manifest.layer_budgets)
    assert result.diff["tokens_after"] == [pack.manifest.tokens_after, result.pack.manifest.tokens_after]
    assert result.pack.manifest.window == pack.manifest.window


def test_repack_same_profile_reproduces_the_request(counter, memory_store_url):
    store, pack, uri, _ = _saved(counter, memory_store_url)
    result = repack(uri, "default")
    assert result.pack.request.checksum == pack.request.checksum
    assert result.diff["checksum_changed"] is False


def test_repack_with_smaller_window_cuts_more(counter, memory_store_url):
    store = PackStore(memory_store_url, background=False)
    pack = _pack(counter, history=history_turns(12, big=300))
    uri = store.save(pack)
    result = repack(uri, "default", window_tokens=1_500)
    assert result.pack.manifest.window == 1_500
    assert result.pack.manifest.tokens_after < pack.manifest.tokens_after
    assert result.diff["truncation_events"][1] >= result.diff["truncation_events"][0]


def test_repack_of_a_reused_call_under_a_new_profile_starts_fresh(counter, memory_store_url):
    store = PackStore(memory_store_url, background=False)
    p1 = _pack(counter)
    loop = [call_msg("search", q="x"), resp_msg("search", result=filler(50))]
    p2 = _pack(counter, loop=loop, previous=p1.state)
    assert p2.manifest.reused_payload
    store.save(p1)
    uri = store.save(p2)
    same = repack(uri, "default")
    assert same.pack.request.checksum == p2.request.checksum and same.pack.manifest.reused_payload
    other = repack(uri, "research")
    assert not other.pack.manifest.reused_payload


# ------------------------------------------------------------------------------------------------
# content-addressed dedup and background writes
# ------------------------------------------------------------------------------------------------


def test_blobs_grow_only_by_new_messages(counter, store_url):
    store = PackStore(store_url, background=False)
    history = history_turns(24, big=100)
    loop: list = []
    pack = _pack(counter, history=history)
    store.save(pack)
    before = len(_blob_files(store))
    # every distinct message once (the sent request and ADK's share the verbatim history: fewer files than
    # two copies), plus the head, the records and the chunks of the long lists
    distinct = {m.digest for m in pack.request.messages} | {m.digest for m in pack.inputs.request.messages}
    assert len(distinct) < before <= len(distinct) + 1 + 3 + 4 + 10  # + the keys of the four records
    for i in range(3):  # three more calls of the same invocation
        loop = loop + [call_msg("search", q=str(i)), resp_msg("search", result=filler(80, i))]
        pack = _pack(counter, history=history, loop=loop, previous=pack.state)
        store.save(pack)
        after = len(_blob_files(store))
        # 2 new messages, the message the closing status rides (or rode) on, a request record, an inputs request record and an inputs record, plus the
        # last chunk of each level of the long lists (history, recorded state); on the first reuse,
        # the previous call's state is new content (its lists are chunked once, then shared)
        assert after - before <= 2 + 1 + 3 + 10, (i, after - before)
        before = after
    # a new invocation rebuilds the pack but the old messages are still shared
    grown = history + [text_msg("user", "summarise the sources")] + loop + [text_msg("model", "done")]
    pack = _pack(counter, history=grown, request="next", previous=pack.state)
    store.save(pack)
    assert len(_blob_files(store)) - before <= 16 < len(grown)


def test_same_pack_twice_writes_nothing_new(counter, memory_store_url):
    store = PackStore(memory_store_url, background=False)
    pack = _pack(counter)
    store.save(pack)
    n = len(_blob_files(store))
    fresh = PackStore(memory_store_url, background=False)  # no in-process memory of what exists
    fresh.save(pack)
    assert len(_blob_files(fresh)) == n


def test_background_writes_complete_after_flush(counter, memory_store_url):
    store = PackStore(memory_store_url)  # background=True is the default
    packs, uris = [], []
    history = history_turns(6)
    pack = None
    for i in range(6):
        loop = [m for j in range(i) for m in (call_msg("search", q=str(j)), resp_msg("search", r=j))]
        pack = _pack(counter, history=history, loop=loop, previous=pack.state if pack else None)
        packs.append(pack)
        uris.append(store.save(pack))
    store.flush()
    for pack, uri in zip(packs, uris):
        assert replay(uri).checksum == pack.manifest.checksum
    assert sorted(store.list_manifests()) == sorted(uris)
    assert not [p for p in store.fs.find(store.root) if "/.tmp-" in p]


@pytest.mark.parametrize("background", [True, False])
def test_write_errors_are_recorded_never_raised(counter, tmp_path, caplog, background):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the store wants a folder")
    store = PackStore(str(blocker / "packs"), background=background)
    store.save(_pack(counter))  # never raises: the failure is logged and counted
    store.save_usage(_pack(counter).manifest, {"reported": 1})
    assert store.flush() is True and store.close() is True
    stats = store.stats()
    assert stats["failed"] == 2 and len(stats["recent_failures"]) == 2
    assert "manifest.json" in stats["recent_failures"][0]["what"]
    logged = [r for r in caplog.records if "pack store failed" in r.getMessage()]
    assert len(logged) == 2 and logged[0].exc_info and not logged[1].exc_info  # one traceback, then one line each


def test_file_store_layout(counter, tmp_path):
    store = PackStore(f"file://{tmp_path}/packs", background=False)
    pack = _pack(counter)
    store.save(pack)
    manifest_path = tmp_path / "packs" / "app" / "u" / "s1" / "analyst" / pack.manifest.pack_id / "manifest.json"
    assert manifest_path.is_file()
    data = json.loads(manifest_path.read_text())
    assert data["storage"]["layout"] == 3 and data["storage"]["redacted"] == 0 and len(data["record"]) == 64
    assert data["integrity"].startswith("sha256:") and data["schema_version"] == 2
    digest = pack.request.messages[0].digest
    assert (tmp_path / "packs" / "blobs" / digest[:2] / digest).is_file()


def test_memory_stores_are_isolated(counter, memory_store_url):
    other = memory_store_url + "-other"
    try:
        a, b = PackStore(memory_store_url, background=False), PackStore(other, background=False)
        a.save(_pack(counter))
        assert a.list_manifests() and not b.list_manifests()
    finally:
        fs = fsspec.filesystem("memory")
        if fs.exists(other[len("memory://"):]):
            fs.rm(other[len("memory://"):], recursive=True)


def _long_history(n: int) -> list:
    out = []
    for i in range(n // 2):
        out += [call_msg("search", q=f"q{i}"), resp_msg("search", result=filler(40, i))]
    return out


@pytest.mark.parametrize("events", [300, 3000])
def test_a_call_writes_its_new_content_and_a_bounded_record(counter, tmp_path, events):
    """Bytes written by a call do not grow with the history: lists are chunk trees of shared pieces."""
    store = PackStore(str(tmp_path / "packs"), background=False)
    history = _long_history(events)
    pack = _pack(counter, history=history, window=8_000)
    store.save(pack)
    store.save(_pack(counter, history=history, window=8_000, previous=pack.state, loop=[call_msg("search", q="w")]))
    loop: list = []
    for i in range(4):
        loop = loop + [call_msg("search", q=str(i)), resp_msg("search", result=filler(60, i))]
        pack = _pack(counter, history=history, loop=loop, window=8_000, previous=pack.state)
        before = store.stats()["bytes"]
        uri = store.save(pack)
        added = store.stats()["bytes"] - before
        new_content = sum(len(json.dumps(m.to_json())) for m in loop[-2:])
        assert added <= new_content + 16_000, (events, i, added)  # the target, whatever the history
        assert len(store.read_bytes(store.rel_from_uri(uri))) < 8_000
        assert replay(uri).checksum == pack.manifest.checksum
        assert store.get_inputs(store.load_manifest(uri).inputs_ref) == pack.inputs
