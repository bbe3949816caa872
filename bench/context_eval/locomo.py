"""LoCoMo as ADK sessions: a long companion conversation, then its questions asked through a real Runner.

Session mode: every turn of a conversation becomes an event of ONE ADK session (speaker A as the
user, speaker B as the agent, stamped from the session dates), then each question of categories 1–4
is a new user message in that session, one after another (the model answers briefly with the gold
answer). Memory mode: each LoCoMo session is its own ADK session added to `InMemoryMemoryService`;
the questions are asked, one after another, from a new session. Score per question: the share of
its evidence turns whose text is in the request the model received.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from google.adk.events.event import Event
from google.genai import types

from replay_adk import AGENT_NAME, ClockedSessionService
from trajectories import Invocation, ModelTurn, Trajectory

__all__ = ["Turn", "Question", "Conversation", "load_locomo", "question_trajectory", "seed_session_mode",
           "seed_memory_mode", "evidence_share", "normalize", "CATEGORIES"]

LOCOMO_FILE = "locomo/locomo_dev.json"
CATEGORIES = (1, 2, 3, 4)
TURN_STEP_S = 30.0  # seconds between two turns of one LoCoMo session
SYSTEM = ("You are {b}, talking with your friend {a}. Answer {a}'s questions about your past conversations "
          "briefly, with dates where they matter.")
_DATE = "%I:%M %p on %d %B, %Y"
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    caption: str = ""

    def message(self) -> str:
        """The event text: `Name: text`, and the shared image's caption when there is one."""
        image = f" [shares an image: {self.caption}]" if self.caption else ""
        return f"{self.speaker}: {self.text}{image}"


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[tuple[float, tuple[Turn, ...]], ...]  # (start timestamp, turns) per LoCoMo session
    questions: tuple[Question, ...]

    @cached_property
    def turns(self) -> dict[str, Turn]:
        return {t.dia_id: t for _, turns in self.sessions for t in turns}


def _evidence(raw: Sequence[str]) -> tuple[str, ...]:
    """Evidence ids, malformed entries ("D8:6; D9:17") split on `;` and whitespace."""
    return tuple(x for item in raw for x in re.split(r"[;\s]+", item) if x)


def _sessions(conv: dict[str, Any]) -> tuple[tuple[float, tuple[Turn, ...]], ...]:
    numbers = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    out = []
    for n in numbers:
        start = dt.datetime.strptime(conv[f"session_{n}_date_time"].strip(), _DATE).replace(tzinfo=dt.timezone.utc)
        turns = tuple(Turn(t["dia_id"], t["speaker"], t["text"], t.get("blip_caption") or "") for t in conv[f"session_{n}"])
        out.append((start.timestamp(), turns))
    return tuple(out)


def load_locomo(data: str | Path, *, conversations: int | None = None, questions: int | None = None) -> list[Conversation]:
    """The dev conversations, each with its category 1–4 questions (`questions`: that many, evenly spread)."""
    path = Path(data) / LOCOMO_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: pass --data pointing at the shared datasets folder")
    out = []
    for sample in json.loads(path.read_text(encoding="utf-8"))[:conversations]:
        conv = sample["conversation"]
        qs = [Question(q["question"], str(q.get("answer", "")), _evidence(q.get("evidence") or ()), q["category"])
              for q in sample["qa"] if q["category"] in CATEGORIES and q.get("evidence")]
        if questions is not None and questions < len(qs):
            qs = [qs[round(i * (len(qs) - 1) / max(1, questions - 1))] for i in range(questions)]
        out.append(Conversation(sample["sample_id"], conv["speaker_a"], conv["speaker_b"], _sessions(conv), tuple(qs)))
    return out


def question_trajectory(conv: Conversation, mode: str) -> Trajectory:
    """The questions as invocations: one user message and one brief answer each, no tools."""
    invocations = tuple(Invocation(q.text, (ModelTurn(q.answer or "I don't know."),)) for q in conv.questions)
    return Trajectory(id=f"locomo-{mode}-{conv.id}", source="locomo", system=SYSTEM.format(a=conv.speaker_a, b=conv.speaker_b),
                      tools=(), invocations=invocations, meta={"conversation": conv.id})


def _event(conv: Conversation, turn: Turn, timestamp: float, invocation: str, stable_id: bool = False) -> Event:
    user = turn.speaker == conv.speaker_a
    ids = {"id": f"{conv.id}-{turn.dia_id}"} if stable_id else {}
    return Event(author="user" if user else AGENT_NAME, invocation_id=invocation, timestamp=timestamp,
                 content=types.Content(role="user" if user else "model", parts=[types.Part(text=turn.message())]),
                 **ids)


async def _seed(service: ClockedSessionService, session: Any, conv: Conversation, index: int,
                stable_ids: bool = False) -> None:
    start, turns = conv.sessions[index]
    for k, turn in enumerate(turns):
        await service.append_seeded(session, _event(conv, turn, start + k * TURN_STEP_S, f"{conv.id}-s{index + 1}",
                                                     stable_ids))


def _last_time(conv: Conversation) -> float:
    start, turns = conv.sessions[-1]
    return start + len(turns) * TURN_STEP_S


async def seed_session_mode(conv: Conversation, *, app_name: str, user_id: str) -> tuple[ClockedSessionService, str]:
    """One session holding every turn; questions are then stamped after the last turn."""
    service = ClockedSessionService(f"locomo-session-{conv.id}", start=_last_time(conv))
    session = await service.create_session(app_name=app_name, user_id=user_id)
    for i in range(len(conv.sessions)):
        await _seed(service, session, conv, i)
    return service, session.id


async def seed_memory_mode(conv: Conversation, memory: Any, *, app_name: str, user_id: str) -> ClockedSessionService:
    """Each LoCoMo session its own ADK session, added to `memory`; returns the service for the question session.

    The events keep the same ids in every pass, as a memory service's stored entries do: ranking breaks ties by
    id, so random ids would make two passes over the same data differ."""
    seeder = ClockedSessionService(f"locomo-memory-{conv.id}")
    for i in range(len(conv.sessions)):
        session = await seeder.create_session(app_name=app_name, user_id=user_id, session_id=f"{conv.id}-session-{i + 1}")
        await _seed(seeder, session, conv, i, stable_ids=True)
        await memory.add_session_to_memory(session)
    return ClockedSessionService(f"locomo-questions-{conv.id}", start=_last_time(conv) + 86_400)


def normalize(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def evidence_share(conv: Conversation, question: Question, request_text_normalized: str) -> tuple[int, int]:
    """(evidence turns whose text is in the request, evidence turns known); unknown ids are not counted."""
    turns = conv.turns
    known = [turns[e] for e in question.evidence if e in turns]
    return sum(normalize(t.text) in request_text_normalized for t in known), len(known)
