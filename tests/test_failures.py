"""Failure evidence: categories from realistic error text, error shapes, log analysis and rendering."""

from __future__ import annotations

import json

import pytest

from aether_context.loop.failures import (
    assertion_details, evidence_lines, CATEGORIES, FailureLog, FailureRecord, FailureSettings, categorize_failure, digest_args, error_text, exception_lines,
    first_error_line,
    is_error_result, mentioned_file, render_failures,
)
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()


def tb(*frames_and_error: str) -> str:
    """A Python traceback: frame lines then the final exception line."""
    *frames, error = frames_and_error
    body = "".join(f'  File "{f}", line 3, in <module>\n    x()\n' for f in frames)
    return f"Traceback (most recent call last):\n{body}{error}"


SAMPLES: dict[str, list[str]] = {
    "permission": [
        tb("write_cfg.py", "PermissionError: [Errno 13] Permission denied: '/etc/hosts'"),
        "rm: cannot remove '/usr/lib/python3/dist-packages/x': Permission denied",
        "npm ERR! code EACCES\nnpm ERR! syscall mkdir",
        "fatal: Authentication failed for 'https://github.com/acme/shop.git/'",
    ],
    "not_found": [
        tb("reproduce_issue.py", "ModuleNotFoundError: No module named 'dateutil'"),
        tb("run.py", "FileNotFoundError: [Errno 2] No such file or directory: 'config/settings.yaml'"),
        "bash: rg: command not found",
        "sed: can't read shop/helpers.py: No such file or directory",
        '{"error": "Reservation not found"}',
        "fatal: not a git repository (or any of the parent directories): .git",
        "error: pathspec 'shop/old.py' did not match any file(s) known to git",
        "404 Client Error: Not Found for url: https://api.example.com/v1/users/9",
        # chained traceback: the last exception decides
        tb("/testbed/django/db/backends/utils.py", "sqlite3.OperationalError: no such table: shop_order"),
    ],
    "syntax": [
        '  File "shop/main.py", line 12\n    def run(:\n            ^\nSyntaxError: invalid syntax',
        '  File "shop/models.py", line 5\n    return x\n    ^\nIndentationError: unexpected indent',
        "bash: -c: line 1: syntax error near unexpected token `('",
        "sed: -e expression #1, char 9: unterminated `s' command",
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
    ],
    "type": [
        tb("shop/cart.py", "TypeError: unsupported operand type(s) for +: 'int' and 'str'"),
        tb("shop/cart.py", "AttributeError: 'NoneType' object has no attribute 'split'"),
        "TypeError: Cannot read properties of undefined (reading 'map')\n    at render (web/src/ui/index.tsx:4:10)",
    ],
    "runtime": [
        tb("stats.py", "ZeroDivisionError: division by zero"),
        tb("shop/api.py", "KeyError: 'user_id'"),
        tb("shop/api.py", "IndexError: list index out of range"),
        tb("reproduce.py", "RuntimeError: Model class __main__.Order doesn't declare an explicit app_label"),
        "Segmentation fault (core dumped)",
    ],
    "network": [
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.example.com', port=443): Max retries "
        "exceeded with url: /v1 (Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] "
        "Connection refused'))",
        "curl: (6) Could not resolve host: pypi.internal",
        "Error: connect ECONNREFUSED 127.0.0.1:5432",
        "socket.gaierror: [Errno -3] Temporary failure in name resolution",
    ],
    "timeout": [
        "subprocess.TimeoutExpired: Command '['pytest', '-x']' timed out after 60 seconds",
        tb("client.py", "TimeoutError: [Errno 110] Connection timed out"),
        "The command timed out after 120 seconds. Try a faster command.",
        "504 Gateway Timeout",
    ],
    "validation": [
        tb("parse.py", "ValueError: invalid literal for int() with base 10: 'abc'"),
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for User\n"
        "age\n  Input should be a valid integer",
        "Error: certificate cannot be used to update reservation",
        "usage: manage.py [-h] [--fast]\nmanage.py: error: unrecognized arguments: --fastest",
        '{"error": "invalid argument: cabin must be one of economy, business"}',
        "422 Unprocessable Entity",
    ],
    "logic": [
        "E       AssertionError: assert 3 == 4\nE        +  where 3 = add(1, 2)",
        "FAILED tests/test_cart.py::test_total - assert 10 == 12\n===== 1 failed, 12 passed in 0.31s =====",
        "Error: payment amount does not add up, total price is 4875, but paid 1625",
        "error: patch failed: shop/cart.py:12\nerror: shop/cart.py: patch does not apply",
    ],
    "resource": [
        "MemoryError",
        "OSError: [Errno 28] No space left on device: '/tmp/build'",
        "429 Too Many Requests: rate limit exceeded, retry in 20s",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "google.api_core.exceptions.ResourceExhausted: 429 Quota exceeded for aiplatform",
        "Error: not enough seats on flight HAT290",
    ],
    "unknown": [
        "something odd happened",
        "",
        "Done. 3 files changed.",
    ],
}


