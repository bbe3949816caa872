"""Canonical JSON in pieces: a huge value is encoded a slice at a time, to the same text as one `json.dumps`."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

import aether_context.content as content
from aether_context.adk import worker
from aether_context.content import SLICE_CHARS, canonical_json, json_text

text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)
values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
                      lambda inner: st.lists(inner, max_size=5) | st.dictionaries(text, inner, max_size=5)
                      | st.dictionaries(st.integers(), inner, max_size=3), max_leaves=30)


def whole(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


@settings(max_examples=300, deadline=None)
@given(values)
def test_pieces_join_to_the_whole_encoding(value):
    old = content.SLICE_CHARS
    content.SLICE_CHARS = 7  # small: every string of 8+ characters is sliced, every container opened by hand
    try:
        assert canonical_json(value) == whole(value)
        for indent in (-1, 0, 1, 2):
            assert json_text(value, indent=indent) == json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    finally:
        content.SLICE_CHARS = old


def test_a_50_mb_result_is_encoded_in_slices_to_the_same_text():
    line = "2026-12-07T02:29:46Z INFO worker exported row \"quoted\" \\ tab\t é \ud83d\ude00 \ud800\n"
    value = {"status": "ok", "log": line * 40_000, "rows": [{"id": i, "note": line} for i in range(3)]}
    assert len(value["log"]) > 2 * content.SLICE_CHARS
    assert canonical_json(value) == whole(value)
    assert json_text(value, indent=1) == json.dumps(value, indent=1, ensure_ascii=False, default=str)


def test_a_lone_surrogate_past_the_first_slice_is_still_repaired():
    value = "a" * (SLICE_CHARS + 10) + "\udc80" + "b"
    fixed, n = worker.repair_unicode(value)
    assert n == 1 and fixed.endswith("\ufffdb")
    assert worker.repair_unicode("plain " * 300_000) == ("plain " * 300_000, 0)
