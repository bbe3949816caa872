"""The real failure lines of a tool output, exactly as issue 10 defines them.

Kept apart from the package's own recognizer (`aether_context.compress.failure_lines`, which is
broader: `FAIL`, `fatal:`, `panic:` lines): the benchmark measures the package, so it must not share
a blind spot with it, and its definition is the issue's, not whatever the package recognizes.
"""

from __future__ import annotations

import re

from aether_context.compress.error_lines import strip_ansi

__all__ = ["failure_lines"]

_TB_HEADER = "Traceback (most recent call last)"
_EXC_NAME = r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*"
_EXCEPTION = re.compile(rf"^{_EXC_NAME}(?::\s.*)?$")
_NAMED_ERROR = re.compile(rf"^{_EXC_NAME}(?:Error|Exception)\b")
_PYTEST_E = re.compile(r"^E\s+(\S.*)$")
_FILE_ERROR = re.compile(rf"^\S+\.py:\d+: {_EXC_NAME}(?:Error|Exception)\b.*$")
_SUMMARY = re.compile(r"^(?:FAILED|ERROR)\b.*$")
_PLAIN = re.compile(r"^Error:\s*\S.*$")


def _traceback_end(lines: list[str], start: int) -> str | None:
    """The exception line closing the traceback whose header is at `start`: the first unindented line after its frames."""
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith((" ", "\t")):
            continue
        stripped = line.strip()
        return stripped if _EXCEPTION.match(stripped) else None
    return None


def failure_lines(text: str) -> list[str]:
    """Failure lines of one output, in order: exception lines that end a traceback, pytest `E` lines naming an
    exception or an assertion, `file.py:N: XError` lines, `FAILED` / `ERROR` lines, lines starting `Error:`."""
    lines = strip_ansi(text).splitlines()
    out: list[str] = []
    for i, raw in enumerate(lines):
        line = raw.strip()
        if _TB_HEADER in line:
            end = _traceback_end(lines, i)
            if end:
                out.append(end)
            continue
        m = _PYTEST_E.match(line)
        if m and (_NAMED_ERROR.match(m.group(1)) or m.group(1).startswith("assert ")):
            out.append(m.group(1))
        elif _FILE_ERROR.match(line) or _SUMMARY.match(line) or _PLAIN.match(line):
            out.append(line)
    return out
