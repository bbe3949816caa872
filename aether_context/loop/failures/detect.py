"""Failure detection: whether a tool result failed, and the lines that say why.

Deliberately conservative: prose or file contents that merely mention "error" are not failures;
only explicit fields, an exit code, an opening error line, a traceback that ends in an exception, or
a test run that reports failures count. The lines themselves are recognised by
`aether_context.compress.error_lines`, the one definition shared with compression and folding.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ...compress.error_lines import (
    EXCEPTION_LINE, FRAME_FILE, decisive_exception, decisive_index, decisive_lines, failure_line_indices,
    mentions_error, noise_indices, opens_with_error, run_counts, strip_ansi, traceback_ends,
)
from ...content import canonical_json, sha256_hex
from .categorize import categorize_failure, match_patterns

__all__ = ["is_error_result", "error_text", "exception_lines", "evidence_lines", "first_error_line", "mentioned_file",
           "digest_args", "assertion_details"]

_ERROR_KEYS = ("error", "errors", "exception", "error_message", "stderr_error")
_ERROR_STATUS = {"error", "failed", "failure", "fail", "exception", "errored"}
_CODE_KEYS = ("returncode", "return_code", "exit_code", "exitcode", "exitCode", "exit_status")
_HTTP_KEYS = ("status_code", "http_status", "statusCode")
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_OUTPUT = re.compile(r"<output>(.*?)(?:</output>|$)", re.DOTALL)

def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text_is_error(text: str) -> bool:
    stripped = text.strip()
    if not stripped:
        return False
    m = _RETURNCODE.search(stripped)
    if m:
        code = int(m.group(1))
        body = _OUTPUT.search(stripped)
        output = (body.group(1) if body else stripped[m.end():]).strip()
        if code == 0:  # the shell succeeded, but a program inside it may have crashed or failed its tests
            return _output_failed(output)
        # grep/diff convention: exit 1 with no output means "no match", not a failure.
        return bool(output) and (code != 1 or _has_error_evidence(output))
    if stripped[0] in "{[":
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return _dict_is_error(parsed)
    lines = [ln.strip() for ln in strip_ansi(stripped).splitlines() if ln.strip()]
    if opens_with_error(lines[0]):
        return True
    first_exc = EXCEPTION_LINE.match(lines[0])
    if first_exc and (first_exc.group(2) or len(lines) == 1):
        return True
    return _output_failed(stripped)


def _output_failed(output: str) -> bool:
    """A crash (a traceback ended by its exception) or a test run that reports failures or errors.

    Pytest piped through `tail`, or `cmd; echo done`, exits 0 while a test failed: the output decides.
    """
    lines = strip_ansi(output).splitlines()
    finals, _ = traceback_ends(lines)
    if finals:
        return True
    counts = run_counts(output)
    return counts is not None and counts.failed


def _has_error_evidence(output: str) -> bool:
    return mentions_error(output) or categorize_failure(output) != "unknown"


def _dict_is_error(payload: Mapping[str, Any], depth: int = 0) -> bool:
    for key in _ERROR_KEYS:
        if payload.get(key) not in (None, False, "", [], {}, 0):
            return True
    for key in ("status", "state", "outcome"):
        value = payload.get(key)
        if isinstance(value, str) and value.strip().lower() in _ERROR_STATUS:
            return True
    if payload.get("success") is False or payload.get("ok") is False:
        return True
    codes = [payload[k] for k in _CODE_KEYS if _is_int(payload.get(k))]
    if codes:  # an explicit exit code decides; exit 1 with no output at all is grep/diff saying "no match"
        said = any(isinstance(payload.get(k), str) and payload[k].strip() for k in ("stdout", "stderr", "output"))
        return codes[0] != 0 and (codes[0] != 1 or said)
    if any(isinstance(payload.get(k), int) and payload[k] >= 400 for k in _HTTP_KEYS):
        return True
    if depth < 2:  # ADK wraps plain tool returns as {"result": ...}
        for key in ("result", "output", "response"):
            value = payload.get(key)
            if isinstance(value, Mapping) and _dict_is_error(value, depth + 1):
                return True
            if isinstance(value, str) and _text_is_error(value):
                return True
    return False


def is_error_result(payload: Mapping[str, Any] | str) -> bool:
    """Whether a tool result looks like a failure: error keys, error status, nonzero exit, error text.

    Deliberately conservative: prose or file contents that merely mention "error" are not failures;
    only the first line, a traceback that ends in an exception, or explicit fields count.
    """
    if isinstance(payload, str):
        return _text_is_error(payload)
    return _dict_is_error(payload)


_TEXT_KEYS = ("error", "errors", "exception", "error_message", "message", "detail", "stderr", "output", "stdout",
              "result", "response")


def error_text(payload: Mapping[str, Any] | str) -> str:
    """The plain text of a tool result for error analysis: its message fields with their real line
    breaks (JSON would escape them and hide every traceback line), then any exit or HTTP code."""
    if isinstance(payload, str):
        return payload
    parts: list[str] = []

    def walk(value: Any, depth: int) -> None:
        if isinstance(value, str):
            if value.strip():
                parts.append(value)
        elif isinstance(value, Mapping) and depth < 3:
            for key in _TEXT_KEYS:
                if key in value:
                    walk(value[key], depth + 1)
            for key in (*_CODE_KEYS, *_HTTP_KEYS):
                if _is_int(value.get(key)):
                    parts.append(f"{key}: {value[key]}")
        elif isinstance(value, (list, tuple)) and depth < 3:
            for item in value[:20]:
                walk(item, depth + 1)

    walk(payload, 0)
    return "\n".join(parts) if parts else canonical_json(payload)


def _clip_chars(text: str, max_chars: int) -> str:
    """The first `max_chars` characters kept whole, so a clipped line still starts verbatim (only a line
    longer than `max_chars`, a dumped value, is ever cut)."""
    return text if len(text) <= max_chars else text[:max_chars] + "…"


def evidence_lines(text: str, max_chars: int = 200) -> list[str]:
    """Every distinct failure or exception line, in order, warnings and banners left out: what a failure
    record keeps beside its message (a chained traceback's causes, the other failing tests, the counts)."""
    lines = strip_ansi(text).splitlines()
    keep = set(failure_line_indices(lines)) | {i for i, ln in enumerate(lines) if EXCEPTION_LINE.match(ln)}
    keep -= noise_indices(lines)
    seen: dict[str, None] = {}
    for i in sorted(keep):
        seen.setdefault(_clip_chars(lines[i].strip(), max_chars), None)
    return list(seen)


def exception_lines(text: str, max_chars: int = 200) -> list[str]:
    """Every distinct exception line, in order (a chained traceback names its causes first)."""
    seen: dict[str, None] = {}
    for line in strip_ansi(text).splitlines():
        if EXCEPTION_LINE.match(line):
            seen.setdefault(_clip_chars(re.sub(r"^\s*(?:E\s+)?", "", line).strip(), max_chars), None)
    return list(seen)


_BOILERPLATE = re.compile(r"^(?:<returncode>.*|<output>|</output>|<warning>.*|traceback \(most recent call last\):|"
                          r"file \".*\", line \d+.*|during handling of the above exception.*|"
                          r"the above exception was the direct cause.*|[=\-_*~^ ]+)$", re.IGNORECASE)
_PATH = re.compile(r"(?:(?<=[\s'\"(=:])|^)((?:\.{0,2}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.(?:py|pyi|js|jsx|ts|tsx|mjs|cjs|"
                   r"json|ya?ml|toml|cfg|ini|txt|md|rst|sh|c|h|cc|cpp|hpp|go|rs|java|rb|html|css|sql|csv))\b")
_PATH_ARG_KEYS = ("path", "file", "file_path", "filepath", "filename", "target", "source")


def digest_args(args: Mapping[str, Any] | None) -> str:
    """A short stable digest of tool arguments, so identical retries are recognised."""
    return sha256_hex(canonical_json(dict(args or {})))[:12]


def assertion_details(text: str, max_chars: int = 2_000) -> list[str]:
    """The `E` lines under the decisive line (`error_lines.decisive_lines`), whole, as printed."""
    return [_clip_chars(line, max_chars) for line in decisive_lines(text)[1:]]


def first_error_line(text: str, max_chars: int = 2_000) -> str:
    """The most telling line, as printed (colour codes removed, pytest's `E` kept): the decisive line
    (`error_lines.decisive_index`), else a failure line (the last one naming an exception, else the
    first), else the decisive exception, else the first line naming an error. Warnings, test-session
    banners and environment notes are never chosen while anything else is there."""
    text = strip_ansi(text)
    all_lines = text.splitlines()
    at = decisive_index(all_lines)
    if at is not None:
        return _clip_chars(all_lines[at].strip(), max_chars)
    failures = [all_lines[i].strip() for i in failure_line_indices(all_lines)]
    noise = noise_indices(all_lines)
    lines = [ln.strip() for i, ln in enumerate(all_lines)
             if i not in noise and ln.strip() and not _BOILERPLATE.match(ln.strip())]
    chosen = ""
    decisive = decisive_exception(text)
    if failures:
        chosen = next((ln for ln in reversed(failures) if EXCEPTION_LINE.match(ln)), failures[0])
    elif decisive is not None:
        name, message = decisive
        chosen = next((ln for ln in reversed(lines) if name in ln), f"{name}: {message}")
    else:
        chosen = next((ln for ln in lines if mentions_error(ln) or match_patterns(ln)), lines[0] if lines else "")
    return _clip_chars(chosen, max_chars)


def mentioned_file(text: str, args: Mapping[str, Any] | None = None) -> str | None:
    """A file the failure is about: a path argument, else one named in the error, else the last frame."""
    for key in _PATH_ARG_KEYS:
        value = (args or {}).get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    decisive_line = first_error_line(text, max_chars=10_000)
    for source in (decisive_line, text):
        m = _PATH.search(source)
        if m:
            return m.group(1)
    frames = FRAME_FILE.findall(text)
    return frames[-1] if frames else None
