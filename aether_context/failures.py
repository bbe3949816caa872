"""Failure evidence: recognise failed tool calls, remember them, and warn before they repeat.

Why: agents in long sessions retry the same broken action, chase a cascade of errors that share one
root cause, or keep hitting the same class of problem. A short "FAILURES SO FAR" section in the
Context Pack, built from a bounded log, lets the model see that pattern instead of rediscovering it.

Everything here is pure: `FailureLog` is a small bounded container that serialises to JSON so it can
live in ADK session state, and `analyze` / `render_failures` return new values.

Usage::

    log = FailureLog()
    if is_error_result(result):
        log.add(turn=7, tool="bash", args={"command": "pytest"}, error_text=str(result))
    text = render_failures(log.analyze(current_turn=8), log.records, max_tokens=300, counter=counter)
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter, deque
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, Mapping, Sequence, get_args

from pydantic import BaseModel, ConfigDict, Field

from .content import canonical_json, sha256_hex
from .tokens import TokenCounting

__all__ = [
    "Category", "CATEGORIES", "categorize_failure", "is_error_result", "error_text", "exception_lines", "digest_args",
    "first_error_line",
    "mentioned_file", "FailureRecord", "FailureWarning", "FailureAnalysis", "FailureSettings", "FailureLog",
    "render_failures",
]

logger = logging.getLogger(__name__)

Category = Literal[
    "permission", "not_found", "syntax", "type", "runtime", "network", "timeout", "validation", "logic",
    "resource", "unknown",
]
CATEGORIES: tuple[str, ...] = get_args(Category)
WarningKind = Literal["repeat", "systemic", "cascade", "cluster"]
_KIND_ORDER = {"repeat": 0, "systemic": 1, "cascade": 2, "cluster": 3}

# --- categorisation -------------------------------------------------------------------------------
#
# The decisive exception (the last "SomethingError: message" line, i.e. the one a chained traceback
# ends with) is classified by its class name first, then by its message; plain text falls back to
# ordered patterns. Decision on runtime vs logic: `runtime` is an unexpected exception raised while
# executing (RuntimeError, KeyError, IndexError, ZeroDivisionError, NameError, an unmapped traceback);
# `logic` is a check about the *outcome* that failed (AssertionError, failing tests, "expected X got
# Y", patches that do not apply) — the code ran, the agent's model of it is wrong.

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

_EXC_LINE = re.compile(
    r"^\s*(?:E\s+|FAILED \S+ - )?(?:[A-Za-z_][\w]*\.)*"
    r"([A-Za-z_]\w*?(?:Error|Exception|Exit|Timeout|Failure|NotFound|Forbidden|Exhausted|Expired|"
    r"Exceeded|DoesNotExist|gaierror))\b(?::\s*(.*))?$"
)
_FRAME = re.compile(r"File \"([^\"]+)\", line \d+")
_FRAME_LINE = re.compile(r"\s+" + _FRAME.pattern)  # a traceback frame as Python prints it (indented)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TEST_TOOL = re.compile(r"test|pytest|jest|unittest", re.IGNORECASE)


def _decisive_exception(text: str) -> tuple[str, str] | None:
    """(class name, message) of the last exception line, the one a (chained) traceback ends with."""
    found = None
    for line in _ANSI.sub("", text).splitlines():
        m = _EXC_LINE.match(line)
        if m:
            found = (m.group(1), (m.group(2) or "").strip())
    return found


def _match_patterns(text: str) -> str | None:
    for cat, rx in _PATTERNS:
        if rx.search(text):
            return cat
    return None


def categorize_failure(text: str, tool_name: str | None = None) -> Category:
    """The failure category of an error text; `tool_name` only breaks ties (a test tool → logic)."""
    text = _ANSI.sub("", text)
    decisive = _decisive_exception(text)
    category: str | None = None
    if decisive is not None:
        name, message = decisive
        category = _EXCEPTIONS.get(name) or _match_patterns(message)
    if category is None:
        category = _match_patterns(text)
    if category is None and tool_name and _TEST_TOOL.search(tool_name) and text.strip():
        category = "logic"
    return category or "unknown"  # type: ignore[return-value]


# --- error shape detection --------------------------------------------------------------------------

_ERROR_KEYS = ("error", "errors", "exception", "error_message", "stderr_error")
_ERROR_STATUS = {"error", "failed", "failure", "fail", "exception", "errored"}
_CODE_KEYS = ("returncode", "return_code", "exit_code", "exitcode", "exitCode", "exit_status")
_HTTP_KEYS = ("status_code", "http_status", "statusCode")
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_OUTPUT = re.compile(r"<output>(.*?)(?:</output>|$)", re.DOTALL)
_ERROR_PREFIX = re.compile(
    r"^(?:error|fatal|exception|err!)\b\s*[:!\-]|^npm err!|^traceback \(most recent call last\)|"
    r"^(?:http(?:/[\d.]+)?\s+)?[45]\d\d\s+[a-z]|^(?:the )?command timed out|"
    r"^segmentation fault|^killed$|\(core dumped\)|"
    r"^[a-z][\w.-]*: (?:line \d+: )?.*(?:command not found|no such file|permission denied|"
    r"can't read|cannot access|not found|could not|couldn't|cannot|can't|unable to|\bfailed\b|\berror\b|"
    r"\bdenied\b|\binvalid\b|unrecognized|unterminated)",
    re.IGNORECASE,
)
_TEST_SUMMARY = re.compile(r"\b\d+ (?:failed|errors?)\b.* in [\d.]+s\b|^FAILED \(", re.IGNORECASE)
_ERROR_WORD = re.compile(r"\berror\b|\bfail(?:ed|ure)?\b|traceback|exception", re.IGNORECASE)


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
        if code == 0:  # the shell succeeded, but a program inside it may have crashed (`cmd; echo done`)
            return _ends_in_traceback(output)
        # grep/diff convention: exit 1 with no output means "no match", not a failure.
        return bool(output) and (code != 1 or _has_error_evidence(output))
    if stripped[0] in "{[":
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return _dict_is_error(parsed)
    lines = [ln.strip() for ln in _ANSI.sub("", stripped).splitlines() if ln.strip()]
    if _ERROR_PREFIX.search(lines[0]):
        return True
    first_exc = _EXC_LINE.match(lines[0])
    if first_exc and (first_exc.group(2) or len(lines) == 1):
        return True
    tracebackish = "Traceback (most recent call last):" in stripped or _FRAME.search(stripped) is not None
    if tracebackish and _EXC_LINE.match(lines[-1]):
        return True
    return bool(_TEST_SUMMARY.search(lines[-1]))


def _ends_in_traceback(text: str) -> bool:
    """A Python traceback whose exception line follows it: a crash, whatever the exit code said.

    Some programs print the crash without the `Traceback` header (Sphinx: "Exception occurred:" then
    the frames): a `File "...", line N` frame followed by an exception line counts too.
    """
    at = text.rfind("Traceback (most recent call last):")
    if at >= 0:
        return any(_EXC_LINE.match(ln) for ln in _ANSI.sub("", text[at:]).splitlines()[1:])
    # No header: the last indented frame line, then (past its indented source and caret lines) the first
    # unindented line must be the exception. A frame quoted in prose or code is not followed by one.
    lines = _ANSI.sub("", text).splitlines()
    last = max((i for i, ln in enumerate(lines) if _FRAME_LINE.match(ln)), default=None)
    if last is None:
        return False
    after = next((ln for ln in lines[last + 1:] if ln.strip() and not ln[0].isspace()), "")
    return _EXC_LINE.match(after) is not None


def _has_error_evidence(output: str) -> bool:
    return bool(_ERROR_WORD.search(output)) or categorize_failure(output) != "unknown"


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
    """The first `max_chars` characters kept whole, so a clipped line still starts verbatim."""
    return text if len(text) <= max_chars else text[:max_chars] + "…"


def exception_lines(text: str, max_chars: int = 200) -> list[str]:
    """Every distinct exception line, in order (a chained traceback names its causes first)."""
    seen: dict[str, None] = {}
    for line in _ANSI.sub("", text).splitlines():
        if _EXC_LINE.match(line):
            seen.setdefault(_clip_chars(re.sub(r"^\s*(?:E\s+)?", "", line).strip(), max_chars), None)
    return list(seen)


# --- records ----------------------------------------------------------------------------------------

_BOILERPLATE = re.compile(r"^(?:<returncode>.*|<output>|</output>|<warning>.*|traceback \(most recent call last\):|"
                          r"file \".*\", line \d+.*|during handling of the above exception.*|"
                          r"the above exception was the direct cause.*|[=\-_*~^ ]+)$", re.IGNORECASE)
_PATH = re.compile(r"(?:(?<=[\s'\"(=:])|^)((?:\.{0,2}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.(?:py|pyi|js|jsx|ts|tsx|mjs|cjs|"
                   r"json|ya?ml|toml|cfg|ini|txt|md|rst|sh|c|h|cc|cpp|hpp|go|rs|java|rb|html|css|sql|csv))\b")
_PATH_ARG_KEYS = ("path", "file", "file_path", "filepath", "filename", "target", "source")


def digest_args(args: Mapping[str, Any] | None) -> str:
    """A short stable digest of tool arguments, so identical retries are recognised."""
    return sha256_hex(canonical_json(dict(args or {})))[:12]


def first_error_line(text: str, max_chars: int = 200) -> str:
    """The most telling line: the decisive exception, else the first line naming an error."""
    text = _ANSI.sub("", text)
    decisive = _decisive_exception(text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not _BOILERPLATE.match(ln.strip())]
    chosen = ""
    if decisive is not None:
        name, message = decisive
        chosen = next((ln for ln in reversed(lines) if name in ln), f"{name}: {message}")
    else:
        for ln in lines:
            if _ERROR_WORD.search(ln) or _match_patterns(ln):
                chosen = ln
                break
        else:
            chosen = lines[0] if lines else ""
    chosen = re.sub(r"^E\s{2,}", "", chosen)  # pytest's error-line marker
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
    frames = _FRAME.findall(text)
    return frames[-1] if frames else None


@dataclass(frozen=True)
class FailureRecord:
    """One failed tool call, reduced to what helps the next model call avoid it."""

    turn: int
    tool: str
    args_digest: str
    category: Category
    message: str
    file: str | None = None
    uri: str | None = None
    timestamp: float | None = None
    causes: tuple[str, ...] = ()  # the other exception lines of the same output (chained causes), nearest last

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["causes"] = list(self.causes)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FailureRecord":
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["causes"] = tuple(values.get("causes") or ())
        return cls(**values)


@dataclass(frozen=True)
class FailureWarning:
    """A pattern across failures worth telling the model about (rendered first)."""

    kind: WarningKind
    message: str
    count: int
    turns: tuple[int, ...]
    tool: str | None = None
    category: Category | None = None
    file: str | None = None


@dataclass(frozen=True)
class FailureAnalysis:
    """The warnings for one model call; `evicted` counts failures dropped from the bounded log."""

    current_turn: int
    total_failures: int
    evicted: int
    warnings: tuple[FailureWarning, ...] = ()


class FailureSettings(BaseModel):
    """Thresholds for failure tracking; defaults follow what helps agents in practice."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_records: int = Field(50, ge=1, description="Failures kept; the oldest are evicted (and counted).")
    repeat_threshold: int = Field(3, ge=2, description="Warn when the same tool + arguments failed this often.")
    cluster_threshold: int = Field(5, ge=2, description="Warn when this many recent failures share a category.")
    cluster_window: int = Field(10, ge=2, description="How many most recent failures a cluster is looked for in.")
    cascade_window_turns: int = Field(2, ge=0, description="Max turn gap between links of a cascade.")
    cascade_min_downstream: int = Field(2, ge=1, description="Failures after the root needed to call it a cascade.")
    systemic_threshold: int = Field(3, ge=2, description="Distinct turns in which one tool + category must fail.")
    stale_after_turns: int = Field(20, ge=1, description="Patterns whose last failure is older than this are dropped.")
    message_max_chars: int = Field(200, ge=20, description="Clip stored error lines to this many characters.")
    max_causes: int = Field(2, ge=0, description="Other exception lines of a chained traceback kept with a failure.")


