"""Structural variation (deterministic, opt-in)."""

from __future__ import annotations

import pytest

from aether_context.loop.variation import (
    CANONICAL_STYLE, LIST_STYLES, PROGRESS_STYLES, SEPARATORS, STATUS_LABELS, StructuralVariation, format_list,
    format_progress,
)


def test_disabled_is_always_canonical():
    v = StructuralVariation(seed=123)
    assert not v.enabled
    for i in range(20):
        assert v.style(i) == CANONICAL_STYLE
        assert v.format_progress(3, 5, i) == "3/5"
        assert v.format_list(["a", "b"], i) == "- a\n- b"
        assert v.separator(i) == "---" and v.status_label(i) == "Status:"


def test_same_seed_and_call_same_choice():
    a, b = StructuralVariation(seed=7, enabled=True), StructuralVariation(seed=7, enabled=True)
    assert [a.style(i) for i in range(50)] == [b.style(i) for i in range(50)]
    assert [a.format_progress(2, 7, i) for i in range(50)] == [b.format_progress(2, 7, i) for i in range(50)]


def test_choices_vary_across_calls_and_seeds_and_cover_all_options():
    v = StructuralVariation(seed=7, enabled=True)
    styles = [v.style(i) for i in range(200)]
    assert {s.progress for s in styles} == set(PROGRESS_STYLES)
    assert {s.separator for s in styles} == set(SEPARATORS)
    assert {s.list_style for s in styles} == set(LIST_STYLES)
    assert {s.status_label for s in styles} == set(STATUS_LABELS)
    other = StructuralVariation(seed=8, enabled=True)
    assert styles != [other.style(i) for i in range(200)]


def test_pinned_choice_is_stable_across_versions():
    # sha256-based: this must never change, or replays of old sessions would render differently.
    assert StructuralVariation(seed=3, enabled=True).style(2).progress == "steps"


@pytest.mark.parametrize("style,expected", [
    ("fraction", "3/5"), ("percentage", "60%"), ("bar", "[######....] 3/5"), ("steps", "step 3 of 5"),
])
def test_progress_formats(style, expected):
    assert format_progress(3, 5, style) == expected


def test_progress_edge_cases():
    assert format_progress(9, 5) == "5/5"
    assert format_progress(-1, 5, "percentage") == "0%"
    assert format_progress(2, 0) == "2/?"
    assert format_progress(2, 0, "steps") == "2 steps done"


def test_list_formats():
    assert format_list(["a", "b"], "numbered") == "1. a\n2. b"
    assert format_list(["a", "b"], "indented") == "    a\n    b"
    assert format_list([], "bulleted") == ""