def test_every_category_has_at_least_two_samples():
    assert set(SAMPLES) == set(CATEGORIES)
    assert all(len(v) >= 2 for v in SAMPLES.values())


@pytest.mark.parametrize("category,text", [(c, t) for c, ts in SAMPLES.items() for t in ts])
def test_categorize_failure(category, text):
    assert categorize_failure(text) == category


def test_tool_name_only_breaks_ties():
    assert categorize_failure("2 checks did not pass", tool_name="run_tests") == "logic"
    assert categorize_failure("2 checks did not pass", tool_name="bash") == "unknown"
    assert categorize_failure("KeyError: 'a'", tool_name="run_tests") == "runtime"


def test_ansi_colour_codes_are_ignored():
    assert categorize_failure("\x1b[31mE   AssertionError: assert 1 == 2\x1b[0m") == "logic"


POSITIVE = [
    {"error": "Reservation not found"},
    {"status": "error", "message": "quota"},
    {"success": False, "reason": "x"},
    {"returncode": 2, "stdout": "", "stderr": "usage: ..."},
    {"exit_code": 1, "output": "FAILED tests/test_a.py::test_x"},
    {"status_code": 503},
    {"result": "Error: gift card balance is not enough"},
    "Error: flight HAT030 not available on date 2024-05-13",
    "<returncode>1</returncode>\n<output>\n" + tb("r.py", "ModuleNotFoundError: No module named 'foo'") + "\n</output>",
    "<returncode>2</returncode>\n<output>\nls: cannot access 'reproduce_app': No such file or directory\n</output>",
    "<returncode>1</returncode>\n<output>\ncollected 3 items\n\n=== 1 failed, 2 passed in 0.12s ===\n</output>",
    "bash: rg: command not found",
    "Starting...\n" + tb("r.py", "ValueError: bad"),
    "collected 3 items\ntests/test_a.py F..\n=== 1 failed, 2 passed in 0.12s ===",
    '{"error": {"code": 404, "message": "Not Found"}}',
]
NEGATIVE = [
    "Transfer successful",
    "[]",
    "1023.0",
    "",
    {"error": None, "result": "ok"},
    {"errors": []},
    {"status": "ok", "items": [1]},
    {"returncode": 0, "stdout": "done"},
    {"returncode": 0, "output": "Error: printed by a passing script"},  # the exit code decides
    {"returncode": 1, "stdout": "", "stderr": ""},  # grep: no match
    {"result": "No errors found"},
    '{"reservation_id": "ABC123", "status": "confirmed"}',
    "<returncode>0</returncode>\n<output>\nError: printed by a passing script\n</output>",
    "<returncode>1</returncode>\n<output>\n</output>",  # grep: no match
    "def handle_error(e):\n    raise ValueError('bad input')\n",  # a file that mentions errors
    "The error handling module logs exceptions and retries.",
    "=== 5 passed in 0.12s ===",
]


@pytest.mark.parametrize("payload", POSITIVE)
def test_is_error_result_positive(payload):
    assert is_error_result(payload)


@pytest.mark.parametrize("payload", NEGATIVE)
def test_is_error_result_negative(payload):
    assert not is_error_result(payload)


def test_first_error_line_and_file():
    text = ("<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n"
            '  File "reproduce_issue.py", line 4, in <module>\n    from shop.models import Order\n'
            '  File "/testbed/shop/models.py", line 2, in <module>\n    import dateutil\n'
            "ModuleNotFoundError: No module named 'dateutil'\n</output>")
    assert first_error_line(text) == "ModuleNotFoundError: No module named 'dateutil'"
    assert mentioned_file(text) == "reproduce_issue.py"
    assert mentioned_file(text, {"path": "shop/models.py"}) == "shop/models.py"
    assert mentioned_file("sed: can't read shop/helpers.py: No such file or directory") == "shop/helpers.py"
    clipped = first_error_line("Error: " + "x" * 1000, max_chars=50)
    assert clipped == ("Error: " + "x" * 1000)[:50] + "…"  # the first 50 characters stay verbatim


