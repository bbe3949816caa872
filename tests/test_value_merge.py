"""Merging known values again from an earlier merge gives what a merge from scratch gives."""

from __future__ import annotations

import random
import re

from aether_context.compress._value_forms import short_fields
from aether_context.compress.value_merge import merge_values, merged_values
from aether_context.compress.values import ValueSet, extract_values

IDS = [f"res_{k}" for k in range(12)] + ["YAX4DR", "HAT136", "credit_card_4421486", "mia_li_3668"]
PLAIN = ["250", "2024-05-20", "gold", "economy", "Austin", "Mia Li", "975 Sunset Drive", "no"]


def _reference(sets: list, visible: str) -> list:
    """The merge as its docstring states it, source by source, value by value: what the merge must equal."""
    latest: dict = {}
    for vs in sets:
        if vs.source not in latest or vs.turn >= latest[vs.source].turn:
            latest[vs.source] = vs
    shown: set = set()
    every: set = set()
    words = set(re.findall(r"[\w.@+-]*\w", visible))  # the visible text's whole tokens
    out = []
    for vs in sorted(latest.values(), key=lambda v: (v.derived, -v.turn, v.source)):
        own = {p.split("=", 1)[1] for p in vs.source[vs.source.find("(") + 1:vs.source.rfind(")")].split(", ")
               if "=" in p} if vs.call else set()
        fields = []
        for name, values in short_fields(vs.fields):
            fresh = tuple(v for v in values if v not in own and v not in (every if vs.derived else shown)
                          and not (v in words if " " not in v else re.search(rf"(?<!\w){re.escape(v)}(?!\w)", visible)))
            if fresh:
                fields.append((name, fresh))
            shown.update(v for v in fresh if re.match(r"^(?=.*[A-Za-z])(?=.*\d)[\w.@+-]{3,}$|^[A-Z][A-Z0-9]{2,11}$", v))
            every.update(fresh)
        if fields or vs.call:
            out.append(ValueSet(vs.source, vs.turn, tuple(fields), vs.call))
    return out


def _source(rng: random.Random, turn: int) -> ValueSet:
    """A random source: a call (its label may hold one of its values), a user text or a model text."""
    fields = tuple((rng.choice(["user_id", "flights.flight_number", "prices.economy", "name", "city", "amount"]),
                    tuple(dict.fromkeys(rng.choice(IDS + PLAIN) for _ in range(rng.randint(1, 4)))))
                   for _ in range(rng.randint(1, 3)))
    kind = rng.random()
    if kind < 0.5:
        return ValueSet(f"get_{rng.randint(0, 5)}(id={rng.choice(IDS)})", turn, fields, call=True)
    return ValueSet(f"{'user' if kind < 0.8 else 'model'} (turn {turn})", turn, fields)


def _visible(rng: random.Random) -> str:
    return " ".join(rng.sample(IDS + PLAIN, rng.randint(0, 8)))


def test_a_merge_from_an_earlier_one_equals_a_merge_from_scratch():
    """Random chains of merges (sources added, dropped and replaced by a newer result of the same call,
    the visible text changing): each merge from the last one equals a fresh merge, and most of what
    the sources keep is reused, not merged again."""
    reused = total = 0
    for seed in range(200):
        rng = random.Random(seed)
        sources = [_source(rng, t) for t in range(rng.randint(0, 30))]
        before = merged_values(sources, visible=_visible(rng))
        for step in range(6):
            turn = 30 + step
            sources = [s for s in sources if rng.random() > 0.1]  # some go (the oldest leave a compaction's reading)
            sources += [_source(rng, turn) for _ in range(rng.randint(0, 3))]  # new turns, a call repeated among them
            rng.shuffle(sources)  # the merge orders its sources itself
            visible = _visible(rng) if rng.random() < 0.5 else ""
            again = merged_values(sources, visible=visible, since=before)
            scratch = merged_values(sources, visible=visible)
            assert list(again.sets) == _reference(sources, visible) == list(scratch.sets)
            _same_state(again, scratch)
            reused += sum(1 for out in again.sets if any(out is o for o in before.sets))
            total += len(again.sets)
            before = again
    assert reused > total // 3


