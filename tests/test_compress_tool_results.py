"""Typed tool-output compression: classification, what each kind keeps, and the hard cap."""

from __future__ import annotations

import json

import pytest

from aether_context.compress import CompressedOutput, classify_tool_output, compress_tool_output
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()
URI = "artifact://sessions/s1/tool/t7.txt"

NOISE = "\n".join(f"DEBUG loading fixture {i} from tests/fixtures/data_{i}.json" for i in range(300))
MINI_SWE_FAILURE = (
    "<returncode>1</returncode>\n<output>\n"
    "============================= test session starts ==============================\n"
    "collected 42 items\n\n"
    f"{NOISE}\n"
    "Traceback (most recent call last):\n"
    '  File "/testbed/reproduce.py", line 12, in <module>\n'
    "    main()\n"
    '  File "/testbed/reproduce.py", line 9, in main\n'
    "    assert result == expected, result\n"
    "AssertionError: {'a': 1} != {'a': 2}\n"
    "FAILED tests/test_models.py::test_save - AssertionError: {'a': 1} != {'a': 2}\n"
    "=========================== 1 failed, 41 passed in 3.21s ===========================\n"
    "</output>"
)
SEARCH = {
    "query": "django admin inline view permission",
    "results": [
        {"title": f"Result {i}: InlineModelAdmin permissions", "url": f"https://example.org/r{i}",
         "snippet": f"Snippet {i}. " + "Inline admin permissions are checked per request. " * 12}
        for i in range(12)
    ],
}
FLIGHTS = [
    {"flight_number": "HAT069", "origin": "JFK", "destination": "SEA", "status": "available",
     "available_seats": {"basic_economy": 17, "economy": 12, "business": 3},
     "prices": {"basic_economy": 51, "economy": 121, "business": 239}},
    {"flight_number": "HAT083", "origin": "JFK", "destination": "SEA", "status": "available",
     "available_seats": {"basic_economy": 16, "economy": 7, "business": 3},
     "prices": {"basic_economy": 87, "economy": 100, "business": 276}},
]


@pytest.mark.parametrize(
    ("tool", "payload", "kind"),
    [
        ("bash", MINI_SWE_FAILURE, "command"),
        ("anything", {"returncode": 0, "stdout": "ok\n", "stderr": ""}, "command"),
        ("run_shell_command", "plain output without tags", "command"),
        ("web_search", SEARCH, "search"),
        ("lookup", {"items": [{"title": "A", "url": "https://a.example"}]}, "search"),
        ("search_direct_flight", FLIGHTS, "json"),  # a "search" tool returning records, not hits
        ("search_direct_flight", json.dumps(FLIGHTS), "json"),  # JSON carried as text
        ("get_file", {"path": "src/a.py", "content": "import os\n"}, "file_read"),
        ("read_file", "import os\nprint(1)\n", "file_read"),
        ("cat", "line 1\nline 2\n", "file_read"),
        ("read_file", {"result": "import os\n"}, "file_read"),  # ADK's envelope for non-dict results
        ("get_user_details", {"name": "Mia", "membership": "gold"}, "json"),
        ("think", "Just some prose from a tool.", "text"),
        ("mcp_tool", {"content": [{"type": "text", "text": "hello"}], "isError": False}, "text"),
    ],
)
def test_classify(tool, payload, kind):
    assert classify_tool_output(tool, payload) == kind


def test_output_that_fits_is_kept_as_is():
    out = compress_tool_output("bash", "<returncode>0</returncode>\n<output>\nok\n</output>", max_tokens=100,
                               counter=COUNTER, uri=URI)
    assert out.text.endswith("</output>") and not out.compressed
    assert out.original_tokens == out.compressed_tokens


def test_mini_swe_failure_keeps_exit_code_and_every_error_line():
    out = compress_tool_output("bash", MINI_SWE_FAILURE, max_tokens=160, counter=COUNTER, uri=URI)
    assert isinstance(out, CompressedOutput) and out.kind == "command" and out.compressed
    assert out.compressed_tokens == COUNTER.count_text(out.text) <= 160
    assert out.original_tokens > 3000
    lines = out.text.splitlines()
    assert lines[0].startswith("exit code 1")
    assert "AssertionError: {'a': 1} != {'a': 2}" in lines
    assert any(line.startswith("FAILED tests/test_models.py::test_save") for line in lines)
    assert '  File "/testbed/reproduce.py", line 9, in main' in lines
    assert any("lines omitted" in line for line in lines)
    assert lines[-1] == f"full output: {URI}"


def test_command_dict_labels_streams_and_keeps_stderr_errors():
    payload = {"exit_code": 2, "stdout": "\n".join(f"compiling module {i}" for i in range(500)),
               "stderr": "warning: unused variable\nerror: cannot find symbol `frobnicate` in this scope\n"}
    out = compress_tool_output("run", payload, max_tokens=90, counter=COUNTER, uri=URI)
    assert out.kind == "command" and out.compressed_tokens <= 90
    assert "exit code 2" in out.text and "stderr (2 lines):" in out.text
    assert "error: cannot find symbol `frobnicate` in this scope" in out.text


def test_successful_command_keeps_first_and_last_lines():
    body = "\n".join(f"line {i}" for i in range(1000))
    out = compress_tool_output("bash", f"<returncode>0</returncode>\n<output>\n{body}\n</output>", max_tokens=80,
                               counter=COUNTER)
    lines = out.text.splitlines()
    assert lines[0] == "exit code 0 · 1000 lines"
    assert "line 0" in lines and "line 999" in lines and "line 500" not in lines
    assert out.compressed_tokens <= 80


