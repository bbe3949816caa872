"""Failure evidence: recognise failed tool calls, remember them, and warn before they repeat.

Why: agents in long sessions retry the same broken action, chase a cascade of errors that share one
root cause, or keep hitting the same class of problem. A short "FAILURES SO FAR" section in the
Context Pack, built from a bounded log, lets the model see that pattern instead of rediscovering it.

Everything here is pure: `FailureLog` is a small bounded container that serialises to JSON so it can
live in ADK session state, and `analyze` / `render_failures` return new values. Modules: `detect`
(did it fail, which line says so), `categorize` (what kind of failure), `log` (records and patterns),
`render` (the pack section).

Usage::

    log = FailureLog()
    if is_error_result(result):
        log.add(turn=7, tool="bash", args={"command": "pytest"}, error_text=str(result))
    text = render_failures(log.analyze(current_turn=8), log.records, max_tokens=300, counter=counter)
"""

from .categorize import CATEGORIES, Category, categorize_failure
from .detect import (
    assertion_details, digest_args, error_text, evidence_lines, exception_lines, first_error_line, is_error_result, mentioned_file,
)
from .log import FailureAnalysis, FailureLog, FailureRecord, FailureSettings, FailureWarning, WarningKind
from .render import render_failures

__all__ = [
    "Category", "CATEGORIES", "categorize_failure", "is_error_result", "error_text", "exception_lines",
    "evidence_lines", "digest_args", "first_error_line", "mentioned_file", "FailureRecord", "FailureWarning",
    "FailureAnalysis", "FailureSettings", "FailureLog", "WarningKind", "render_failures", "assertion_details",
]
