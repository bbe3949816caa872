"""Throughput shortcuts (issue 38) give what the long way gives: the secret scan's skip of short texts, and the
size bound under which a tool result is examined on the event loop."""

from __future__ import annotations

import random

import pytest

import aether_context.redact as redaction
from aether_context.adk.packer import SMALL_RESULT_CHARS
from aether_context.content import within_chars

from test_secrets import ORDINARY, SECRET_SHAPES


def _texts() -> list[str]:
    rng = random.Random(38)
    shapes = [make(rng)[0] for make in SECRET_SHAPES.values()]
    words = ["agent", "lookup", "e-7515e8da-6197-4405-be30-3ebfd179320e", "sha256:" + "ab" * 32, "pk_24f3a0e2be5b",
             "ACCOUNT", "SKU-12", "it's", 'say "hi"']
    return shapes + ORDINARY + words + [f"{w} {s}" for w in words for s in shapes[:5]]


@pytest.mark.parametrize("text", _texts())
def test_the_short_text_skip_masks_what_a_full_scan_masks(text, monkeypatch):
    settings = redaction.RedactionSettings()
    quick = redaction.redact(text, settings)
    monkeypatch.setattr(redaction, "_may_hold", lambda t: True)
    assert quick == redaction.redact(text, settings)


def test_a_result_is_small_up_to_its_bound():
    def small(value):
        return within_chars(value, SMALL_RESULT_CHARS)

    assert small({"key": "K1", "detail": "x" * 1000})
    assert not small({"detail": "x" * (SMALL_RESULT_CHARS + 1)})
    assert not small([0] * SMALL_RESULT_CHARS)  # many items count too
    assert not small({"rows": [{"a": "y" * 100} for _ in range(100)]})