def test_a_merge_after_a_new_verbatim_turn_equals_a_merge_from_scratch(monkeypatch):
    """A new verbatim turn only adds words to the visible text: the sources holding them keep what they kept,
    less those values (`_less`, not merged again); each merge equals a fresh one, state included."""
    from aether_context.compress import value_merge

    calls = {"merged": 0, "less": 0}
    merge_source, less = value_merge._merge_source, value_merge._less

    def counted(name, fn):  # type: ignore[no-untyped-def]
        def call(*args):  # type: ignore[no-untyped-def]
            calls[name] += 1
            return fn(*args)
        return call
    for seed in range(200):
        rng = random.Random(5000 + seed)
        sources = [_source(rng, t) for t in range(rng.randint(1, 40))]
        parts = (_visible(rng),)
        before = merged_values(sources, visible=parts)
        for _ in range(5):
            parts = (*parts, _visible(rng))  # a turn joins the verbatim zone
            with monkeypatch.context() as patch:
                patch.setattr(value_merge, "_merge_source", counted("merged", merge_source))
                patch.setattr(value_merge, "_less", counted("less", less))
                again = merged_values(sources, visible=parts, since=before)
            assert list(again.sets) == _reference(sources, "\n".join(parts))
            _same_state(again, merged_values(sources, visible="\n".join(parts)))
            before = again
    assert calls["merged"] == 0 and calls["less"] > 1000, calls  # no source merged again whole


def _same_state(again, scratch) -> None:
    """What a later merge starts from is what a merge from scratch leaves."""
    assert again.sources == scratch.sources and again.keys == scratch.keys
    assert [again.entries[id(s)][2:] for s in again.sources] == [scratch.entries[id(s)][2:] for s in scratch.sources]
    assert again.keepers == scratch.keepers and again.spaced == scratch.spaced
    assert again.holders == scratch.holders
    assert [again.shown[id(s)] for s in again.sources] == [scratch.shown[id(s)] for s in scratch.sources]
    assert (again.visible, again.words, again.runs) == (scratch.visible, scratch.words, scratch.runs)


def test_merges_from_one_earlier_merge_and_a_visible_text_in_parts_equal_merges_from_scratch():
    """An earlier merge is left as it was: two merges from it (a compaction's full merge and its capped
    one, the newest sources only) each equal a merge from scratch, and so do chains of them; the visible
    text given as parts joined by line breaks (some parts the same as the last merge's) is that text."""
    for seed in range(200):
        rng = random.Random(1000 + seed)
        sources = [_source(rng, t) for t in range(rng.randint(0, 40))]
        parts = tuple(_visible(rng) for _ in range(3))
        before = merged_values(sources, visible=parts)
        for step in range(5):
            turn = 40 + step
            sources = [s for s in sources if rng.random() > 0.1]
            sources += [_source(rng, turn) for _ in range(rng.randint(0, 4))]
            parts = tuple(p if rng.random() < 0.6 else _visible(rng) for p in parts[rng.randint(0, 1):]) + (
                _visible(rng),) * rng.randint(0, 2)
            text = "\n".join(parts)
            newest = sorted(sources, key=lambda s: -s.turn)[:rng.randint(0, len(sources))]
            capped = merged_values(newest, visible=parts, since=before)
            again = merged_values(sources, visible=parts, since=before)
            assert list(capped.sets) == _reference(newest, text) == list(merged_values(newest, visible=text).sets)
            assert list(again.sets) == _reference(sources, text)
            _same_state(again, merged_values(sources, visible=text))
            _same_state(capped, merged_values(newest, visible=text))
            before = again if rng.random() < 0.7 else capped


def test_a_value_that_becomes_visible_leaves_the_sources_that_showed_it():
    """The visible text changed: a reused source's value now in the verbatim turns is not shown again,
    and one no longer there is shown again."""
    booking = extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"},
                             result={"user_id": "mia_li_3668", "flights": [{"flight_number": "HAT136"}]}, turn=2)
    said = extract_values(text="Your flight HAT136 is booked.", role="model", turn=3)
    first = merged_values([booking, said], visible="")
    assert "mia_li_3668" in str(first.sets)
    now = merged_values([booking, said], visible="the user mia_li_3668 asked", since=first)
    assert "mia_li_3668" not in str(now.sets) and now.sets == merged_values([booking, said],
                                                                           visible="the user mia_li_3668 asked").sets
    back = merged_values([booking, said], visible="", since=now)
    assert back.sets == first.sets


def test_a_merge_reads_again_only_the_sources_a_change_touches():
    """A new source and a changed visible text: the sources none of whose values changed standing keep
    what they found without being looked at again (the same sets, not equal ones recomputed), and the
    merge still equals one from scratch."""
    rng = random.Random(7)
    sources = [_source(rng, t) for t in range(300)]
    visible = "the user mia_li_3668 asked about Mia Li"
    before = merged_values(sources, visible=visible)
    sources.append(ValueSet("get_9(id=res_99)", 400, (("user_id", ("res_99", "Austin")),), call=True))
    visible = visible + " and res_3"
    again = merged_values(sources, visible=visible, since=before)
    assert list(again.sets) == _reference(sources, visible)
    untouched = sum(1 for s in again.sources if again.entries[id(s)] is before.entries.get(id(s)))
    assert untouched > len(again.sources) // 2, untouched


