"""`aether-context inspect / replay / list` through `aether_context.cli.main`."""

from __future__ import annotations

import io
import json

import pytest

from aether_context.cli import main
from aether_context.content import ModelRequest
from aether_context.pipeline import EvidenceItem, TaskSpec, build_pack
from aether_context.profile import load_profile
from aether_context.store import PackStore

from conftest import history_turns, make_inputs, tool_spec


@pytest.fixture(params=["memory", "file"])
def saved(request, counter, memory_store_url, tmp_path):
    url = memory_store_url if request.param == "memory" else f"file://{tmp_path}/packs"
    task = TaskSpec(goal="Write the report", acceptance=("cites sources",))
    # a history over its room at this window: the pack compacts it (a fold in the manifest)
    inputs = make_inputs(history_turns(12, big=300), "summarise the sources", task=task,
                         tools=[tool_spec("search")],
                         evidence=[EvidenceItem("ev1", "revenue grew 12%", uri="artifact://app/u/s1/r.txt")])
    pack = build_pack(inputs, load_profile("default"), counter=counter, window=3_000)
    store = PackStore(url, background=False)
    return store, pack, store.save(pack)


def run(argv):
    out = io.StringIO()
    code = main(argv, out=out)
    return code, out.getvalue()


def test_inspect(saved):
    _, pack, uri = saved
    code, text = run(["inspect", uri])
    assert code == 0
    m = pack.manifest
    assert m.pack_id in text and m.checksum in text
    for layer in ("system", "task", "tools", "evidence", "memory", "conversation", "slack"):
        assert layer in text
    assert "truncations:" in text and "conversation: fold" in text
    assert "artifact://app/u/s1/r.txt" in text


def test_replay_text(saved):
    _, pack, uri = saved
    code, text = run(["replay", uri])
    assert code == 0
    assert f"checksum {pack.request.checksum}" in text
    assert "USER REQUEST (VERBATIM; answer it):\nsummarise the sources" in text
    assert "CONVERSATION SO FAR (earlier turns, compacted" in text
    assert "tools: search" in text


def test_replay_json_is_the_exact_request(saved):
    _, pack, uri = saved
    code, text = run(["replay", uri, "--json"])
    assert code == 0
    request = ModelRequest.from_json(json.loads(text))
    assert request == pack.request
    assert request.checksum == pack.manifest.checksum


def test_replay_with_profile_shows_the_diff(saved):
    _, pack, uri = saved
    code, text = run(["replay", uri, "--profile", "research"])
    assert code == 0
    assert "profile research" in text and "changes:" in text
    code, text = run(["replay", uri, "--profile", "research", "--json"])
    assert code == 0
    data = json.loads(text)
    assert data["diff"]["profile"] == ["default", "research"]
    assert data["manifest"]["profile"] == "research"
    assert ModelRequest.from_json(data["request"]).checksum == data["manifest"]["checksum"]


def test_replay_with_profile_path(saved, tmp_path):
    _, _, uri = saved
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nconversation: {tail_turns: 2}\n")
    code, text = run(["replay", uri, "--profile", str(path), "--json"])
    assert code == 0
    assert json.loads(text)["manifest"]["profile"] == "mine"


def test_list(saved):
    store, pack, uri = saved
    code, text = run(["list", store.url])
    assert code == 0
    assert pack.manifest.pack_id in text and uri in text
    code, text = run(["list", store.url, "--app", "nope"])
    assert code == 0 and text == ""


def test_tampered_manifest_exit_code(saved, capsys):
    store, _, uri = saved
    rel = store.rel_from_uri(uri)
    data = json.loads(store.read_bytes(rel))
    data["tokens_after"] = 1
    with store.fs.open(store._path(rel), "wb") as f:
        f.write(json.dumps(data).encode())
    for argv in (["inspect", uri], ["replay", uri], ["replay", uri, "--profile", "research"]):
        code, _ = run(argv)
        assert code == 2
    assert "integrity" in capsys.readouterr().err


def test_bad_uris_exit_code(saved, capsys):
    _, _, uri = saved
    code, _ = run(["inspect", uri.replace("manifest.json", "other.json")])
    assert code == 2
    code, _ = run(["replay", uri.rsplit("/", 2)[0] + "/pk_missing/manifest.json"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("aether-context:") == 2


def test_unknown_profile_exit_code(saved, capsys):
    _, _, uri = saved
    code, _ = run(["replay", uri, "--profile", "no_such_profile"])
    assert code == 2
    assert "unknown profile" in capsys.readouterr().err


def test_usage_errors():
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(SystemExit):
        main(["frobnicate"])
