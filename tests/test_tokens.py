"""Token counting: what each part costs, and that counts are cached by content hash."""

from __future__ import annotations

import pytest

from aether_context.content import Blob, FunctionCall, FunctionResponse, Message, OpaquePart, TextPart, canonical_json
from aether_context.tokens import IMAGE_TOKENS, MESSAGE_OVERHEAD, PART_OVERHEAD, TokenCounter, TokenCounting

from conftest import filler, text_msg


def test_count_text_known_values(counter):
    assert counter.count_text("hello world") == 2
    assert counter.count_text("") == 0
    long = " ".join(["hello world"] * 50)
    assert counter.count_text(long) == 100


def test_text_message_is_text_plus_overhead(counter):
    msg = text_msg("user", "hello world")
    assert counter.count_message(msg) == MESSAGE_OVERHEAD + 2


def test_function_call_counts_name_and_args(counter):
    args = {"path": "src/main.py", "lines": [1, 2, 3], "recursive": True}
    msg = Message("model", (FunctionCall("read_file", args),))
    expected = MESSAGE_OVERHEAD + PART_OVERHEAD + counter.count_text("read_file") + counter.count_text(canonical_json(args))
    assert counter.count_message(msg) == expected
    bigger = Message("model", (FunctionCall("read_file", {**args, "extra": filler(100)}),))
    assert counter.count_message(bigger) > expected + 90


def test_function_response_counts_payload(counter):
    payload = {"content": filler(300), "status": "ok"}
    msg = Message("user", (FunctionResponse("read_file", payload),))
    expected = MESSAGE_OVERHEAD + PART_OVERHEAD + counter.count_text("read_file") + counter.count_text(canonical_json(payload))
    assert counter.count_message(msg) == expected
    assert counter.count_message(msg) > 300


@pytest.mark.parametrize("size", [10, 10_000, 1_000_000])
def test_inline_image_is_a_fixed_estimate(counter, size):
    msg = Message("user", (Blob("image/png", b"\x89PNG" + b"\0" * size),))
    assert counter.count_message(msg) == MESSAGE_OVERHEAD + IMAGE_TOKENS


def test_two_images_and_text(counter):
    msg = Message("user", (TextPart("hello world"), Blob("image/png", b"a"), Blob("image/jpeg", b"b")))
    assert counter.count_message(msg) == MESSAGE_OVERHEAD + 2 + 2 * IMAGE_TOKENS


def test_custom_image_estimate():
    counter = TokenCounter(image_tokens=1000)
    msg = Message("user", (Blob("image/png", b"x"),))
    assert counter.count_message(msg) == MESSAGE_OVERHEAD + 1000


def test_opaque_part_is_counted_as_json(counter):
    raw = {"file_data": {"file_uri": "gs://bucket/report.pdf", "mime_type": "application/pdf"}}
    msg = Message("user", (OpaquePart(raw),))
    assert counter.count_message(msg) == MESSAGE_OVERHEAD + counter.count_text(canonical_json(raw))


def test_per_message_overhead_adds_up(counter):
    msgs = [text_msg("user", "hi"), text_msg("model", "hi"), text_msg("user", "hi")]
    assert counter.count_messages(msgs) == 3 * (MESSAGE_OVERHEAD + counter.count_text("hi"))
    one = Message("user", (TextPart("hi"), TextPart("hi"), TextPart("hi")))
    assert counter.count_messages(msgs) - counter.count_message(one) == 2 * MESSAGE_OVERHEAD


def test_counter_satisfies_protocol(counter):
    assert isinstance(counter, TokenCounting)


def test_truncate_text_cuts_on_token_boundary(counter):
    text = filler(200)
    cut = counter.truncate_text(text, 50)
    assert text.startswith(cut)
    assert counter.count_text(cut) <= 50
    assert counter.truncate_text("short text", 50) == "short text"


def test_message_counts_are_cached_by_content_hash(counter):
    msg = text_msg("user", filler(200))
    first = counter.count_message(msg)
    stats = counter.cache_stats
    # an equal message built separately has the same digest: a hit, no re-tokenization
    twin = Message("user", (TextPart(filler(200)),))
    assert twin is not msg and twin.digest == msg.digest
    assert counter.count_message(twin) == first
    after = counter.cache_stats
    assert after["message_hits"] == stats["message_hits"] + 1
    assert after["message_misses"] == stats["message_misses"]
    assert after["text_misses"] == stats["text_misses"]
    # a different message is a miss
    counter.count_message(text_msg("user", filler(201)))
    assert counter.cache_stats["message_misses"] == stats["message_misses"] + 1


