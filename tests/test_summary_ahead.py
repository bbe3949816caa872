"""A compaction's running summary takes in fold lines the work ahead already read and counted: the
summary a compaction writes costs it lookups, not a reading of each line and an encoding of the text."""

from __future__ import annotations

from aether_context.adk import packer
from aether_context.adk.worker import wait_ahead
from aether_context.compress import summarize as summarize_module
from aether_context.pipeline.cache import PackCache

from conftest import filler, run_turn
from test_compaction_cost import CALL, _booking_chat, _run, on_pack_thread


class Encoding:
    """A tiktoken encoding noting the characters it encodes on the pack thread, by call, while `inside`."""

    def __init__(self, inner, inside: list[bool], encoded: dict[int, int]):  # type: ignore[no-untyped-def]
        self.inner, self.inside, self.encoded = inner, inside, encoded

    def encode_ordinary(self, text):  # type: ignore[no-untyped-def]
        if self.inside[0] and on_pack_thread():
            self.encoded[CALL[0] + 1] = self.encoded.get(CALL[0] + 1, 0) + len(text)
        return self.inner.encode_ordinary(text)

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


class Counting:
    """A tiktoken encoding adding the characters it encodes on the pack thread while `inside` to `encoded[0]`
    (the work ahead may run meanwhile, on its own thread)."""

    def __init__(self, inner, inside: list[bool], encoded: list[int]):  # type: ignore[no-untyped-def]
        self.inner, self.inside, self.encoded = inner, inside, encoded

    def encode_ordinary(self, text):  # type: ignore[no-untyped-def]
        if self.inside[0] and on_pack_thread():
            self.encoded[0] += len(text)
        return self.inner.encode_ordinary(text)

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


def _record_searches(monkeypatch, searched: list[int], on_write=None) -> list[bool]:  # type: ignore[no-untyped-def]
    """Patch the summarizer so that each call whose summary looks for references in a line on the pack thread
    is noted in `searched` (`on_write(summarizer)` runs first at each summary); returns the flag that is
    True while a summary is written."""
    inside = [False]
    write, find = summarize_module.ExtractiveSummarizer.summarize, summarize_module.extract_references

    def writing(self, previous, items, **kw):  # type: ignore[no-untyped-def]
        if on_write is not None:
            on_write(self)
        inside[0] = True
        try:
            return write(self, previous, items, **kw)
        finally:
            inside[0] = False

    def finding(text, **kw):  # type: ignore[no-untyped-def]
        if inside[0] and on_pack_thread():
            searched.append(CALL[0] + 1)
        return find(text, **kw)
    monkeypatch.setattr(summarize_module.ExtractiveSummarizer, "summarize", writing)
    monkeypatch.setattr(summarize_module, "extract_references", finding)
    return inside


async def test_a_compaction_summary_reads_and_encodes_no_line_the_work_ahead_could(memory_store_url, monkeypatch):
    """The fold lines a summary takes in were fold lines of turns the work ahead read while they were
    verbatim: their reading (the clipped Progress line, its decisions, errors and files), whether a line
    names anything, and the counts of the lines the summary and the block show are kept then, and the
    summary's text is counted by its lines. So each summary after the first finds no reference in a line
    and encodes nothing while it writes its summary, and sends what a packer that works nothing ahead sends."""
    summaries: list[int] = []  # the calls whose pack wrote a summary
    searched: list[int] = []  # the calls whose summary looked for references in a line on the pack thread
    encoded: dict[int, int] = {}

    def writing(summarizer) -> None:  # type: ignore[no-untyped-def]
        counter = summarizer.counter
        if not isinstance(counter._encoding, Encoding):
            counter._encoding = Encoding(counter._encoding, inside, encoded)
        if on_pack_thread():
            summaries.append(CALL[0] + 1)
    inside = _record_searches(monkeypatch, searched, writing)
    seen = {}
    for ahead in (True, False):
        if not ahead:  # the control: no work ahead, so each compaction reads and counts its lines itself
            monkeypatch.setattr(packer, "warm_ahead", lambda *a, **k: 0)
        summaries.clear(), searched.clear(), encoded.clear()
        requests, manifests = await _run(f"{memory_store_url}/summary-{ahead}", cold=False, cache=PackCache())
        compacting = [k for k, m in enumerate(manifests) if m.compaction]
        # the summaries after the first (which counts the session's goal line and section headers once)
        later = [k for k in summaries if k in compacting[1:] and k != summaries[0]]
        assert len(later) >= 2, (summaries, compacting)
        assert any("SUMMARY:" in str(r) for r in requests)
        seen[ahead] = (requests, [k for k in searched if k in later], {k: n for k, n in encoded.items() if k in later})
    assert seen[False][1] and seen[False][2], seen[False][1:]  # the recorders see the pack thread's work
    assert not seen[True][1] and not seen[True][2], seen[True][1:]
    assert seen[True][0] == seen[False][0]


