"""`aether-context inspect / replay / list / timeline / report / compact` through `aether_context.cli.main`."""

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
    assert "truncations:" in text and "conversation: fold" in text and "folded into one-line summaries" in text
    assert "artifact://app/u/s1/r.txt" in text
    assert f"calibration {m.calibration:.2f}" in text and f"packed for {m.packed_for:,}" in text
    assert f"ADK would have sent {m.tokens_before:,}" in text


def test_inspect_accepts_the_pack_folder_and_json(saved):
    _, pack, uri = saved
    folder = uri.rsplit("/", 1)[0]
    code, text = run(["inspect", folder + "/", "--json"])
    assert code == 0
    data = json.loads(text)
    assert data["pack_id"] == pack.manifest.pack_id and data["uri"] == uri
    assert data["tokens_without_plugin"] >= data["tokens_before"] > 0
    assert data["truncations_explained"] and all(isinstance(t, str) for t in data["truncations_explained"])
    assert run(["replay", folder])[1] == run(["replay", uri])[1]


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


def test_replay_with_profile_shows_the_diff(saved, tmp_path):
    _, pack, uri = saved
    # a profile that packs this history differently: every turn cut to 64 tokens
    path = tmp_path / "short_turns.yaml"
    path.write_text("name: short_turns\nconversation: {max_turn_tokens: 64}\n")
    code, text = run(["replay", uri, "--profile", str(path)])
    assert code == 0
    assert "profile default -> profile short_turns" in text and "tokens sent" in text
    # a unified diff of the two requests, line by line (not JSON)
    assert "--- recorded (default)" in text and "+++ re-packed (short_turns)" in text and "\n@@ " in text
    assert f"-checksum {pack.request.checksum}" in text
    code, text = run(["replay", uri, "--profile", str(path), "--json"])
    assert code == 0
    data = json.loads(text)
    assert data["diff"]["profile"] == ["default", "short_turns"]
    assert data["manifest"]["profile"] == "short_turns"
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
    assert pack.manifest.pack_id in text and uri in text and "s1" in text
    code, text = run(["list", store.url, "--app", "nope"])
    assert code == 0 and text == ""
    code, text = run(["list", store.url, "--json"])
    data = json.loads(text)
    assert [c["uri"] for c in data["calls"]] == [uri] and data["skipped"] == []


def _second_session(store, counter):
    inputs = make_inputs(history_turns(4, big=50), "and the other one?", session_id="s2")
    return store.save(build_pack(inputs, load_profile("default"), counter=counter, window=3_000))


def test_timeline_has_a_session_column_and_json(saved, counter):
    store, pack, uri = saved
    other = _second_session(store, counter)
    code, text = run(["timeline", store.url])
    assert code == 0
    header = text.splitlines()[1]
    assert "session" in header and "without plugin" in header
    assert "s1" in text and "s2" in text and "2 calls" in text
    code, text = run(["timeline", store.url, "--session", "s2", "--json"])
    data = json.loads(text)
    assert [c["uri"] for c in data["calls"]] == [other] and data["calls"][0]["session"] == "s2"
    assert data["savings"]["reported"] == 0


def test_a_scope_with_no_calls_says_so(saved, capsys):
    store, _, _ = saved
    for verb in ("list", "timeline"):
        code, _ = run([verb, store.url, "--session", "s1x"])
        assert code == 0
        assert "no recorded calls for --session 's1x': ids are matched whole" in capsys.readouterr().err


def test_corrupt_manifest_is_skipped_and_reported(saved, counter, capsys):
    store, pack, uri = saved
    other = _second_session(store, counter)
    with store.fs.open(store._path(store.rel_from_uri(other)), "wb") as f:
        f.write(b'{"truncated":')
    for verb in ("list", "timeline"):
        code, text = run([verb, store.url])
        assert code == 0 and pack.manifest.pack_id in text
    err = capsys.readouterr().err
    assert err.count("skipped an unreadable manifest") == 2 and "not valid JSON" in err


def test_missing_store_is_an_error(tmp_path, capsys):
    for verb in ("list", "timeline", "report"):
        code, text = run([verb, str(tmp_path / "no-such-store")])
        assert code == 2 and text == ""
    assert capsys.readouterr().err.count("no pack store at") == 3


def test_every_option_has_help():
    import click

    from aether_context.cli import cli

    for name, command in cli.commands.items():
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{name} {param.opts} has no help"
        assert command.help, name


