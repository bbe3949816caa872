"""Rank an agent's tool declarations against the step, without a model call.

An agent with many tools (MCP servers bring 100+) pays for every declaration on every call. When no step
list names the tools, the declarations (name, description, parameter names and descriptions) are ranked
with the project's BM25 index against the request, goal, step and recent turns, and raised by their
neighbours in the declaration order (ADK declares an agent's tools in its order, a toolset's together).
The best `keep` are declared, then more while the declared JSON stays within `share` of all of it, with
the tools that must always be (ADK's own, the recall tool, those already called). The kept ones keep the
request's order, and a later call of the same invocation keeps the same set (plus any tool called
meanwhile), so the cached prefix holds.

Pure and deterministic: typed in, typed out.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Sequence

import numpy as np

from ..content import ToolSpec
from ..retrieval.analyzer import Analyzer
from ..retrieval.lexical import LexicalIndex

__all__ = ["ToolRanking", "rank_tools", "tool_text", "HOLD_TOP"]

# A new invocation keeps the last invocation's set while it holds the new ranking's best few: the tools
# come before the messages, so a changed set re-processes the whole request.
HOLD_TOP = 3
CONTEXT_WEIGHT = 2.0  # tau-bench replay (bench/tool_catalogue.py): 0.3 to 4 change the declared share by ~5 points
# ADK declares an agent's tools in its order, a toolset's (an MCP server's) together: a tool scores at least
# NEIGHBOUR_DECAY ** d times the score of a tool d places away, so a toolset's siblings follow its best tool
# (the replay, 100 episodes: 0.8 / 0.85 / 0.9 / 0.95 give 99.5 / 99.8 / 100 / 100 % declared; none: 73 %).
NEIGHBOUR_DECAY = 0.9


@dataclass(frozen=True)
class ToolRanking:
    """`kept`: the names to declare, in the request's order. `left_out`: name → why (rank and score)."""

    kept: tuple[str, ...]
    left_out: dict[str, str] = field(default_factory=dict)
    held: bool = False  # the previous set was kept as it was (plus tools called since)


def tool_text(declaration: dict[str, Any]) -> str:
    """The searchable text of a function declaration: name, description, and each parameter's name and
    description (nested objects included)."""
    out = [str(declaration.get("name", "")), str(declaration.get("description", ""))]

    def walk(schema: Any, depth: int) -> None:
        if not isinstance(schema, dict) or depth > 4:
            return
        for name, sub in (schema.get("properties") or {}).items():
            out.append(str(name))
            if isinstance(sub, dict):
                out.append(str(sub.get("description", "")))
                walk(sub, depth + 1)
        walk(schema.get("items"), depth + 1)

    walk(declaration.get("parameters") or declaration.get("parameters_json_schema"), 0)
    return "\n".join(x for x in out if x)


_ANALYZER = Analyzer()


@lru_cache(maxsize=16)
def _index(texts: "tuple[str, ...]") -> LexicalIndex:
    """The BM25 index of a tool set, built once per set (an agent's tools rarely change)."""
    index = LexicalIndex(_ANALYZER)
    index.add(list(texts))
    return index


def _cosines(index: LexicalIndex, texts: "tuple[str, ...]", context: str) -> np.ndarray:
    """TF-IDF cosine of each tool text to `context` (length-normalised: a long description gains nothing)."""
    terms = Counter(_ANALYZER(context))
    idf = {t: math.log(1 + len(texts) / (1 + _df(texts).get(t, 0))) for t in terms}
    c_norm = math.sqrt(sum((n * idf[t]) ** 2 for t, n in terms.items())) or 1.0
    out = np.zeros(len(texts))
    for i, doc in enumerate(_tool_terms(texts)):
        dot = sum(n * idf[t] * terms[t] * idf[t] for t, n in doc.items() if t in terms)
        d_norm = math.sqrt(sum((n * idf.get(t, 1.0)) ** 2 for t, n in doc.items())) or 1.0
        out[i] = dot / (c_norm * d_norm)
    return out


@lru_cache(maxsize=16)
def _tool_terms(texts: "tuple[str, ...]") -> "tuple[Counter, ...]":
    return tuple(Counter(_ANALYZER(t)) for t in texts)


@lru_cache(maxsize=16)
def _df(texts: "tuple[str, ...]") -> Counter:
    return Counter(t for doc in _tool_terms(texts) for t in doc)


def _scale(x: np.ndarray) -> np.ndarray:
    top = float(x.max()) if len(x) else 0.0
    return x / top if top > 0 else x


def _with_neighbours(scores: np.ndarray) -> np.ndarray:
    """Each score raised to the best of the others, decayed by `NEIGHBOUR_DECAY` per place between them (a pass
    each way)."""
    out = scores.copy()
    for places in (range(1, len(out)), range(len(out) - 2, -1, -1)):
        step = 1 if places.step == 1 else -1
        for i in places:
            out[i] = max(out[i], NEIGHBOUR_DECAY * out[i - step])
    return out


def rank_tools(tools: Sequence[ToolSpec], query: str, *, keep: int, always: Iterable[str] = (),
               previous: "Sequence[str] | None" = None, hold: bool = False, context: str = "",
               context_weight: float = CONTEXT_WEIGHT, share: float | None = None) -> ToolRanking:
    """Which of `tools` (in the request's order) to declare for `query` (the request, goal, step and recent
    turns, joined).

    `context` (the agent's instruction) adds `context_weight` times its TF-IDF cosine to each tool (scores
    scaled to 0..1 each); then each tool is raised by its neighbours (`_with_neighbours`). The best `keep`
    are declared, and with `share` more, in rank order, while all declared tools' JSON stays within that
    share of all the tools' JSON. `always` are declared whatever their rank (framework tools, the recall tool, tools already called).
    `previous` is the set the last call declared: with `hold` (a later call of the same invocation) it is
    kept as it is (it only grows by `always`); otherwise it is held while it contains the new ranking's
    best `HOLD_TOP`. Ties keep the request's order."""
    names = [t.name for t in tools]
    must = set(always) & set(names)
    texts = tuple(tool_text(t.declaration) for t in tools)
    scores = _scale(_index(texts).scores(query)) if tools else np.zeros(0)
    if context and tools:  # the agent's instruction: a domain prior, by cosine so long declarations gain nothing
        scores = scores + context_weight * _scale(_cosines(_index(texts), texts, context))
    scores = _with_neighbours(scores)
    order = sorted(range(len(tools)), key=lambda i: (-float(scores[i]), i))
    rank = {names[i]: r for r, i in enumerate(order)}
    sizes = [len(t.declaration_json) for t in tools]
    room = (share or 0.0) * sum(sizes) - sum(sizes[i] for i in range(len(tools)) if names[i] in must)
    ranked: list[str] = []
    for i in (i for i in order if names[i] not in must):
        if len(ranked) >= keep and (share is None or sizes[i] > room):
            break
        ranked.append(names[i])
        room -= sizes[i]
    held = False
    if previous is not None:
        prev = set(previous) & set(names)
        best = [names[i] for i in order[:HOLD_TOP] if scores[i] > 0]
        if prev and (hold or all(n in prev for n in best)):
            ranked, held = [n for n in names if n in prev], True
    chosen = must | set(ranked)
    kept = tuple(n for n in names if n in chosen)
    left_out = {names[i]: f"rank {rank[names[i]] + 1} of {len(names)}, score {float(scores[i]):.2f}: "
                          f"{'not in the held set' if held else 'below the best ' + str(len(ranked))}"
                for i in range(len(names)) if names[i] not in chosen}
    return ToolRanking(kept=kept, left_out=left_out, held=held)
