"""Known values: what a tool result or a message carried, merged across turns and rendered within a cap."""

from __future__ import annotations

import json

from aether_context.compress.values import (
    ValueSet, extract_values, merge_values, render_call, render_values, values_from_messages,
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
    assert "certificate_7504069" not in fields(merged[1])["payment_methods"]  # shown by the newer source
    assert merged[2].fields == ()  # YAX4DR is already in the newer call's label


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
    assert "flights.flight_number=HAT136,HAT039" in small and "payment_history.payment_id=certificate_7504069" in small
    assert "prices.business" in full and "prices.business" not in small  # plain numbers give way to identifiers
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
    assert fields(merged[1])["flights.flight_number"] == ("HAT136", "HAT039")  # the answered call, not the bare one
    envelope = {"summary": "reservation_id: YAX4DR\nflights: [2 items; first: {flight_number}]\n1. flight_number=HAT136",
                "artifact_uri": "artifact://a/u/s/tool-output/r.json#v0", "original_tokens": 900, "note": "offloaded"}
    offloaded = extract_values(tool="get_reservation_details", args={"reservation_id": "YAX4DR"}, result=envelope)
    assert "HAT136" in offloaded.values() and not any("artifact://" in v for v in offloaded.values())
