"""Folding a call/response pair or a plain turn into one line."""

from __future__ import annotations

import pytest

from aether_context.compress import describe_outcome, fold_message, fold_tool_pair
from aether_context.content import Blob, FunctionCall, FunctionResponse, Message, TextPart
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()
URI = "artifact://s/1/t12.json"


def _fold(call: FunctionCall, response: dict, max_tokens: int = 60, uri: str | None = URI) -> str:
    line = fold_tool_pair(12, call, FunctionResponse(call.name, response), uri=uri, counter=COUNTER,
                          max_tokens=max_tokens)
    assert "\n" not in line and COUNTER.count_text(line) <= max_tokens
    return line


def test_file_read_fold_line():
    call = FunctionCall("read_file", {"path": "src/a.py"})
    line = _fold(call, {"content": "\n" + "import os\n" * 230})
    assert line == '[turn 12] read_file(path="src/a.py") → ok, 231 lines: import os · artifact://s/1/t12.json'


def test_error_result_shows_the_error_first():
    call = FunctionCall("read_file", {"path": "src/missing.py"})
    line = _fold(call, {"error": "FileNotFoundError: [Errno 2] No such file or directory: 'src/missing.py'\nmore"})
    assert line.startswith('[turn 12] read_file(path="src/missing.py") → error: FileNotFoundError: [Errno 2]')
    assert line.endswith(" · " + URI)


def test_command_failure_shows_exit_code_and_exception():
    output = ("<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n"
              '  File "reproduce.py", line 3, in <module>\n    run()\nValueError: bad config value\n</output>')
    line = _fold(FunctionCall("bash", {"command": "python reproduce.py"}), {"result": output})
    assert line == ('[turn 12] bash(command="python reproduce.py") → exit 1: ValueError: bad config value · '
                    + URI)


def test_long_arguments_are_clipped_but_uri_survives():
    script = "cat <<'EOF' > reproduce_issue.py\n" + "import django\n" * 300 + "EOF"
    line = _fold(FunctionCall("bash", {"command": script}), {"result": "<returncode>0</returncode>\n<output>\n</output>"})
    assert line.startswith('[turn 12] bash(command="cat <<\'EOF\' > reproduce_issue.py')
    assert "…" in line and line.endswith("→ exit 0, no output · " + URI)


def test_many_arguments_keep_identifiers_first_then_by_name():
    args = {"origin": "JFK", "destination": "SEA", "flight_type": "one_way", "user_id": "mia_li_3668",
            "cabin": "economy", "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}] * 3,
            "passengers": [{"first_name": "Mia", "last_name": "Li"}], "payment_methods": [{"amount": 250}]}
    line = _fold(FunctionCall("book_reservation", args), {"result": "Error: payment amount does not add up"}, 70)
    assert line.startswith('[turn 12] book_reservation(user_id="mia_li_3668", cabin="economy", destination="SEA"')
    assert ", …) → Error: payment amount does not add up" in line


def test_argument_order_never_changes_the_fold_line():
    """Re-packing gives the same bytes whatever order the model wrote the arguments in (issue: checksums)."""
    args = {"b": {"z": 1, "a": [2, {"y": 3, "x": 4}]}, "reservation_id": "YAX4DR", "a": "text"}
    reordered = {"a": "text", "reservation_id": "YAX4DR", "b": {"a": [2, {"x": 4, "y": 3}], "z": 1}}
    for cap in (20, 40, 60, 120):
        assert _fold(FunctionCall("f", args), {"ok": True}, cap) == _fold(FunctionCall("f", reordered), {"ok": True}, cap)
    msg = Message("model", (FunctionCall("f", args),))
    assert fold_message(3, msg, COUNTER) == fold_message(3, Message("model", (FunctionCall("f", reordered),)), COUNTER)


