"""Structural variation (opt-in) for injected context.

Why vary: a status block rendered identically on every call becomes wallpaper — models learn to skim
or parrot it. `StructuralVariation` picks, per (seed, call index), one of a few equivalent layouts, so
the same inputs always give the same bytes (replayable, testable) while consecutive calls differ.
It is off by default: disabled, it always returns the canonical layout, which keeps prompts
cache-friendly.

Usage::

    v = StructuralVariation(seed=7, enabled=True)
    v.format_progress(3, 5, call_index=2)          # e.g. "60%" or "[######....]" or "step 3 of 5"
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence

__all__ = [
    "ProgressStyle", "ListStyle", "VariationStyle", "CANONICAL_STYLE", "StructuralVariation", "format_progress",
    "format_list",
]

ProgressStyle = Literal["fraction", "percentage", "bar", "steps"]
ListStyle = Literal["bulleted", "numbered", "indented"]

PROGRESS_STYLES: tuple[ProgressStyle, ...] = ("fraction", "percentage", "bar", "steps")
SEPARATORS: tuple[str, ...] = ("---", "===", "***", "")
LIST_STYLES: tuple[ListStyle, ...] = ("bulleted", "numbered", "indented")
STATUS_LABELS: tuple[str, ...] = ("Status:", "Progress:", "Current state:")
BAR_WIDTH = 10


@dataclass(frozen=True)
class VariationStyle:
    """One concrete layout: the canonical one, or the one chosen for a call."""

    progress: ProgressStyle
    separator: str
    list_style: ListStyle
    status_label: str


CANONICAL_STYLE = VariationStyle("fraction", "---", "bulleted", "Status:")


def _pick(seed: int, call_index: int, dimension: str, options: Sequence[Any]) -> Any:
    # sha256 rather than random.Random or hash(): stable across processes, platforms and Python versions.
    digest = hashlib.sha256(f"{seed}:{call_index}:{dimension}".encode()).digest()
    return options[int.from_bytes(digest[:8], "big") % len(options)]


@dataclass(frozen=True)
class StructuralVariation:
    """Deterministic layout choice per (seed, call_index); canonical layout whenever disabled."""

    seed: int = 0
    enabled: bool = False

    def style(self, call_index: int) -> VariationStyle:
        if not self.enabled:
            return CANONICAL_STYLE
        return VariationStyle(
            progress=_pick(self.seed, call_index, "progress", PROGRESS_STYLES),
            separator=_pick(self.seed, call_index, "separator", SEPARATORS),
            list_style=_pick(self.seed, call_index, "list", LIST_STYLES),
            status_label=_pick(self.seed, call_index, "label", STATUS_LABELS),
        )

    def separator(self, call_index: int = 0) -> str:
        return self.style(call_index).separator

    def status_label(self, call_index: int = 0) -> str:
        return self.style(call_index).status_label

    def format_progress(self, done: int, total: int, call_index: int = 0) -> str:
        """`done` of `total` steps in this call's progress style (canonical: "3/5")."""
        return format_progress(done, total, self.style(call_index).progress)

    def format_list(self, items: Sequence[str], call_index: int = 0) -> str:
        """Items one per line in this call's list style (canonical: "- item")."""
        return format_list(items, self.style(call_index).list_style)


def format_progress(done: int, total: int, style: ProgressStyle = "fraction") -> str:
    """Progress in one style; `done` is clamped to [0, total], an unknown total (≤ 0) shows as "n/?"."""
    if total <= 0:
        return f"{done} steps done" if style == "steps" else f"{done}/?"
    done = max(0, min(done, total))
    if style == "percentage":
        return f"{math.floor(100 * done / total)}%"
    if style == "bar":
        filled = round(BAR_WIDTH * done / total)
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total}"
    if style == "steps":
        return f"step {done} of {total}"
    return f"{done}/{total}"


def format_list(items: Sequence[str], style: ListStyle = "bulleted") -> str:
    """Items one per line: "- a", "1. a" or four-space indented."""
    if style == "numbered":
        return "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))
    if style == "indented":
        return "\n".join(f"    {item}" for item in items)
    return "\n".join(f"- {item}" for item in items)