def test_cache_savings_in_the_timeline(saved):
    store, pack, uri = saved
    m = pack.manifest
    store.save_usage(m, {"reported": 1000, "cached": 800})
    code, text = run(["timeline", store.url, "--json", "--discount", "default=0.5"])
    data = json.loads(text)["savings"]
    assert data["reported"] == 1000 and data["cached"] == 800 and data["cached_share"] == 0.8
    assert data["saved_tokens"] == 400  # the model is gpt-4o in the manifest: OpenAI's 50 %
    code, text = run(["timeline", store.url, "--discount", "openai=0.25", "--price", "2.5"])
    assert "cache savings: ≈ 200 full-price input tokens ≈ $0.0005" in text
    with pytest.raises(SystemExit) as exc:  # a usage error, as argparse would
        run(["timeline", store.url, "--discount", "openai=2"])
    assert exc.value.code == 2


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


def test_timeline_fits_a_narrow_terminal(saved):
    from rich.console import Console

    from aether_context.cli.render import timeline_view
    from aether_context.report import cache_savings, load_calls

    store, pack, _ = saved
    calls = load_calls(store.url).calls
    out = io.StringIO()
    Console(file=out, width=100).print(timeline_view(calls, cache_savings(calls), width=100))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert pack.manifest.pack_id not in text and "ADK" in text and "…" not in text.split("\n\n")[0]


# ------------------------------------------------------------------------------------------------
# edges: every verb fails in one line with exit 2 and a hint; a read verb creates nothing
# ------------------------------------------------------------------------------------------------


def _one_line_error(capsys, *needles):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aether-context: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_report_into_a_missing_folder(saved, tmp_path, capsys):
    store, _, _ = saved
    target = tmp_path / "missing" / "dir" / "r.html"
    code, text = run(["report", store.url, "-o", str(target)])
    assert code == 2 and text == ""
    _one_line_error(capsys, "does not exist", "-o")
    assert not (tmp_path / "missing").exists()


def test_a_store_url_of_an_unknown_or_uninstalled_protocol(capsys):
    for verb in ("list", "timeline", "report"):
        code, _ = run([verb, "nosuchproto://bucket/packs"])
        assert code == 2
        _one_line_error(capsys, "nosuchproto", "s3fs")
    code, _ = run(["inspect", "nosuchproto://bucket/packs/a/u/s/agent/pk/manifest.json"])
    assert code == 2
    _one_line_error(capsys, "nosuchproto")


def test_a_folder_that_is_not_a_store(tmp_path, capsys):
    folder = tmp_path / "not-a-store"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "notes.txt").write_text("hello")
    for verb in ("list", "timeline"):
        code, text = run([verb, str(folder)])
        assert code == 2 and text == ""
        _one_line_error(capsys, "is not a pack store", ".aether/packs")
    assert sorted(p.name for p in folder.rglob("*")) == ["docs", "notes.txt"]  # nothing created


def test_compact_does_not_create_a_database(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _ = run(["compact", "--db", "sqlite:///nonexistent.db", "app", "u", "s1"])
    assert code == 2
    _one_line_error(capsys, "nonexistent.db", "nothing was created")
    assert not (tmp_path / "nonexistent.db").exists()
    code, _ = run(["compact", "--db", f"sqlite+aiosqlite:///{tmp_path}/missing/sessions.db", "app", "u", "s1"])
    assert code == 2
    _one_line_error(capsys, "no database file")
    assert list(tmp_path.iterdir()) == []


def test_inspect_on_a_store_points_at_list(saved, capsys):
    store, _, uri = saved
    for verb in ("inspect", "replay"):
        code, text = run([verb, store.url])
        assert code == 2 and text == ""
        _one_line_error(capsys, "is a pack store", f"aether-context list {store.url}")
    code, _ = run(["inspect", uri.rsplit("/", 3)[0]])  # a folder above one call
    assert code == 2
    _one_line_error(capsys, "aether-context list")


def test_read_verbs_create_nothing(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "packs"
    for argv in (["list", str(missing)], ["timeline", str(missing)], ["inspect", f"{missing}/a/u/s/agent/pk"],
                 ["replay", f"{missing}/a/u/s/agent/pk/manifest.json"]):
        code, _ = run(argv)
        assert code == 2
        _one_line_error(capsys)
    assert not (tmp_path / "nowhere").exists()