def test_digest_args_is_order_independent():
    assert digest_args({"a": 1, "b": [2]}) == digest_args({"b": [2], "a": 1})
    assert digest_args({"a": 1}) != digest_args({"a": 2})
    assert digest_args(None) == digest_args({})


NOT_FOUND = "sed: can't read shop/helpers.py: No such file or directory"


def test_repeat_warns_at_threshold():
    log = FailureLog()
    for turn in (1, 2):
        log.add(turn=turn, tool="bash", args={"command": "sed -n 1p shop/helpers.py"}, error_text=NOT_FOUND)
    assert not [w for w in log.analyze(3).warnings if w.kind == "repeat"]
    log.add(turn=3, tool="bash", args={"command": "sed -n 1p shop/helpers.py"}, error_text=NOT_FOUND)
    repeats = [w for w in log.analyze(4).warnings if w.kind == "repeat"]
    assert len(repeats) == 1 and repeats[0].count == 3 and repeats[0].turns == (1, 2, 3)
    assert repeats[0].category == "not_found"


def test_repeat_threshold_is_configurable():
    log = FailureLog(FailureSettings(repeat_threshold=2))
    for turn in (1, 2):
        log.add(turn=turn, tool="read_file", args={"path": "a.py"}, error_text="FileNotFoundError: a.py")
    assert [w.kind for w in log.analyze(3).warnings].count("repeat") == 1


def test_different_args_do_not_repeat_but_are_systemic():
    log = FailureLog()
    for turn in (1, 4, 8):
        log.add(turn=turn, tool="read_file", args={"path": f"f{turn}.py"}, error_text="FileNotFoundError: missing")
    kinds = [w.kind for w in log.analyze(9).warnings]
    assert "repeat" not in kinds and "systemic" in kinds


def test_cluster_of_one_category():
    log = FailureLog(FailureSettings(cluster_threshold=4, cascade_window_turns=0))
    for i, tool in enumerate(["a", "b", "c", "d"]):
        log.add(turn=i * 3, tool=tool, args={"i": i}, error_text="ValueError: bad value")
    clusters = [w for w in log.analyze(12).warnings if w.kind == "cluster"]
    assert len(clusters) == 1 and clusters[0].category == "validation" and clusters[0].count == 4


def test_cascade_of_related_failures():
    log = FailureLog()
    log.add(turn=5, tool="edit_file", args={"path": "shop/cart.py"},
            error_text='  File "shop/cart.py", line 3\n    def f(:\nSyntaxError: invalid syntax')
    log.add(turn=6, tool="bash", args={"command": "pytest"},
            error_text="ImportError while importing test module 'tests/test_cart.py'\n"
                       'E   File "shop/cart.py"\nE   SyntaxError: invalid syntax')
    log.add(turn=7, tool="bash", args={"command": "python -m shop"},
            error_text=tb("shop/cart.py", "NameError: name 'Cart' is not defined"))
    log.add(turn=9, tool="bash", args={"command": "ls"}, error_text="ls: cannot access 'x': No such file or directory")
    cascades = [w for w in log.analyze(10).warnings if w.kind == "cascade"]
    assert len(cascades) == 1
    assert cascades[0].turns == (5, 6, 7) and cascades[0].file == "shop/cart.py" and cascades[0].tool == "edit_file"
    assert "root cause: edit_file [syntax] SyntaxError: invalid syntax" in cascades[0].message


def test_far_apart_failures_are_not_a_cascade():
    log = FailureLog()
    for turn in (1, 5, 9):
        log.add(turn=turn, tool="bash", args={"n": turn}, error_text="ValueError: bad")
    assert not [w for w in log.analyze(10).warnings if w.kind == "cascade"]


def test_stale_patterns_are_dropped():
    log = FailureLog(FailureSettings(stale_after_turns=5))
    for turn in (1, 2, 3):
        log.add(turn=turn, tool="bash", args={"c": 1}, error_text=NOT_FOUND)
    assert log.analyze(4).warnings
    assert not log.analyze(50).warnings


def test_eviction_is_bounded_and_counted():
    log = FailureLog(FailureSettings(max_records=5))
    for turn in range(12):
        log.add(turn=turn, tool="t", args={"n": turn}, error_text="Error: boom")
    assert len(log) == 5 and log.evicted == 7
    assert [r.turn for r in log.records] == [7, 8, 9, 10, 11]
    analysis = log.analyze(12)
    assert analysis.total_failures == 12 and analysis.evicted == 7
    assert len(FailureLog().settings.model_dump()) and FailureLog().settings.max_records == 50


