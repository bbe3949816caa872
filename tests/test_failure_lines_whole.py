"""Failure lines whole: the decisive line and its assertion details reach the pack verbatim.

Realistic pytest output (colours on, a long assertion line, `E` detail lines, a summary): the
failure record keeps the decisive line as printed (no "…" inside it, colour codes stripped,
pytest's `E` kept) with the `E` lines under it; a compressed long output is cut between lines,
never inside the decisive one.
"""

from __future__ import annotations

from aether_context.compress import compress_tool_output
from aether_context.compress.error_lines import decisive_index, decisive_lines, strip_ansi
from aether_context.loop.failures import FailureLog, error_text, render_failures
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()
RED, BOLD, RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"
EXPECTED = {f"order_{i:03d}": {"status": "shipped", "total": 10 * i} for i in range(14)}
ACTUAL = {**EXPECTED, "order_007": {"status": "pending", "total": 70}}
LONG_ASSERT = f"E       AssertionError: assert {ACTUAL!r} == {EXPECTED!r}"
DETAILS = ["E         Omitting 13 identical items, use -vv to show",
           "E         Differing items:",
           "E         {'order_007': {'status': 'pending', 'total': 70}} != {'order_007': {'status': 'shipped', 'total': 70}}",
           "E         Use -v to get more diff"]


def pytest_output(passing_lines: int = 0) -> str:
    body = "".join(f"tests/test_orders.py::test_case_{i} PASSED{' ' * 30}[{i % 100:3d}%]\n" for i in range(passing_lines))
    return (
        f"{BOLD}============================= test session starts =============================={RESET}\n"
        "platform linux -- Python 3.11.7, pytest-8.2.0, pluggy-1.5.0\n"
        "rootdir: /repo\ncollected 41 items\n\n" + body +
        f"{RED}{BOLD}=================================== FAILURES ==================================={RESET}\n"
        f"{RED}{BOLD}_______________________________ test_ship_orders _______________________________{RESET}\n\n"
        "    def test_ship_orders():\n"
        ">       assert ship(ACTUAL) == EXPECTED\n"
        f"{BOLD}{RED}{LONG_ASSERT}{RESET}\n" + "".join(f"{BOLD}{RED}{d}{RESET}\n" for d in DETAILS) +
        "\ntests/test_orders.py:88: AssertionError\n"
        f"{RED}=========================== short test summary info ============================{RESET}\n"
        f"{RED}FAILED{RESET} tests/test_orders.py::test_ship_orders - AssertionError: assert {{'order_000': ...\n"
        f"{RED}========================= 1 failed, 40 passed in 0.41s ========================={RESET}\n")


def test_the_decisive_line_follows_the_definition():
    tb = ["Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "ValueError: bad", "E   assert 1"]
    assert decisive_index(tb) == 2  # the exception closing the last traceback first
    assert decisive_index(["E   assert 1 == 2", "E    +  where 1 = f()", "FAILED t.py::x - assert 1 == 2"]) == 0
    assert decisive_index(["collected 2 items", "FAILED t.py::x", "ERROR t.py::y - setup failed"]) == 2
    assert decisive_index(["all good"]) is None


def test_the_decisive_line_and_its_details_are_kept_whole_without_colours():
    lines = decisive_lines(pytest_output())
    assert lines == [LONG_ASSERT, *DETAILS]
    assert len(LONG_ASSERT) > 600 and not any("\x1b" in ln or "…" in ln for ln in lines)


def test_a_failure_record_and_failures_so_far_carry_the_lines_verbatim():
    log = FailureLog()
    record = log.add(turn=3, tool="bash", args={"command": "pytest"},
                     error_text=error_text({"returncode": 1, "output": pytest_output()}))
    assert record.message == LONG_ASSERT and record.details == tuple(DETAILS)
    assert any(c.startswith("FAILED tests/test_orders.py::test_ship_orders") for c in record.causes)
    section = render_failures(log.analyze(4), log.records, max_tokens=1_200, counter=COUNTER)
    assert LONG_ASSERT in section and all(d in section for d in DETAILS) and "…" not in section


def test_a_long_output_is_cut_between_lines_never_inside_the_decisive_one():
    output = pytest_output(passing_lines=400)
    result = compress_tool_output("bash", {"returncode": 1, "output": output}, max_tokens=900, counter=COUNTER)
    assert result.compressed and COUNTER.count_text(result.text) <= 900
    text = result.text
    assert LONG_ASSERT in text and all(d in text for d in DETAILS)
    assert "1 failed, 40 passed in 0.41s" in text and "\x1b" not in text
    kept = set(strip_ansi(output).splitlines())
    for line in text.splitlines():  # every kept output line is a whole line of the output
        if line.startswith("tests/test_orders.py::test_case_"):
            assert line in kept
