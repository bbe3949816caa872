"""Budget profiles (built-ins, files, validation); the context-window registry is in test_model_windows."""

from __future__ import annotations

import pytest

from aether_context.errors import ProfileError
from aether_context.pipeline import Signals, allocate
from aether_context.profile import BudgetProfile, builtin_profiles, load_profile

# ------------------------------------------------------------------------------------------------
# built-in profiles
# ------------------------------------------------------------------------------------------------


def _shares(profile: BudgetProfile, window: int = 1_000_000) -> dict[str, float]:
    alloc = allocate(profile, window, Signals(), {}, {})
    return {k: v / alloc.remainder for k, v in alloc.nominal.items()}


def test_builtins_are_listed():
    names = builtin_profiles()
    for name in ("default", "research", "requirements", "test_construction"):
        assert name in names


@pytest.mark.parametrize("name", ["default", "research", "requirements", "test_construction", "coding_agent"])
def test_builtin_loads_by_name(name):
    profile = load_profile(name)
    assert isinstance(profile, BudgetProfile)
    assert profile.name == name
    assert profile.description


def test_none_gives_default():
    assert load_profile(None).name == "default"
    assert load_profile().name == "default"


def test_profile_instance_passes_through():
    p = load_profile("research")
    assert load_profile(p) is p


@pytest.mark.parametrize("name, evidence, memory, conversation", [
    ("research", (0.55, 0.65), (0.20, 0.25), (0.10, 0.15)),
    ("requirements", (0.45, 0.55), (0.25, 0.30), (0.15, 0.20)),
    ("test_construction", (0.50, 0.60), (0.20, 0.25), (0.10, 0.15)),
])
def test_builtin_remainder_shares_in_design_ranges(name, evidence, memory, conversation):
    shares = _shares(load_profile(name))
    eps = 1e-6
    for layer, (lo, hi) in (("evidence", evidence), ("memory", memory), ("conversation", conversation)):
        assert lo - eps <= shares[layer] <= hi + eps, (name, layer, shares[layer])
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-4)


def test_default_shares():
    shares = _shares(load_profile("default"))
    assert shares["evidence"] == pytest.approx(0.40, abs=1e-4)
    assert shares["memory"] == pytest.approx(0.20, abs=1e-4)
    assert shares["conversation"] == pytest.approx(0.40, abs=1e-4)


def test_unknown_builtin_name():
    with pytest.raises(ProfileError, match="unknown profile 'nope'"):
        load_profile("nope")


# ------------------------------------------------------------------------------------------------
# profiles from files
# ------------------------------------------------------------------------------------------------


def test_load_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nwindow_tokens: 32000\nfloors: {slack: 0.2}\nconversation: {tail_turns: 3}\n")
    profile = load_profile(path)
    assert profile.name == "mine"
    assert profile.window_tokens == 32_000
    assert profile.floors.slack == 0.2
    assert profile.floors.system == 0.06  # defaults fill what the file does not set
    assert profile.conversation.tail_turns == 3
    assert load_profile(str(path)) == profile


def test_missing_yaml_file(tmp_path):
    with pytest.raises(ProfileError, match="not found"):
        load_profile(tmp_path / "absent.yaml")


@pytest.mark.parametrize("text, key", [
    ("name: x\nwindow_tokenz: 1000\n", "window_tokenz"),
    ("floors: {system: 0.1, sytem: 0.1}\n", "floors.sytem"),
    ("weights:\n  evidence: {base: 0.5, risk: 0.1}\n", "weights.evidence.risk"),
])
def test_unknown_key_is_named(tmp_path, text, key):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert f"unknown key {key!r}" in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("floors", [
    "{system: 0.25, task: 0.25, tools: 0.25, slack: 0.25}",
    "{system: 0.5, task: 0.3, tools: 0.2, slack: 0.1}",
])
def test_floors_summing_to_one_or_more(tmp_path, floors):
    path = tmp_path / "floors.yaml"
    path.write_text(f"floors: {floors}\n")
    with pytest.raises(ProfileError, match="floors add up to"):
        load_profile(path)


@pytest.mark.parametrize("text", ["floors: {system: [0.1\n", "name: a\n  bad: indent: here\n", "a: b: c\n"])
def test_invalid_yaml(tmp_path, text):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile(path)


def test_yaml_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ProfileError, match="mapping"):
        load_profile(path)


def test_bad_value_names_key_and_value(tmp_path):
    path = tmp_path / "neg.yaml"
    path.write_text("conversation: {tail_turns: 0}\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert "conversation.tail_turns" in str(info.value) and "0" in str(info.value)


def test_override_revalidates():
    base = load_profile("default")
    changed = base.override(window_tokens=16_000, floors={"slack": 0.2})
    assert changed.window_tokens == 16_000 and changed.floors.slack == 0.2
    assert changed.floors.system == base.floors.system
    assert base.window_tokens is None  # the original is not mutated
    with pytest.raises(ProfileError, match="unknown key"):
        base.override(nonsense=1)
    with pytest.raises(ProfileError, match="floors add up to"):
        base.override(floors={"system": 0.9, "slack": 0.5})


def test_profiles_are_frozen():
    profile = load_profile("default")
    with pytest.raises(Exception):
        profile.window_tokens = 5  # type: ignore[misc]


def test_a_yaml_retrieval_key_keeps_the_pack_embedding_defaults(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nretrieval: {fusion: rrf}\n", encoding="utf-8")
    r = load_profile(path).retrieval
    assert r.fusion == "rrf"
    assert (r.embedding_max_seq_length, r.embedding_threads) == (128, 1)
    assert load_profile("default").override(retrieval={"fusion": "rrf"}).retrieval == r
    path.write_text("name: p\nretrieval: {embedding_threads: null}\n", encoding="utf-8")
    r = load_profile(path).retrieval
    assert (r.embedding_max_seq_length, r.embedding_threads) == (128, None)


def test_a_removed_embedding_key_names_the_fix(tmp_path):
    path = tmp_path / "p.yaml"
    for key in ("embedding_quantize: true", "embedding_batch_size: 8"):
        path.write_text(f"name: p\nretrieval: {{{key}}}\n", encoding="utf-8")
        with pytest.raises(ProfileError, match=rf"retrieval: {key.split(':')[0]} was removed \(.+\): delete the key"):
            load_profile(path)
