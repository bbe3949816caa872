"""Secret redaction: secrets masked before anything is written (store, session state, originals, logs).

User messages and tool outputs carry secrets (an API key pasted into the chat, a config file a
tool read, a database URL in a stack trace). Everything the plugin writes -- store blobs, request
heads, recorded inputs, manifests, offloaded originals, its notes and failure records in session
state -- goes through `redact` first when `RedactionSettings.enabled` (the default). A secret
becomes `[REDACTED:<kind>]`; for a `key=value` field, a URL's password or a bearer token, the name
stays and only the value is masked, so the text still reads right.

What finds secrets:
- detect-secrets' plugins (AWS, GitHub, GitLab, Slack, Stripe, JWT, private keys, Basic auth in URLs,
  npm, PyPI, SendGrid, Twilio, Azure, IBM, Discord, Telegram, its keyword detector, ...) and its Base64
  high-entropy check on quoted strings. Its Hex high-entropy check is left off: commit ids and
  content digests would be masked. Its public-IP plugin is left off: an address is not a secret.
- Our own shapes for tokens it lacks (Hugging Face `hf_`, npm `npm_`, OpenAI and Anthropic keys, Google
  `AIza`, `sk_live_`/`whsec_`), `name = value` and `"name": "value"` fields whose name ends in PASSWORD,
  SECRET, TOKEN or KEY (`DB_PASSWORD=…`, `PGPASSWORD=…`, `"SecretAccessKey": "…"`), bearer tokens,
  and free text such as "my db password is …".

Cost: linear in the text. detect-secrets' patterns are line patterns, some of them quadratic on a long
line, so each runs only on a bounded window around a literal its match must hold (`_Detector.anchors`),
and a text holding none of a rule's literals is not searched by it. A text over 2 KB finds where its literals
are in one Aho-Corasick pass (pyahocorasick) instead of a pass per literal. One regex call searches
at most 64 KB, so the interpreter lock is never held long. 1 MB of logs or JSON masks in about 0.1-0.5 s,
source code dense with `key`/`token` names in up to 2 s on a shared machine (tests/test_secrets.py).

Usage::

    text, count = redact("key sk-proj-abc...", RedactionSettings())
    value, count = redact_value({"password": "hunter2", "log": "..."}, settings)  # JSON-like data

Masking is idempotent: masked text has nothing left to mask, so records can be re-written.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["RedactionSettings", "redact", "redact_value", "MASK", "MASKED", "SECRET_KEYS"]

MASK = "[REDACTED:{kind}]"
_NOT_MASKED = r"(?!\[REDACTED)"
MASKED = re.compile(r"\[REDACTED:[A-Za-z0-9_]{1,64}\]")  # a mask `MASK` wrote (kinds are short words)
# A token starts at a word boundary or right after a JSON escape ("...\\nsk-proj-..." in a dumped result).
_START = r"(?:(?<=\\[nrt])|\b)"

# Field names whose value is a secret (in JSON objects and in `name = value` / `"name": "value"` text).
SECRET_KEYS = ("password", "passwd", "passphrase", "pwd", "secret", "client_secret", "api_key", "apikey",
               "access_token", "refresh_token", "auth_token", "token_secret", "private_key",
               "secret_key", "aws_secret_access_key")
# A name ending in one of these (after a separator, a lower-case letter for CamelCase, or upper case: DB_PASSWORD,
# PGPASSWORD, SecretAccessKey, apiToken) holds a secret...
_SECRET_SUFFIXES = ("password", "passwd", "passphrase", "passcode", "secret", "token", "key", "pwd")
# ... except these names ending in KEY or TOKEN, which name ordinary values.
_ORDINARY_NAMES = frozenset({
    "key", "publickey", "pubkey", "primarykey", "foreignkey", "sortkey", "partitionkey", "cachekey", "objectkey",
    "rowkey", "idempotencykey", "dedupkey", "dedupekey", "dedupkey", "lookupkey", "hashkey", "rangekey", "sshpublickey",
    "uniquekey", "indexkey", "groupkey", "routingkey", "shardkey", "mapkey", "dictkey", "statekey", "eventkey",
    "messagekey", "sessionkey", "cursorkey", "pagekey", "jsonkey", "datakey", "keykey", "hotkey", "monkey", "turkey",
    "donkey", "whiskey", "jockey", "hockey", "lackey", "storagekey", "itemkey", "recordkey", "sourcekey", "cellkey",
    "nexttoken", "pagetoken", "nextpagetoken", "continuationtoken", "maxtoken", "stoptoken", "eostoken", "bostoken",
    "padtoken", "unktoken", "septoken", "clstoken", "masktoken", "tokentoken", "cancellationtoken", "synctoken",
})
_ORDINARY_VALUES = frozenset({"true", "false", "null", "none", "nil", "undefined", "required", "optional", "string",
                              "str", "int", "bool", "", "***", "xxx", "changeme", "env", "secret", "password"})


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    group: int = 0  # the group masked; 0 is the whole match
    # strings a match holds one of (case as written): a text holding none is not searched. A pattern that
    # opens with a lookbehind or a word boundary is tried at every position of the text (about 0.1 ms per
    # 3 KB each), and most texts (tool outputs, the pack's blocks) hold none of these.
    needs: tuple[str, ...] = ()
    before: int = 8  # characters before a literal of `needs` a match can start at
    after: int = 256  # characters after it a match can end at


def _rules() -> tuple[_Rule, ...]:
    c = re.compile
    return (
        _Rule("private_key", c(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
                               r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s]*)"),
              needs=("PRIVATE KEY",), before=64, after=65536),
        _Rule("anthropic_key", c(_START + r"sk-ant-[A-Za-z0-9]{2,8}\d*-[A-Za-z0-9_\-]{20,}"), needs=("sk-ant-",)),
        _Rule("openai_key", c(_START + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}"), needs=("sk-",)),
        _Rule("stripe_key", c(_START + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|" + _START + r"whsec_[A-Za-z0-9]{24,}"),
              needs=("k_live_", "k_test_", "whsec_")),
        _Rule("huggingface_token", c(_START + r"hf_[A-Za-z0-9]{30,}"), needs=("hf_",)),
        _Rule("npm_token", c(_START + r"npm_[A-Za-z0-9]{30,}"), needs=("npm_",)),
        _Rule("gitlab_token", c(_START + r"gl(?:pat|dt|rt|cbt|ptt|ft|imt|agent|oas|soat)-[A-Za-z0-9_\-]{20,}"),
              needs=("gl",)),
        _Rule("google_api_key", c(_START + r"AIza[0-9A-Za-z_\-]{35}"), needs=("AIza",)),
        _Rule("aws_access_key", c(_START + r"(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA)[0-9A-Z]{16}\b"),
              needs=("AKIA", "ASIA", "ABIA", "ACCA", "AIDA", "AROA")),
        _Rule("aws_secret_key", c(r"(?i)aws.{0,24}?(?:secret|private).{0,24}?[\"']?\s*[:=]\s*[\"']?"
                                  r"([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"), 1, needs=("aws", "AWS", "Aws"), before=0),
        _Rule("github_token", c(_START + r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}\b|" + _START + r"github_pat_[A-Za-z0-9_]{40,}"),
              needs=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
        _Rule("slack_token", c(_START + r"xox[abposre]-[A-Za-z0-9-]{10,}|https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
              needs=("xox", "https://hooks.slack.com/services/")),
        _Rule("jwt", c(_START + r"eyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}"), needs=("eyJ",), after=8192),
        _Rule("bearer_token", c(r"(?i)" + _START + r"bearer\s+" + _NOT_MASKED + r"([A-Za-z0-9._~+/=\-]{16,})"), 1,
              needs=("bearer", "Bearer", "BEARER"), after=8192),
        _Rule("basic_auth", c(r"(?i)" + _START + r"authorization[\"']?\s*[:=]\s*[\"']?basic\s+" + _NOT_MASKED
                              + r"([A-Za-z0-9+/=]{8,})"), 1, needs=("uthorization", "UTHORIZATION"), before=4, after=8192),
        _Rule("url_password", c(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@\"'<>]+:" + _NOT_MASKED
                                + r"([^\s@/\"'<>]+)@"), 1, needs=("://",), before=64, after=1024),
    )


_RULES = _rules()

# "my db password is hunter2", "the API key was: abc123..." -- the value must look like a credential
_FREE_TEXT = re.compile(
    r"(?i)\b(pass(?:word|phrase|code)|pwd|secret|token|api[ _-]?key|access[ _-]?key|secret[ _-]?key)"
    r"\s+(?:is|was|=|:)\s*:?\s*[\"'`]?" + _NOT_MASKED + r"([^\s\"'`<>]{3,200})")
_FREE_TEXT_WORDS = frozenset({
    "the", "a", "an", "that", "this", "not", "wrong", "incorrect", "correct", "required", "missing", "empty", "set",
    "invalid", "expired", "too", "being", "still", "now", "also", "stored", "saved", "valid", "needed", "unknown",
    "changed", "reset", "in", "on", "at", "for", "from", "to", "and", "or", "of", "with", "by", "used", "same",
    "different", "null", "none", "blank", "hidden", "masked", "redacted", "secret", "strong", "weak", "short",
    "long", "ok", "fine", "good", "bad", "revoked", "rotated", "there", "here", "what", "which", "where", "shown",
    "sent", "given", "only", "just", "it", "my", "your", "our", "their", "its", "his", "her", "no", "yes",
})
# `name = value`, `name: value`, `"name": "value"` for names ending in a secret word: group 1 the word, 2 a quote
# closing the name, then the value in 3 ("..."), 4 ('...') or 5 (bare). The name's start is found backwards in
# Python (a pattern opening with `[\w-]*` would be tried at every position of every word).
_SUFFIX_FIELD = re.compile(
    r"(?i)(" + "|".join(_SECRET_SUFFIXES) + r")(\\*[\"']?)(\s*(?::=|=>|[:=])\s*)(?:\\*\"" + _NOT_MASKED
    + r"([^\"\\\n]*)\\*\"|'" + _NOT_MASKED + r"([^'\n]*)'|" + _NOT_MASKED + r"([^\s\"',;&}\]\\]+))")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")


def _field_rule(keys: tuple[str, ...]) -> re.Pattern[str]:
    """`name = value`, `name: value`, `"name": "value"`: group 2 is the name, 4/5/6 the value."""
    names = "|".join(sorted((re.escape(k).replace("_", "[_-]?") for k in keys), key=len, reverse=True))
    return re.compile(r"(?i)([\"']?)" + _START + r"(" + names + r")\b(?:\1|\\*[\"'])(\s*[:=]\s*)(?:\\*\""
                      + _NOT_MASKED + r"([^\"\\\n]*)\\*\"|'" + _NOT_MASKED + r"([^'\n]*)'|" + _NOT_MASKED
                      + r"([^\s\"',;&}\]\\]+))")


_FIELD = _field_rule(SECRET_KEYS)


def _kind_of(secret_type: str) -> str:
    return {"JSON Web Token": "jwt", "Secret Keyword": "secret_keyword", "Base64 High Entropy String": "high_entropy",
            "Basic Auth Credentials": "url_password"}.get(
        secret_type, re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_"))


_WINDOW = 400  # characters searched on each side of an anchor
_LONGEST = 200  # an anchor this close to the end of the last window is given a window of its own
_KEYWORDS = ("pass", "pwd", "secret", "token", "key", "contrase")
_FREE_TEXT_ANCHORS = ("pass", "pwd", "secret", "token", "key")


@dataclass(frozen=True)
class _Detector:
    """One detect-secrets plugin, run line by line (its patterns are line patterns, some quadratic on a
    long line: a line is cut into overlapping pieces of at most 2 x `_WINDOW`) on the windows around the
    literals its matches hold (`anchors`, lower case)."""
    kind: str
    plugin: Any
    anchors: tuple[str, ...]  # () searches the whole text
    assignment: bool = False  # only anchors followed by `=`, `:` or `(` (a keyword being assigned) open a window
    before: int = 16
    after: int = 256


@lru_cache(maxsize=1)
def _detectors() -> tuple[_Detector, ...]:
    """detect-secrets' plugins with the literals each one's match holds (its own patterns, its own checks)."""
    from detect_secrets.plugins import (artifactory, aws, azure_storage_key, basic_auth, cloudant,
                                        github_token, gitlab_token, ibm_cloud_iam, ibm_cos_hmac, jwt, keyword,
                                        mailchimp, npm, openai, private_key, pypi_token, sendgrid, slack, softlayer,
                                        square_oauth, stripe, twilio)
    anchors = (
        (artifactory.ArtifactoryDetector, ("akc",)),  # its "AP…" password shape matches ordinary words
        (aws.AWSKeyDetector, ("a3t", "abia", "acca", "akia", "asia", "aws")),
        (azure_storage_key.AzureStorageKeyDetector, ("accountkey=",)),
        (basic_auth.BasicAuthDetector, ("://",)),
        (cloudant.CloudantDetector, _KEYWORDS),
        (github_token.GitHubTokenDetector, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
        (gitlab_token.GitLabTokenDetector, ("gl", "gr1348941")),
        (ibm_cloud_iam.IbmCloudIamDetector, _KEYWORDS),
        (ibm_cos_hmac.IbmCosHmacDetector, _KEYWORDS),
        (jwt.JwtTokenDetector, ("eyj",)),
        (keyword.KeywordDetector, _KEYWORDS),
        (mailchimp.MailchimpDetector, ("-us",)),
        (npm.NpmDetector, ("_authtoken",)),
        (openai.OpenAIDetector, ("t3blbkfj",)),
        (private_key.PrivateKeyDetector, ("private key", "putty-user-key")),
        (pypi_token.PypiTokenDetector, ("pypi-",)),
        (sendgrid.SendGridDetector, ("sg.",)),
        (slack.SlackDetector, ("xox", "hooks.slack.com")),
        (softlayer.SoftlayerDetector, ("sl", "softlayer")),
        (square_oauth.SquareOAuthDetector, ("sq0csp-",)),
        (stripe.StripeDetector, ("k_live_",)),
        (twilio.TwilioKeyDetector, ()),  # its patterns open with a literal: searched whole, fast
    )
    # Left out: Discord's and Telegram's bot tokens hold no literal to search for (a pattern that opens with a
    # character class is tried at every position: 25-60 ms a MB each), public IPs are not secrets, and the Hex
    # high-entropy check would mask every commit id and digest.
    reach = {jwt.JwtTokenDetector: (8, 4096), private_key.PrivateKeyDetector: (64, 64),
             basic_auth.BasicAuthDetector: (8, 400), aws.AWSKeyDetector: (8, 120)}
    return tuple(_Detector(_kind_of(cls.secret_type), cls(), anchor, anchor is _KEYWORDS,
                           *reach.get(cls, (40, 160) if anchor is _KEYWORDS else (16, 256))) for cls, anchor in anchors)


@lru_cache(maxsize=1)
def _entropy() -> Any:
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    plugin = Base64HighEntropyString()
    # the plugin's own pattern (a quoted run of its characters), held to the lengths checked
    return plugin, re.compile(r"(['\"])([" + re.escape(plugin.charset) + r"]{20,1000})\1")


_Span = tuple[int, int, str]
_CHUNK = 65536  # one regex call searches at most this much: `re` holds the interpreter lock for a whole call
_KEYWORD_BUDGET = 65536  # characters of keyword windows given to detect-secrets' keyword plugins per text
_INDEXED = 2048  # a text this long finds its anchors in one pass (`_chunks_holding`); a shorter one, each alone
_DENSE = 256  # anchor occurrences in a chunk past which the pass stops listing them: the chunk is searched whole
_ASSIGNED = re.compile(r"[\w.\-]{0,40}[\]'\"`\\]{0,6}\s{0,8}(?:[:=(!]|\.assign)")


def _chunks(ranges: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """`ranges` cut into pieces of at most `_CHUNK` characters that overlap by `_LONGEST`."""
    for lo, hi in ranges:
        while hi - lo > _CHUNK:
            yield lo, lo + _CHUNK
            lo += _CHUNK - _LONGEST
        yield lo, hi


def _values_at(plugin: Any, text: str, a: int, b: int) -> Iterator[tuple[int, int]]:
    """Spans in text[a:b] of the values `plugin` reports there."""
    piece = text[a:b]
    for value in set(plugin.analyze_string(piece)):
        if len(value) < 4 or value.startswith("[REDACTED"):
            continue
        at = piece.find(value)
        while at >= 0:
            yield a + at, a + at + len(value)
            at = piece.find(value, at + len(value))


@lru_cache(maxsize=1)
def _anchor_words() -> frozenset[str]:
    """Every anchor literal the built-in shapes search for (lower case)."""
    words = {n.lower() for r in _RULES for n in r.needs} | {a for d in _detectors() for a in d.anchors}
    return frozenset({*words, *_FIELD_ANCHORS, *_SECRET_SUFFIXES, *_KEYWORDS, *_FREE_TEXT_ANCHORS})


@lru_cache(maxsize=1)
def _automaton() -> Any:
    """An Aho-Corasick automaton (pyahocorasick) of `_anchor_words`."""
    import ahocorasick

    automaton = ahocorasick.Automaton()
    for word in _anchor_words():
        automaton.add_word(word, word)
    automaton.make_automaton()
    return automaton


def _chunks_holding(low: str) -> dict[str, set[int]]:
    """Per anchor literal, the `_CHUNK`-aligned chunks of `low` where one of its occurrences starts, in one pass of
    the automaton (instead of one pass of the text per literal). A chunk with more than `_DENSE` occurrences is
    listed under "" instead: every literal is looked for there."""
    automaton = _automaton()
    longest = max(map(len, _anchor_words()))
    found: dict[str, set[int]] = {"": set()}
    n = len(low)
    for chunk, lo in enumerate(range(0, n, _CHUNK)):
        hi = min(n, lo + _CHUNK)
        hits = 0
        for end, word in automaton.iter(low[lo:hi + longest - 1]):  # a slice: `iter` reads its whole argument
            if end - len(word) + 1 >= _CHUNK:
                continue  # starts in the next chunk, which finds it itself
            found.setdefault(word, set()).add(chunk)
            hits += 1
            if hits > _DENSE:
                found[""].add(chunk)
                break
    return found


def _find(low: str, lit: str, start: int) -> int:
    """`low.find(lit, start)`, searched `_CHUNK` characters at a time: one `find` over a huge text holds the
    interpreter lock (and so the event loop) for its whole length."""
    n = len(low)
    while start < n:
        at = low.find(lit, start, min(n, start + _CHUNK + len(lit) - 1))
        if at >= 0:
            return at
        start += _CHUNK
    return -1


def _find_in(low: str, lit: str, chunks: list[int], members: set[int], start: int) -> int:
    """`low.find(lit, start)`, searched only in `chunks` (sorted; `members` the same as a set)."""
    n = len(low)
    chunk = start // _CHUNK
    if chunk in members:  # the usual case in a text dense with `lit`: the next one is close
        at = low.find(lit, start, min(n, (chunk + 1) * _CHUNK + len(lit) - 1))
        if at >= 0:
            return at
    for chunk in itertools.islice(chunks, bisect.bisect_right(chunks, chunk), None):
        at = low.find(lit, chunk * _CHUNK, min(n, (chunk + 1) * _CHUNK + len(lit) - 1))
        if at >= 0:
            return at
    return -1


def _lower(text: str) -> str:
    """`text` in lower case, position for position: a character whose lower case is longer ('İ') stays as it is.
    Such a text is lowered a chunk at a time, character by character only in the chunks that hold one."""
    low = text.lower()
    if len(low) == len(text):
        return low
    out = []
    for lo in range(0, len(text), _CHUNK):
        piece = text[lo:lo + _CHUNK]
        low = piece.lower()
        out.append(low if len(low) == len(piece) else "".join(ch if len(ch.lower()) != 1 else ch.lower() for ch in piece))
    return "".join(out)


class _Text:
    """A text and, per anchor literal, the windows around its occurrences (found in the lower-case text)."""

    def __init__(self, text: str):
        self.text = text
        self.low = _lower(text)
        self._windows: dict[tuple[str, ...], list[tuple[int, int]]] = {}
        # where each literal can be, from one pass on the first search (a search per literal costs a pass each)
        self._holding: dict[str, set[int]] | None = None
        self._sorted: dict[str, tuple[list[int], set[int]] | None] = {}

    def _listed(self, lit: str) -> tuple[list[int], set[int]] | None:
        """The chunks that may hold `lit` (sorted, and as a set); None when it is searched everywhere (not indexed,
        or in most chunks)."""
        if lit not in self._sorted:
            if len(self.low) < _INDEXED:
                return None
            if self._holding is None:
                self._holding = _chunks_holding(self.low)
            chunks = self._holding.get(lit, set()) | self._holding[""] if lit in _anchor_words() else None
            # absent, or in at most half the chunks; else a plain search is faster
            sparse = chunks is not None and (not chunks or 2 * len(chunks) <= len(self.low) // _CHUNK)
            self._sorted[lit] = (sorted(chunks), chunks) if sparse else None
        return self._sorted[lit]

    def windows(self, anchors: tuple[str, ...], assignment: bool = False, before: int = _WINDOW,
                after: int = _WINDOW) -> list[tuple[int, int]]:
        """Disjoint (lo, hi) ranges holding every occurrence of an anchor with `before` characters before it and
        at least `after` after it (with `assignment`, only occurrences followed by `=`, `:` or `(` after the rest
        of their word). An occurrence inside the range of the one before is not looked at again."""
        if not anchors:
            return [(0, len(self.text))]
        key = (anchors, assignment, before, after)
        found = self._windows.get(key)
        if found is not None:
            return found
        low, n = self.low, len(self.low)
        ranges: list[tuple[int, int]] = []
        for lit in anchors:
            listed = self._listed(lit)  # None: searched everywhere
            find = (functools.partial(_find, low, lit) if listed is None
                    else functools.partial(_find_in, low, lit, *listed))
            at = find(0)
            while at >= 0:
                if assignment and _ASSIGNED.match(low, at + len(lit)) is None:
                    at = find(at + 1)
                    continue
                lo, hi = max(0, at - before), min(n, at + len(lit) + after + max(after // 2, 64))
                ranges.append((lo, hi))
                at = find(max(at + 1, hi - after - len(lit)))
        ranges.sort()
        merged: list[tuple[int, int]] = []
        for lo, hi in ranges:
            if merged and lo <= merged[-1][1]:
                if hi > merged[-1][1]:
                    merged[-1] = (merged[-1][0], hi)
            else:
                merged.append((lo, hi))
        self._windows[key] = merged
        return merged


def _rule_spans(rule: _Rule, t: _Text) -> Iterator[_Span]:
    if not rule.needs:
        ranges = [(0, len(t.text))]
    else:
        ranges = t.windows(tuple(dict.fromkeys(n.lower() for n in rule.needs)), before=rule.before, after=rule.after)
    for lo, hi in _chunks(ranges):
        for m in rule.pattern.finditer(t.text, lo, hi):
            start, end = m.span(rule.group)
            if start >= 0 and end > start:
                yield start, end, rule.kind


def _pieces(text: str, lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """The lines of text[lo:hi], a long line cut into overlapping pieces of at most 2 x `_WINDOW`."""
    start = lo
    while start < hi:
        end = text.find("\n", start, hi)
        end = hi if end < 0 else end
        piece = start
        while True:
            stop = min(end, piece + 2 * _WINDOW)
            yield piece, stop
            if stop >= end:
                break
            piece = stop - _LONGEST
        start = end + 1


def _detector_spans(det: _Detector, t: _Text) -> Iterator[_Span]:
    text = t.text
    if not det.anchors:
        for a, b in _chunks([(0, len(text))]):
            for m in _values_at(det.plugin, text, a, b):
                yield m[0], m[1], det.kind
        return
    budget = _KEYWORD_BUDGET if det.assignment else len(text)
    for lo, hi in t.windows(det.anchors, det.assignment, det.before, det.after):
        budget -= hi - lo
        if budget < 0:
            return  # a text dense with keywords: our own field rules go on covering it
        for a, b in _pieces(text, lo, hi):
            for start, end in _values_at(det.plugin, text, a, b):
                yield start, end, det.kind


def _entropy_spans(t: _Text) -> Iterator[_Span]:
    """detect-secrets' Base64 high-entropy check on quoted strings of 20 to 1,000 characters holding a digit."""
    text = t.text
    if '"' not in text and "'" not in text:
        return
    plugin, quoted = _entropy()
    for lo, hi in _chunks([(0, len(text))]):
        if text.find('"', lo, hi) < 0 and text.find("'", lo, hi) < 0:
            continue  # a match opens with a quote (a scan for one byte is far cheaper than the pattern's)
        for m in quoted.finditer(text, lo, hi):
            value = m.group(2)
            if any(ch.isdigit() for ch in value) and plugin.calculate_shannon_entropy(value) > plugin.entropy_limit:
                yield m.start(2), m.end(2), "high_entropy"