def test_json_round_trip():
    log = FailureLog(FailureSettings(max_records=3))
    for turn in range(4):
        log.add(turn=turn, tool="bash", args={"n": turn}, error_text=NOT_FOUND, uri=f"aether://t/{turn}",
                timestamp=1000.0 + turn)
    data = json.loads(json.dumps(log.to_json()))
    again = FailureLog.from_json(data)
    assert again.records == log.records and again.evicted == 1 and again.settings == log.settings
    assert FailureRecord.from_json(log.records[0].to_json()) == log.records[0]


def test_settings_reject_unknown_and_bad_values():
    with pytest.raises(ValueError):
        FailureSettings(max_record=5)
    with pytest.raises(ValueError):
        FailureSettings(repeat_threshold=1)


def _busy_log() -> FailureLog:
    log = FailureLog()
    for turn in (1, 2, 3):
        log.add(turn=turn, tool="bash", args={"command": "cat shop/helpers.py"}, error_text=NOT_FOUND,
                uri=f"aether://pack/{turn}")
    log.add(turn=4, tool="run_tests", args={}, error_text="E   AssertionError: assert 3 == 4")
    log.add(turn=5, tool="http_get", args={"url": "x"}, error_text="curl: (6) Could not resolve host: x")
    return log


def test_render_warnings_first_then_recent_with_uri():
    log = _busy_log()
    text = render_failures(log.analyze(6), log.records, max_tokens=400, counter=COUNTER)
    lines = text.splitlines()
    assert lines[0].startswith("FAILURES SO FAR (5 total")
    assert lines[1].startswith("! bash failed 3x")
    recent = [ln for ln in lines if ln.startswith("- ")]
    assert recent[0].startswith("- turn 5 http_get [network]")
    assert any("<aether://pack/3>" in ln for ln in recent)
    assert sum("cat shop/helpers.py" in ln or "helpers.py" in ln for ln in recent) == 1  # distinct only


@pytest.mark.parametrize("cap", [5, 12, 25, 40, 80, 400])
def test_render_is_hard_capped(cap):
    log = _busy_log()
    text = render_failures(log.analyze(6), log.records, max_tokens=cap, counter=COUNTER)
    assert COUNTER.count_text(text) <= cap


def test_render_empty_and_deterministic():
    empty = FailureLog()
    assert render_failures(empty.analyze(1), empty.records, max_tokens=100, counter=COUNTER) == ""
    a, b = _busy_log(), _busy_log()
    assert (render_failures(a.analyze(6), a.records, max_tokens=200, counter=COUNTER)
            == render_failures(b.analyze(6), b.records, max_tokens=200, counter=COUNTER))


CHAINED = ("<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n"
           '  File "/testbed/django/db/backends/utils.py", line 84, in _execute\n    return self.cursor.execute(sql)\n'
           "sqlite3.OperationalError: no such table: app_book\n\nThe above exception was the direct cause of the "
           "following exception:\n\nTraceback (most recent call last):\n  File \"reproduce.py\", line 9, in <module>\n"
           "django.db.utils.OperationalError: no such table: app_book\n</output>")


def test_a_dict_result_is_analysed_as_its_text_not_its_json():
    """ADK tools return dicts: a traceback inside {"output": ...} keeps its line breaks for the analysis."""
    result = {"output": CHAINED}
    assert is_error_result(result)
    text = error_text(result)
    assert "\nsqlite3.OperationalError: no such table: app_book\n" in text
    log = FailureLog()
    record = log.add(turn=3, tool="bash", args={"command": "python reproduce.py"}, error_text=text)
    assert record.message == "django.db.utils.OperationalError: no such table: app_book"
    assert record.causes == ("sqlite3.OperationalError: no such table: app_book",)
    assert record.category == "not_found"
    assert FailureRecord.from_json(record.to_json()) == record
    rendered = render_failures(log.analyze(4), log.records, max_tokens=400, counter=TokenCounter())
    assert ("- turn 3 bash [not_found] django.db.utils.OperationalError: no such table: app_book "
            "(after: sqlite3.OperationalError: no such table: app_book)") in rendered


def test_error_text_of_nested_and_coded_results():
    assert error_text({"result": {"stderr": "boom\nline 2", "returncode": 2}}) == "boom\nline 2\nreturncode: 2"
    assert error_text({"status": "error", "error": ["first", "second"]}) == "first\nsecond"
    assert error_text({"weird": 1}) == '{"weird":1}'


