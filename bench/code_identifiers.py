"""A code-identifier retrieval set built from real coding-agent runs (mini-swe-agent trajectories).

Why: coding agents ask in words ("separability matrix", "query set") for code that names things in
CamelCase and snake_case (`separability_matrix`, `QuerySet`). The items are the function and
class definitions the agent actually saw in its tool outputs (grep hits, `cat -n`/`sed -n`
listings), each with its file path; a query is one definition's name written as plain lower-case
words; the relevant items are every definition whose name has exactly those words (the same name
in several files counts in each). The word splitting here is a plain regex, independent of the
analyzer under test.

    from code_identifiers import load_code_identifiers
    items, queries, qrels, stats = load_code_identifiers(Path("../shared/datasets"))
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

from aether_context.retrieval import Document

__all__ = ["load_code_identifiers", "words_of"]

_DEF = re.compile(r"^(?:(?P<path>[\w./-]+\.py)[:-]\d+[:-])?\s*(?:\d+\s+)?\s*(?:async\s+)?(?P<kind>def|class)\s+"
                  r"(?P<name>[A-Za-z_]\w*)(?P<rest>.*)$")
_PY_PATH = re.compile(r"[\w./-]+\.py\b")
_OUTPUT = re.compile(r"<output>(.*?)</output>", re.S)
_COMMAND = re.compile(r"```(?:bash|sh)?\n(.*?)```", re.S)
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def words_of(name: str) -> list[str]:
    """`get_userName2` -> ['get', 'user', 'name', '2']: the plain-words form of an identifier."""
    return [p.lower() for p in _PARTS.findall(name)]


def _definitions(command: str, output: str):
    """(path, kind, name, line) for each definition line in a tool output."""
    paths = _PY_PATH.findall(command)
    default_path = paths[-1] if paths else ""
    for raw in output.splitlines():
        match = _DEF.match(raw.strip("\r"))
        if match is None:
            continue
        path = match.group("path") or default_path
        if not path:
            continue
        line = f"{match.group('kind')} {match.group('name')}{match.group('rest')}".strip()
        yield path.lstrip("./"), match.group("kind"), match.group("name"), line[:200]


def load_code_identifiers(data: Path, *, max_queries: int = 300):
    """Items, queries (id -> words), qrels (id -> relevant item ids) and a description of the set."""
    folder = data / "trajectories" / "mini-swe-agent"
    runs = sorted(folder.glob("*.traj.json"))
    items: dict[str, Document] = {}
    for run in runs:
        messages = json.loads(run.read_text(encoding="utf-8"))["messages"]
        for previous, message in zip(messages, messages[1:]):
            if message.get("role") != "user" or previous.get("role") != "assistant":
                continue
            content = message.get("content") or ""
            output = "\n".join(_OUTPUT.findall(content)) or content
            command = "\n".join(_COMMAND.findall(previous.get("content") or ""))
            for path, kind, name, line in _definitions(command, output):
                item_id = f"{path}::{name}"
                if item_id not in items:
                    items[item_id] = Document(item_id, f"{line}  # {path}", run.name.split(".traj")[0])
    by_words: dict[str, set[str]] = defaultdict(set)
    for item_id, doc in items.items():
        parts = words_of(item_id.split("::")[1])
        if len([p for p in parts if p.isalpha() and len(p) > 1]) >= 2:
            by_words[" ".join(parts)].add(item_id)
    ordered = sorted(by_words, key=lambda q: hashlib.sha256(q.encode()).hexdigest())[:max_queries]
    queries = {f"q{i}": q for i, q in enumerate(ordered)}
    qrels = {qid: by_words[q] for qid, q in queries.items()}
    names = [i.split("::")[1] for rel in qrels.values() for i in rel]
    stats = {
        "runs": len(runs), "items": len(items), "queries": len(queries),
        "relevant": sum(len(r) for r in qrels.values()),
        "camel": sum(1 for n in names if re.search(r"[a-z][A-Z]|[A-Z]{2}[a-z]", n)),
        "snake": sum(1 for n in names if "_" in n.strip("_")),
    }
    return sorted(items.values(), key=lambda d: d.id), queries, qrels, stats