def _is_secret_name(text: str, m: re.Match[str]) -> bool:
    """Whether the name ending in the secret word `m.group(1)` names a secret (DB_PASSWORD, apiKey)."""
    start = m.start(1)
    begin = start
    while begin > 0 and start - begin < 64 and text[begin - 1] in _NAME_CHARS:
        begin -= 1
    name = text[begin:m.end(1)]
    norm = _norm(name).replace(".", "")
    if norm in _ORDINARY_NAMES or (begin > 0 and text[begin - 1].isalnum()):
        return False
    word = m.group(1)
    if word.lower() not in ("key", "token") or start == begin:
        return word.lower() != "key"  # a bare `key:` names anything
    before = text[start - 1]
    # DB_KEY, api-key, apiKey, APIKEY, SecretAccessKey: a separator, CamelCase or upper case; not "monkey"
    return before in "_-." or word[0].isupper() and (before.islower() or word.isupper() and before.isupper())


_SUFFIX_AT_END = re.compile(r"(?i)(" + "|".join(_SECRET_SUFFIXES) + r")$")


@lru_cache(maxsize=4096)
def _secret_field(name: str) -> bool:
    """Whether a field named `name` holds a secret by its ending (DB_PASSWORD, SecretAccessKey, apiToken)."""
    m = _SUFFIX_AT_END.search(name)
    return m is not None and all(ch in _NAME_CHARS for ch in name) and _is_secret_name(name, m)


