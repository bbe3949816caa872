"""Evidence that changed under a frozen payload.

Within an invocation the payload is kept as sent, so later calls extend the cached prefix instead
of rewriting it. A saved artifact's new version (a tool writes notes.txt v1 mid-loop) must still
reach the very next model call: each evidence item the payload sent is marked by a digest of its
summary and URI (the URI carries the version), and a call whose inputs carry a different mark for
one of them rebuilds the payload. That rebuild is a cache break, recorded with the item that caused
it; an unchanged item never causes one.
"""

from __future__ import annotations

from typing import Sequence

from ..content import sha256_hex
from .inputs import EvidenceItem, PackState

__all__ = ["evidence_marks", "changed_evidence", "change_cause"]


def _mark(item: EvidenceItem) -> str:
    return sha256_hex(f"{item.summary}\n{item.uri}")[:16]


def evidence_marks(evidence: Sequence[EvidenceItem], sent_ids: Sequence[str]) -> tuple[str, ...]:
    """The mark of each sent evidence item, in `sent_ids` order ("" for an id the inputs lack)."""
    by_id = {e.id: e for e in evidence}
    return tuple(_mark(by_id[i]) if i in by_id else "" for i in sent_ids)


def changed_evidence(previous: PackState, evidence: Sequence[EvidenceItem]) -> tuple[EvidenceItem, ...]:
    """Items the previous payload sent whose summary or URI (version) is different now."""
    by_id = {e.id: e for e in evidence}
    return tuple(by_id[i] for i, mark in zip(previous.evidence_ids, previous.evidence_marks)
                 if mark and i in by_id and _mark(by_id[i]) != mark)


def change_cause(items: Sequence[EvidenceItem]) -> str:
    """'evidence changed: notes.txt v1, …' (the name without its `artifact:` prefix, the URI's version)."""
    names = []
    for item in items:
        name = item.id.split(":", 1)[1] if item.id.startswith("artifact:") else item.id
        version = item.uri.rpartition("#v")[2] if "#v" in item.uri else ""
        names.append(f"{name} v{version}" if version.isdigit() else name)
    return "evidence changed: " + ", ".join(names)
