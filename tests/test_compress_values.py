"""Known values: what a tool result or a message carried, merged across turns and rendered within a cap."""

from __future__ import annotations

import json

from aether_context.compress.value_merge import merge_values
from aether_context.compress.values import (
    ValueSet, extract_values, render_call, render_values, values_from_messages,
)
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()

USER = {
    "name": {"first_name": "Mia", "last_name": "Li"}, "email": "mia.li3818@example.com", "dob": "1990-04-05",
    "address": {"address1": "975 Sunset Drive", "city": "Austin", "zip": "78750"},
    "payment_methods": {
        "credit_card_4421486": {"source": "credit_card", "brand": "visa", "last_four": "7447", "id": "credit_card_4421486"},
        "certificate_7504069": {"source": "certificate", "amount": 250, "id": "certificate_7504069"},
    },
    "reservations": ["NO6JO3", "AIXC49"], "membership": "gold",
}
RESERVATION = {
    "reservation_id": "YAX4DR", "user_id": "mia_li_3668", "origin": "JFK", "destination": "SEA",
    "flights": [{"flight_number": "HAT136", "date": "2024-05-20", "price": 152},
                {"flight_number": "HAT039", "date": "2024-05-20", "price": 103}],
    "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
    "payment_history": [{"payment_id": "certificate_7504069", "amount": 250}], "insurance": "no",
}


def fields(vs: ValueSet) -> dict[str, tuple[str, ...]]:
    return dict(vs.fields)


def test_a_tool_result_keeps_its_ids_values_and_id_keys():
    vs = extract_values(tool="get_user_details", args={"user_id": "mia_li_3668"}, result=json.dumps(USER), turn=3)
    assert vs.source == "get_user_details(user_id=mia_li_3668)"
    got = fields(vs)
    assert got["payment_methods"] == ("certificate_7504069", "credit_card_4421486")  # ids used as dict keys, sorted
    assert got["payment_methods.*.id"] == ("certificate_7504069", "credit_card_4421486")
    assert got["reservations"] == ("NO6JO3", "AIXC49") and got["email"] == ("mia.li3818@example.com",)
    assert got["address.address1"] == ("975 Sunset Drive",)  # `address1` is a field, not an id
    assert got["payment_methods.*.amount"] == ("250",)


def test_nested_records_keep_every_value_once():
    vs = extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"}, result={"result": RESERVATION})
    got = fields(vs)
    assert got["flights.flight_number"] == ("HAT136", "HAT039") and got["flights.date"] == ("2024-05-20",)
    assert got["payment_history.payment_id"] == ("certificate_7504069",) and got["insurance"] == ("no",)


def test_user_text_identifiers_codes_names_amounts_and_dates():
    text = ("Sure, my user ID is omar_rossi_1241. Cancel the reservations with IDs IFOYYZ and NQNU5R, and add "
            "Kevin Smith, born on April 12, 1985, to 1N99U6. Use HAT258 from SEA to SFO priced at $304, "
            "write to omar@example.org and see docs/policy.md.")
    got = fields(extract_values(text=text, turn=7))
    assert got["ids"] == ("omar_rossi_1241",)
    assert {"IFOYYZ", "NQNU5R", "1N99U6", "HAT258", "SEA", "SFO"} <= set(got["codes"])
    assert "Kevin Smith" in got["names"] and got["amounts"] == ("$304",)
    assert got["dates"] == ("April 12, 1985",) and got["emails"] == ("omar@example.org",)
    assert got["paths"] == ("docs/policy.md",)
    assert extract_values(text="thanks, that is all", turn=9) is None
    assert fields(extract_values(text="his first name is Ivan and his last name is Smith."))["names"] == ("Ivan", "Smith")


def test_call_labels_ignore_argument_order():
    a = render_call("search", {"origin": "JFK", "date": "2024-05-20", "filters": {"b": 1, "a": [2]}})
    b = render_call("search", {"filters": {"a": [2], "b": 1}, "date": "2024-05-20", "origin": "JFK"})
    assert a == b == 'search(date=2024-05-20, filters={"a":[2],"b":1}, origin=JFK)'
    assert render_call("f", {"note": "two words", "user_id": "u_1"}) == 'f(user_id=u_1, note="two words")'


