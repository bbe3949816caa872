"""Error lines: one definition of failure lines and noise, and the compact forms and fold lines built on it."""

from __future__ import annotations

from pathlib import Path

from aether_context.compress import compress_tool_output, fold_tool_pair
from aether_context.compress.error_lines import failure_lines, noise_indices, run_counts, traceback_ends
from aether_context.content import FunctionCall, FunctionResponse
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()
OUTPUTS = Path(__file__).parent / "fixtures" / "outputs"
PYTEST = (OUTPUTS / "pytest_warned.txt").read_text()
UNITTEST = (OUTPUTS / "unittest_errors.txt").read_text()


def shell(text: str, code: int = 0) -> dict:
    """A mini-swe-agent shell result as a tool returns it."""
    return {"output": f"<returncode>{code}</returncode>\n<output>\n{text}</output>"}


def test_failure_lines_reads_the_issue_kinds_and_skips_banners():
    """The kinds the context benchmark counts (bench/context_eval/coding.py reads through this function)."""
    text = ("RuntimeWarning: Expected 80 from C header, got 96\nTraceback (most recent call last):\n"
            '  File "a.py", line 1, in <module>\nValueError: bad\nE       AssertionError: assert 1 == 2\n'
            "E        +  where 1 = f()\nt.py:12: TypeError\nFAILED (errors=6, skipped=2)\nError: nope\n")
    assert failure_lines(text) == ["ValueError: bad", "E       AssertionError: assert 1 == 2", "t.py:12: TypeError",
                                   "FAILED (errors=6, skipped=2)", "Error: nope"]


def test_pytest_failure_lines_skip_warnings_banners_and_notes():
    assert failure_lines(PYTEST) == [
        "E       AssertionError:",
        "astropy/modeling/tests/test_separable.py:151: AssertionError",
        "FAILED astropy/modeling/tests/test_separable.py::test_nested_compound - AssertionError:",
    ]
    lines = PYTEST.splitlines()
    noisy = {lines[i] for i in noise_indices(lines)}
    assert any("RuntimeWarning" in ln for ln in noisy)
    assert any(ln.startswith("Invalid -W option ignored") for ln in noisy)
    assert "Scipy: not available" in noisy and "rootdir: /testbed" in noisy
    assert not any(ln.startswith(("E ", "FAILED")) for ln in noisy)


def test_unittest_error_lines_and_counts_are_failures():
    assert failure_lines(UNITTEST) == [
        "ERROR: test_unicode_filename (forms_tests.tests.tests.FormsModelTestCase)",
        "UnicodeEncodeError: 'ascii' codec can't encode characters in position 39-47: ordinal not in range(128)",
        "ERROR: test_delete_unique_together_with_pk (migrations.test_operations.OperationTests)",
        "ValueError: Found wrong number (2) of constraints",
        "FAILED (errors=6, skipped=2)",
    ]
    counts = run_counts(UNITTEST)
    assert counts is not None and counts.failed and counts.line == "FAILED (errors=6, skipped=2)"


def test_counts_lines_of_passing_runs_are_not_failures():
    assert not run_counts("collected 3 items\n\n=== 3 passed, 2 warnings in 0.12s ===").failed
    assert not run_counts("....\nRan 4 tests in 0.01s\n\nOK (skipped=1)").failed
    assert run_counts("tests finished: 90 passed, 2 expected to fail, 2 exceptions, in 3.11 seconds").failed
    assert run_counts("OK") is None  # a bare OK is not a test run without unittest's `Ran N tests`


def test_a_warning_raised_as_an_error_ends_its_traceback():
    text = ('Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n    warn()\n'
            "DeprecationWarning: NotImplemented should not be used in a boolean context\n")
    assert failure_lines(text) == ["DeprecationWarning: NotImplemented should not be used in a boolean context"]


def test_headerless_traceback_needs_an_exception_after_its_frames():
    cut = '  File "/testbed/x.py", line 9, in run\n    go()\n        ^^\nKeyError: \'user\'\n'
    assert failure_lines(cut) == ["KeyError: 'user'"]
    quoted = 'The log says:\n  File "x.py", line 9, in run\nThat frame is fine.\n'
    assert traceback_ends(quoted.splitlines()) == (set(), set())


