"""Failure categories: what kind of problem an error text describes.

The decisive exception (the last `SomethingError: message` line outside warnings and banners, the
one a chained traceback ends with) is classified by its class name first, then by its message;
plain text falls back to ordered patterns. Decision on runtime vs logic: `runtime` is an unexpected
exception raised while executing (RuntimeError, KeyError, IndexError, ZeroDivisionError, NameError,
an unmapped traceback); `logic` is a check about the *outcome* that failed (AssertionError, failing
tests, "expected X got Y", patches that do not apply): the code ran, the agent's model of it is wrong.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from ...compress.error_lines import decisive_exception, noise_indices, strip_ansi

__all__ = ["Category", "CATEGORIES", "categorize_failure", "match_patterns"]

Category = Literal[
    "permission", "not_found", "syntax", "type", "runtime", "network", "timeout", "validation", "logic",
    "resource", "unknown",
]
CATEGORIES: tuple[str, ...] = get_args(Category)

_EXCEPTIONS: dict[str, str] = {}
for _cat, _names in {
    "permission": "PermissionError AccessDenied AccessDeniedError Forbidden ForbiddenError Unauthorized "
                  "AuthenticationError PermissionDenied",
    "not_found": "FileNotFoundError ModuleNotFoundError ImportError NotADirectoryError NotFound NotFoundError "
                 "DoesNotExist ObjectDoesNotExist NoSuchKey ResourceNotFoundError",
    "syntax": "SyntaxError IndentationError TabError JSONDecodeError ParseError ParserError YAMLError "
              "ScannerError TemplateSyntaxError",
    "type": "TypeError AttributeError ClassCastException",
    "runtime": "RuntimeError ZeroDivisionError KeyError IndexError NameError UnboundLocalError RecursionError "
               "OverflowError StopIteration NotImplementedError SystemError NullPointerException "
               "ArithmeticError FloatingPointError",
    "network": "ConnectionError ConnectionRefusedError ConnectionResetError ConnectionAbortedError URLError "
               "SSLError ProxyError gaierror NewConnectionError MaxRetryError ClientConnectorError",
    "timeout": "TimeoutError TimeoutExpired ReadTimeout ConnectTimeout ReadTimeoutError DeadlineExceeded",
    "validation": "ValueError ValidationError UnicodeDecodeError UnicodeEncodeError InvalidArgument "
                  "InvalidArgumentError ArgumentError ArgumentTypeError UsageError BadRequest",
    "logic": "AssertionError AssertionFailure",
    "resource": "MemoryError OutOfMemoryError ResourceExhausted RateLimitError QuotaExceeded TooManyRequests",
}.items():
    _EXCEPTIONS.update(dict.fromkeys(_names.split(), _cat))

# Ordered: the first category whose pattern matches wins, so the more specific come first
# (a "connection timed out" is a timeout, "bash: syntax error ..." is syntax not not_found).
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((cat, re.compile(rx, re.IGNORECASE)) for cat, rx in (
    ("permission", r"permission denied|operation not permitted|\beacces\b|\beperm\b|\bforbidden\b|"
                   r"\bunauthori[sz]ed\b|access denied|not authori[sz]ed|read-only file system|"
                   r"authentication failed|\b(?:40[13])\b(?= |$|:)"),
    ("timeout", r"timed? ?out\b|\betimedout\b|deadline[ _]exceeded|\b504\b|took too long"),
    ("network", r"\beconnrefused\b|\beconnreset\b|\behostunreach\b|\benetunreach\b|"
                r"connection (?:refused|reset|aborted)|"
                r"could not resolve host|name or service not known|temporary failure in name resolution|"
                r"getaddrinfo|\bdns\b|network is unreachable|max retries exceeded|\b50[23]\b|bad gateway|"
                r"service unavailable|failed to establish a new connection|\bssl\b.*\berror\b"),
    ("resource", r"out of memory|\benomem\b|cannot allocate memory|no space left|\benospc\b|disk (?:is )?full|"
                 r"quota|rate.?limit|too many requests|\b429\b|resource_exhausted|\bkilled\b|"
                 r"insufficient|not enough (?!values)"),
    ("syntax", r"syntax ?error|unexpected token|unexpected (?:eof|end of (?:file|input))|parse error|"
               r"invalid syntax|unterminated|unmatched|unknown option to `s'|expecting (?:value|property name)"),
    ("not_found", r"no such file|\benoent\b|command not found|not found|does not exist|no such "
                  r"(?:table|column|module|key|option|directory|revision)|cannot find|can't find|could not find|"
                  r"can't read|cannot access|no module named|cannot import name|unknown revision|"
                  r"did not match any file|not a git repository|\b404\b|\bnot available\b"),
    ("type", r"type ?error|wrong type|invalid type|is not callable|has no attribute|unsupported operand|"
             r"cannot read propert(?:y|ies) of (?:undefined|null)|is not a function|is not iterable|"
             r"not subscriptable|must be (?:str|int|float|bytes|a string|a number)"),
    ("validation", r"validation|\binvalid\b|value ?error|required (?:field|argument|parameter)|"
                   r"missing (?:required|argument)|is not a valid|must be|must not|unrecognized arguments|"
                   r"bad request|\b4(?:00|22)\b|invalid_argument|cannot be used|not allowed|out of range"),
    ("logic", r"assert|\bfailed\b.*::|\b\d+ failed\b|tests? failed|(?-i:\bFAIL(?:ED)?\b)|expected .{1,80}\bgot\b|"
              r"does not add up|mismatch|patch does not apply|patch failed|merge conflict|\bconflict\b|"
              r"hunk #\d+ failed"),
    ("runtime", r"traceback \(most recent call last\)|runtime ?error|segmentation fault|core dumped|"
                r"\bpanic(?:ked)?\b|uncaught exception|unhandled exception|\bexception\b"),
))

_TEST_TOOL = re.compile(r"test|pytest|jest|unittest", re.IGNORECASE)


def match_patterns(text: str) -> str | None:
    """The first category whose text pattern matches `text`, or None."""
    for cat, rx in _PATTERNS:
        if rx.search(text):
            return cat
    return None


def categorize_failure(text: str, tool_name: str | None = None) -> Category:
    """The failure category of an error text; `tool_name` only breaks ties (a test tool → logic)."""
    text = strip_ansi(text)
    decisive = decisive_exception(text)
    category: str | None = None
    if decisive is not None:
        name, message = decisive
        category = _EXCEPTIONS.get(name) or match_patterns(message)
    if category is None:  # warnings, banners and environment notes say nothing about the failure
        lines = text.splitlines()
        noise = noise_indices(lines)
        category = match_patterns("\n".join(ln for i, ln in enumerate(lines) if i not in noise))
    if category is None and tool_name and _TEST_TOOL.search(tool_name) and text.strip():
        category = "logic"
    return category or "unknown"  # type: ignore[return-value]
