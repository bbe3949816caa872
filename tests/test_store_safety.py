"""Pack store safety: paths from ids, private files, secret redaction, write failures, signatures."""

from __future__ import annotations

import collections
import json
import os
import stat
import threading
from dataclasses import replace

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from aether_context.content import Message, TextPart
from aether_context.errors import ManifestError
from aether_context.pipeline import TaskSpec, build_pack
from aether_context.profile import load_profile
from aether_context.redact import RedactionSettings, redact, redact_value
from aether_context.replay import repack, replay
from aether_context.store import HMAC_ENV, PackStore
from aether_context.store.paths import MAX_SEGMENT, decode_segment, encode_segment

from conftest import history_turns, make_inputs, resp_msg, text_msg, tool_spec

DEFAULT = load_profile("default")
TASK = TaskSpec(goal="Write the report", acceptance=("cites sources",), step="gather")


def _pack(counter, history=None, request="summarise the sources", **ids):
    inputs = make_inputs(history_turns(4) if history is None else history, request, task=TASK,
                         tools=[tool_spec("search")])
    inputs = replace(inputs, **ids) if ids else inputs
    return build_pack(inputs, DEFAULT, counter=counter, window=16_000)


# ------------------------------------------------------------------------------------------------
# paths from ids
# ------------------------------------------------------------------------------------------------

IDS = ["alice@x.com", "alice_x.com", "Alice@x.com", "..", ".", "", "a/b", "a\\b", "a b", "x" * 1000,
       "日本語", "\ud83d", "=41", "~", "con", "-", "_"]


def test_segments_are_unique_reversible_and_stay_inside():
    encoded = [encode_segment(i) for i in IDS]
    assert len(set(encoded)) == len(IDS)  # no two ids share a path
    assert len({e.lower() for e in encoded}) == len(IDS)  # not even on a case-insensitive file system
    for raw, seg in zip(IDS, encoded):
        assert seg and "/" not in seg and "\\" not in seg and not seg.startswith(".") and len(seg) <= MAX_SEGMENT
        assert decode_segment(seg) == (None if len(raw) > 100 else raw)
    assert encode_segment("alice@x.com") == "alice=40x.com"
    assert encode_segment("x" * 1000) != encode_segment("x" * 999)


def test_colliding_user_ids_get_separate_folders(counter, tmp_path):
    store = PackStore(str(tmp_path / "packs"), background=False)
    uris = [store.save(_pack(counter, user_id=u)) for u in ("alice@x.com", "alice_x.com")]
    assert uris[0] != uris[1]
    assert store.list_manifests(user="alice@x.com") == [uris[0]]
    assert store.list_manifests(user="alice_x.com") == [uris[1]]


@pytest.mark.parametrize("bad", ["..", "../..", "/", "", "x" * 5000, "../../../etc"])
def test_ids_never_leave_the_store_root(counter, tmp_path, bad):
    root = tmp_path / "packs"
    store = PackStore(str(root), background=False)
    uri = store.save(_pack(counter, app_name=bad, user_id=bad, session_id=bad, agent=bad))
    assert store.stats().get("failed", 0) == 0
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(root in p.parents for p in written)
    assert replay(uri).checksum == store.load_manifest(uri).checksum


def test_files_and_folders_are_private(counter, tmp_path):
    old = os.umask(0o022)  # the usual umask would leave group and others able to read
    try:
        store = PackStore(str(tmp_path / "a" / "packs"), background=False)
        store.save(_pack(counter))
        store.put_artifact("app", "u", "s1", "tool_output/x.txt", b"data")
    finally:
        os.umask(old)
    for p in (tmp_path / "a").rglob("*"):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))


# ------------------------------------------------------------------------------------------------
# redaction
# ------------------------------------------------------------------------------------------------

