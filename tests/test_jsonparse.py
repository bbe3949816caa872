"""Tolerant JSON parsing of model output."""

from __future__ import annotations

import pytest

from aether_context.errors import AetherContextError
from aether_context.compress.jsonparse import JSONNotFoundError, json_candidates, parse_json_loose


@pytest.mark.parametrize("text,expected", [
    ('{"a": 1}', {"a": 1}),
    ("42", 42),
    ('"plain"', "plain"),
    ("[]", []),
    ('```json\n{"action": "read_file", "path": "a.py"}\n```', {"action": "read_file", "path": "a.py"}),
    ('Sure, here it is:\n```\n[{"id": 1}, {"id": 2}]\n```\nAnything else?', [{"id": 1}, {"id": 2}]),
    ("```JSON\n42\n```", 42),
    ('{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}),
    ("{'name': 'x', 'tags': ['a', 'b']}", {"name": "x", "tags": ["a", "b"]}),
    ("Here's the config: {'retries': 3}", {"retries": 3}),
    ('The answer is {"ok": true, "n": 2} as requested.', {"ok": True, "n": 2}),
    ('See [note 1] first. Result: {"a": 1}', {"a": 1}),  # a bracketed aside is not the JSON
    ('Result:\n[1, 2, 3,]\nthanks', [1, 2, 3]),
    ('{"a": {"b": [1, {"c": "}"}]}} trailing prose', {"a": {"b": [1, {"c": "}"}]}}),
    ('{"plan": ["step 1", "step 2"', {"plan": ["step 1", "step 2"]}),  # truncated output
    ('{"a": True, "b": None}', {"a": True, "b": None}),  # Python literals
    ("x = {}", {}),
])
def test_parse_json_loose(text, expected):
    assert parse_json_loose(text) == expected


@pytest.mark.parametrize("text", ["", "hello world", "no json at all.", "abc {", "```\nnot json\n```"])
def test_nothing_json_like_raises(text):
    with pytest.raises(JSONNotFoundError) as info:
        parse_json_loose(text)
    assert isinstance(info.value, ValueError) and isinstance(info.value, AetherContextError)
    assert "no JSON" in str(info.value)


def test_non_string_is_a_type_error():
    with pytest.raises(TypeError):
        parse_json_loose(b"{}")  # type: ignore[arg-type]


def test_candidates_order_fences_first():
    text = 'x {"b": 2} y\n```json\n{"a": 1}\n```'
    assert json_candidates(text)[0] == '{"a": 1}'
    assert parse_json_loose(text) == {"a": 1}


def test_deterministic():
    text = "{'a': [1, 2,], 'b': 'c',}"
    assert parse_json_loose(text) == parse_json_loose(text) == {"a": [1, 2], "b": "c"}