def _suffix_spans(t: _Text) -> Iterator[_Span]:
    text = t.text
    for lo, hi in _chunks(t.windows(_SECRET_SUFFIXES, True, 8, 320)):
        for m in _SUFFIX_FIELD.finditer(text, lo, hi):
            for g in (4, 5, 6):
                value = m.group(g)
                if value is not None:
                    break
            else:
                continue
            if value.strip().lower() in _ORDINARY_VALUES or not _is_secret_name(text, m):
                continue
            yield m.start(g), m.end(g), _norm(m.group(1))


def _free_text_spans(t: _Text) -> Iterator[_Span]:
    text = t.text
    for lo, hi in _chunks(t.windows(_FREE_TEXT_ANCHORS, False, 8, 240)):
        for m in _FREE_TEXT.finditer(text, lo, hi):
            value = m.group(2).rstrip(".,;:!?)")
            word = m.group(1).lower()
            if value.lower() in _FREE_TEXT_WORDS or not value:
                continue
            password = word.startswith("pass") or word == "pwd"
            if password or any(ch.isdigit() for ch in value) or len(value) >= 16 or not value.isalpha():
                yield m.start(2), m.start(2) + len(value), "password" if password else _norm(word)


def _field_spans(t: _Text, pattern: re.Pattern[str], anchors: tuple[str, ...]) -> Iterator[_Span]:
    for lo, hi in _chunks(t.windows(anchors, True, 80, 320)):
        for m in pattern.finditer(t.text, lo, hi):
            for g in (4, 5, 6):
                if m.group(g):
                    yield m.start(g), m.end(g), _norm(m.group(2))
                    break