def test_merge_keeps_the_newest_result_per_call_and_drops_repeated_values():
    old = extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"},
                         result={**RESERVATION, "insurance": "no"}, turn=4)
    new = extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"},
                         result={**RESERVATION, "insurance": "yes"}, turn=9)
    user = extract_values(tool="get_user_details", args={"user_id": "mia_li_3668"}, result=USER, turn=2)
    said = extract_values(text="My reservation is YAX4DR", turn=1)
    merged = merge_values([said, user, old, new])
    assert [m.source for m in merged] == ["get_reservation_details(reservation_id=YAX4DR)",
                                          "get_user_details(user_id=mia_li_3668)", "user (turn 1)"]
    assert fields(merged[0])["insurance"] == ("yes",)  # the newest value of the same call
    assert "reservation_id" not in fields(merged[0])  # the call's own argument is in its label
    assert "certificate_7504069" not in fields(merged[1])["payment_methods"]  # shown by the newer source
    # a label is not a field: it may not fit, so the user's own mention of an id stays
    assert fields(merged[2]) == {"codes": ("YAX4DR",)}


def test_render_fits_the_cap_and_keeps_identifiers_first():
    search = [{"flight_number": f"HAT{200 + i}", "origin": "JFK", "destination": "SEA", "status": "available",
               "prices": {"economy": 100 + i, "business": 300 + i}, "available_seats": {"economy": i}}
              for i in range(40)]
    sets = merge_values([
        extract_values(text="my user id is mia_li_3668 and the reservation is YAX4DR", turn=1),
        extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"}, result=RESERVATION, turn=3),
        extract_values(tool="search_direct_flight", args={"origin": "JFK", "destination": "SEA", "date": "2024-05-20"},
                       result=search, turn=5),
    ])
    full = render_values(sets, 10_000, COUNTER)
    for cap in (40, 80, 150, 300):
        block = render_values(sets, cap, COUNTER)
        assert COUNTER.count_text(block) <= cap
        assert block == render_values(sets, cap, COUNTER)  # deterministic
    small = render_values(sets, 150, COUNTER)
    assert small.startswith("KNOWN VALUES:\n- search_direct_flight(")
    # field paths shortened where the short name is the source's only one; prices and seats keep theirs
    assert "flight_number=HAT136,HAT039" in small and " payment_id=certificate_7504069" in small
    assert "prices.economy=" in full and "available_seats.economy=" in full and " business=" in full
    assert "prices.economy" not in small  # plain numbers give way to identifiers
    assert render_values(sets, 3, COUNTER) == ""


def test_values_from_messages_pair_calls_with_their_responses():
    from aether_context.content import FunctionCall, FunctionResponse, Message, TextPart

    turns = [
        (1, Message("user", (TextPart("Hi, my user id is mia_li_3668. Change reservation YAX4DR please."),))),
        (2, Message("model", (FunctionCall("get_reservation_details", {"reservation_id": "YAX4DR"}, "c1"),))),
        (3, Message("user", (FunctionResponse("get_reservation_details", {"result": RESERVATION}, "c1"),))),
        (4, Message("model", (FunctionCall("get_user_details", {"user_id": "mia_li_3668"}),))),
    ]
    sets = values_from_messages(turns)
    assert [s.source for s in sets] == ["user (turn 1)", "get_reservation_details(reservation_id=YAX4DR)",
                                        "get_reservation_details(reservation_id=YAX4DR)",
                                        "get_user_details(user_id=mia_li_3668)"]
    merged = merge_values(sets)
    answered = next(m for m in merged if m.source.startswith("get_reservation_details"))
    assert fields(answered)["flight_number"] == ("HAT136", "HAT039")  # the answered call, not the bare one
    envelope = {"summary": "reservation_id: YAX4DR\nflights: [2 items; first: {flight_number}]\n1. flight_number=HAT136",
                "artifact_uri": "artifact://a/u/s/tool-output/r.json#v0", "original_tokens": 900, "note": "offloaded"}
    offloaded = extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"}, result=envelope)
    assert "HAT136" in offloaded.values() and not any("artifact://" in v for v in offloaded.values())
    assert not {"flight_number", "v0"} & set(offloaded.values())  # a shape's key list and the URI are no values


def test_values_come_from_where_they_were_read_and_are_shown_once():
    """Tool results and the user's texts first, newest first; the model's own texts only add what
    no other source shows; nothing the verbatim turns already show is repeated."""
    user = extract_values(tool="get_user_details", args={"user_id": "mia_li_3668"}, result=USER, turn=2)
    said = extract_values(text="Your reservations are NO6JO3 and AIXC49; I can use certificate_7504069 or LX99.",
                          role="model", turn=5)
    asked = extract_values(text="Please rebook NO6JO3 onto HAT136.", turn=6)
    merged = merge_values([user, said, asked], visible="the agent said: visa card credit_card_4421486")
    assert [m.source for m in merged] == ["user (turn 6)", "get_user_details(user_id=mia_li_3668)", "model (turn 5)"]
    assert fields(merged[2]) == {"codes": ("LX99",)}  # the rest of what the model said came from the tool
    assert "credit_card_4421486" not in merged[1].values()  # visible in a verbatim turn
    assert "NO6JO3" in fields(merged[0])["codes"] and "NO6JO3" not in fields(merged[1])["reservations"]


