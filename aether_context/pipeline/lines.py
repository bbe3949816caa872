"""Memory's and Evidence's lines: how a ranked document is shown, and its tokens, kept by its content."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable

from ..retrieval import Document
from ..tokens import TokenCounting
from .cache import current_memo

__all__ = ["RENDERS", "date_label", "line_of"]


def date_label(ts: float | None) -> str:
    if ts is None:
        return "undated"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def _block(text: str, limit: int) -> str:
    """Multi-line text as a bullet's body: lines kept (code stays readable), continuation indented."""
    text = text.strip()
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return "\n  ".join(text.splitlines())


def render_evidence(doc: Document) -> str:
    uri = doc.metadata.get("uri", "")
    return f"- [{doc.id}] {_block(doc.text, 6000)}" + (f" ({uri})" if uri else "")


def render_memory(doc: Document) -> str:
    return f"- ({date_label(doc.timestamp)}) {_block(doc.text, 2000)}"


RENDERS: dict[str, Callable[[Document], str]] = {"evidence": render_evidence, "memory": render_memory}


def line_of(doc: Document, render: Callable[[Document], str], counter: TokenCounting, counted_by: object) -> tuple[str, int]:
    """A document's line and its tokens (`counted_by`: `counter_key(counter)`), kept by the document's content."""
    cache = current_memo()
    key = (render.__name__, doc.id, doc.text, doc.timestamp, str(doc.metadata.get("uri", "")), counted_by)
    return cache.get("line", key, lambda: _counted(render(doc), counter))


def _counted(text: str, counter: TokenCounting) -> tuple[str, int]:
    return text, counter.count_text(text)
