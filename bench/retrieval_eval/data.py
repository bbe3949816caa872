"""The datasets as retrieval inputs: SciFact (BEIR test split) and LoCoMo turns with their context."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from aether_context.retrieval import Document
from aether_context.retrieval.turns import neighbours, turn_context
from aether_context.tokens import TokenCounter

# ---------------------------------------------------------------- data

def load_scifact(data: Path):
    root = data / "scifact"
    docs = [json.loads(line) for line in open(root / "corpus.jsonl", encoding="utf-8")]
    queries = {q["_id"]: q["text"] for q in map(json.loads, open(root / "queries.jsonl", encoding="utf-8"))}
    qrels: dict[str, set[str]] = defaultdict(set)
    for line in list(open(root / "qrels" / "test.tsv", encoding="utf-8"))[1:]:
        qid, did, score = line.split()
        if int(score) > 0:
            qrels[qid].add(did)
    corpus = [Document(d["_id"], (d["title"] + " " + d["text"]).strip(), "scifact") for d in docs]
    return corpus, {q: queries[q] for q in sorted(qrels, key=int)}, qrels


def turn_text(turn: dict) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [image: {turn['blip_caption']}]"
    return text


CONTEXTS = ("packed", "previous", "bare")


def load_locomo(data: Path, *, context: str = "packed"):
    """Turns as documents, one list per conversation. `context`: "packed" is what the pack indexes
    (`turn_context`: the session date, two turns before and one after, within 192 tokens);
    "previous" the session date and the previous turn only (96 tokens); "bare" the text alone."""
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    counter = TokenCounter()
    samples = json.load(open(data / "locomo" / "locomo_dev.json", encoding="utf-8"))
    out = []
    for sample in samples:
        conv, turns, n = sample["conversation"], [], 1
        while f"session_{n}" in conv:
            session, date = conv[f"session_{n}"], conv.get(f"session_{n}_date_time", "")
            texts = [turn_text(t) for t in session]
            for i, t in enumerate(session):
                extra = ""
                if context == "packed":
                    before, after = neighbours(texts, i)
                    extra = turn_context(date=date, previous=before, next=after, count_tokens=counter.count_text)
                elif context == "previous":
                    extra = turn_context(date=date, previous=texts[i - 1] if i else "", max_tokens=96,
                                         count_tokens=counter.count_text)
                turns.append(Document(t["dia_id"], texts[i], sample["sample_id"], context=extra))
            n += 1
        qas = []
        for qa in sample["qa"]:
            evidence = {e for item in qa.get("evidence", []) for e in re.split(r"[;\s]+", item) if e}
            qas.append((qa["question"], int(qa["category"]), evidence))
        out.append((sample["sample_id"], turns, qas))
    return out


def describe_scifact(data: Path) -> dict:
    corpus, queries, qrels = load_scifact(data)
    return {"split": "BEIR test", "docs": len(corpus), "queries": len(queries),
            "judgements": sum(len(r) for r in qrels.values())}
