"""A frozen payload is rebuilt only when an evidence item it sent really changed."""

from __future__ import annotations

from aether_context.pipeline.inputs import EvidenceItem, PackState
from aether_context.pipeline.evidence_change import change_cause, changed_evidence, evidence_marks


def _state(items: list[EvidenceItem]) -> PackState:
    ids = tuple(e.id for e in items)
    return PackState(evidence_ids=ids, evidence_marks=evidence_marks(items, ids))


def test_unchanged_evidence_is_no_change():
    items = [EvidenceItem("artifact:notes.txt", "notes.txt: v0 text", "artifact://a/u/s/notes.txt#v0", "artifact"),
             EvidenceItem("ev1", "a fact from state")]
    assert changed_evidence(_state(items), items) == ()
    assert changed_evidence(_state(items), items + [EvidenceItem("new", "not sent before")]) == ()  # waits


def test_a_new_version_or_summary_is_a_change_named_by_file_and_version():
    v0 = EvidenceItem("artifact:notes.txt", "notes.txt: draft", "artifact://a/u/s/notes.txt#v0", "artifact")
    v1 = EvidenceItem("artifact:notes.txt", "notes.txt: final", "artifact://a/u/s/notes.txt#v1", "artifact")
    fact = EvidenceItem("ev1", "old fact")
    changed = changed_evidence(_state([v0, fact]), [v1, EvidenceItem("ev1", "new fact")])
    assert changed == (v1, EvidenceItem("ev1", "new fact"))
    assert change_cause(changed) == "evidence changed: notes.txt v1, ev1"


def test_marks_round_trip_through_the_state_json():
    items = [EvidenceItem("artifact:notes.txt", "notes.txt: draft", "artifact://a/u/s/notes.txt#v0", "artifact")]
    state = _state(items)
    assert PackState.from_json(state.to_json()).evidence_marks == state.evidence_marks