def test_interleaved_stdout_does_not_end_a_traceback():
    text = ('Traceback (most recent call last):\n  File "a.py", line 1, in <module>\nCalling draw()...\n'
            '  File "b.py", line 2, in draw\n    x.y\nAttributeError: no y\n')
    assert failure_lines(text) == ["AttributeError: no y"]


def test_compact_test_run_keeps_failures_and_final_counts():
    text = compress_tool_output("bash", shell(PYTEST), max_tokens=200, counter=COUNTER, uri="artifact://s/t.txt").text
    assert "FAILED astropy/modeling/tests/test_separable.py::test_nested_compound - AssertionError:" in text
    assert "1 failed, 11 passed, 1 warning in 0.21s" in text
    assert "RuntimeWarning" not in text and "Scipy" not in text
    text = compress_tool_output("bash", shell(UNITTEST), max_tokens=200, counter=COUNTER).text
    for line in failure_lines(UNITTEST):
        assert line in text


def test_compact_diff_keeps_every_file_header_with_its_hunk_count():
    body = "".join(f" line {k}\n-old {k}\n+new {k}\n" for k in range(30))
    diff = "".join(f"diff --git a/pkg/mod{i}.py b/pkg/mod{i}.py\nindex 1..2 100644\n--- a/pkg/mod{i}.py\n"
                   f"+++ b/pkg/mod{i}.py\n@@ -1,30 +1,30 @@\n{body}@@ -90,3 +90,3 @@\n{body}" for i in range(12))
    text = compress_tool_output("bash", shell(diff), max_tokens=400, counter=COUNTER, uri="artifact://a/u/s/d.txt").text
    for i in range(12):
        assert f"diff --git a/pkg/mod{i}.py b/pkg/mod{i}.py (2 hunks)" in text
    assert COUNTER.count_text(text) <= 400


def test_a_failing_run_that_exits_zero_is_never_folded_as_ok():
    call = FunctionCall("bash", {"command": "pytest astropy/modeling | tail -40"})
    line = fold_tool_pair(4, call, FunctionResponse("bash", shell(PYTEST)), uri=None, counter=COUNTER, max_tokens=90)
    assert "failed: FAILED astropy/modeling/tests/test_separable.py::test_nested_compound" in line
    assert "→ ok" not in line and "RuntimeWarning" not in line


def test_an_offloaded_result_folds_from_its_compact_form():
    compact = compress_tool_output("bash", shell(UNITTEST), max_tokens=120, counter=COUNTER).text
    envelope = {"summary": compact, "artifact_uri": "artifact://a/u/s/t.txt", "original_tokens": 900,
                "note": "Output offloaded (command)"}
    call = FunctionCall("bash", {"command": "./runtests.py forms_tests"})
    line = fold_tool_pair(7, call, FunctionResponse("bash", envelope), uri="artifact://a/u/s/t.txt", counter=COUNTER,
                          max_tokens=90)
    assert "exit 0, 26 lines, failed:" in line and "FAILED (errors=6, skipped=2)" in line
    assert "→ ok" not in line


def test_a_diff_folds_to_the_files_it_changes():
    diff = "diff --git a/x.py b/x.py\n@@ -1 +1 @@\n-a\n+b\ndiff --git a/y/z.py b/y/z.py\n@@ -1 +1 @@\n-a\n+b\n"
    line = fold_tool_pair(2, FunctionCall("bash", {"command": "git diff"}), FunctionResponse("bash", shell(diff)),
                          uri=None, counter=COUNTER)
    assert line == '[turn 2] bash(command="git diff") → exit 0, diff of 2 files: x.py, y/z.py'


def test_other_runners_failure_lines():
    jest = "PASS src/a.test.js\nFAIL src/cart.test.js\n  ● cart › adds\n\nTests:       1 failed, 3 passed, 4 total\n"
    assert failure_lines(jest) == ["FAIL src/cart.test.js"]
    go = "=== RUN   TestParse\n--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 3, want 4\nFAIL\nFAIL\texample.com/p\t0.01s\n"
    assert failure_lines(go) == ["--- FAIL: TestParse (0.00s)", "FAIL", "FAIL\texample.com/p\t0.01s"]
    rust = "error[E0308]: mismatched types\n --> src/main.rs:4:18\n"
    assert failure_lines(rust) == ["error[E0308]: mismatched types"]
    assert failure_lines("FAILED = 1\nERROR_CODES = {}\n") == []  # code, not a runner's verdict
