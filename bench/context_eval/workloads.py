"""The four workloads: their jobs, the systems and windows they run under, and what each run must keep.

- ``locomo-session`` LoCoMo, all turns in one session, questions asked one after another (also the
  multi-invocation chat workload of the cost figures);
- ``locomo-memory`` LoCoMo sessions in `InMemoryMemoryService`, questions from a new session;
- ``tau`` tau-bench airline episodes: identifier uses;
- ``mini-swe`` mini-swe-agent runs: files of the final diff, last five failure lines, calls over W.

`retention(workload, records, window, misses)` returns named (hits, total) figures for one system and
window, and appends what was missed (run, call, item) to `misses` when given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from google.adk.memory import InMemoryMemoryService

from context_eval.capture import RunRecord
from context_eval.coding import check_final, coding_facts
from context_eval.identifiers import identifier_uses, present
from context_eval.locomo import (Conversation, evidence_share, load_locomo, normalize, question_trajectory,
                                 seed_memory_mode, seed_session_mode)
from context_eval.run import APP_NAME, USER_ID, Job, Services
from trajectories import load_mini_swe, load_tau_airline

__all__ = ["Workload", "build_workloads", "retention", "WORKLOAD_NAMES"]

WORKLOAD_NAMES = ("locomo-session", "locomo-memory", "tau", "mini-swe")


@dataclass
class Workload:
    name: str
    title: str
    profile: str
    windows: tuple[int, ...]
    systems: tuple[str, ...]
    jobs: list[Job]
    facts: dict[str, Any] = field(default_factory=dict)  # run id -> what the run must keep


def _locomo_jobs(convs: list[Conversation], mode: str) -> tuple[list[Job], dict[str, Any]]:
    jobs, facts = [], {}
    for conv in convs:
        traj = question_trajectory(conv, mode)

        async def prepare(conv: Conversation = conv) -> Services:
            if mode == "session":
                service, session_id = await seed_session_mode(conv, app_name=APP_NAME, user_id=USER_ID)
                return Services(service, session_id)
            memory = InMemoryMemoryService()
            service = await seed_memory_mode(conv, memory, app_name=APP_NAME, user_id=USER_ID)
            return Services(service, None, memory)

        jobs.append(Job(traj, want_text=lambda i: True, prepare=prepare))
        facts[traj.id] = conv
    return jobs, facts


def build_workloads(data: str | Path, names: tuple[str, ...], *, conversations: Optional[int], questions: Optional[int],
                    runs: Optional[int], episodes: Optional[int], profiles: dict[str, str]) -> list[Workload]:
    out = []
    if {"locomo-session", "locomo-memory"} & set(names):
        convs = load_locomo(data, conversations=conversations, questions=questions)
    if "locomo-session" in names:
        jobs, facts = _locomo_jobs(convs, "session")
        out.append(Workload("locomo-session", "LoCoMo, session mode (questions one after another in the conversation's session)",
                            profiles.get("locomo", "default"), (8000, 32000), ("none", "sliding", "adk_compact", "aether"),
                            jobs, facts))
    if "locomo-memory" in names:
        jobs, facts = _locomo_jobs(convs, "memory")
        out.append(Workload("locomo-memory", "LoCoMo, memory mode (sessions in InMemoryMemoryService, questions from a new session)",
                            profiles.get("locomo", "default"), (8000, 32000), ("none", "preload", "aether"), jobs, facts))
    if "tau" in names:
        eps = load_tau_airline(data, limit=episodes)
        uses = {t.id: identifier_uses(t) for t in eps}
        jobs = [Job(t, want_text=(lambda i, calls=frozenset(u.call for u in uses[t.id]): i in calls)) for t in eps]
        out.append(Workload("tau", "tau-bench airline (gpt-4o)", profiles.get("tau", "default"), (8000, 4000),
                            ("none", "adk_compact", "aether"), jobs, uses))
    if "mini-swe" in names:
        swe = load_mini_swe(data, limit=runs)
        out.append(Workload("mini-swe", "mini-swe-agent (SWE-bench Verified, Gemini 3 Pro)", profiles.get("mini-swe", "coding_agent"),
                            (8000, 32000), ("none", "adk_compact", "aether"), [Job(t) for t in swe],
                            {t.id: coding_facts(t) for t in swe}))
    return out


# --------------------------------------------------------------------------- retention per workload
def _locomo(w: Workload, records: list[RunRecord], window: int, misses: list[dict]) -> dict[str, tuple[float, int]]:
    share_sum, n, found, total = 0.0, 0, 0, 0
    by_cat: dict[int, list[float]] = {}
    for rec in records:
        conv: Conversation = w.facts[rec.run_id]
        for i, q in enumerate(conv.questions):
            if i not in rec.texts:
                continue
            text = normalize(rec.texts[i])
            hit, known = evidence_share(conv, q, text)
            misses.extend({"run": rec.run_id, "call": i, "question": q.text, "evidence": e}
                          for e in q.evidence if e in conv.turns and normalize(conv.turns[e].text) not in text)
            if known:
                share_sum += hit / known
                n += 1
                found, total = found + int(hit), total + known
                by_cat.setdefault(q.category, []).append(hit / known)
    out = {"evidence (mean per question)": (share_sum, n), "evidence turns (pooled)": (found, total)}
    for cat in sorted(by_cat):
        out[f"evidence, category {cat}"] = (sum(by_cat[cat]), len(by_cat[cat]))
    return out


def _tau(w: Workload, records: list[RunRecord], window: int, misses: list[dict]) -> dict[str, tuple[float, int]]:
    found = total = 0
    for rec in records:
        for u in w.facts[rec.run_id]:
            text = rec.texts.get(u.call)
            if text is not None:
                total += 1
                hit = present(u.value, text)
                found += int(hit)
                if not hit:
                    misses.append({"run": rec.run_id, "call": u.call, "tool": u.tool, "value": u.value, "source": u.source})
    return {"identifier uses in the request": (found, total)}


def _swe(w: Workload, records: list[RunRecord], window: int, misses: list[dict]) -> dict[str, tuple[float, int]]:
    files = fails = nf = nl = 0
    for rec in records:
        if not rec.final_text:
            continue
        facts = w.facts[rec.run_id]
        f, l = check_final(facts, rec.final_text)
        misses.extend({"run": rec.run_id, "call": "final", "file": x} for x, ok in zip(facts.files, f) if not ok)
        misses.extend({"run": rec.run_id, "call": "final", "failure_line": x} for x, ok in zip(facts.failures, l) if not ok)
        files, nf, fails, nl = files + int(sum(f)), nf + len(f), fails + int(sum(l)), nl + len(l)
    over = int(sum(c.tokens > window for rec in records for c in rec.calls))
    calls = sum(len(rec.calls) for rec in records)
    return {"final-diff files in the final request": (files, nf), "last five failure lines in the final request": (fails, nl),
            "calls over the window": (over, calls)}


_RETENTION: dict[str, Callable[[Workload, list[RunRecord], int, list[dict]], dict[str, tuple[float, int]]]] = {
    "locomo-session": _locomo, "locomo-memory": _locomo, "tau": _tau, "mini-swe": _swe}


def retention(w: Workload, records: list[RunRecord], window: int,
              misses: Optional[list[dict]] = None) -> dict[str, tuple[float, int]]:
    return _RETENTION[w.name](w, records, window, [] if misses is None else misses)