def test_file_read_of_10k_lines_keeps_size_head_and_uri():
    content = "\n".join(f"    value_{i} = compute({i})  # step {i}" for i in range(10_000))
    content = "import math\n\ndef compute(x):\n    return math.sqrt(x)\n" + content
    out = compress_tool_output("read_file", {"path": "src/pkg/big_module.py", "content": content}, max_tokens=200,
                               counter=COUNTER, uri=URI)
    lines = out.text.splitlines()
    assert out.kind == "file_read" and out.compressed_tokens <= 200
    assert lines[0] == f"src/pkg/big_module.py: 10004 lines, {len(content)} chars"
    assert lines[1:11] == content.splitlines()[:10]
    assert "    value_6 = compute(6)  # step 6" not in lines
    assert "… 9994 more lines" in lines
    assert lines[-1] == f"full output: {URI}"


def test_file_read_path_from_call_args():
    out = compress_tool_output("view_file", "x = 1\n" * 3000, max_tokens=60, counter=COUNTER,
                               args={"path": "app/settings.py"})
    assert out.text.startswith("app/settings.py: 3000 lines")


def test_search_keeps_top_titles_and_counts_the_rest():
    out = compress_tool_output("web_search", SEARCH, max_tokens=250, counter=COUNTER, uri=URI)
    assert out.kind == "search" and out.compressed_tokens <= 250
    assert out.text.startswith('search "django admin inline view permission": 12 results')
    for i in range(5):
        assert f"{i + 1}. Result {i}: InlineModelAdmin permissions — https://example.org/r{i}" in out.text
    assert "Result 5:" not in out.text
    assert "… 7 more results" in out.text and "Snippet 0." in out.text
    assert out.text.endswith(f"full output: {URI}")


def test_big_json_record_keeps_key_fields_first():
    payload = {
        "reservation_id": "JG7FMM", "user_id": "omar_davis_3817", "status": "confirmed",
        "message": "updated", "cabin": "business", "created_at": "2024-05-11T08:28:51",
        "notes": "n" * 3000,
        "flights": [{"flight_number": f"HAT{i:03d}", "date": "2024-05-20", "price": 100 + i} for i in range(300)],
        "passengers": [{"first_name": "Omar", "last_name": "Davis", "dob": "1980-01-01"}],
    }
    out = compress_tool_output("get_reservation_details", payload, max_tokens=120, counter=COUNTER, uri=URI)
    lines = out.text.splitlines()
    assert out.kind == "json" and out.compressed_tokens <= 120
    assert lines[:4] == ['status: "confirmed"', 'message: "updated"', 'reservation_id: "JG7FMM"',
                         'user_id: "omar_davis_3817"']
    assert "flights: [300 items; first: {flight_number, date, price}]" in lines
    before_flights = lines[: lines.index("flights: [300 items; first: {flight_number, date, price}]")]
    assert not any(line.startswith("notes:") for line in before_flights)  # long free text goes last
    assert lines[-1] == f"full output: {URI}"


def test_json_list_summarises_items():
    flights = FLIGHTS * 40
    out = compress_tool_output("search_direct_flight", flights, max_tokens=100, counter=COUNTER, uri=URI)
    assert out.kind == "json"
    assert out.text.startswith("[80 items; first: {status, flight_number,")
    assert '1. status="available" flight_number="HAT069"' in out.text
    assert out.compressed_tokens <= 100


def test_plain_text_falls_back_to_middle_out():
    text = "\n".join(f"paragraph {i} of a very long document about context windows" for i in range(500))
    out = compress_tool_output("fetch_page", text, max_tokens=90, counter=COUNTER, uri=URI)
    assert out.kind == "text" and out.compressed_tokens <= 90
    assert out.text.startswith("paragraph 0") and "tokens omitted" in out.text
    assert out.text.splitlines()[-1] == f"full output: {URI}"


@pytest.mark.parametrize("cap", [12, 25, 50, 120, 400])
@pytest.mark.parametrize(
    ("tool", "payload"),
    [("bash", MINI_SWE_FAILURE), ("web_search", SEARCH), ("search_direct_flight", FLIGHTS * 50),
     ("read_file", {"path": "a.py", "content": "print('x')\n" * 5000}), ("fetch", "word " * 5000)],
)
def test_every_kind_respects_the_cap(tool, payload, cap):
    out = compress_tool_output(tool, payload, max_tokens=cap, counter=COUNTER, uri=URI)
    assert COUNTER.count_text(out.text) <= cap
    assert out == compress_tool_output(tool, payload, max_tokens=cap, counter=COUNTER, uri=URI)


def test_plain_callable_counter_is_accepted():
    out = compress_tool_output("fetch", "abc " * 1000, max_tokens=200, counter=len)
    assert len(out.text) <= 200


def test_huge_json_is_summarised_without_rendering_everything():
    wide = {f"key_{i:05d}": "v" * 50 for i in range(5000)} | {"id": "rec-1", "status": "ok"}
    out = compress_tool_output("get_record", wide, max_tokens=60, counter=COUNTER)
    assert out.text.startswith('status: "ok"\nid: "rec-1"') and out.compressed_tokens <= 60
    long = [{"id": i, "name": f"item {i}", "tags": ["a", "b"]} for i in range(100_000)]
    out = compress_tool_output("list_items", long, max_tokens=60, counter=COUNTER)
    assert out.text.startswith("[100000 items; first: {id, name, tags}]") and out.compressed_tokens <= 60


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="max_tokens must be >= 0, got -1"):
        compress_tool_output("x", "y", max_tokens=-1, counter=COUNTER)
    with pytest.raises(ValueError, match="search_top"):
        compress_tool_output("x", "y", max_tokens=10, counter=COUNTER, search_top=0)
    with pytest.raises(TypeError, match="counter"):
        compress_tool_output("x", "y", max_tokens=10, counter=42)
    assert classify_tool_output("noop", None) == "text"
