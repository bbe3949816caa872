"""Readers survive hostile files: every CLI verb and store reader reports a bad manifest in one line and goes on.

A store holds one good call beside manifests that are nested 100,000 deep, truncated, binary garbage, a
wrong-typed field (with a valid integrity hash, so it reaches validation), a record blob nested 100,000
deep, and a file too large to be a manifest. `list`, `timeline` and `report` show the good call and one
line per bad file; `inspect` and `replay` on a bad file fail in one line with exit 2.
"""

from __future__ import annotations

import io
import json
import random

import pytest

from aether_context import store as store_module
from aether_context.cli import main
from aether_context.errors import ManifestError
from aether_context.pipeline import TaskSpec, build_pack
from aether_context.profile import load_profile
from aether_context.report import load_calls
from aether_context.store import PackStore
from aether_context.store.format import manifest_integrity

from conftest import history_turns, make_inputs, tool_spec

DEEP = 100_000


def _sealed(data: dict) -> bytes:
    body = {k: v for k, v in data.items() if k != "integrity"}
    return json.dumps({**body, "integrity": manifest_integrity(body)}).encode("utf-8")


@pytest.fixture
def hostile(tmp_path, counter, monkeypatch):
    """(store url, the good call's URI, {kind: hostile manifest URI})."""
    monkeypatch.setattr(store_module, "MAX_MANIFEST_BYTES", 1_000_000)
    url = f"file://{tmp_path}/packs"
    inputs = make_inputs(history_turns(4), "summarise the sources", task=TaskSpec(goal="Write the report"),
                         tools=[tool_spec("search")])
    store = PackStore(url, background=False)
    good = store.save(build_pack(inputs, load_profile("default"), counter=counter, window=8_000))
    raw = store.read_bytes(store.rel_from_uri(good))
    valid = json.loads(raw)
    deep_blob = store.put_blob(("[" * DEEP + "]" * DEEP).encode())
    files = {
        "deep_array": ("[" * DEEP + "]" * DEEP).encode(),
        "deep_object": ('{"a":' * DEEP + "1" + "}" * DEEP).encode(),
        "truncated": raw[:len(raw) // 2],
        "binary": bytes(random.Random(7).getrandbits(8) for _ in range(4096)),
        "wrong_type": _sealed({**valid, "created_at": "yesterday"}),
        "deep_record": _sealed({**valid, "record": deep_blob}),
        "huge": b'{"pad": "' + b"x" * 2_000_000 + b'"}',
        "not_an_object": b"[1, 2, 3]",
    }
    folder = good.rsplit("/", 2)[0]
    uris = {}
    for kind, data in files.items():
        uri = f"{folder}/{kind}/manifest.json"
        path = uri[len("file://"):]
        store.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        uris[kind] = uri
    return url, good, uris


def run(argv, capsys):
    out = io.StringIO()
    code = main(argv, out=out)
    err = capsys.readouterr().err
    return code, out.getvalue(), err


def test_store_readers_name_each_bad_manifest_and_go_on(hostile):
    url, good, uris = hostile
    store = PackStore(url, background=False)
    for kind, uri in uris.items():
        with pytest.raises(ManifestError) as caught:
            store.read_manifest(uri)
        assert uri in str(caught.value) or kind == "deep_record", (kind, caught.value)
    errors: list = []
    listed = store.list_manifests(errors=errors)
    assert good in listed and {u for u, _ in errors} == set(uris.values())
    listing = load_calls(url)
    assert [c.uri for c in listing.calls] == [good]
    assert {u for u, _ in listing.skipped} == set(uris.values())


@pytest.mark.parametrize("verb", ["list", "timeline", "report"])
def test_listing_verbs_show_the_good_call_and_one_line_per_bad_file(hostile, capsys, tmp_path, verb):
    url, good, uris = hostile
    argv = [verb, url] + (["-o", str(tmp_path / "r.html")] if verb == "report" else [])
    code, out, err = run(argv, capsys)
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == len(uris) and all(ln.startswith("aether-context: skipped an unreadable manifest: ")
                                           for ln in lines), err
    assert "Traceback" not in err
    if verb == "list":
        assert good.rsplit("/", 2)[1] in out  # the good call is still listed


@pytest.mark.parametrize("verb", [["inspect"], ["inspect", "--json"], ["replay"], ["replay", "--profile", "default"]])
def test_call_verbs_fail_in_one_line_on_each_bad_file(hostile, capsys, verb):
    _, _, uris = hostile
    for kind, uri in uris.items():
        code, out, err = run([*verb, uri], capsys)
        assert code == 2, (kind, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("aether-context: "), (kind, err)
        assert "Traceback" not in err and out == ""
