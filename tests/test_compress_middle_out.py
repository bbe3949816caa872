"""middle_out: the cap holds, cuts fall on line and character-cluster boundaries."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from aether_context.compress import clip_text, middle_out, omission_marker
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()
MARKER_RE = re.compile(r"\n…\[(\d+) tokens omitted(?:: [^;\]]+)?(?:; full text: (\S+))?\]…\n")


def _split(result: str) -> tuple[str, int, str | None, str]:
    match = MARKER_RE.search(result)
    assert match, result
    return result[: match.start()], int(match.group(1)), match.group(2), result[match.end():]


def test_text_that_fits_is_returned_unchanged():
    assert middle_out("short text\n", 50, COUNTER) == "short text\n"


def test_long_log_keeps_whole_head_and_tail_lines_and_names_the_uri():
    lines = [f"2024-05-01 12:00:{i:02d} INFO worker {i} processed batch {i * 7}" for i in range(400)]
    text = "\n".join(lines)
    result = middle_out(text, 200, COUNTER, uri="artifact://run/7/stdout.txt")
    assert COUNTER.count_text(result) <= 200
    head, omitted, uri, tail = _split(result)
    assert uri == "artifact://run/7/stdout.txt"
    assert text.startswith(head) and text.endswith(tail)
    assert head.startswith(lines[0]) and tail.endswith(lines[-1])
    assert omitted > 1000
    kept = head.split("\n") + tail.split("\n")
    assert all(line in lines for line in kept)  # line cuts, not mid-line


def test_marker_without_uri_and_omission_count():
    text = "alpha beta gamma delta " * 500
    result = middle_out(text, 60, COUNTER)
    head, omitted, uri, tail = _split(result)
    assert uri is None
    assert COUNTER.count_text(result) <= 60
    assert omitted == COUNTER.count_text(text[len(head):len(text) - len(tail)])
    assert omission_marker(3) == "\n…[3 tokens omitted]…\n"


def test_the_note_says_why_in_the_one_marker():
    """`middle_out(text, max_tokens, counter, note)`: the pipeline's cuts use the same marker."""
    text = "\n".join(f"row {i}: value {i * 3}" for i in range(500))
    result = middle_out(text, 80, COUNTER, "oversized tool result", uri="artifact://a/u/s/r.json")
    assert COUNTER.count_text(result) <= 80
    assert "tokens omitted: oversized tool result; full text: artifact://a/u/s/r.json]…" in result
    head, _, uri, tail = _split(result)
    assert uri == "artifact://a/u/s/r.json" and text.startswith(head) and text.endswith(tail)
    assert omission_marker(3, None, "oversized message") == "\n…[3 tokens omitted: oversized message]…\n"


def test_cjk_and_emoji_are_never_split():
    unit = "日本語のテキストを処理します。👨\u200d👩\u200d👧\u200d👦🇯🇵🇫🇷 e\u0301 👍🏽 "
    text = unit * 300
    for cap in (17, 40, 101, 333):
        result = middle_out(text, cap, COUNTER, uri="artifact://x")
        assert COUNTER.count_text(result) <= cap
        assert "\ufffd" not in result
        head, _, _, tail = _split(result)
        assert text.startswith(head) and text.endswith(tail)
        assert not head.endswith("\u200d") and not tail.startswith(("\u200d", "\u0301", "\U0001F3FD"))
        flags = sum(1 for c in head if 0x1F1E6 <= ord(c) <= 0x1F1FF)
        assert flags % 2 == 0


def test_surrogate_pairs_are_never_split():
    pair = "\ud83d\ude00"  # a surrogate pair as code points (e.g. JSON decoded with surrogatepass)
    text = ("ab" + pair) * 400
    result = middle_out(text, 101, len)
    head, _, _, tail = _split(result)
    assert len(result) <= 101
    assert not head.endswith("\ud83d") and not tail.startswith("\ude00")


def test_tiny_and_zero_budgets():
    text = "x" * 5000
    assert middle_out(text, 0, COUNTER) == ""
    small = middle_out(text, 3, COUNTER)
    assert 0 < COUNTER.count_text(small) <= 3
    assert clip_text("hello world, this is long", 3, COUNTER).endswith("…")


def test_same_input_same_bytes():
    text = "\n".join(f"row {i}: {'z' * (i % 37)}" for i in range(2000))
    assert middle_out(text, 150, COUNTER, uri="u://1") == middle_out(text, 150, COUNTER, uri="u://1")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(list("ab \n.,-_日本語🎉é") + ["\u0301", "👨\u200d👩", "🇯🇵"]), max_size=300).map("".join),
    st.integers(min_value=1, max_value=40),
    st.integers(min_value=1, max_value=80),
)
def test_cap_property(piece: str, repeat: int, cap: int):
    """Whatever the text: within the cap, and a head + marker + tail cut whenever the marker fits (the
    repeat makes texts over the cap common; short random lists alone almost never are)."""
    text = piece * repeat
    result = middle_out(text, cap, COUNTER)
    assert COUNTER.count_text(result) <= cap
    match = MARKER_RE.search(result)
    if COUNTER.count_text(text) <= cap:
        assert result == text
    elif match is not None:  # head + marker + tail
        assert text.startswith(result[: match.start()]) and text.endswith(result[match.end():])
    else:  # no room for a marker beside some text: a clipped head
        assert cap < 24, (text, cap, result)
        assert text.startswith(result.rstrip("…").rstrip())
