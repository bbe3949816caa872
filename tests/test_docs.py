"""The docs render: every code fence in README.md and docs/*.md is closed.

An unclosed fence turns the rest of a page into code on GitHub (docs/configuration.md once rendered four sections
that way). Fences follow CommonMark: three or more backticks or tildes, indented by any amount inside lists; a
fence closes on a line of the same character, at least as long, with nothing after it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")


def unclosed_fence(text: str) -> int | None:
    """The 1-based line of a fence that never closes, or None when every fence closes."""
    opened: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if not match:
            continue
        marker, rest = match.groups()
        if opened is None:
            if marker[0] == "`" and "`" in rest:
                continue  # inline code such as ```x```, not a fence
            opened = (number, marker)
        elif marker[0] == opened[1][0] and len(marker) >= len(opened[1]) and not rest.strip():
            opened = None
    return None if opened is None else opened[0]


def test_the_checker_finds_an_unclosed_fence():
    assert unclosed_fence("```yaml\na: 1\n```\ntext\n```\nb: 2\n") == 5
    assert unclosed_fence("````\n```\nstill code\n````\n") is None
    assert unclosed_fence("- item\n\n  ```bash\n  make\n  ```\n") is None
    assert unclosed_fence("~~~\n```\n~~~\n") is None


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_fence_closes(path: Path):
    line = unclosed_fence(path.read_text(encoding="utf-8"))
    assert line is None, f"{path.relative_to(ROOT)}:{line}: this code fence never closes; add a closing ``` line"


def test_the_minimal_profile_is_the_defaults_with_five_knobs_spelled_out():
    """aether_context/profiles/minimal.yaml (docs/adk-features.md) validates, sets the five knobs the docs map,
    and changes nothing else: it is a starting point, not a tuning."""
    import yaml

    from aether_context.profile import BudgetProfile, load_profile

    profile = load_profile("minimal")
    raw = yaml.safe_load((ROOT / "aether_context" / "profiles" / "minimal.yaml").read_text(encoding="utf-8"))
    assert set(raw) == {"name", "description", "window_tokens", "floors", "conversation", "weights", "offload"}
    knobs = (profile.window_tokens, profile.floors.slack, profile.conversation.compact_to,
             profile.weights.memory.base, profile.offload.threshold_tokens)
    assert knobs == (None, 0.12, 0.5, 0.2, 1500)
    defaults = BudgetProfile(name=profile.name, description=profile.description)
    assert profile.model_dump() == defaults.model_dump()
    doc = (ROOT / "docs" / "adk-features.md").read_text(encoding="utf-8")
    for key in ("window_tokens", "floors.slack", "conversation.compact_to", "weights.memory.base",
                "offload.threshold_tokens"):
        assert f"`{key}`" in doc, key