def test_fields_named_like_a_tool_parameter_come_before_other_values():
    """A result's fields that a declared tool takes as arguments (`cabin`, a flight's `date`) are what an
    agent passes back: they get room before names, amounts and the rest."""
    from aether_context.compress.values import parameter_names

    declarations = [{"name": "update_flights", "parameters": {"type": "object", "properties": {
        "cabin": {"type": "string"},
        "flights": {"type": "array", "items": {"type": "object", "properties": {"date": {}, "flight_number": {}}}}}}}]
    params = parameter_names(declarations)
    assert params == {"cabin", "flights", "date", "flight_number"}
    sets = merge_values([extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"},
                                        result={**RESERVATION, "cabin": "basic_economy"}, turn=3),
                         extract_values(tool="calculate", args={"expression": "152 + 103"}, result="255.0", turn=4)])
    plain = render_values(sets, 60, COUNTER)
    ranked = render_values(sets, 60, COUNTER, params=params)
    assert "cabin=basic_economy" in ranked and "cabin=" not in plain


def test_a_call_with_nothing_to_show_gets_only_the_room_every_value_left():
    calc = extract_values(tool="calculate", args={"expression": "152 + 103"}, turn=4)
    booking = extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"}, result=RESERVATION,
                             turn=3)
    sets = merge_values([booking, calc])
    assert sets[0].source.startswith("calculate(")  # the newest source
    full = render_values(sets, 1000, COUNTER)
    assert "calculate(expression=" in full
    tight = render_values(sets, COUNTER.count_text(full) - 5, COUNTER)
    assert "calculate(" not in tight and "payment_id=certificate_7504069" in tight


def test_a_render_with_the_last_renders_ranks_renders_the_same():
    """A render may take each source's ranked fields and the tokens of the lines it tried from an earlier render
    (`memo`, by the source object, for the same params and counter): the block is the one a render that ranks
    and counts every line gives, at every cap, and once some sources are new objects with fewer values."""
    sets = [extract_values(tool="lookup", args={"ref": f"r{i}"}, turn=i,
                           result={"booking_id": f"BK{i:04d}X", "user": f"user_{i % 3}_77", "note": f"Call Ann {i}",
                                   "seats": list(range(i % 9)), "price": 100 + i}) for i in range(60)]
    sets += [extract_values(text=f"Reservation Q{i}X7Z for mia_li_{i} on 2024-05-{i % 28 + 1:02d}", turn=i)
             for i in range(0, 60, 7)]
    params = frozenset({"ref"})
    memo: dict = {}
    for cap in (10, 40, 80, 150, 300, 600, 80, 10):
        assert render_values(sets, cap, COUNTER, params=params, memo=memo) == render_values(sets, cap, COUNTER, params=params)
    assert len(memo) == len(sets)
    fewer = [ValueSet(vs.source, vs.turn, tuple((n, v[:1]) for n, v in vs.fields), vs.call) if i % 5 == 0 else vs
             for i, vs in enumerate(sets)]  # as a merge gives the sources a verbatim turn's words touch
    for cap in (10, 80, 300, 600):
        assert render_values(fewer, cap, COUNTER, params=params, memo=memo) == render_values(fewer, cap, COUNTER, params=params)


def test_a_render_ranks_a_field_it_has_ranked_once(monkeypatch):
    """A merge gives a source it merges again as a new object, most of its fields as they were: a render
    takes a field's rank by its name and values (`fields`, for the same params) and ranks only new fields,
    with the block a render that ranks every field gives."""
    from aether_context.compress import values as values_module

    sets = [extract_values(tool="lookup", args={"ref": f"r{i}"}, turn=i,
                           result={"booking_id": f"BK{i:04d}X", "note": f"Call Ann {i}", "price": 100 + i % 4})
            for i in range(30)]
    fields: dict = {}
    first = render_values(sets, 300, COUNTER, fields=fields)
    ranked: list[str] = []
    rank = values_module._field_rank
    monkeypatch.setattr(values_module, "_field_rank", lambda name, *a: ranked.append(name) or rank(name, *a))
    again = [ValueSet(vs.source, vs.turn, vs.fields[:1] + vs.fields[1:], vs.call) for vs in sets]  # new objects
    again[0] = ValueSet(sets[0].source, 0, (("booking_id", ("BK9999X",)), *sets[0].fields[1:]), True)
    with_memo = render_values(again, 300, COUNTER, fields=fields)
    assert ranked == ["booking_id"], ranked  # the one field no render had ranked
    assert with_memo == render_values(again, 300, COUNTER) and first
