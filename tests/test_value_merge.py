"""A merge of known values gives what the merge's docstring states, source by source, value by value."""

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


def test_a_merge_equals_the_reference_for_random_sources_and_visible_texts():
    """Random sources (added, dropped and replaced by a newer result of the same call) and visible texts, whole
    or in parts joined by line breaks: the merge equals the reference."""
    for seed in range(200):
        rng = random.Random(seed)
        sources = [_source(rng, t) for t in range(rng.randint(0, 30))]
        for step in range(4):
            sources = [s for s in sources if rng.random() > 0.1]
            sources += [_source(rng, 30 + step) for _ in range(rng.randint(0, 3))]
            rng.shuffle(sources)  # the merge orders its sources itself
            parts = tuple(_visible(rng) for _ in range(rng.randint(0, 3)))
            text = "\n".join(parts)
            assert list(merged_values(sources, visible=parts).sets) == _reference(sources, text)
            assert merge_values(sources, visible=text) == _reference(sources, text)


def test_a_value_that_becomes_visible_leaves_the_sources_that_showed_it():
    """A value in the verbatim turns is not shown again, and shown once it is no longer there."""
    booking = extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"},
                             result={"user_id": "mia_li_3668", "flights": [{"flight_number": "HAT136"}]}, turn=2)
    said = extract_values(text="Your flight HAT136 is booked.", role="model", turn=3)
    first = merged_values([booking, said], visible="")
    assert "mia_li_3668" in str(first.sets)
    now = merged_values([booking, said], visible="the user mia_li_3668 asked")
    assert "mia_li_3668" not in str(now.sets)


def test_a_phrase_is_held_only_as_a_whole():
    """A value with a space is held where no word character touches it, as the regex `(?<!\\w)v(?!\\w)`
    finds it (accents and digits are word characters; dashes and dots are not)."""
    for text in ["Mia Li", "xMia Li", "Mia Lis", "Mia Li_", "éMia Li", "Mia Li2", "-Mia Li.", "Mia Lix Mia Li",
                 "(Mia Li)", "Mia  Li", "ÉMia Li Mia Li", "Mia Li\u00b2", "Mia Li\nMia Lia"]:
        booking = ValueSet("user (turn 1)", 1, (("name", ("Mia Li",)),))
        expected = re.search(r"(?<!\w)Mia Li(?!\w)", text) is None
        assert ("Mia Li" in str(merged_values([booking], visible=text).sets)) == expected, text