def test_a_long_uri_does_not_hide_the_call_arguments():
    uri = "artifact://airline/mia_li_3668/4f0c1d9e-session/tool-output/get_reservation_details-0123456789abcdef.json#v0"
    record = {"reservation_id": "YAX4DR", "user_id": "mia_li_3668", "origin": "JFK", "destination": "SEA",
              "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}], "status": "confirmed"}
    line = _fold(FunctionCall("get_reservation_details", {"reservation_id": "YAX4DR"}), record, 60, uri=uri)
    assert line.startswith('[turn 12] get_reservation_details(reservation_id="YAX4DR") → ') and line.endswith(uri)


def test_a_model_turn_folds_with_its_calls_arguments():
    msg = Message("model", (TextPart("Let me look that up."), FunctionCall("get_user_details", {"user_id": "mia_li_3668"})))
    assert fold_message(5, msg, COUNTER) == (
        "[turn 5] model: Let me look that up. · calls get_user_details(user_id=mia_li_3668)")


def test_search_and_json_outcomes():
    hits = {"results": [{"title": t, "url": f"https://x.org/{t}"} for t in ("Quicksort", "Mergesort", "TimSort", "Heap")]}
    line = _fold(FunctionCall("web_search", {"query": "sorting algorithms"}), hits, uri=None)
    assert line == '[turn 12] web_search(query="sorting algorithms") → 4 results: Quicksort; Mergesort; TimSort'
    record = {"reservation_id": "HATHAT", "status": "booked", "cabin": "economy", "flights": [1, 2]}
    assert describe_outcome("book_reservation", record) == 'ok: status="booked", reservation_id="HATHAT", cabin="economy"'
    assert describe_outcome("search_direct_flight", [{"flight_number": "HAT069"}, {}]) == \
        '2 items: flight_number="HAT069"'


@pytest.mark.parametrize("cap", [5, 12, 20, 40])
def test_fold_respects_tiny_caps(cap):
    """The cap holds; only a URI that cannot fit beside the turn number overruns it (the bare minimum,
    whole: see test_a_fold_line_keeps_a_long_uri_whole_over_its_soft_cap)."""
    call = FunctionCall("bash", {"command": "pytest -x tests/test_models.py::test_save " * 5})
    response = {"stdout": "x\n" * 100, "returncode": 0}
    line = _fold(call, response, max_tokens=cap, uri=None)
    assert line.startswith("[turn") or line == ""
    with_uri = fold_tool_pair(12, call, FunctionResponse(call.name, response), uri=URI, counter=COUNTER, max_tokens=cap)
    assert with_uri.endswith(" · " + URI)
    assert COUNTER.count_text(with_uri) <= cap or with_uri == f"[turn 12] · {URI}"


def test_fold_message_first_sentences_and_role():
    msg = Message("user", (TextPart("Hi! I'm looking to book a flight from New York to Seattle. Thanks."),))
    assert fold_message(3, msg, COUNTER) == "[turn 3] user: Hi! I'm looking to book a flight from New York to Seattle."


def test_fold_message_keeps_the_command_of_a_mini_swe_turn():
    text = ("THOUGHT: Ah, I imported `User` before `settings.configure()`. I need to move the imports.\n\n"
            "```bash\npython3 reproduce_issue.py\n```")
    line = fold_message(4, Message("model", (TextPart(text),)), COUNTER)
    assert line == "[turn 4] model: Ah, I imported `User` before `settings.configure()`. · $ python3 reproduce_issue.py"


def test_fold_message_reads_a_command_result_sent_as_text():
    text = "<returncode>1</returncode>\n<output>\nerror: pathspec 'nope' did not match any file(s)\n</output>"
    line = fold_message(5, Message("user", (TextPart(text),)), COUNTER)
    assert line == "[turn 5] user: exit 1: error: pathspec 'nope' did not match any file(s)"


def test_fold_message_notes_calls_and_images_within_cap():
    msg = Message("model", (TextPart("Let me look at the file and the screenshot. " * 30),
                            FunctionCall("read_file", {"path": "a.py"}), Blob("image/png", b"\x89PNG")))
    line = fold_message(6, msg, COUNTER, max_tokens=40)
    assert COUNTER.count_text(line) <= 40
    assert line.startswith("[turn 6] model: Let me look at the file")
    assert "calls read_file" in line and "[1 image]" in line
    assert fold_message(6, msg, COUNTER, max_tokens=40) == line


def test_module_usage_examples_run():
    import doctest

    from aether_context.compress import fold, tool_results

    for module in (fold, tool_results):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__


# --- artifact URIs are never cut ------------------------------------------------------------------

LONG_URI = "artifact://app/user-7/session-0042/" + "/".join(f"folder-{k}" for k in range(30)) + "/result.json"


def test_a_fold_line_keeps_a_long_uri_whole_over_its_soft_cap():
    """Found by the replica benchmark: the last resort clipped `[turn N] name(…) · artifact://…` to the cap and
    cut the URI, so the model saw an address it could not recall. The URI goes out whole; the name goes first."""
    call = FunctionCall("a_tool_with_a_rather_long_name", {"path": "src/a.py"})
    line = fold_tool_pair(12, call, FunctionResponse(call.name, {"content": "x" * 400}), uri=LONG_URI,
                          counter=COUNTER, max_tokens=8)
    assert line.endswith(" · " + LONG_URI)
    assert line == f"[turn 12] · {LONG_URI}"
    # with room for the name, the name stays
    roomy = fold_tool_pair(12, call, FunctionResponse(call.name, {"content": "x" * 400}), uri=LONG_URI,
                           counter=COUNTER, max_tokens=COUNTER.count_text(f"[turn 12] {call.name}(…) · {LONG_URI}"))
    assert roomy.startswith(f"[turn 12] {call.name}(") and roomy.endswith(" · " + LONG_URI)


def test_clipping_never_cuts_inside_a_uri():
    """clip_text, middle_out and the character clip of fold lines move a cut that would split a URI to its
    start (or, for a tail, to its end): a URI is whole or absent."""
    from aether_context.compress import clip_text, middle_out

    text = "see " + LONG_URI + " for the full table, and " + " ".join(f"w{k}" for k in range(400))
    for budget in range(3, 60, 4):
        for out in (clip_text(text, budget, COUNTER), middle_out(text, budget, COUNTER)):
            assert "artifact://" not in out or LONG_URI in out, (budget, out)
    tail = " ".join(f"w{k}" for k in range(400)) + " saved at " + LONG_URI + " (original)"
    for budget in range(20, 80, 6):
        out = middle_out(tail, budget, COUNTER)
        assert "artifact://" not in out or LONG_URI in out, (budget, out)
    said = fold_message(3, Message("model", (TextPart(f"I saved it to {LONG_URI} and moved on."),)), COUNTER, 20)
    assert "artifact://" not in said or LONG_URI in said, said