SECRETS = {
    "openai_key": "sk-proj-Q7fLk2Xw9RmT4vBn8YcJ1pZs6HdE3uGa0KoW",
    "anthropic_key": "sk-ant-api03-Zx8Vq2Lm5Nr7Tb1Kc4Hd9Jf3Gs6Pw0Ye-AbCdEf",
    "google_api_key": "AIzaSyD4f8Kq2Lm9Nx7Rt3Vb6Hc1Jw5Zp0YsEuGo",
    "aws_access_key": "AKIAIOSFODNN7QX3PL2M",
    "aws_secret_key": "aws_secret_access_key = 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",
    "github_token": "ghp_4Fq8Lm2Xw9RmT4vBn8YcJ1pZs6HdE3uGa0Ko",
    "slack_token": "xoxb-2048-8192-Zx8Vq2Lm5Nr7Tb1Kc4Hd",
    "bearer_token": "Authorization: Bearer Zx8Vq2Lm5Nr7Tb1Kc4Hd9Jf3Gs",
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.Sfl2KxwRJSMeKKF2QT4fwpMeJf36POk6yJVadQssw5c",
    "url_password": "postgres://admin:Tr0ub4dor&3@db.internal:5432/prod",
    "password": "password=Tr0ub4dor&3",
    "password_json": '{"password": "correct horse battery"}',
}
CORE = {k: v.split("=", 1)[-1].split("Bearer ")[-1] for k, v in SECRETS.items()}
CORE.update(url_password="Tr0ub4dor&3", password_json="correct horse battery", private_key="b3BlbnNzaC1rZXktdjEA",
            aws_secret_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Lm3Tv9W")


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_secret_shape_is_masked(kind):
    text = f"before {SECRETS[kind]} after"
    out, n = redact(text)
    assert n == 1 and CORE[kind] not in out and "[REDACTED:" in out and out.startswith("before ")
    assert redact(out) == (out, 0)  # idempotent


def test_no_false_positives_on_ordinary_text():
    text = ("sha256:" + "ab" * 32 + " pack pk_0123456789abcdef01234567 at https://example.com/a?b=c "
            "token count 12345 bearer of news; the password field is required; key: value")
    assert redact(text) == (text, 0)


def test_structured_values_and_settings():
    value = {"password": "x", "nested": [{"api_key": "abc"}, "see postgres://u:p@h/db"], "n": 3}
    out, n = redact_value(value)
    assert n == 3 and out["password"] == "[REDACTED:password]" and out["n"] == 3
    assert redact_value(value, RedactionSettings(enabled=False)) == (value, 0)
    custom = RedactionSettings(patterns=(r"EMP-(\d{6})",), keys=("ssn",))
    assert redact("id EMP-123456, ssn: 123-45-6789", custom) == ("id EMP-[REDACTED:custom], ssn: [REDACTED:ssn]", 2)
    with pytest.raises(ValueError, match="not a valid regular expression"):
        RedactionSettings(patterns=("(",))


def _store_text(store: PackStore) -> str:
    """Everything in the store as text, blobs decompressed (a compressed secret is still a secret)."""
    out = []
    for path in store.fs.find(store.root):
        name = path.rsplit("/", 1)[-1]
        data = store.get_blob(name) if "/blobs/" in path and not name.startswith(".") else store.fs.cat(path)
        out.append(data.decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_secrets_never_reach_blobs_or_manifests(counter, tmp_path, kind):
    secret = SECRETS[kind]
    history = [*history_turns(2), text_msg("user", f"my config: {secret}"),
               resp_msg("search", result=f"found {secret} in .env")]
    pack = _pack(counter, history=history, request=f"use {secret} please")
    pack = replace(pack, manifest=pack.manifest.model_copy(update={"flags": [f"note: {secret}"]}))
    store = PackStore(str(tmp_path / "packs"), background=False)
    uri = store.save(pack)
    assert CORE[kind] not in _store_text(store)
    manifest, storage = store.read_manifest(uri)
    assert storage["redacted"] >= 3 and store.stats()["redacted"] >= 4
    request = replay(uri)  # replayable: the stored request, secrets masked, verified by its own checksum
    assert request.checksum == storage["stored_checksum"] != manifest.checksum
    assert "[REDACTED:" in json.dumps(request.to_json())
    assert repack(uri, "default").pack.request.messages


def test_redaction_off_stores_as_is(counter, tmp_path):
    secret = SECRETS["openai_key"]
    store = PackStore(str(tmp_path / "packs"), background=False, redaction=RedactionSettings(enabled=False))
    uri = store.save(_pack(counter, request=f"use {secret}"))
    assert secret in _store_text(store)
    assert replay(uri).checksum == store.load_manifest(uri).checksum


# ------------------------------------------------------------------------------------------------
# writes
# ------------------------------------------------------------------------------------------------


def test_a_deleted_store_still_gives_replayable_manifests(counter, tmp_path):
    root = tmp_path / "packs"
    store = PackStore(str(root))
    history = history_turns(6)
    first = store.save(_pack(counter, history=history))
    store.flush()
    import shutil
    shutil.rmtree(root)  # deleted mid-run: the blob cache must not trust its memory
    later = [store.save(_pack(counter, history=history, request=f"again {i}")) for i in range(3)]
    store.flush()
    assert store.stats()["store_recreated"] == 1 and not store.stats().get("failed")
    for uri in later:
        assert replay(uri).checksum == store.load_manifest(uri).checksum
    with pytest.raises(ManifestError, match="not found"):
        replay(first)


class _Bucket(MemoryFileSystem):
    """An in-memory file system that says it is an object store, and counts what would be requests."""

    protocol = ("bucket-test", "s3")
    store: dict = {}  # its own objects, not memory://'s
    pseudo_dirs = [""]
    requests: collections.Counter = collections.Counter()

    def info(self, path, **kwargs):
        _Bucket.requests["head"] += 1
        return super().info(path, **kwargs)

    def pipe_file(self, path, value, **kwargs):
        _Bucket.requests["put"] += 1
        return super().pipe_file(path, value, **kwargs)


def test_a_bucket_store_puts_blobs_without_asking_first(counter, monkeypatch):
    """On a bucket an existence check is a HEAD (and a listing when absent), a small put one request: blobs
    are put without a check (they are content-addressed), the marker is looked at once a second at most."""
    fsspec.register_implementation("bucket-test", _Bucket, clobber=True)
    store = PackStore("bucket-test://packs", background=False)
    assert store.object_store
    history = history_turns(6)
    first = store.save(_pack(counter, history=history))
    _Bucket.requests.clear()
    uris = [store.save(_pack(counter, history=history, request=f"again {i}")) for i in range(5)]
    assert _Bucket.requests["head"] <= 1, _Bucket.requests  # the marker, once within the second
    assert _Bucket.requests["put"] >= 5
    for uri in (first, *uris):
        assert replay(uri).checksum == store.load_manifest(uri).checksum
    clock = [1000.0]
    monkeypatch.setattr("aether_context.store.monotonic", lambda: clock[0])  # the store's clock only
    store._marker_seen = clock[0]
    store.fs.rm(store._path(".aether-store"))  # the bucket's folder emptied: noticed at the next look
    for path in store.fs.find(store.root):
        store.fs.rm(path)
    clock[0] += 2
    later = store.save(_pack(counter, history=history, request="after the wipe"))
    assert store.stats()["store_recreated"] == 1
    assert replay(later).checksum == store.load_manifest(later).checksum
    bucket, local = PackStore(str(store.url)), PackStore("memory://packs-local")
    assert bucket.object_store and not local.object_store
    assert (bucket._writer.workers, local._writer.workers) == (8, 1)  # a bucket's writes wait on the network
    assert PackStore("memory://packs-local", writers=3)._writer.workers == 3
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="writers="):
            PackStore("memory://packs-local", writers=bad)


def test_several_writer_threads_run_jobs_at_once():
    """Four jobs that each wait for the other three pass only when four threads run them together."""
    from aether_context.store.io import BackgroundWriter, WriteStats

    stats = WriteStats()
    writer = BackgroundWriter(stats, workers=4)
    barrier = threading.Barrier(4, timeout=30)
    for i in range(4):
        writer.submit(f"job {i}", barrier.wait)
    assert writer.flush(timeout=60)
    assert not stats.snapshot().get("failed"), stats.snapshot()["recent_failures"]


def test_a_full_queue_makes_the_caller_write_or_drop(counter, memory_store_url):
    import threading
    gate = threading.Event()
    store = PackStore(memory_store_url, max_queue=1, put_timeout=0.05)
    store._writer.submit("block", gate.wait)  # the writer is busy until the gate opens
    store._writer.submit("fill", lambda: None)  # the queue (size 1) is full
    uri = store.save(_pack(counter))  # waits 50 ms, then writes inline: nothing is lost
    assert store.stats()["inline"] == 1 and replay(uri)
    dropping = PackStore(memory_store_url + "-drop", max_queue=1, put_timeout=0.05, on_full="drop")
    dropping._writer.submit("block", gate.wait)
    dropping._writer.submit("fill", lambda: None)
    dropping.save(_pack(counter))
    assert dropping.stats()["dropped"] == 1 and "dropped" in dropping.failures[0]["error"]
    gate.set()
    assert store.flush(timeout=5) and dropping.flush(timeout=5)


async def test_a_save_on_the_event_loop_never_writes_there(memory_store_url):
    """The queue filled by another thread between `room()` and the save: the job is queued past the bound."""
    import asyncio
    import threading
    gate, ran_on = threading.Event(), []
    store = PackStore(memory_store_url, max_queue=1, put_timeout=5)
    store._writer.submit("held", lambda: gate.wait(10))
    while store._writer._queue.qsize():  # the writer has taken it
        await asyncio.sleep(0.001)
    await store.room()
    other = threading.Thread(target=store._writer.submit, args=("other thread", lambda: None))
    other.start()
    other.join()
    store._writer.submit("mine", lambda: ran_on.append(threading.current_thread().name))
    assert store._writer.full() and not ran_on  # queued, not written on the loop
    gate.set()
    assert store.flush(timeout=5) and ran_on == ["aether-context-store"] and not store.stats().get("inline")


def test_flush_is_bounded(memory_store_url):
    import threading
    gate = threading.Event()
    store = PackStore(memory_store_url)
    store._writer.submit("slow", gate.wait)
    assert store.flush(timeout=0.05) is False and store.stats()["pending"] == 1
    gate.set()
    assert store.flush(timeout=5) is True


# ------------------------------------------------------------------------------------------------
# signed manifests
# ------------------------------------------------------------------------------------------------


def _edit(store: PackStore, uri: str, change) -> None:
    """Edit a manifest and recompute its integrity hash, as a forger would."""
    from aether_context.store import manifest_integrity
    rel = store.rel_from_uri(uri)
    data = json.loads(store.read_bytes(rel))
    data.pop("integrity")
    change(data)
    data["integrity"] = manifest_integrity(data)
    with store.fs.open(store._path(rel), "wb") as f:
        f.write(json.dumps(data).encode())


def test_signed_manifest_detects_a_recomputed_integrity_hash(counter, memory_store_url, monkeypatch):
    monkeypatch.setenv(HMAC_ENV, "k3y-for-tests")
    store = PackStore(memory_store_url, background=False)
    uri = store.save(_pack(counter))
    assert replay(uri)  # a store built from the URI reads the key from the environment too
    _edit(store, uri, lambda d: d.update(tokens_after=1))
    with pytest.raises(ManifestError, match="signature that does not verify"):
        store.load_manifest(uri)
    _edit(store, uri, lambda d: d.pop("signature"))
    with pytest.raises(ManifestError, match="not signed"):
        replay(uri)
    other = PackStore(memory_store_url, background=False, hmac_key="another key")
    uri2 = store.save(_pack(counter, request="second"))
    with pytest.raises(ManifestError, match="another key"):
        other.load_manifest(uri2)


def test_without_a_key_an_edit_with_recomputed_hash_is_not_detectable(counter, memory_store_url, monkeypatch):
    monkeypatch.delenv(HMAC_ENV, raising=False)
    store = PackStore(memory_store_url, background=False)
    uri = store.save(_pack(counter))
    # the fields live in a content-addressed node: an edit writes a node on it and points the file there
    edited = store._put_piece({"v": 3, "base": json.loads(store.read_bytes(store.rel_from_uri(uri)))["record"],
                               "patch": {"$o": {"tokens_after": 1}}})
    _edit(store, uri, lambda d: d.update(record=edited))
    assert store.load_manifest(uri).tokens_after == 1  # why signing exists: integrity alone is not tamper evidence


def test_list_skips_a_corrupt_manifest(counter, memory_store_url):
    store = PackStore(memory_store_url, background=False)
    good = store.save(_pack(counter))
    bad = store.save(_pack(counter, request="other"))
    with store.fs.open(store._path(store.rel_from_uri(bad)), "wb") as f:
        f.write(b"{not json")
    errors: list = []
    assert store.list_manifests(errors=errors) == [good, bad]
    assert errors and errors[0][0] == bad and "not valid JSON" in errors[0][1]


# ------------------------------------------------------------------------------------------------
# process death: atexit flush, kill -9
# ------------------------------------------------------------------------------------------------

WRITER = """
import sys, time
sys.path[:0] = [{root!r}, {tests!r}]
from dataclasses import replace
from conftest import history_turns, make_inputs
from aether_context.pipeline import build_pack
from aether_context.profile import load_profile
from aether_context.store import PackStore
from aether_context.tokens import TokenCounter
store = PackStore({url!r}, max_queue=4)
profile, counter = load_profile("default"), TokenCounter()
for i in range({n}):
    pack = build_pack(make_inputs(history_turns(3), f"request {{i}}"), profile, counter=counter, window=16_000)
    print(store.save(pack), flush=True)
"""


def _writer_script(tmp_path, url: str, n: int) -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return WRITER.format(root=os.path.dirname(here), tests=here, url=url, n=n)


def test_queued_writes_are_flushed_at_interpreter_exit(tmp_path):
    import subprocess
    import sys
    url = str(tmp_path / "packs")
    out = subprocess.run([sys.executable, "-c", _writer_script(tmp_path, url, 8)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    uris = out.stdout.split()
    store = PackStore(url, background=False)
    assert len(uris) == 8 and sorted(store.list_manifests()) == sorted(uris)  # exit without close(): none lost
    assert all(replay(u) for u in uris)


def test_kill_9_during_writes_leaves_no_corrupt_manifest(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    url = str(tmp_path / "packs")
    proc = subprocess.Popen([sys.executable, "-c", _writer_script(tmp_path, url, 100_000)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    for _ in range(40):  # let it write for a while
        proc.stdout.readline()
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    store = PackStore(url, background=False)
    errors: list = []
    uris = store.list_manifests(errors=errors)
    assert len(uris) >= 20 and errors == []
    for uri in uris:
        replay(uri)  # every manifest that exists is whole, and so is everything it references


def test_blobs_are_compressed_and_checked(counter, tmp_path):
    store = PackStore(str(tmp_path / "packs"), background=False)
    pack = _pack(counter, history=history_turns(8, big=200))
    store.save(pack)
    files = [p for p in (tmp_path / "packs" / "blobs").rglob("*") if p.is_file()]
    packed = [p for p in files if p.read_bytes().startswith(b"\x00acz1")]
    assert packed and sum(p.stat().st_size for p in files) < sum(len(store.get_blob(p.name)) for p in files)
    victim = packed[0]
    victim.write_bytes(victim.read_bytes()[:-5])  # a cut compressed blob is corrupt, not silently short
    with pytest.raises(ManifestError, match="corrupt"):
        store.get_blob(victim.name)


def test_a_rule_skips_texts_without_its_literal_and_masks_as_a_full_search_does():
    """A secret shape whose pattern opens with a boundary is tried at every position of a text: a rule that
    names the strings a match holds (`_Rule.needs`) skips a text holding none, with the same result as
    searching it (each shape, JSON-escaped and at a line start, and texts with only a near miss)."""
    import random

    from aether_context.redact import _RULES, _apply

    rng = random.Random(3)
    secrets = ["sk-ant-api03-" + "a1B2" * 8, "sk-proj-" + "Zz9_" * 7, "AIza" + "Sy0_-" * 7, "AKIA" + "Q7" * 8,
               "ghp_" + "x9" * 18, "github_pat_" + "A_" * 25, "xoxb-1234567890-abc", "https://hooks.slack.com/services/T0/B1/x",
               "eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl", "sk-", "eyJ", "AKIA", "xox"]
    filler_words = ["path=/tmp/x", "id=BK0042X", "\\n", "ok", "{\"a\": 1}", "\n", "  ", "token", "ask-me"]
    texts = []
    for _ in range(400):
        words = [rng.choice(filler_words) for _ in range(rng.randint(0, 12))]
        if rng.random() < 0.6:
            words.insert(rng.randint(0, len(words)), rng.choice(["", "\\n", " "]) + rng.choice(secrets))
        texts.append(rng.choice(["", " ", "\n"]).join(words))
    checked = [r for r in _RULES if r.needs]
    assert len(checked) >= 7
    for rule in checked:
        searched = replace(rule, needs=())
        for text in texts:
            assert _apply(rule, text) == _apply(searched, text), (rule.kind, text)
    assert any(_apply(r, t)[1] for r in checked for t in texts)  # the texts do hold secrets
