"""Secret redaction: well-known secret shapes masked before anything reaches the pack store.

User messages and tool outputs carry secrets (an API key pasted into the chat, a config file a
tool read, a database URL in a stack trace). Everything the store writes -- message blobs,
request heads, recorded inputs, manifests, offloaded originals -- goes through `redact` first
when `RedactionSettings.enabled` (the default). A secret becomes `[REDACTED:<kind>]`; for a
`key=value` field, a URL's password or a bearer token, the name stays and only the value is
masked, so the text still reads right.

Usage::

    text, count = redact("key sk-proj-abc...", RedactionSettings())
    value, count = redact_value({"password": "hunter2", "log": "..."}, settings)  # JSON-like data

Masking is idempotent: masked text has nothing left to mask, so records can be re-written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["RedactionSettings", "redact", "redact_value", "MASK", "SECRET_KEYS"]

MASK = "[REDACTED:{kind}]"
_NOT_MASKED = r"(?!\[REDACTED)"
# A token starts at a word boundary or right after a JSON escape ("...\\nsk-proj-..." in a dumped result).
_START = r"(?:(?<=\\[nrt])|\b)"

# Field names whose value is a secret (in JSON objects and in `name = value` / `"name": "value"` text).
SECRET_KEYS = ("password", "passwd", "passphrase", "pwd", "secret", "client_secret", "api_key", "apikey",
               "access_token", "refresh_token", "auth_token", "token_secret", "private_key",
               "secret_key", "aws_secret_access_key")


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    group: int = 0  # the group masked; 0 is the whole match
    # strings a match holds one of (case as written): a text holding none is not searched. A pattern that
    # opens with a lookbehind or a word boundary is tried at every position of the text (about 0.1 ms per
    # 3 KB each), and most texts (tool outputs, the pack's blocks) hold none of these.
    needs: tuple[str, ...] = ()


def _rules() -> tuple[_Rule, ...]:
    c = re.compile
    return (
        _Rule("private_key", c(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
                               r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s]*)")),
        _Rule("anthropic_key", c(_START + r"sk-ant-[A-Za-z0-9]{2,8}\d*-[A-Za-z0-9_\-]{20,}"), needs=("sk-ant-",)),
        _Rule("openai_key", c(_START + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}"), needs=("sk-",)),
        _Rule("google_api_key", c(_START + r"AIza[0-9A-Za-z_\-]{35}"), needs=("AIza",)),
        _Rule("aws_access_key", c(_START + r"(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA)[0-9A-Z]{16}\b"),
              needs=("AKIA", "ASIA", "ABIA", "ACCA", "AIDA", "AROA")),
        _Rule("aws_secret_key", c(r"(?i)aws.{0,24}?(?:secret|private).{0,24}?[\"']?\s*[:=]\s*[\"']?"
                                  r"([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"), 1),
        _Rule("github_token", c(_START + r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}\b|" + _START + r"github_pat_[A-Za-z0-9_]{40,}"),
              needs=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
        _Rule("slack_token", c(_START + r"xox[abposre]-[A-Za-z0-9-]{10,}|https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
              needs=("xox", "https://hooks.slack.com/services/")),
        _Rule("jwt", c(_START + r"eyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}"), needs=("eyJ",)),
        _Rule("bearer_token", c(r"(?i)" + _START + r"bearer\s+" + _NOT_MASKED + r"([A-Za-z0-9._~+/=\-]{16,})"), 1),
        _Rule("basic_auth", c(r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?basic\s+" + _NOT_MASKED
                              + r"([A-Za-z0-9+/=]{8,})"), 1),
        _Rule("url_password", c(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@\"'<>]+:" + _NOT_MASKED
                                + r"([^\s@/\"'<>]+)@"), 1),
    )


_RULES = _rules()


def _field_rule(keys: tuple[str, ...]) -> re.Pattern[str]:
    """`name = value`, `name: value`, `"name": "value"`: group 2 is the name, 4/5/6 the value."""
    names = "|".join(sorted((re.escape(k).replace("_", "[_-]?") for k in keys), key=len, reverse=True))
    return re.compile(r"(?i)([\"']?)" + _START + r"(" + names + r")\b\1(\s*[:=]\s*)(?:\"" + _NOT_MASKED + r"([^\"\n]*)\"|'"
                      + _NOT_MASKED + r"([^'\n]*)'|" + _NOT_MASKED + r"([^\s\"',;&}\]]+))")


_FIELD = _field_rule(SECRET_KEYS)


class RedactionSettings(BaseModel):
    """What the store masks before writing (profile section `redaction:`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Mask secrets in everything written to the pack store. Off: store as is.")
    builtin: bool = Field(True, description="Use the built-in secret shapes (API keys, tokens, passwords, ...).")
    patterns: tuple[str, ...] = Field((), description=(
        "Extra regular expressions; a match (or its first group, if it has one) is masked as [REDACTED:custom]."))
    keys: tuple[str, ...] = Field((), description="Extra field names whose values are secrets (case-insensitive).")

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for p in patterns:
            try:
                re.compile(p)
            except re.error as e:
                raise ValueError(f"pattern {p[:80]!r} is not a valid regular expression ({e}): fix or remove it") from None
        return patterns


@lru_cache(maxsize=64)
def _custom(patterns: tuple[str, ...]) -> tuple[_Rule, ...]:
    compiled = [re.compile(p) for p in patterns]
    return tuple(_Rule("custom", c, 1 if c.groups else 0) for c in compiled)


@lru_cache(maxsize=64)
def _secret_keys(extra: tuple[str, ...]) -> frozenset[str]:
    return frozenset(_norm(k) for k in (*SECRET_KEYS, *extra))


def _norm(key: str) -> str:
    return key.lower().replace("-", "").replace("_", "")


def _apply(rule: _Rule, text: str) -> tuple[str, int]:
    if rule.needs and not any(n in text for n in rule.needs):
        return text, 0  # no match can be in it
    count = 0

    def sub(m: re.Match[str]) -> str:
        nonlocal count
        if rule.group == 0:
            count += 1
            return MASK.format(kind=rule.kind)
        start, end = m.span(rule.group)
        if start < 0 or text.startswith("[REDACTED", start):
            return m.group(0)
        count += 1
        base = m.start(0)
        whole = m.group(0)
        return whole[:start - base] + MASK.format(kind=rule.kind) + whole[end - base:]

    return rule.pattern.sub(sub, text), count


def _fields(text: str, pattern: re.Pattern[str]) -> tuple[str, int]:
    count = 0

    def sub(m: re.Match[str]) -> str:
        nonlocal count
        for g in (4, 5, 6):
            if m.group(g):
                count += 1
                base = m.start(0)
                start, end = m.span(g)
                return m.group(0)[:start - base] + MASK.format(kind=_norm(m.group(2))) + m.group(0)[end - base:]
        return m.group(0)

    return pattern.sub(sub, text), count


def redact(text: str, settings: RedactionSettings | None = None) -> tuple[str, int]:
    """`text` with its secrets masked, and how many were masked."""
    settings = settings or RedactionSettings()
    if not settings.enabled or not text:
        return text, 0
    total = 0
    rules = (_RULES if settings.builtin else ()) + _custom(settings.patterns)
    for rule in rules:
        text, n = _apply(rule, text)
        total += n
    if settings.builtin:
        text, n = _fields(text, _FIELD)
        total += n
    if settings.keys:
        text, n = _fields(text, _extra_field_rule(settings.keys))
        total += n
    return text, total


@lru_cache(maxsize=64)
def _extra_field_rule(keys: tuple[str, ...]) -> re.Pattern[str]:
    return _field_rule(keys)


def redact_value(value: Any, settings: RedactionSettings | None = None, *, skip: frozenset[str] = frozenset(),
                 memo: Any = None) -> tuple[Any, int]:
    """JSON-like `value` with secrets masked in every string, and in every value of a secret-named
    key (`{"password": "x"}`); keys in `skip` (e.g. inline binary data) are left untouched.
    `memo` (an object with `get(text)` and `put(text, result)`) remembers strings already scanned."""
    settings = settings or RedactionSettings()
    if not settings.enabled:
        return value, 0
    keys = _secret_keys(settings.keys) if settings.builtin else frozenset(_norm(k) for k in settings.keys)
    return _walk(value, settings, keys, skip, memo)


def _walk(value: Any, settings: RedactionSettings, keys: frozenset[str], skip: frozenset[str], memo: Any) -> tuple[Any, int]:
    if isinstance(value, str):
        if memo is None or len(value) < 16:
            return redact(value, settings)
        found = memo.get(value)
        if found is None:
            found = redact(value, settings)
            memo.put(value, found)
        return found
    if isinstance(value, list):
        out, total = [], 0
        for v in value:
            v, n = _walk(v, settings, keys, skip, memo)
            out.append(v)
            total += n
        return (out, total) if total else (value, 0)
    if isinstance(value, dict):
        out_d: dict[Any, Any] = {}
        total = 0
        for k, v in value.items():
            if k in skip:
                out_d[k] = v
                continue
            if isinstance(k, str) and _norm(k) in keys and isinstance(v, (str, int, float)) and v != "" \
                    and not (isinstance(v, str) and v.startswith("[REDACTED")) and not isinstance(v, bool):
                out_d[k] = MASK.format(kind=_norm(k))
                total += 1
                continue
            v, n = _walk(v, settings, keys, skip, memo)
            out_d[k] = v
            total += n
        return (out_d, total) if total else (value, 0)
    return value, 0