def test_exit_code_zero_with_a_traceback_is_a_failure():
    crashed = ("<returncode>0</returncode>\n<output>\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
               "TypeError: int() argument must be a string\ndone\n</output>")
    assert is_error_result({"output": crashed})
    assert not is_error_result({"output": "<returncode>0</returncode>\n<output>\nTypeError is a builtin\n</output>"})
    # a crash report without the Traceback header (Sphinx prints "Exception occurred:" and the frames)
    sphinx = ("<returncode>0</returncode>\n<output>\nRunning Sphinx v3.5.0\n\nException occurred:\n"
              "  File \"/testbed/sphinx/ext/autodoc/__init__.py\", line 1857\n    def get_doc(self):\n    ^\n"
              "SyntaxError: invalid syntax\nThe full traceback has been saved in /tmp/sphinx-err.log\n</output>")
    assert is_error_result({"output": sphinx})
    assert not is_error_result({"output": "<returncode>0</returncode>\n<output>\nsee File \"a.py\", line 3\nall good\n</output>"})
    # a frame quoted in source being viewed, then an exception name in a docstring: not a crash
    viewed = ("<returncode>0</returncode>\n<output>\ndef parse(tb):\n    \"\"\"Parse a line like 'File \"a.py\", line 3'.\n\n"
              "    Raises:\n        ValueError: if the line is not a frame.\n    \"\"\"\n</output>")
    assert not is_error_result({"output": viewed})


def test_exception_lines_are_distinct_clipped_and_in_order():
    lines = exception_lines("E   ValueError: bad\nValueError: bad\nKeyError: 'k'\n" + "RuntimeError: " + "y" * 300)
    assert lines[:2] == ["ValueError: bad", "KeyError: 'k'"]
    assert lines[2] == ("RuntimeError: " + "y" * 300)[:200] + "…"


def test_failures_that_differ_only_in_numbers_and_progress_marks_show_once():
    """A test runner's progress line changes every run; it must not crowd out a different error."""
    log = FailureLog()
    log.add(turn=2, tool="bash", args={"command": "python repro.py"},
            error_text="Traceback (most recent call last):\n  File \"repro.py\", line 3\nIndentationError: expected an indented block")
    for turn, marks in ((4, "..E..F.."), (6, ".E...EE.F"), (8, "E.....F..")):
        log.add(turn=turn, tool="bash", args={"command": "bin/test core"}, error_text=f"returncode: 1\n{marks}   [FAIL]")
    text = render_failures(log.analyze(9), log.records, max_tokens=400, counter=COUNTER)
    recent = [ln for ln in text.splitlines() if ln.startswith("- ")]
    assert sum("[FAIL]" in ln for ln in recent) == 1 and "E.....F.." in recent[0]  # the latest one
    assert any("IndentationError: expected an indented block" in ln for ln in recent)
    # ... but a different name, value or path is a different failure
    log = FailureLog()
    for turn, mod in ((2, "np"), (4, "pd")):
        log.add(turn=turn, tool="bash", args={"command": f"python -c 'import {mod}'"},
                error_text=f"ModuleNotFoundError: No module named '{mod}'")
    text = render_failures(log.analyze(5), log.records, max_tokens=400, counter=COUNTER)
    assert "named 'np'" in text and "named 'pd'" in text


def test_a_tight_cap_keeps_more_failures_before_their_links():
    log = FailureLog()
    errors = ["IndentationError: expected an indented block", "NotImplementedError: Infinity needs __ne__",
              "SyntaxError: invalid syntax", "KeyError: 'total'", "ZeroDivisionError: division by zero"]
    for turn, err in enumerate(errors, start=1):
        log.add(turn=2 * turn, tool="bash", args={"command": f"python step{turn}.py"},
                error_text=f"Traceback (most recent call last):\n  File \"step{turn}.py\", line 1\n{err}",
                uri=f"artifact://app/user/0f8e6b2c-5a41-4a7d-9c1e-3b2d7f6e8a90/tool-output/bash-{turn:016x}.json#v0")
    full = render_failures(log.analyze(11), log.records, max_tokens=1000, counter=COUNTER)
    assert all(e in full for e in errors) and full.count("<artifact://") == 5
    tight = render_failures(log.analyze(11), log.records, max_tokens=220, counter=COUNTER)
    assert COUNTER.count_text(tight) <= 220
    assert all(e in tight for e in errors)  # every error, some without their link
    assert 0 < tight.count("<artifact://") < 5
    assert "bash-0000000000000005.json" in tight  # the newest failure keeps its link first


