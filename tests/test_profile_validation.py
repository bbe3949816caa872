"""Profiles refuse values that would break packing, with short errors naming the field and the fix."""

from __future__ import annotations

import pytest

from aether_context.errors import ProfileError
from aether_context.profile import MAX_ERROR_CHARS, load_profile
from aether_context.redact import RedactionSettings


def _load(tmp_path, text: str):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return load_profile(str(path))


@pytest.mark.parametrize("text, field", [
    ("weights: {evidence: {base: .inf}}", "weights.evidence.base"),
    ("weights: {memory: {similarity: .nan}}", "weights.memory.similarity"),
    ("weights: {conversation: {dialogue_depth: -.inf}}", "weights.conversation.dialogue_depth"),
    ("recovery: {window_factor: .nan}", "recovery.window_factor"),
    ("retrieval: {min_score: .inf}", "retrieval.min_score"),
])
def test_non_finite_numbers_are_refused(tmp_path, text, field):
    with pytest.raises(ProfileError, match=f"{field}: must be a finite number"):
        _load(tmp_path, text)


@pytest.mark.parametrize("text, field", [
    ("conversation: {tail_turns: true}", "conversation.tail_turns"),
    ("floors: {slack: false}", "floors.slack"),
    ("evidence: {top_k: '8'}", "evidence.top_k"),
    ("window_tokens: yes", "window_tokens"),
])
def test_booleans_and_strings_for_numbers_are_refused(tmp_path, text, field):
    with pytest.raises(ProfileError, match=f"{field}: a number is required"):
        _load(tmp_path, text)


@pytest.mark.parametrize("floors", [
    "{slack: 0.95, system: 0, task: 0, tools: 0}",
    "{slack: 0.5, system: 0.2, task: 0.1, tools: 0.05}",
    "{slack: 0.12, system: 0.3, task: 0.3, tools: 0.1}",
])
def test_floors_that_leave_no_room_are_refused(tmp_path, floors):
    with pytest.raises(ProfileError, match="floors|slack"):
        _load(tmp_path, f"floors: {floors}")


def test_floors_at_the_limit_are_accepted(tmp_path):
    assert _load(tmp_path, "floors: {slack: 0.5, system: 0.1, task: 0.1, tools: 0.1}").floors.slack == 0.5


def test_duplicate_keys_are_refused(tmp_path):
    with pytest.raises(ProfileError, match="duplicate key 'floors'.*line 2"):
        _load(tmp_path, "floors: {slack: 0.1}\nfloors: {slack: 0.2}\n")
    with pytest.raises(ProfileError, match="duplicate key 'top_k'"):
        _load(tmp_path, "evidence: {top_k: 3, top_k: 4}")


def test_an_alias_bomb_gives_a_short_error(tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    lines.append("name: *i")
    with pytest.raises(ProfileError) as err:
        _load(tmp_path, "\n".join(lines))
    assert len(str(err.value)) < MAX_ERROR_CHARS and "alias" in str(err.value)


def test_a_big_wrong_value_is_echoed_briefly(tmp_path):
    value = "[" + ", ".join(["[" + ", ".join(["1"] * 50) + "]"] * 50) + "]"
    with pytest.raises(ProfileError) as err:
        _load(tmp_path, f"name: {value}\nfloors: {{slack: {value}}}\nbogus: {value}")
    text = str(err.value)
    assert len(text) < 1000 and "name" in text and "floors.slack" in text and "unknown key 'bogus'" in text


def test_redaction_section(tmp_path):
    profile = _load(tmp_path, "redaction: {enabled: false}")
    assert profile.redaction == RedactionSettings(enabled=False)
    profile = _load(tmp_path, "redaction: {patterns: ['EMP-\\d+'], keys: [ssn]}")
    assert profile.redaction.patterns == ("EMP-\\d+",) and profile.redaction.enabled
    assert load_profile("default").redaction.enabled  # on by default
    with pytest.raises(ProfileError, match="redaction.patterns.*not a valid regular expression"):
        _load(tmp_path, "redaction: {patterns: ['(']}")


@pytest.mark.parametrize("setting, value", [("window_tokens", -1), ("window_tokens", "32k"), ("window_tokens", 0),
                                            ("window_tokens", True), ("pack_timeout", -3), ("pack_timeout", "5"),
                                            ("memory_pool", -1), ("keep_recent", -1)])
def test_a_bad_plugin_argument_is_refused_at_construction(memory_store_url, setting, value):
    """Accepted, each of these made every call fail open with a log line only (a newcomer's typo)."""
    from aether_context import ContextPackPlugin

    with pytest.raises(ValueError, match=rf"^{setting}={value!r}: .+"):
        ContextPackPlugin(store=memory_store_url, **{setting: value})
    ContextPackPlugin(store=memory_store_url, window_tokens=8000, pack_timeout=0.5, memory_pool=0, keep_recent=1)
    ContextPackPlugin(store=memory_store_url, pack_timeout=None, keep_recent=0)  # no time limit; no recent calls kept


def test_a_bad_pack_timeout_from_the_environment_is_named(memory_store_url, monkeypatch):
    import aether_context.adk.packer as packer

    monkeypatch.setenv("AETHER_CONTEXT_PACK_TIMEOUT", "0")
    monkeypatch.setattr(packer, "PACK_TIMEOUT", 0.0)  # as read at import with the variable set
    with pytest.raises(ValueError, match=r"pack_timeout=0.0 \(from AETHER_CONTEXT_PACK_TIMEOUT\): seconds above 0"):
        packer.ContextPacker(store=memory_store_url, pack_timeout=packer.PACK_TIMEOUT)


def test_every_problem_is_listed_at_once_with_the_fix_for_its_kind(tmp_path):
    """A quoted number no longer hides the other problems, a YAML boolean is named as one, and a check over
    a whole section does not echo keys the file never wrote."""
    with pytest.raises(ProfileError) as err:
        _load(tmp_path, 'window_tokens: -5\noffload: {threshold_tokens: "2000"}\nconversation: {compact_to: 1.5}')
    text = str(err.value)
    assert "window_tokens" in text and "offload.threshold_tokens" in text and "conversation.compact_to" in text
    with pytest.raises(ProfileError, match=r"conversation.tail_turns: a number is required, got True \(YAML reads"):
        _load(tmp_path, "conversation: {tail_turns: true}")
    with pytest.raises(ProfileError, match=r"name: text is required, got False .+: put it in quotes"):
        _load(tmp_path, "name: off")
    with pytest.raises(ProfileError) as err:
        _load(tmp_path, "retrieval: {embedding_quantize: true}")
    assert "embedding_max_seq_length" not in str(err.value)