def test_long_texts_are_cached_by_hash(counter):
    text = filler(100)
    counter.count_text(text)
    before = counter.cache_stats
    counter.count_text(str(text))
    after = counter.cache_stats
    assert after["text_hits"] == before["text_hits"] + 1
    assert after["text_misses"] == before["text_misses"]


def test_role_changes_the_digest_not_the_count(counter):
    a, b = text_msg("user", filler(80)), text_msg("model", filler(80))
    assert a.digest != b.digest
    assert counter.count_message(a) == counter.count_message(b)


# ------------------------------------------------------------------------------------------------
# A real ADK session: history is tokenized once, not on every call.
# ------------------------------------------------------------------------------------------------


async def test_adk_session_history_is_not_retokenized(memory_store_url):
    from google.adk.plugins.base_plugin import BasePlugin

    from aether_context import ContextPackPlugin
    from aether_context.testing import call

    from conftest import make_runner, new_session, run_turn, scripted_agent

    class Snapshot(BasePlugin):
        """Registered before the pack plugin: sees ADK's request and the counter before packing."""

        def __init__(self, packer):
            super().__init__(name="snapshot")
            self.packer = packer
            self.seen: list[tuple[int, dict]] = []

        async def before_model_callback(self, *, callback_context, llm_request):
            self.seen.append((len(llm_request.contents), dict(self.packer.counter.cache_stats)))

    turns = []
    for i in range(8):
        turns += [call("fetch_page", url=f"https://example.com/{i}"), f"Summary of page {i}."]
    agent, llm = scripted_agent(turns)
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=6000)
    snap = Snapshot(plugin.packer)
    runner = make_runner(agent, plugins=[snap, plugin])
    sid = await new_session(runner)
    for i in range(8):
        await run_turn(runner, sid, f"Please read page {i} and summarise it.")
    plugin.packer.store.flush()

    assert len(snap.seen) == 16
    final = plugin.packer.counter.cache_stats
    sizes = [n for n, _ in snap.seen]
    stats = [s for _, s in snap.seen] + [final]
    for j, n in enumerate(sizes):  # packing call j
        new_messages = n - (sizes[j - 1] if j else 0)
        misses = stats[j + 1]["message_misses"] - stats[j]["message_misses"]
        # call j tokenized only its new ADK messages plus the few messages the pack itself rendered
        # (payload, task probe; at a compaction the new block; the last message with the closing status on
        # it; a payload re-rendered after a final drop); never the whole history again
        m = plugin.packer.recent[j].manifest
        rendered = 3 + (1 if m.compaction else 0) + (1 if m.recited else 0) + sum(
            1 for e in m.truncation_events if e["reason"].startswith("window still exceeded"))
        assert misses <= new_messages + rendered, (j, misses, new_messages, n)
        if j:
            assert stats[j + 1]["message_hits"] - stats[j]["message_hits"] >= sizes[j - 1] // 2
    # over the session the misses are linear in the new content, far below the contents counted
    assert final["message_misses"] <= sizes[-1] + 3 * len(sizes)
    assert final["message_misses"] < sum(sizes) / 3


def test_a_text_counted_by_its_lines_counts_as_a_whole(counter):
    """`count_lines` sums the counts of a text's lines where no token runs across the line break: the
    same count as the whole text's, for texts made of every kind of character around line breaks."""
    import random

    assert type(counter)()._by_lines  # cl100k's pattern: else count_lines is count_text and this proves nothing
    rng = random.Random(7)
    pieces = list("ab Z9 .,-\n\n\r\t→…é中😀\u00a0\u2028\u3000\x1c\x85\u200b\"()[]{}:;_=+/\\'") + \
        ["'s", "'ll", " \n", "\n ", "  - ", "123", "4567", "\n  - lookup(ref=7) → id=BK7", "\nKNOWN VALUES:"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(40, 160)))
        text = text + "\n" + "x" * max(0, 256 - len(text))  # long enough to be counted by its lines
        fresh = type(counter)()
        assert fresh.count_lines(text) == counter.count_text(text), repr(text)
    block = "HEADER:\n" + "\n".join(f"  - line {i}: {filler(12, seed=i)}" for i in range(40))
    assert counter.count_lines(block) == type(counter)().count_text(block)
