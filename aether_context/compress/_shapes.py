"""Recognising the shape of a tool output: commands, file reads, search results, JSON records.

Shared by the compressors and by history folding, so a tool output is read the same way whether
it is shrunk in place or folded into one line later.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..content import canonical_json

_WRAPPER_KEYS = ("result", "output", "response", "content")
_MAX_JSON_PARSE = 4_000_000  # characters; bigger strings stay text rather than cost a parse

RETURNCODE_KEYS = ("returncode", "exit_code", "exitcode", "return_code", "exit_status")
PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "target_file")
CONTENT_KEYS = ("content", "contents", "lines", "text", "data", "file_content")
RESULT_LIST_KEYS = ("results", "items", "hits", "documents", "organic_results", "search_results", "data")
TITLE_KEYS = ("title", "name", "headline")
URL_KEYS = ("url", "link", "href", "source", "uri")
SNIPPET_KEYS = ("snippet", "description", "content", "text", "summary", "body")
_SEARCH_FIELDS = frozenset({"title", "snippet", "url", "link", "href", "description"})

_COMMAND_WORDS = frozenset({"bash", "sh", "shell", "terminal", "exec", "execute", "command", "cmd", "subprocess"})
_FILE_VERBS = frozenset({"cat", "view", "read", "open", "show", "get"})
_SEARCH_WORDS = frozenset({"search", "retrieve", "websearch", "googlesearch"})


def normalize_payload(payload: Any) -> Any:
    """Unwrap ADK's `{"result": x}` and MCP's `{"content": [{"type": "text"}]}` envelopes; parse JSON text."""
    payload = _unwrap_mcp(payload)
    while isinstance(payload, Mapping) and len(payload) == 1:
        (key, value), = payload.items()
        if key not in _WRAPPER_KEYS or not isinstance(value, (str, list, dict)):
            break
        payload = value
    if isinstance(payload, str):
        stripped = payload.strip()
        if stripped[:1] in ("{", "[") and len(stripped) <= _MAX_JSON_PARSE:
            try:
                parsed = json.loads(stripped)
            except ValueError:
                return payload
            if isinstance(parsed, (dict, list)):
                return normalize_payload(parsed)  # JSON text may hold another envelope
    return payload


def _unwrap_mcp(payload: Any) -> Any:
    if not isinstance(payload, Mapping) or not isinstance(payload.get("content"), list):
        return payload
    blocks = payload["content"]
    if not blocks or not all(isinstance(b, Mapping) and b.get("type") == "text" for b in blocks):
        return payload
    if not set(payload) <= {"content", "isError", "structuredContent", "_meta"}:
        return payload
    text = "\n".join(str(b.get("text", "")) for b in blocks)
    return {"error": text} if payload.get("isError") else text


def name_words(tool_name: str) -> frozenset[str]:
    """`run_shell_command` -> {run, shell, command}; `readFile` -> {read, file}."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", tool_name)
    return frozenset(w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w)


def is_command_name(tool_name: str) -> bool:
    return bool(name_words(tool_name) & _COMMAND_WORDS)


def is_file_read_name(tool_name: str) -> bool:
    words = name_words(tool_name)
    if not words & _FILE_VERBS:
        return False
    return len(words) == 1 or bool(words & {"file", "files"})


def is_search_name(tool_name: str) -> bool:
    return bool(name_words(tool_name) & _SEARCH_WORDS)


def first_value(record: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = record.get(key)
        if value not in (None, "", [], {}):
            return value
    return None


def search_results(payload: Any, *, by_name: bool) -> list[Mapping[str, Any]] | None:
    """The result records of a search-shaped payload, or None when it is not one."""
    candidates: list[Any] = []
    if isinstance(payload, list):
        candidates.append(payload)
    elif isinstance(payload, Mapping):
        candidates.extend(payload[k] for k in RESULT_LIST_KEYS if isinstance(payload.get(k), list))
    need = 1 if by_name else 2
    for items in candidates:
        records = [r for r in items if isinstance(r, Mapping)]
        if not items:
            if by_name and isinstance(payload, Mapping):
                return []
            continue
        hits = sum(1 for r in records if len(_SEARCH_FIELDS & r.keys()) >= need)
        if hits and hits * 2 >= len(items):
            return records
    return None


def is_file_read_shape(payload: Any) -> bool:
    return isinstance(payload, Mapping) and first_value(payload, PATH_KEYS) is not None and any(
        k in payload for k in CONTENT_KEYS
    )


def file_content(payload: Any) -> str:
    if isinstance(payload, str):
        return payload
    if isinstance(payload, Mapping):
        for key in CONTENT_KEYS:
            value = payload.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, list):
                return "\n".join(v if isinstance(v, str) else canonical_json(v) for v in value)
    return canonical_json(payload)


def file_path(payload: Any, args: Mapping[str, Any] | None) -> str | None:
    for source in (payload, args):
        if isinstance(source, Mapping):
            value = first_value(source, PATH_KEYS)
            if isinstance(value, str):
                return value
    return None


# ---- commands ------------------------------------------------------------------------------------