# --- failures that are failures: warnings, banners and notes are noise ------------------------------

from pathlib import Path  # noqa: E402

OUTPUTS = Path(__file__).parent / "fixtures" / "outputs"
PYTEST_WARNED = (OUTPUTS / "pytest_warned.txt").read_text()
UNITTEST_ERRORS = (OUTPUTS / "unittest_errors.txt").read_text()


def _shell(text: str, code: int) -> dict:
    return {"output": f"<returncode>{code}</returncode>\n<output>\n{text}</output>"}


@pytest.mark.parametrize("code", [0, 1])
def test_pytest_output_with_warnings_above_its_failure_reports_the_failure(code):
    result = _shell(PYTEST_WARNED, code)  # exit 0: pytest piped through `tail`
    assert is_error_result(result)
    text = error_text(result)
    # the decisive line is the last pytest `E` line naming the assertion, as printed, with its details
    assert first_error_line(text) == "E       AssertionError:"
    assert assertion_details(text)[0] == "E       Not equal to tolerance rtol=1e-07, atol=0"
    assert "FAILED astropy/modeling/tests/test_separable.py::test_nested_compound - AssertionError:" in (
        evidence_lines(text))
    assert categorize_failure(text, "bash") == "logic"  # not "not_found" from `Scipy: not available`


def test_unittest_errors_report_an_error_line_not_the_deprecation_warning():
    text = error_text(_shell(UNITTEST_ERRORS, 0))
    assert is_error_result(_shell(UNITTEST_ERRORS, 0))
    assert first_error_line(text) == "ValueError: Found wrong number (2) of constraints"
    assert "Warning" not in first_error_line(text)


def test_warnings_and_banners_alone_are_not_failures():
    banner = PYTEST_WARNED.split("=================================== FAILURES")[0]
    passing = banner.replace("..........F.", "............") + "======== 12 passed, 1 warning in 0.20s ========\n"
    assert not is_error_result(_shell(passing, 0))


async def test_a_pytest_failure_under_warnings_reaches_the_pack_through_a_runner():
    from google.adk.agents import LlmAgent
    from google.adk.apps.app import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from aether_context import ContextPackPlugin
    from aether_context.adk import request_from_llm
    from aether_context.testing import ScriptedLlm, call

    def bash(command: str) -> dict:
        """Run a shell command."""
        return _shell(PYTEST_WARNED, 0)

    llm = ScriptedLlm(turns=[call("bash", command="pytest astropy/modeling | tail -60"), "seen", "ok"])
    agent = LlmAgent(name="coder", model=llm, instruction="Fix the bug.", tools=[bash])
    plugin = ContextPackPlugin(store="memory://failures-runner", window_tokens=32_000)
    runner = Runner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    for text in ("run the tests", "what failed?"):
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=text)])):
            pass
    # the failure is recorded as the failing test, not the warnings above it; while its output is sent
    # verbatim the pack does not repeat it in a FAILURES SO FAR section (nothing to add)
    state = (await runner.session_service.get_session(app_name="app", user_id="u", session_id=session.id)).state
    record = (await plugin.packer.records.get(state, "aether:failures"))["records"][-1]
    assert (record["tool"], record["category"]) == ("bash", "logic")
    assert record["message"] == "E       AssertionError:"
    assert record["details"][0] == "E       Not equal to tolerance rtol=1e-07, atol=0"
    assert record["causes"][-1].startswith("FAILED astropy/modeling/tests/test_separable.py::test_nested_compound")
    assert not any("RuntimeWarning" in c or "not available" in c for c in [record["message"], *record["causes"]])
    sent = request_from_llm(llm.requests[-1])
    outputs = " ".join(str(r.response) for m in sent.messages for r in m.responses)
    assert record["message"] in outputs and "FAILURES SO FAR" not in "\n".join(m.text for m in sent.messages)


def test_a_record_keeps_the_other_failing_tests_and_the_final_counts():
    log = FailureLog()
    record = log.add(turn=5, tool="bash", args={"command": "./runtests.py"}, error_text=error_text(_shell(UNITTEST_ERRORS, 1)))
    assert record.message == "ValueError: Found wrong number (2) of constraints"
    assert record.causes == ("ERROR: test_delete_unique_together_with_pk (migrations.test_operations.OperationTests)",
                             "FAILED (errors=6, skipped=2)")
    assert not any("Warning" in c for c in record.causes)