def _key_anchors(keys: tuple[str, ...]) -> tuple[str, ...]:
    """Literals a `_field_rule` match holds: each key's longest piece between separators."""
    return tuple(dict.fromkeys(max(re.split(r"[_\-]", k.lower()), key=len) for k in keys))


_FIELD_ANCHORS = _key_anchors(SECRET_KEYS)


@lru_cache(maxsize=1)
def _anchors() -> re.Pattern[str]:
    """Every literal a built-in shape's search opens on (lower case), and the quotes of the entropy check."""
    words = {n.lower() for r in _RULES for n in r.needs} | {a for d in _detectors() for a in d.anchors}
    words |= {*_FIELD_ANCHORS, *_SECRET_SUFFIXES, *_KEYWORDS, '"', "'"}
    return re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))


def _may_hold(t: _Text) -> bool:
    """False when no built-in shape can match: a short text holding none of their literals (each would find no
    window; Twilio's keys open with AC or SK). Long texts are searched as they are."""
    return len(t.text) > 4096 or "AC" in t.text or "SK" in t.text or _anchors().search(t.low) is not None


def _spans(text: str, settings: "RedactionSettings") -> list[_Span]:
    t = _Text(text)
    spans: list[_Span] = []
    if settings.builtin and _may_hold(t):
        for rule in _RULES:
            spans.extend(_rule_spans(rule, t))
        spans.extend(_field_spans(t, _FIELD, _FIELD_ANCHORS))
        spans.extend(_suffix_spans(t))
        spans.extend(_free_text_spans(t))
        for det in _detectors():
            spans.extend(_detector_spans(det, t))
        if settings.entropy:
            spans.extend(_entropy_spans(t))
    for rule in _custom(settings.patterns):
        spans.extend(_rule_spans(rule, t))
    if settings.keys:
        spans.extend(_field_spans(t, _extra_field_rule(settings.keys), _key_anchors(settings.keys)))
    return spans


