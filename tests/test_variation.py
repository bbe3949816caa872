"""Structural variation (deterministic, opt-in) and compact JSON (shortest faithful encoding)."""

from __future__ import annotations

import json

import pytest

from aether_context.tokens import TokenCounter
from aether_context.variation import (
    CANONICAL_STYLE, LIST_STYLES, PROGRESS_STYLES, SEPARATORS, STATUS_LABELS, StructuralVariation, columnarize,
    compact_json, decolumnarize, expand_compact_json, format_list, format_progress,
)

COUNTER = TokenCounter()


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


RECORDS = [
    {"flight": "HAT030", "date": "2024-05-13", "seats": 3, "price": 120.5},
    {"flight": "HAT290", "date": "2024-05-14", "seats": 0, "price": 99},
    {"flight": "HAT229", "date": "2024-05-15", "seats": 12, "price": None},
]
VALUES = [
    RECORDS,
    {"user": "noah_muller_9847", "reservations": RECORDS, "ok": True},
    {"a": "1", "b": "x y", "c": "", "d": "NaN", "e": [1, 2], "f": None, "g": "true", "h": " pad", "i": "é"},
    {"multi": "line one\nline two", "n": -3.5e-7},
    [{"a": [{"x": 1}, {"x": 2}]}, {"a": []}],  # nested tables inside rows
    [{"a": 1}, {"b": 2}],  # not homogeneous
    [1, "two", None, True], "s", 3.5, None, {}, [], [{}, {}],
    {"k=v": 1}, {"[weird": "{x"}, {"": 1},
]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("use_counter", [False, True])
def test_compact_json_round_trips_and_is_never_longer(value, use_counter):
    counter = COUNTER if use_counter else None
    text = compact_json(value, counter)
    assert expand_compact_json(text) == value
    minified = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert len(text) <= len(minified) if counter is None else COUNTER.count_text(text) <= COUNTER.count_text(minified)
    assert compact_json(value, counter) == text  # deterministic


def test_records_use_the_columnar_form():
    text = compact_json(RECORDS)
    assert "columns" in text and "rows" in text and '"flight"' in text
    assert len(text) < len(json.dumps(RECORDS, separators=(",", ":")))
    assert decolumnarize(columnarize(RECORDS)) == RECORDS
    assert columnarize(RECORDS) == {"columns": ["date", "flight", "price", "seats"],
                                    "rows": [["2024-05-13", "HAT030", 120.5, 3], ["2024-05-14", "HAT290", 99, 0],
                                             ["2024-05-15", "HAT229", None, 12]]}


def test_flat_dict_uses_key_value_lines():
    assert compact_json({"status": "confirmed", "id": "ABC123", "n": 2}) == "id=ABC123\nn=2\nstatus=confirmed"


def test_table_lookalike_input_stays_minified_json():
    lookalike = {"columns": ["a"], "rows": [[1], [2]]}
    assert compact_json(lookalike) == json.dumps(lookalike, sort_keys=True, separators=(",", ":"))


def test_expand_rejects_garbage():
    with pytest.raises(ValueError):
        expand_compact_json("not an encoding")


def test_non_json_values_are_rejected():
    with pytest.raises(ValueError):
        compact_json({"x": float("nan")})