def test_a_phrase_is_held_only_as_a_whole():
    """A value with a space is held where no word character touches it, as the regex `(?<!\\w)v(?!\\w)`
    finds it (accents and digits are word characters; dashes and dots are not)."""
    for text in ["Mia Li", "xMia Li", "Mia Lis", "Mia Li_", "éMia Li", "Mia Li2", "-Mia Li.", "Mia Lix Mia Li",
                 "(Mia Li)", "Mia  Li", "ÉMia Li Mia Li", "Mia Li\u00b2", "Mia Li\nMia Lia"]:
        booking = ValueSet("user (turn 1)", 1, (("name", ("Mia Li",)),))
        expected = re.search(r"(?<!\w)Mia Li(?!\w)", text) is None
        assert ("Mia Li" in str(merged_values([booking], visible=text).sets)) == expected, text


def test_phrases_keep_their_standing_unless_a_changed_part_holds_them():
    """A merge from an earlier one takes whether the visible text holds a phrase from it when no part that
    changed (one text has it, the other not) contains the phrase: the same sets as a merge from scratch,
    with phrases held in parts that stay, in parts that come or go, split across two parts' line break
    (a value with a line break is always looked up), or with their words apart in a part that stays."""
    phrases = ["Mia Li", "975 Sunset Drive", "Sunset\nDrive", "gold member"]
    words = ["Mia", "Li", "975", "Sunset", "Drive", "gold", "member", "Sunset Drive", "Mia Lin", "xMia Li"]
    for seed in range(300):
        rng = random.Random(5000 + seed)

        def source(turn: int) -> ValueSet:
            values = tuple(dict.fromkeys(rng.choice(phrases + IDS[:4]) for _ in range(rng.randint(1, 3))))
            return ValueSet(f"get_{rng.randint(0, 3)}(id={rng.choice(IDS)})", turn, (("name", values),), call=True)

        def part() -> str:
            return " ".join(rng.choice(words + phrases) for _ in range(rng.randint(0, 4)))
        sources = [source(t) for t in range(rng.randint(1, 12))]
        parts = tuple(part() for _ in range(rng.randint(1, 4)))
        before = merged_values(sources, visible=parts)
        for step in range(4):
            sources = [s for s in sources if rng.random() > 0.2] + [source(20 + step) for _ in range(rng.randint(0, 2))]
            parts = tuple(p for p in parts if rng.random() < 0.7) + tuple(part() for _ in range(rng.randint(0, 2)))
            again = merged_values(sources, visible=parts, since=before)
            text = "\n".join(parts)
            assert list(again.sets) == _reference(sources, text) == list(merged_values(sources, visible=text).sets)
            before = again


def test_a_merge_searches_only_the_phrases_a_changed_part_contains(monkeypatch):
    """The visible text changes by a few parts from one compaction to the next: a phrase that none of them
    contains keeps its standing without a search of the whole text."""
    from aether_context.compress import _visible_text

    searched: list[str] = []
    holds = _visible_text._holds
    monkeypatch.setattr(_visible_text, "_holds", lambda text, v: searched.append(v) or holds(text, v))
    sources = [ValueSet(f"get(id=r{k})", k, (("name", (f"Guest {k}", f"Room {k} East")),), call=True)
               for k in range(20)]
    first = merged_values(sources, visible=("Guest 3 and Room 7 East", "the tail"))
    searched.clear()
    again = merged_values(sources, visible=("Guest 3 and Room 7 East", "Guest 5 came"), since=first)
    assert searched == ["Guest 5"], searched
    assert again.sets == merged_values(sources, visible="Guest 3 and Room 7 East\nGuest 5 came").sets


def test_a_new_visible_text_alone_merges_no_source_again(monkeypatch):
    """The same sources with another visible text (a compaction whose cut the work ahead guessed, and a new
    verbatim turn): the merge without the text is the earlier one (its indexes the same objects, no source
    placed or merged again), and only the sources that kept a value whose standing in the text changed
    show something else; the result equals a merge from scratch."""
    from aether_context.compress import value_merge

    rng = random.Random(11)
    sources = [_source(rng, t) for t in range(300)]
    before = merged_values(sources, visible=("the user asked", "about gold"))
    visible = ("the user asked", "about res_3 and Austin")
    work: list[str] = []
    for name in ("_order", "_merge_source", "_read"):
        monkeypatch.setattr(value_merge, name, lambda *a, _f=getattr(value_merge, name), _n=name: work.append(_n) or _f(*a))
    again = merged_values(sources, visible=visible, since=before)
    monkeypatch.undo()
    assert work == [] and again.entries is before.entries and again.holders is before.holders
    changed = {"gold", "res_3", "and", "Austin"}  # the words that came or went ("about" stayed)
    other = [s for s in again.sources if again.shown[id(s)] is not before.shown[id(s)]]
    assert other and all(again.entries[id(s)][4] & changed for s in other)
    assert list(again.sets) == _reference(sources, "\n".join(visible)) == list(merged_values(sources, visible=visible).sets)