_RETURNCODE_RE = re.compile(r"^\s*<returncode>\s*(-?\d+)\s*</returncode>")
_WARNING_RE = re.compile(r"<warning>.*?</warning>\s*", re.S)
_ELIDED_RE = re.compile(r"<elided_chars>\s*(.*?)\s*</elided_chars>", re.S)
_OUTPUT_TAG_RE = re.compile(r"</?output(?:_head|_tail)?>\n?")


@dataclass(frozen=True)
class CommandOutput:
    """A command's result: exit code (None when unknown) and its labelled output streams."""

    exit_code: int | None
    streams: tuple[tuple[str, str], ...]
    command: str | None = None
    note: str | None = None


def is_command_shape(payload: Any) -> bool:
    if isinstance(payload, str):
        return _RETURNCODE_RE.match(payload) is not None
    return isinstance(payload, Mapping) and any(k in payload for k in (*RETURNCODE_KEYS, "stdout", "stderr"))


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def parse_command(payload: Any) -> CommandOutput:
    """Read mini-swe-agent text (`<returncode>N</returncode><output>…`), a result dict or raw text."""
    if isinstance(payload, Mapping):
        code = next((_as_int(payload[k]) for k in RETURNCODE_KEYS if k in payload), None)
        streams = []
        for label in ("stdout", "output", "stderr"):
            value = payload.get(label)
            if value not in (None, ""):
                streams.append((label, value if isinstance(value, str) else canonical_json(value)))
        command = payload.get("command") or payload.get("cmd")
        return CommandOutput(code, tuple(streams), command if isinstance(command, str) else None)
    text = payload if isinstance(payload, str) else canonical_json(payload)
    match = _RETURNCODE_RE.match(text)
    if not match:
        return CommandOutput(None, (("output", text),))
    rest = text[match.end():]
    note = "output was already cut by the tool" if _WARNING_RE.search(rest) or "<elided_chars>" in rest else None
    rest = _WARNING_RE.sub("", rest)
    rest = _ELIDED_RE.sub(lambda m: f"…[{m.group(1)}]…", rest)
    rest = _OUTPUT_TAG_RE.sub("", rest).strip("\n")
    return CommandOutput(int(match.group(1)), (("output", rest),) if rest else (), None, note)


_DIFF_HEADER_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)")
_HUNK_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


def diff_headers(lines: list[str]) -> dict[int, int]:
    """`diff --git` header line index -> the number of hunks (`@@ ... @@`) of that file."""
    headers: dict[int, int] = {}
    current: int | None = None
    for i, line in enumerate(lines):
        if _DIFF_HEADER_RE.match(line):
            current = i
            headers[i] = 0
        elif current is not None and _HUNK_RE.match(line):
            headers[current] += 1
    return headers


def diff_files(text: str) -> list[str]:
    """The files a unified git diff changes, in order (the `b/` side; the `a/` side when deleted)."""
    files = []
    for line in text.splitlines():
        m = _DIFF_HEADER_RE.match(line)
        if m:
            files.append(m.group(2))
    return files


def is_offload_envelope(payload: Any) -> bool:
    """The compact replacement of an offloaded tool result: its compressed text and the original's URI."""
    return (isinstance(payload, Mapping) and isinstance(payload.get("summary"), str)
            and isinstance(payload.get("artifact_uri"), str))


def error_summary(payload: Any) -> str | None:
    """The first line of an error carried by a JSON-shaped result (`{"error": ...}`), if any."""
    if not isinstance(payload, Mapping):
        return None
    for key in ("error", "errors", "exception", "traceback", "error_message"):
        value = payload.get(key)
        if value not in (None, "", [], {}, False):
            text = value if isinstance(value, str) else canonical_json(value)
            return first_line(text) or key
    status = payload.get("status")
    if isinstance(status, str) and status.lower() in ("error", "failed", "failure"):
        message = payload.get("message")
        return first_line(message) if isinstance(message, str) and message.strip() else status
    return None


def first_line(text: str) -> str:
    """The first non-blank line, stripped."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


# ---- JSON records --------------------------------------------------------------------------------

_STATUS_KEYS = ("error", "errors", "exception", "status", "state", "success", "ok", "code", "message")
_IDENTITY_KEYS = frozenset({"id", "name", "title", "type", "kind", "key", "uuid"})
_LONG_TEXT = 160  # characters: free text this long is shown after the structure, not before it


def key_tier(key: str, value: Any) -> int:
    """0 status/error, 1 identity, 2 other scalars, 3 containers, 4 long free text."""
    lowered = key.lower()
    if isinstance(value, str) and len(value) > _LONG_TEXT and lowered not in ("error", "message", "exception"):
        return 4
    if lowered in _STATUS_KEYS:
        return 0
    if lowered in _IDENTITY_KEYS or lowered.endswith(("_id", "_name", "_number", "_code")) or lowered.endswith("id"):
        return 1 if not isinstance(value, (dict, list)) else 3
    return 3 if isinstance(value, (dict, list)) else 2


def ordered_keys(record: Mapping[str, Any]) -> list[str]:
    """Keys in display order: by tier, status keys in a fixed order, the rest alphabetically."""

    def order(key: str) -> tuple:
        lowered = key.lower()
        status = _STATUS_KEYS.index(lowered) if lowered in _STATUS_KEYS else len(_STATUS_KEYS)
        return (key_tier(key, record[key]), status, key)

    return sorted((str(k) for k in record), key=order)
