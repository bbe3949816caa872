"""Compact JSON: the shortest faithful encoding of a tool result, and its inverse."""

from __future__ import annotations

import json

import pytest

from aether_context.compress.compact_json import columnarize, compact_json, decolumnarize, expand_compact_json
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()


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