async def test_a_summary_reads_no_line_of_a_block_the_work_ahead_saw(memory_store_url, monkeypatch):
    """A first compaction (a long history packed cold) folds turns no call saw verbatim, so the work ahead
    never read their fold lines; it reads them from the block it finds after a call (once per block), so the
    compactions that later fold those lines into the summary look for no reference in them."""
    from aether_context.pipeline import warm

    searched: list[int] = []  # the calls whose summary looked for references in a line on the pack thread
    ahead = warm.warm_ahead

    def after_first_compaction(inputs, state, *args, **kwargs):  # type: ignore[no-untyped-def]
        return ahead(inputs, state, *args, **kwargs) if state.compactions else 0
    _record_searches(monkeypatch, searched)
    monkeypatch.setattr(packer, "warm_ahead", after_first_compaction)
    seen = {}
    for block in (True, False):
        if not block:  # the control: the work ahead reads the verbatim turns only
            monkeypatch.setattr(warm, "_block_ahead", lambda *a, **k: None)
        searched.clear()
        requests, manifests = await _run(f"{memory_store_url}/block-{block}", cold=False, cache=PackCache())
        later = [k for k, m in enumerate(manifests) if m.compaction][1:]
        assert len(later) >= 2 and any("SUMMARY:" in str(r) for r in requests)
        seen[block] = (requests, [k for k in searched if k in later])
    assert seen[False][1], "no summary folded a line of the first block"
    assert not seen[True][1], seen[True][1]
    assert seen[True][0] == seen[False][0]


async def test_a_new_cap_cuts_the_opening_request_by_its_lines(memory_store_url, monkeypatch):
    """The pinned opening request is cut middle-out at each new cap of the block's share: a binary search
    over its prefixes and suffixes, each counted. They are counted by their lines (the same counts:
    `TokenCounter.count_lines`), which the session counted before, so a cut encodes the partial lines it
    tries (less than the text's length), not every prefix whole (many times its length)."""
    from aether_context.pipeline import conversation

    encoded = [0]
    cuts: list[tuple[int, int]] = []  # per cut: (characters of the text, characters encoded)
    inside = [False]
    cut = conversation.middle_out

    def cutting(text, max_tokens, counter, *args, **kwargs):  # type: ignore[no-untyped-def]
        before, inside[0] = encoded[0], True
        try:
            return cut(text, max_tokens, counter, *args, **kwargs)
        finally:
            inside[0] = False
            cuts.append((len(text), encoded[0] - before))
    monkeypatch.setattr(conversation, "middle_out", cutting)
    p, runner = _booking_chat(f"{memory_store_url}/opening-lines", stride=2)
    p.packer.counter._encoding = Counting(p.packer.counter._encoding, inside, encoded)
    await runner.session_service.create_session(app_name=runner.app_name, user_id="u", session_id="chat")
    opening = "Audit these bookings one by one:\n" + "\n".join(filler(40, seed=k) for k in range(24))
    await run_turn(runner, "chat", opening)
    for t in range(1, 8):
        await run_turn(runner, "chat", f"Who holds booking ref{2 * t}?")
        wait_ahead()
    assert len(cuts) >= 2 and all(chars for _, chars in cuts), cuts  # cuts at new caps, each counting
    assert all(chars < size for size, chars in cuts), cuts
