"""Memory's and Evidence's lines: how a ranked document is shown, and its tokens, kept by its content.

Why apart from `select`: a new user turn's first call ranks Memory for a new question, and most of the lines
it then shows were never rendered and counted before (about 30 of 44 at 10,000 events, 1–2 ms). Their
documents are known before that call (the pool its search will rank, guessed by the work ahead:
`Retriever.ahead_query`), so the work ahead renders and counts them into the same `PackCache` entries.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Mapping, Sequence

from ..redact import RedactionSettings
from ..retrieval import Document
from ..tokens import TokenCounting
from .cache import PackCache, counter_key
from .fit import shorten_caps, shortened
from .render import masking, quote

__all__ = ["RENDERS", "date_label", "line_of", "ahead_lines"]


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


def line_of(doc: Document, render: Callable[[Document], str], counter: TokenCounting, counted_by: object,
            cache: PackCache) -> tuple[str, int]:
    """A document's line and its tokens (`counted_by`: `counter_key(counter)`), kept by the document's content."""
    key = (render.__name__, doc.id, doc.text, doc.timestamp, str(doc.metadata.get("uri", "")), counted_by)
    return cache.get("line", key, lambda: _counted(render(doc), counter))


def _counted(text: str, counter: TokenCounting) -> tuple[str, int]:
    return text, counter.count_text(text)


def ahead_lines(layer: str, documents: Sequence[Document], *, counter: TokenCounting, cache: PackCache,
                item_max_tokens: Mapping[str, int], redaction: RedactionSettings | None = None) -> None:
    """Work ahead: the lines of `layer`'s documents a call is about to rank, and the shortened forms `fit` cuts
    the long ones to when the layer is over its budget (`item_max_tokens`: per layer), so the call finds them;
    with `redaction` (the profile's), each masked as the payload will quote it (`render.quote`, kept by its text)."""
    render, counted_by = RENDERS[layer], counter_key(counter)
    caps = shorten_caps(item_max_tokens[layer])
    forms = []
    for doc in documents:
        text, tokens = line_of(doc, render, counter, counted_by, cache)
        forms.append(text)
        for cap in caps:  # as `fit.fit_lines` shortens: to the item cap, then what that left to half of it
            if tokens > cap:
                text = shortened(text, str(doc.metadata.get("uri", "")), cap, counter)
                tokens = counter.count_text(text)
                forms.append(text)
    if redaction is not None and redaction.enabled:
        with masking(redaction):
            for text in forms:
                quote(text)
