"""Evidence providers: pluggable sources of Evidence items, asked before every pack.

A provider is any callable taking an `EvidenceRequest` and returning evidence items (sync or
async), so users plug their own (a search index, a ticket system) without subclassing.

Usage::

    plugin = ContextPackPlugin(evidence_providers=[CodeContextProvider("/path/to/repo")])
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Sequence, Union

from .code import CodeContextSettings, collect_code_context, find_seed_files
from ..pipeline.collect import EvidenceItem, TaskSpec
from ..tokens import TokenCounter, TokenCounting

__all__ = ["EvidenceRequest", "EvidenceProvider", "CodeContextProvider"]


@dataclass(frozen=True)
class EvidenceRequest:
    """What a provider may look at: the task, the user request and the recent turns' text."""

    task: TaskSpec
    user_request: str
    recent_texts: tuple[str, ...]


EvidenceProvider = Callable[[EvidenceRequest], Union[Sequence[EvidenceItem], Awaitable[Sequence[EvidenceItem]]]]


class CodeContextProvider:
    """Files a coding agent is working on, and what they import (Python, JS/TS), breadth-first.

    Seeds are the files named in the task, the user request or the recent turns; imports are
    followed within the settings' depth, file-count and token limits. Results are memoised by
    their seeds, so a long tool loop does not re-read the repository on every call.
    """

    def __init__(self, root: "str | Path", settings: CodeContextSettings | None = None,
                 counter: TokenCounting | None = None):
        self.root = Path(root)
        self.settings = settings or CodeContextSettings()
        self.counter = counter or TokenCounter()
        self._cache: dict[tuple[str, ...], list[EvidenceItem]] = {}

    def __call__(self, request: EvidenceRequest) -> list[EvidenceItem]:
        texts = [request.task.goal, request.task.step, request.user_request, *request.recent_texts]
        seeds = find_seed_files([t for t in texts if t], self.root)
        if not seeds:
            return []
        if seeds not in self._cache:
            items = collect_code_context(seeds, self.root, settings=self.settings, count_tokens=self.counter.count_text)
            self._cache[seeds] = [
                EvidenceItem(id=f"code:{it.path}", summary=f"{it.path} ({it.reason}{', signatures only' if it.summarized else ''}):\n{it.text}",
                             uri=(self.root / it.path).resolve().as_uri(), source="code")
                for it in items]
            if len(self._cache) > 64:
                self._cache.pop(next(iter(self._cache)))
        return self._cache[seeds]
