"""Error lines: the one definition of what a failure looks like in tool output, and what is only noise.

Why one place: failure tracking, tool-output compression, fold lines and reference extraction all
ask "which lines of this output say it failed?". Answered three ways, a line kept by one was lost
by another, and banner noise (a `RuntimeWarning` printed at import, `Scipy: not available` in a
pytest header) was taken for the failure. Every caller reads output through these functions.

A *failure line* (`failure_lines`) is strict, the same definition the benchmarks count:
- the exception line that ends a Python traceback (with or without its `Traceback` header),
- pytest `E` lines that name an exception or an assertion, and `path.py:N: XError` lines,
- `FAILED` / `FAIL` / `ERROR` lines (pytest and unittest summaries, `FAILED (errors=6, skipped=2)`,
  jest's `FAIL src/a.test.js`, go's `--- FAIL: TestX`),
- lines starting `Error:` / `error:` / `error[E0308]:` / `fatal:` / `panic:`.
An *error-looking line* (`is_error_line`) is broader and only ranks lines for keeping. A *noise
line* (`noise_indices`) is a warning, a test-session banner or an environment note: never a failure.

The *decisive line* (`decisive_index`) is the one a reader needs first: the exception closing the last
traceback, else the last pytest `E` line naming an exception or an assertion, else the last
`FAILED` / `ERROR` line. `decisive_lines` gives it whole with its assertion details (the `E` lines
under it), as printed: colour codes removed, pytest's `E` kept, nothing cut inside a line.

Usage::

    lines = failure_lines(output)          # ["E   AttributeError: ...", "FAILED t.py::test_x - ..."]
    counts = run_counts(output)            # RunCounts(line="=== 1 failed, 3 passed in 0.2s ===", failed=True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "strip_ansi", "EXCEPTION_LINE", "FRAME_FILE", "FRAME_LINE", "is_exception_line", "traceback_ends",
    "is_error_line", "opens_with_error", "mentions_error", "exception_mentions", "error_phrases", "noise_indices",
    "failure_line_indices", "failure_lines", "RunCounts", "run_counts", "counts_line_index", "decisive_exception",
    "last_failure_line", "decisive_index", "decisive_span", "decisive_lines", "MAX_DETAILS",
]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EXC_SUFFIX = (r"(?:Error|Exception|Exit|Timeout|Failure|NotFound|Forbidden|Exhausted|Expired|Exceeded|"
               r"DoesNotExist|gaierror)")
# `[E   ][FAILED x - ][pkg.mod.]SomeError[: message]` — the shape of a raised exception's line.
EXCEPTION_LINE = re.compile(
    r"^\s*(?:E\s+|(?:FAILED|ERROR) \S+ - )?(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*?" + _EXC_SUFFIX + r")\b(?::\s*(.*))?$"
)
# After a traceback's frames any raised class may end it, warnings-as-errors and pytest's `Failed` included.
_TB_FINAL = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*?(?:" + _EXC_SUFFIX[3:-1] + r"|Warning|Failed|Interrupt|"
                       r"Iteration)\b(?::.*)?$")
_RAISED = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?::(?:\s.*)?)?$")  # `Name` or `pkg.Name: msg`
_MAX_STRAYS = 3
FRAME_FILE = re.compile(r'File "([^"]+)", line \d+')  # a frame's file, wherever the frame is quoted
FRAME_LINE = re.compile(r"^\s+" + FRAME_FILE.pattern)  # a traceback frame as Python prints it (indented)
_TB_HEADER = "Traceback (most recent call last)"

_PYTEST_E = re.compile(r"^E\s+(?:(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*?(?:" + _EXC_SUFFIX[3:-1] +
                       r"|Warning|Failed)\b|assert\b)")
_PYTEST_LOCATION = re.compile(r"^\S+\.py:\d+: (?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*?(?:" + _EXC_SUFFIX[3:-1] +
                              r"|Warning|Failed)$")
# pytest/unittest `FAILED x`, `ERROR: t (m.C)`, `FAIL: t`; jest `FAIL src/a.test.js`; go `--- FAIL: TestX`, `FAIL\tpkg`.
_SUMMARY = re.compile(r"^(?:--- )?(?:FAILED|ERROR|FAIL)(?=[ :(\t]|$)(?! ?=)")
_ERROR_START = re.compile(r"^(?:error|fatal)(?:\[\w+\])?:\s|^panic: ", re.I)

_ERROR_CASED = re.compile(
    r"\b(?:[A-Z]\w*)?(?:Error|Exception|Failure|Fault)\b|\bFAIL(?:ED)?\b|\bERROR\b|^\s*E\s{2,}\S"
    r"|\bTraceback \(most recent call last\)"
)
_ERROR_ANYCASE = re.compile(
    r"\b(?:error|fatal|panic)\s*:|^\s*assert\b|\bassertion failed\b|\bsegmentation fault\b"
    r"|\bcommand not found\b|\bno such file or directory\b|\bpermission denied\b",
    re.I,
)
# Whole-text forms, to skip a per-line search that cannot match: a line's match is one of the text's
# (`^` at each line start; `\s` may reach across lines, so the text can match where no line does).
_ANY_EXCEPTION_LINE = re.compile(EXCEPTION_LINE.pattern, re.M)
_ANY_ERROR_LINE = (re.compile(_ERROR_CASED.pattern, re.M), re.compile(_ERROR_ANYCASE.pattern, re.M | re.I))

# An output's first line that says it failed: `error: ...`, `npm ERR!`, `bash: x: command not found`, `404 ...`.
_ERROR_OPENING = re.compile(
    r"^(?:error|fatal|exception|err!)\b\s*[:!\-]|^npm err!|^traceback \(most recent call last\)|"
    r"^(?:http(?:/[\d.]+)?\s+)?[45]\d\d\s+[a-z]|^(?:the )?command timed out|"
    r"^segmentation fault|^killed$|\(core dumped\)|"
    r"^[a-z][\w.-]*: (?:line \d+: )?.*(?:command not found|no such file|permission denied|"
    r"can't read|cannot access|not found|could not|couldn't|cannot|can't|unable to|\bfailed\b|\berror\b|"
    r"\bdenied\b|\binvalid\b|unrecognized|unterminated)",
    re.IGNORECASE,
)
_ERROR_WORD = re.compile(r"\berror\b|\bfail(?:ed|ure)?\b|traceback|exception", re.IGNORECASE)

# Inline mentions, for reference extraction: `SomeError: message` or `pkg.mod.Name: message` anywhere in a line.
_MENTION = re.compile(r"(?<![\w.])(?:[a-z_]\w*\.)*((?:[A-Z]\w*)?(?:Error|Exception|Failure|Fault|DoesNotExist)):"
                      r"[ \t]+(\S.*)")
_DOTTED_MENTION = re.compile(r"(?<![\w.])(?:[a-z_]\w*\.)+([A-Z][a-z]\w*):[ \t]+(\S.*)")
_ERROR_PHRASE = re.compile(r"(?:^|(?<=[\s→>]))(?:error|fatal)[ \t]*:[ \t]*(\S.*)", re.I)

# Noise: printed warnings, test-session banners and environment notes.
# Python's warning format: `path:N: SomeWarning: message`, then the offending source line, indented.
_WARNING = re.compile(r"^\s*(?:[^\s:][^:]*:\d+: )?[A-Z]\w*Warning: |^Invalid -W option ignored\b")
_BANNER_START = re.compile(r"^=+ (?:test session starts|test process starts)\b")
# A header ends where collection or the first progress line starts (`t.py ..F`, `t.py[3] ..`, `t::x PASSED`).
_BANNER_END = re.compile(r"^(?:collected \d+ items?|collecting\b|=+ \w|_{3,}|\S+\.py(?:\[\d+\])?(?: |$)|"
                         r"\S+::\S+ [A-Z]+)")
_MAX_BANNER = 60  # lines: a header without a recognised end stops being one here
_NOTE = re.compile(r"^(?:platform \w+ -- Python|rootdir:|configfile:|inifile:|plugins:|cachedir:|"
                   r"[\w .+/-]{1,40}: not available\.?$)", re.I)
_SECTION = re.compile(r"^=+ (.+?) =+$")
_NOISE_SECTIONS = ("warnings summary",)


def strip_ansi(text: str) -> str:
    """`text` without terminal colour codes (pytest colours its summary lines)."""
    return _ANSI.sub("", text)


def is_exception_line(line: str) -> bool:
    """`SomeError: message` (optionally pytest's `E` or `FAILED x - ` in front)."""
    return EXCEPTION_LINE.match(line) is not None


def traceback_ends(lines: list[str]) -> tuple[set[int], set[int]]:
    """Indices of the exception lines that end Python tracebacks, and of their last frames.

    A traceback is a `Traceback (most recent call last):` header or, when a tool cut the header
    off (or a program prints frames without it), an indented `File "...", line N` frame; it ends
    at the first unindented line shaped like a raised exception (`Name`, `pkg.Name: message`).
    Headerless, the name must also read as an exception class, so a frame quoted in prose does not
    make the next sentence a failure. Lines a program printed between the frames (stdout and stderr
    interleave) are skipped, a few at most.
    """
    finals: set[int] = set()
    frames: set[int] = set()
    state = None  # None, "header" or "frames"
    last_frame: int | None = None
    strays = 0
    for i, line in enumerate(lines):
        if line.startswith(_TB_HEADER):
            state, last_frame, strays = "header", None, 0
        elif FRAME_LINE.match(line):
            state, last_frame = state or "frames", i
        elif state and line.strip() and not line[0].isspace():
            text = line.strip()
            if _TB_FINAL.match(text) or (state == "header" and _RAISED.match(text)):
                finals.add(i)
                if last_frame is not None:
                    frames.add(last_frame)
                state = None
            else:
                strays += 1
                if strays > _MAX_STRAYS:
                    state = None
    return finals, frames


def is_error_line(line: str) -> bool:
    """Error-looking (broad, for ranking what to keep): exception names, `error:`, FAILED, `E` lines."""
    return bool(_ERROR_CASED.search(line) or _ERROR_ANYCASE.search(line))


def opens_with_error(line: str) -> bool:
    """Whether an output's first line announces a failure (`error: ...`, `bash: x: command not found`)."""
    return _ERROR_OPENING.search(line.strip()) is not None


def mentions_error(text: str) -> bool:
    """Whether `text` uses an error word at all (error, failed, traceback, exception)."""
    return _ERROR_WORD.search(text) is not None


def exception_mentions(line: str) -> list[tuple[int, str]]:
    """(position, `Name: message`) for each exception named with a message in `line` (module path dropped)."""
    found = []
    for regex in (_MENTION, _DOTTED_MENTION):
        found.extend((m.start(1), f"{m.group(1)}: {m.group(2).strip()}") for m in regex.finditer(line))
    return found


def error_phrases(line: str) -> list[tuple[int, str]]:
    """(position, text after it) for each `error:` / `fatal:` in `line`."""
    return [(m.start(), m.group(1).strip()) for m in _ERROR_PHRASE.finditer(line)]


def noise_indices(lines: list[str], finals: "set[int] | None" = None) -> set[int]:
    """Lines that are never failures: printed warnings, test-session banners, environment notes.

    A pytest header runs from `test session starts` to `collected N items`; a `warnings summary`
    section to the next `===` heading. Lines that end a traceback are not noise even when they name
    a warning (a warning raised as an error is a failure). `finals`: `traceback_ends(lines)[0]`, if known.
    """
    finals = traceback_ends(lines)[0] if finals is None else finals
    noise: set[int] = set()
    in_banner = in_section = False
    banner_start = 0
    for i, raw in enumerate(lines):
        line = raw.strip()
        section = _SECTION.match(line)
        if section:
            in_section = section.group(1).strip().lower() in _NOISE_SECTIONS
            in_banner, banner_start = bool(_BANNER_START.match(line)), i
            if in_banner or in_section:
                noise.add(i)
            continue
        if in_banner and (_BANNER_END.match(line) or i - banner_start > _MAX_BANNER):
            in_banner = False
            if line.startswith("collect"):
                noise.add(i)
                continue
        if i in finals or _PYTEST_E.match(raw) or _SUMMARY.match(line):
            continue
        if in_banner or in_section or _WARNING.match(raw) or _NOTE.match(line):
            noise.add(i)
        elif i - 1 in noise and raw[:1].isspace() and not FRAME_LINE.match(raw) and _WARNING.match(lines[i - 1]):
            noise.add(i)  # the source line Python prints under a warning
    return noise


def failure_line_indices(lines: list[str], finals: "set[int] | None" = None) -> list[int]:
    """Indices (ascending) of the failure lines among `lines` (ANSI codes already removed); `finals`:
    `traceback_ends(lines)[0]`, if known."""
    finals = traceback_ends(lines)[0] if finals is None else finals
    found = []
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        if (i in finals or _PYTEST_E.match(raw) or _PYTEST_LOCATION.match(line) or _SUMMARY.match(line)
                or _ERROR_START.match(line)):
            found.append(i)
    return found


def failure_lines(text: str) -> list[str]:
    """The failure lines of an output, in order, stripped: what the benchmarks count as real failures."""
    lines = strip_ansi(text).splitlines()
    return [lines[i].strip() for i in failure_line_indices(lines)]


@dataclass(frozen=True)
class RunCounts:
    """A test run's final counts line and whether it reports failures or errors."""

    line: str
    failed: bool


_PYTEST_COUNTS = re.compile(
    r"^=*\s*(?:tests finished: )?(?:\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?|"
    r"expected to fail|exceptions?)[, ]*)+(?:in [\d.]+ ?s(?:econds)?)?\s*=*$|^=*\s*no tests ran\b"
)
_UNITTEST_COUNTS = re.compile(r"^(?:OK|FAILED)(?: \((?:[\w ]+=\d+(?:, )?)+\))?$")
_BAD_COUNT = re.compile(r"\b([1-9]\d*) (?:failed|errors?|exceptions?)\b")


def run_counts(text: str) -> RunCounts | None:
    """The last test-run counts line (pytest, sympy's runner, unittest's `OK`/`FAILED (...)`), if any."""
    lines = strip_ansi(text).splitlines()
    at = counts_line_index(lines)
    if at is None:
        return None
    line = lines[at].strip()
    return RunCounts(line, bool(_BAD_COUNT.search(line)) or line.startswith("FAILED"))


def counts_line_index(lines: list[str]) -> int | None:
    """Index of the last test-run counts line among `lines` (ANSI codes already removed), if any."""
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if _PYTEST_COUNTS.match(line) and re.search(r"\d+ \w|no tests ran", line):
            return i
        if _UNITTEST_COUNTS.match(line) and ("=" in line or any(ln.startswith("Ran ") for ln in lines[max(0, i - 3):i])):
            return i  # `FAILED (errors=6)` says it alone; a bare `OK` needs unittest's `Ran N tests` above it
    return None


def decisive_exception(text: str) -> tuple[str, str] | None:
    """(class name, message) of the last exception line outside noise: the one a chained traceback ends with."""
    lines = strip_ansi(text).splitlines()
    noise = noise_indices(lines)
    found = None
    for i, line in enumerate(lines):
        if i in noise:
            continue
        m = EXCEPTION_LINE.match(line)
        if m:
            found = (m.group(1), (m.group(2) or "").strip())
    return found


def last_failure_line(text: str) -> str | None:
    """The most telling failure line: a traceback's exception line, else the last failure line naming an
    exception, else the last exception line, else the last failure line, else the last error-looking
    line; never a warning or banner line."""
    lines = strip_ansi(text).splitlines()
    finals, _ = traceback_ends(lines)
    if finals:
        return lines[max(finals)].strip()
    failures = failure_line_indices(lines, finals)
    found = next((i for i in reversed(failures) if EXCEPTION_LINE.match(lines[i])), None)
    if found is not None:
        return lines[found].strip()
    text = "\n".join(lines)
    noise: "set[int] | None" = None
    if _ANY_EXCEPTION_LINE.search(text):  # else no line is one
        noise = noise_indices(lines, finals)
        found = next((i for i in range(len(lines) - 1, -1, -1) if i not in noise and EXCEPTION_LINE.match(lines[i])),
                     None)
        if found is not None:
            return lines[found].strip()
    if failures:
        return lines[failures[-1]].strip()
    if any(p.search(text) for p in _ANY_ERROR_LINE):  # else no line is error-looking
        noise = noise_indices(lines, finals) if noise is None else noise
        found = next((i for i in range(len(lines) - 1, -1, -1)
                      if i not in noise and lines[i].strip() and is_error_line(lines[i])), None)
        if found is not None:
            return lines[found].strip()
    return None


_E_LINE = re.compile(r"^E(?:\s|$)")  # any line of pytest's `E` block, assertion details included
_FAILED_OR_ERROR = re.compile(r"^(?:FAILED|ERROR)(?=[ :(\t]|$)")
MAX_DETAILS = 12  # assertion-detail lines kept under the decisive line


def decisive_index(lines: list[str]) -> int | None:
    """Index of the decisive line among `lines` (ANSI codes already removed): the exception closing the
    last traceback, else the last pytest `E` line naming an exception or an assertion, else the last
    `FAILED` / `ERROR` line; warnings and banners never."""
    finals, _ = traceback_ends(lines)
    if finals:
        return max(finals)
    noise = noise_indices(lines)
    for found in ([i for i, ln in enumerate(lines) if _PYTEST_E.match(ln) and i not in noise],
                  [i for i, ln in enumerate(lines) if _FAILED_OR_ERROR.match(ln.strip()) and i not in noise]):
        if found:
            return found[-1]
    return None


def decisive_span(lines: list[str]) -> range:
    """Indices of the decisive line and of the assertion details under it (the `E` lines that follow,
    at most `MAX_DETAILS`) among `lines` (ANSI codes already removed); empty without one."""
    at = decisive_index(lines)
    if at is None:
        return range(0)
    end = at + 1
    if _E_LINE.match(lines[at]):
        while end < min(len(lines), at + 1 + MAX_DETAILS) and _E_LINE.match(lines[end]) and lines[end][1:].strip():
            end += 1
    return range(at, end)


def decisive_lines(text: str) -> list[str]:
    """The decisive line and its assertion details (`decisive_span`), whole, as printed: colour codes
    and surrounding blanks removed, pytest's `E` kept; [] without one."""
    lines = strip_ansi(text).splitlines()
    span = decisive_span(lines)
    return [lines[i].strip() if i == span.start else lines[i].rstrip() for i in span]
