"""The "FAILURES SO FAR" section: warnings first, then the latest failures of distinct kinds."""

from __future__ import annotations

import re
from typing import Sequence

from ...tokens import TokenCounting
from .log import FailureAnalysis, FailureRecord

__all__ = ["render_failures"]

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
        if r.details:  # the assertion details, whole, under their line
            line += "".join(f"\n    {d}" for d in r.details)
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
        first, nl, details = line.partition("\n")  # the link ends the failure's own line, before its details
        with_link = first + link + nl + details
        if link and counter.count_text("\n".join([header, *linked[:k], with_link, *linked[k + 1:]])) <= max_tokens:
            linked[k] = with_link
    return "\n".join([header, *linked])