class FailureLog:
    """Bounded, JSON-serialisable log of failures (oldest evicted first, evictions counted)."""

    def __init__(self, settings: FailureSettings | None = None, records: Sequence[FailureRecord] = (),
                 evicted: int = 0):
        self.settings = settings or FailureSettings()
        self._records: deque[FailureRecord] = deque()
        self.evicted = evicted
        for record in records:
            self.add_record(record)

    @property
    def records(self) -> tuple[FailureRecord, ...]:
        return tuple(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def add_record(self, record: FailureRecord) -> FailureRecord:
        self._records.append(record)
        while len(self._records) > self.settings.max_records:
            dropped = self._records.popleft()
            self.evicted += 1
            logger.debug("failure log full: evicted turn %d %s", dropped.turn, dropped.tool)
        return record

    def add(self, *, turn: int, tool: str, args: Mapping[str, Any] | None, error_text: str,
            uri: str | None = None, timestamp: float | None = None, category: Category | None = None) -> FailureRecord:
        """Record a failure from its raw error text; categorises it unless `category` is given."""
        message = first_error_line(error_text, self.settings.message_max_chars)
        causes = [ln for ln in exception_lines(error_text, self.settings.message_max_chars) if ln != message]
        record = FailureRecord(
            turn=turn, tool=tool, args_digest=digest_args(args),
            category=category or categorize_failure(error_text, tool), message=message,
            file=mentioned_file(error_text, args), uri=uri, timestamp=timestamp,
            causes=tuple(causes[-self.settings.max_causes:]) if self.settings.max_causes else (),
        )
        logger.debug("failure at turn %d: %s [%s] %s", turn, tool, record.category, record.message)
        return self.add_record(record)

    def analyze(self, current_turn: int) -> FailureAnalysis:
        """Repeats, systemic tool+category failures, cascades and category clusters that are still live."""
        return FailureAnalysis(current_turn=current_turn, total_failures=len(self._records) + self.evicted,
                               evicted=self.evicted,
                               warnings=_analyze(self.records, current_turn, self.settings))

    def to_json(self) -> dict[str, Any]:
        return {"settings": self.settings.model_dump(), "evicted": self.evicted,
                "records": [r.to_json() for r in self._records]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FailureLog":
        return cls(FailureSettings(**data.get("settings", {})),
                   [FailureRecord.from_json(r) for r in data.get("records", [])], int(data.get("evicted", 0)))


# --- analysis -----------------------------------------------------------------------------------------

def _analyze(records: tuple[FailureRecord, ...], current_turn: int, s: FailureSettings) -> tuple[FailureWarning, ...]:
    live = current_turn - s.stale_after_turns
    warnings: list[FailureWarning] = []

    actions: dict[tuple[str, str], list[FailureRecord]] = {}
    for r in records:
        actions.setdefault((r.tool, r.args_digest), []).append(r)
    for (tool, _digest), rs in actions.items():
        if len(rs) >= s.repeat_threshold and rs[-1].turn >= live:
            last = rs[-1]
            warnings.append(FailureWarning(
                "repeat", f"{tool} failed {len(rs)}x with the same arguments ({last.category}: {last.message}) "
                          "— do not retry it unchanged", len(rs), tuple(r.turn for r in rs), tool, last.category,
                last.file))

    systemic: dict[tuple[str, str], list[FailureRecord]] = {}
    for r in records:
        systemic.setdefault((r.tool, r.category), []).append(r)
    for (tool, category), rs in systemic.items():
        turns = sorted({r.turn for r in rs})
        if len(turns) >= s.systemic_threshold and len({r.args_digest for r in rs}) > 1 and turns[-1] >= live:
            warnings.append(FailureWarning(
                "systemic", f"{tool} keeps failing with {category} errors across {len(turns)} turns "
                            "— the approach, not the arguments, is the problem", len(rs), tuple(turns), tool,
                category))  # type: ignore[arg-type]

    warnings.extend(_cascades(records, live, s))

    recent = records[-s.cluster_window:]
    for category, count in sorted(Counter(r.category for r in recent).items()):
        if count >= s.cluster_threshold and category != "unknown":
            rs = [r for r in recent if r.category == category]
            if rs[-1].turn >= live:
                warnings.append(FailureWarning(
                    "cluster", f"{count} of the last {len(recent)} failures are {category} errors",
                    count, tuple(r.turn for r in rs), category=category))  # type: ignore[arg-type]

    warnings.sort(key=lambda w: (_KIND_ORDER[w.kind], -max(w.turns), w.tool or "", w.category or "", w.message))
    return tuple(warnings)


def _cascades(records: tuple[FailureRecord, ...], live: int, s: FailureSettings) -> list[FailureWarning]:
    """Chains of failures close in turns that share the root's category or a file with the chain."""
    ordered = sorted(range(len(records)), key=lambda i: (records[i].turn, i))
    used: set[int] = set()
    found: list[FailureWarning] = []
    for pos, root_i in enumerate(ordered):
        if root_i in used:
            continue
        root = records[root_i]
        chain = [root_i]
        files = {root.file} - {None}
        for j in ordered[pos + 1:]:
            r = records[j]
            if j in used:
                continue
            if r.turn - records[chain[-1]].turn > s.cascade_window_turns:
                break
            if r.category == root.category or (r.file is not None and r.file in files):
                chain.append(j)
                if r.file:
                    files.add(r.file)
        members = [records[i] for i in chain]
        single_action = len({(m.tool, m.args_digest) for m in members}) == 1  # that is a repeat, not a cascade
        if len(chain) - 1 >= s.cascade_min_downstream and not single_action and members[-1].turn >= live:
            used.update(chain)
            where = f" around {root.file}" if root.file else ""
            found.append(FailureWarning(
                "cascade", f"{len(chain)} related failures{where} since turn {root.turn}; root cause: "
                           f"{root.tool} [{root.category}] {root.message} — fix that first",
                len(chain), tuple(m.turn for m in members), root.tool, root.category, root.file))
    return found


# --- rendering ------------------------------------------------------------------------------------------

_PROGRESS = re.compile(r"(?<!\S)[.EFsxXw]{3,}(?!\S)")  # a test runner's progress marks: `..E..F.s`
_NUMBER = re.compile(r"\d+")


def _message_kind(message: str) -> str:
    """A failure message without its numbers and test-progress marks.

    Test runners print progress lines (`...E..F [FAIL]`) that change on every run, and the same error
    recurs with other line numbers: such failures say the same thing, and one should not crowd out a
    different error. Names, quoted values and paths stay: `No module named 'np'` and `'pd'` differ.
    """
    return " ".join(_NUMBER.sub("#", _PROGRESS.sub(" ", message)).split())


def render_failures(analysis: FailureAnalysis, records: Sequence[FailureRecord], *, max_tokens: int,
                    counter: TokenCounting, max_recent: int = 8) -> str:
    """A compact "FAILURES SO FAR" section: warnings first, then the latest failures of distinct kinds.

    Lines are added in that order while the whole stays within `max_tokens`; the first line that does
    not fit ends the section. Each failure's URI (its original output) is then added, newest first,
    while the cap allows: more distinct errors before more links, since every original also stays
    named where the output itself was folded. Returns "" when there is nothing to say or not even
    the header fits.
    """
    if not records and not analysis.warnings:
        return ""
    header = f"FAILURES SO FAR ({analysis.total_failures} total"
    header += f", {analysis.evicted} older dropped)" if analysis.evicted else ")"
    if counter.count_text(header) > max_tokens:
        return ""
    seen: set[tuple] = set()
    recent: list[tuple[str, str]] = []  # (line, its URI suffix)
    for r in reversed(records):
        key = (r.tool, r.category, _message_kind(r.message))
        if key in seen:
            continue
        seen.add(key)
        line = f"- turn {r.turn} {r.tool} [{r.category}] {r.message}"
        if r.causes:
            line += f" (after: {'; '.join(r.causes)})"
        if r.file and r.file not in r.message:
            line += f" (file: {r.file})"
        recent.append((line, f" <{r.uri}>" if r.uri else ""))
        if len(recent) >= max_recent:
            break
    candidates = [(f"! {w.message}", "") for w in analysis.warnings] + recent
    lines = [header]
    kept: list[tuple[str, str]] = []
    for line, link in candidates:
        if counter.count_text("\n".join([*lines, line])) > max_tokens:
            break
        lines.append(line)
        kept.append((line, link))
    if not kept:
        return ""
    linked = [line for line, _ in kept]
    for k, (line, link) in enumerate(kept):  # warnings have no link; failures newest first
        if link and counter.count_text("\n".join([header, *linked[:k], line + link, *linked[k + 1:]])) <= max_tokens:
            linked[k] = line + link
    return "\n".join([header, *linked])
