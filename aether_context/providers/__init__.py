"""Evidence providers: pluggable sources of Evidence items, asked before every pack.

A provider is any callable taking an `EvidenceRequest` and returning evidence items (sync or
async), so users plug their own (a search index, a ticket system) without subclassing.

Usage::

    plugin = ContextPackPlugin(evidence_providers=[CodeContextProvider("/path/to/repo")])
"""

from __future__ import annotations

import threading

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Sequence, Union

from .code import CodeContextSettings, RepoIndex, repo_map, require_code_extra
from ..pipeline.inputs import EvidenceItem, TaskSpec
from ..tokens import TokenCounter, TokenCounting

__all__ = ["EvidenceRequest", "EvidenceProvider", "CodeContextProvider"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvidenceRequest:
    """What a provider may look at: the task, the user request and the recent turns' text."""

    task: TaskSpec
    user_request: str
    recent_texts: tuple[str, ...]


EvidenceProvider = Callable[[EvidenceRequest], Union[Sequence[EvidenceItem], Awaitable[Sequence[EvidenceItem]]]]


class CodeContextProvider:
    """A ranked map of a repository for coding agents (`providers.code`): the files the task, the request or
    the recent turns name come first, in full or as an outline, within the settings' `named_share`; then
    the files and symbols PageRank over the import graph ranks best for the task. The index is built on the
    first call and kept; results are memoised by the named files and the symbols the task mentions.
    """

    def __init__(self, root: "str | Path", settings: CodeContextSettings | None = None,
                 counter: TokenCounting | None = None):
        require_code_extra()
        self.root = Path(root)
        self.settings = settings or CodeContextSettings()
        self.counter = counter or TokenCounter()
        self._index: RepoIndex | None = None
        self._cache: dict[tuple, list[EvidenceItem]] = {}
        self._lock = threading.Lock()  # the packer asks from worker threads: one index build, one cache

    def __call__(self, request: EvidenceRequest) -> list[EvidenceItem]:
        with self._lock:
            return self._items(request)

    def _items(self, request: EvidenceRequest) -> list[EvidenceItem]:
        try:
            index = self._index = self._index or RepoIndex(self.root, self.settings)
        except OSError as e:
            logger.warning("CodeContextProvider: cannot index %s (%s); no code evidence", self.root, e)
            return []
        task = [t for t in (request.task.goal, request.task.step, request.user_request) if t]
        key = (index.named_files([*task, *request.recent_texts]), index.mentioned(task))
        if key not in self._cache:
            items = repo_map(index, task, recent_texts=request.recent_texts, count_tokens=self.counter.count_text)
            self._cache[key] = [EvidenceItem(id=f"code:{it.path}", summary=it.text, source="code",
                                             uri=(index.root / it.path).as_uri()) for it in items]
            if len(self._cache) > 64:
                self._cache.pop(next(iter(self._cache)))
        return self._cache[key]