def _masked_regions(text: str) -> tuple[list[int], list[int]]:
    if "[REDACTED:" not in text:
        return [], []
    found = [m.span() for m in MASKED.finditer(text)]
    return [s for s, _ in found], [e for _, e in found]


class RedactionSettings(BaseModel):
    """What the store masks before writing (profile section `redaction:`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Mask secrets in everything written to the pack store. Off: store as is.")
    builtin: bool = Field(True, description="Use the built-in secret shapes (API keys, tokens, passwords, ...).")
    patterns: tuple[str, ...] = Field((), description=(
        "Extra regular expressions; a match (or its first group, if it has one) is masked as [REDACTED:custom]."))
    keys: tuple[str, ...] = Field((), description="Extra field names whose values are secrets (case-insensitive).")
    entropy: bool = Field(True, description=(
        "Also mask quoted strings of high entropy (detect-secrets' Base64 check: 20+ characters with a digit)."))
    originals: bool = Field(True, description=(
        "Mask offloaded originals too. Off: a text original is saved as the tool returned it (the pack and "
        "the store still mask what they quote); for tools whose exact output must be recalled."))

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


@lru_cache(maxsize=8192)
def _secret_key(key: str, keys: frozenset[str]) -> bool:
    return _norm(key) in keys


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


def redact(text: str, settings: RedactionSettings | None = None) -> tuple[str, int]:
    """`text` with its secrets masked, and how many were masked."""
    settings = settings or RedactionSettings()
    if not settings.enabled or not text:
        return text, 0
    spans = _spans(text, settings)
    if not spans:
        return text, 0
    starts, ends = _masked_regions(text)
    spans.sort(key=lambda s: (s[0], -s[1]))
    out: list[str] = []
    pos = count = 0
    for start, end, kind in spans:
        if start < pos:
            if end > pos and out and out[-1].startswith("[REDACTED:"):
                pos = end  # overlaps the previous mask: it grows
            continue
        i = bisect.bisect_right(starts, end - 1) - 1  # an earlier mask overlapping this span: already masked
        if i >= 0 and ends[i] > start:
            continue
        out.append(text[pos:start])
        out.append(MASK.format(kind=kind))
        pos = end
        count += 1
    out.append(text[pos:])
    return "".join(out), count


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
        if memo is None or not value:
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
            if isinstance(k, str) and (_secret_key(k, keys) and isinstance(v, (str, int, float))
                                       or settings.builtin and isinstance(v, str) and _secret_field(k)) and v != "" \
                    and not (isinstance(v, str) and v.startswith("[REDACTED")) and not isinstance(v, bool):
                out_d[k] = MASK.format(kind=_norm(k))
                total += 1
                continue
            v, n = _walk(v, settings, keys, skip, memo)
            out_d[k] = v
            total += n
        return (out_d, total) if total else (value, 0)
    return value, 0


# ------------------------------------------------------------------------------------------------
# logs: the package's own log records are masked as they are made
# ------------------------------------------------------------------------------------------------

_LOG_PREFIX = "aether_context"


def _mask_record(record: logging.LogRecord) -> None:
    """Mask a record's message and its traceback text in place (default settings: logs have no profile)."""
    try:
        message, n = redact(record.getMessage())
        if n:
            record.msg, record.args = message, ()
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            text, n = redact(logging.Formatter().formatException(record.exc_info))
            if n:
                record.exc_text = text
    except Exception:  # a record we cannot format is left as it is: the handler reports it
        return


class _MaskingRecordFactory:
    """Wraps the process's log record factory: records of `aether_context.*` loggers are masked; others untouched."""

    def __init__(self, inner: Any):
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.inner(*args, **kwargs)
        if record.name.startswith(_LOG_PREFIX):
            _mask_record(record)
        return record


def _install_log_masking() -> None:
    factory = logging.getLogRecordFactory()
    if not isinstance(factory, _MaskingRecordFactory):
        logging.setLogRecordFactory(_MaskingRecordFactory(factory))


_install_log_masking()
