"""Goal recitation: the capped status block, drift score and the should_recite rule."""

from __future__ import annotations

import pytest

from aether_context.loop.recitation import (
    RecitationSettings, build_recitation, content_words, drift_score, recitation_interval, should_recite,
)
from aether_context.tokens import TokenCounter
from aether_context.loop.variation import StructuralVariation

COUNTER = TokenCounter()
GOAL = "Fix the failing date parsing in shop/util/helpers.py so that tests in tests/test_helpers.py pass"
ARGS = (GOAL, 3, 5, "run pytest tests/test_helpers.py",
        ["handle timezone offsets", "update the changelog", "add a regression test"],
        ["AssertionError: assert '2024' == '2025'", "ModuleNotFoundError: No module named 'dateutil'"])


def test_canonical_block():
    text = build_recitation(*ARGS, max_tokens=500, counter=COUNTER)
    assert text == (
        f"STATUS — goal: {GOAL}\n"
        "progress 3/5; next: run pytest tests/test_helpers.py\n"
        "open: handle timezone offsets; update the changelog; add a regression test\n"
        "last errors: AssertionError: assert '2024' == '2025'; ModuleNotFoundError: No module named 'dateutil'"
    )


def test_minimal_block():
    # no plan: no progress figure
    assert build_recitation("Ship it", 0, 0, None, [], [], max_tokens=50, counter=COUNTER) == "STATUS — goal: Ship it"


@pytest.mark.parametrize("cap", [1, 3, 8, 12, 20, 40, 60, 500])
def test_hard_cap(cap):
    text = build_recitation(*ARGS, max_tokens=cap, counter=COUNTER)
    assert COUNTER.count_text(text) <= cap
    varied = build_recitation(*ARGS, max_tokens=cap, counter=COUNTER,
                              variation=StructuralVariation(seed=1, enabled=True), call_index=4)
    assert COUNTER.count_text(varied) <= cap


def test_drop_order_open_items_then_errors_then_next_then_goal():
    full = build_recitation(*ARGS, max_tokens=500, counter=COUNTER)
    tight = build_recitation(*ARGS, max_tokens=COUNTER.count_text(full) - 5, counter=COUNTER)
    assert "last errors" in tight and "regression" not in tight and GOAL in tight
    tighter = build_recitation(*ARGS, max_tokens=40, counter=COUNTER)
    assert "open" not in tighter and "last errors" not in tighter and GOAL in tighter
    tiny = build_recitation(*ARGS, max_tokens=15, counter=COUNTER)
    assert tiny.startswith("STATUS — goal: Fix the") and "…" in tiny and tiny.endswith("progress 3/5")


def test_long_items_are_clipped():
    text = build_recitation("g" * 5000, 1, 2, "n" * 5000, [], [], max_tokens=5000, counter=COUNTER)
    assert len(text) < 1000


def test_variation_changes_layout_not_content():
    v = StructuralVariation(seed=5, enabled=True)
    texts = {build_recitation(*ARGS, max_tokens=500, counter=COUNTER, variation=v, call_index=i) for i in range(8)}
    assert len(texts) > 1
    for text in texts:
        assert GOAL in text and "dateutil" in text
    same = build_recitation(*ARGS, max_tokens=500, counter=COUNTER, variation=v, call_index=3)
    assert same == build_recitation(*ARGS, max_tokens=500, counter=COUNTER, variation=v, call_index=3)
    disabled = build_recitation(*ARGS, max_tokens=500, counter=COUNTER, variation=StructuralVariation(seed=5))
    assert disabled == build_recitation(*ARGS, max_tokens=500, counter=COUNTER)


def test_content_words():
    assert content_words("The tests are FAILING in the helpers") == {"test", "fail", "helper"}
    assert content_words("a an of 123 it") == frozenset()


def test_drift_score():
    on_track = ["I ran pytest tests/test_helpers.py; the date parsing fails in helpers.py, fixing it."]
    off_track = ["Let me look at the README and the docker compose config instead."]
    assert drift_score(GOAL, on_track) < 0.4
    assert drift_score(GOAL, off_track) == 1.0
    assert drift_score(GOAL, on_track) < drift_score(GOAL, ["parsing only"]) < 1.0
    assert drift_score(GOAL, []) == 0.0 and drift_score("", ["anything"]) == 0.0
    assert 0.0 <= drift_score(GOAL, ["date"]) <= 1.0


def test_interval_rule():
    s = RecitationSettings()  # base 3, drift_threshold 0.6, on_track 0.2, large 30k
    assert recitation_interval(0.4, 1_000, s) == 3  # moderate drift, small context: base
    assert recitation_interval(0.9, 1_000, s) == 1  # high drift: halved
    assert recitation_interval(0.1, 1_000, s) == 6  # on track, small context: doubled
    assert recitation_interval(0.4, 50_000, s) == 2  # large context: one sooner
    assert recitation_interval(0.1, 50_000, s) == 2  # on track but large: not relaxed
    assert recitation_interval(0.9, 50_000, s) == 1  # never below 1


def test_should_recite_first_call_and_disabled():
    s = RecitationSettings()
    assert should_recite(0, None, 0.0, 0, s)
    assert should_recite(7, None, 0.0, 0, s)  # never recited yet
    assert not should_recite(0, None, 1.0, 10**6, RecitationSettings(enabled=False))


def test_drift_raises_frequency():
    s = RecitationSettings()

    def calls(drift: float, context_tokens: int = 1_000) -> list[int]:
        last, fired = None, []
        for i in range(24):
            if should_recite(i, last, drift, context_tokens, s):
                last = i
                fired.append(i)
        return fired

    on_track, moderate, drifted = calls(0.0), calls(0.4), calls(0.9)
    assert on_track == [0, 6, 12, 18]
    assert moderate == list(range(0, 24, 3))
    assert drifted == list(range(24))
    assert len(calls(0.4, 80_000)) > len(moderate)


def test_settings_validation():
    with pytest.raises(ValueError, match="on_track_threshold"):
        RecitationSettings(on_track_threshold=0.7, drift_threshold=0.5)
    with pytest.raises(ValueError):
        RecitationSettings(max_token=10)
    with pytest.raises(ValueError):
        RecitationSettings(base_every_n_calls=0)
