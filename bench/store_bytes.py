"""Store bytes per call on a synthetic long tool-loop session (issue 17, item 2).

A session of N events (a user request, then tool call / tool result pairs of ~1 KB each) is
packed call after call with an 8K window, as one invocation, and every pack is saved to a real
on-disk `PackStore`. For the calls around 1,000 and 10,000 events it reports what the call added
to the store (blobs + manifest) next to its new content (the canonical JSON of its new messages).

`--whole N` also packs and saves every call of an N-event session from its first event and
compares the store's total size with the size of the session's own events (their canonical JSON:
smaller than ADK's event JSON, so the stricter ratio). `--replay N` runs recorded sessions of about N
model calls through a real ADK Runner with the plugin from their first call -- a tool loop of
concatenated mini-swe-agent runs and a chat of consecutive tau-bench airline episodes -- and reports
the whole store against ADK's JSON of the session's events (`long_sessions._events_bytes`, as
`pack_overhead.py --long` does). Both print what the store's bytes are, by kind of file.

Usage::

    .venv/bin/python bench/store_bytes.py                  # 1,000 and 10,000 events, ~1 min
    .venv/bin/python bench/store_bytes.py --events 1000    # one size
    .venv/bin/python bench/store_bytes.py --events --whole 1000   # total store size of one session
    PYTHONPATH=.:bench .venv/bin/python bench/store_bytes.py --events --replay 300   # recorded sessions, ~3 min
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from aether_context.content import FunctionCall, FunctionResponse, Message, ModelRequest, TextPart, canonical_json  # noqa: E402
from aether_context.pipeline import PackInputs, TaskSpec, build_pack  # noqa: E402
from aether_context.pipeline.cache import PackCache, memo_scope  # noqa: E402
from aether_context.profile import load_profile  # noqa: E402
from aether_context.store import PackStore  # noqa: E402
from aether_context.store.format import PACKED  # noqa: E402
from aether_context.tokens import TokenCounter  # noqa: E402

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


def tool_pair(i: int) -> list[Message]:
    body = " ".join(WORDS[(i * 7 + j) % len(WORDS)] + str(j % 13) for j in range(140))
    return [Message("model", (FunctionCall("run", {"cmd": f"grep -n x{i} src/"}, f"c{i}"),)),
            Message("user", (FunctionResponse("run", {"output": f"step {i}: {body}"}, f"c{i}"),))]


def inputs_at(messages: list[Message], previous) -> PackInputs:
    request = ModelRequest(model="gpt-4o", system_instruction="You are a coding agent.", messages=tuple(messages))
    return PackInputs(request=request, request_index=0, task=TaskSpec(goal="fix the failing test"),
                      app_name="bench", user_id="u", session_id="long", invocation_id="inv-1", agent="coder",
                      now=1_700_000_000.0, previous=previous)


def measure(events: int, calls: int, url: str) -> dict[str, float]:
    with memo_scope(PackCache()):  # one memo for the session's calls, as a packer keeps
        return _measure(events, calls, url)


def _measure(events: int, calls: int, url: str) -> dict[str, float]:
    profile, counter = load_profile("coding_agent"), TokenCounter()
    store = PackStore(url, background=False)
    messages = [Message("user", (TextPart("Fix the failing test in src/."),))]
    i = 0
    while len(messages) < events - 2 * calls:
        messages += tool_pair(i)
        i += 1
    previous = None
    pack = build_pack(inputs_at(messages, previous), profile, counter=counter, window=8_000)
    store.save(pack)  # warm: everything before the measured calls is in the store
    added, new_content, seconds = [], [], []
    for _ in range(calls):
        new = tool_pair(i)
        i += 1
        messages += new
        pack = build_pack(inputs_at(messages, pack.state), profile, counter=counter, window=8_000)
        before = store.stats().get("bytes", 0)
        start = time.thread_time()  # the write runs on this thread (background=False): its CPU, not the machine's load
        store.save(pack)
        seconds.append(time.thread_time() - start)
        added.append(store.stats()["bytes"] - before)
        new_content.append(sum(len(canonical_json(m.to_json()).encode()) for m in new))
    return {"events": len(messages), "bytes_p50": statistics.median(added), "bytes_max": max(added),
            "new_content_p50": statistics.median(new_content), "write_ms_p50": 1000 * statistics.median(seconds),
            "store_total": sum(f.stat().st_size for f in Path(url).rglob("*") if f.is_file()),
            "events_size": sum(len(canonical_json(m.to_json()).encode()) for m in messages)}


def whole_session(events: int, url: str) -> dict[str, float]:
    """Every call of a session packed and saved, from its first event: total store size vs its events."""
    with memo_scope(PackCache()):
        return _whole_session(events, url)


def _whole_session(events: int, url: str) -> dict[str, float]:
    profile, counter = load_profile("coding_agent"), TokenCounter()
    store = PackStore(url, background=False)
    messages = [Message("user", (TextPart("Fix the failing test in src/."),))]
    pack, i = None, 0
    while len(messages) < events:
        messages += tool_pair(i)
        i += 1
        pack = build_pack(inputs_at(messages, pack.state if pack else None), profile, counter=counter, window=8_000)
        store.save(pack)
    size = sum(len(canonical_json(m.to_json()).encode()) for m in messages)
    return {"events": len(messages), "calls": i, "store": _files(Path(url)), "events_size": size,
            "adk_events_size": _adk_events_bytes(messages), "kinds": breakdown(Path(url))}


def _adk_events_bytes(messages: list[Message]) -> int:
    """The same messages as the ADK events a session service keeps (ids, author, timestamp, as
    `pack_overhead.py --long` counts them): the issue's "the session's own events"."""
    from google.adk.events import Event

    from aether_context.adk.convert import to_content

    return sum(len(Event(invocation_id="inv-1", author="user" if m.role == "user" else "coder",
                         content=to_content(m)).model_dump_json(exclude_none=True).encode()) for m in messages)


def _kind(path: Path, raw: bytes) -> str:
    """What a store file holds, read from its content."""
    if path.name in ("manifest.json", "usage.json", ".aether-store"):
        return path.name
    if "artifacts" in path.parts:
        return "offloaded original"
    data = zlib.decompress(raw[len(PACKED):]) if raw.startswith(PACKED) else raw
    try:
        value = json.loads(data)
    except ValueError:
        return "big string"
    if not isinstance(value, dict):
        return "other"
    if "chunk" in value:
        return "list chunk"
    if "role" in value and "parts" in value:
        return "message"
    if "base" in value and "patch" in value:
        return "record patch"  # a node of a record chain: the previous record plus what changed
    if "value" in value:
        return "record key"  # a record whole (a chain's first node)
    if {"request", "v"} <= set(value) or {"head", "messages"} <= set(value):
        return "inputs record" if "fields" in value else "request record"  # layout 2
    return "request head" if "system_instruction" in value else "other"


def breakdown(root: Path) -> str:
    """Bytes by kind of file, largest first."""
    files, size = collections.Counter(), collections.Counter()
    for f in root.rglob("*"):
        if f.is_file():
            raw = f.read_bytes()
            kind = _kind(f, raw)
            files[kind] += 1
            size[kind] += len(raw)
    total = max(1, sum(size.values()))
    return "; ".join(f"{k} {v / 1024:.0f} KB ({100 * v / total:.0f} %, {files[k]} files)" for k, v in size.most_common())


def replayed(kind: str, calls: int, root: Path) -> dict[str, Any]:
    """A recorded session of about `calls` model calls through a Runner, the plugin from its first call."""
    from long_sessions import _events_bytes
    from replay_adk import replay
    from trajectories import Trajectory, concat_trajectories, load_mini_swe, load_tau_airline

    from aether_context import ContextPacker, ContextPackPlugin

    if kind == "tool loop":
        trajectory = concat_trajectories(load_mini_swe(), min_model_calls=calls, ident="first-loop")
    else:
        episodes, invocations = load_tau_airline(), []
        for episode in episodes:
            invocations += episode.invocations
            if sum(len(i.turns) for i in invocations) >= calls:
                break
        first = episodes[0]
        trajectory = Trajectory(id="first-chat", source=first.source, system=first.system, tools=first.tools,
                                invocations=tuple(invocations))
    packer = ContextPacker(profile="default", store=PackStore(str(root), background=True), window_tokens=8_000)
    result = asyncio.run(replay(trajectory, plugins=[ContextPackPlugin(packer=packer)], keep_requests="none",
                                on_request=lambda call, request: packer.store.flush()))
    packer.store.flush()
    return {"calls": len(result.calls), "events": len(result.session.events),
            "events_size": _events_bytes(result.session), "store": _files(root), "kinds": breakdown(root)}


def _files(root: Path) -> int:
    return sum(f.stat().st_size for f in Path(root).rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--calls", type=int, default=9)
    parser.add_argument("--whole", type=int, default=0, help="also save every call of a session of this many events")
    parser.add_argument("--replay", type=int, default=0,
                        help="also replay recorded sessions of about this many model calls, the plugin from the first")
    args = parser.parse_args()
    print("| session events | bytes written per call p50 (max) | the call's new content p50 | overhead p50 | "
          "write CPU ms p50 |")
    print("| --- | --- | --- | --- | --- |")
    for n in args.events:
        with tempfile.TemporaryDirectory() as tmp:
            r = measure(n, args.calls, os.path.join(tmp, "packs"))
        print(f"| {r['events']:,} | {r['bytes_p50'] / 1024:.1f} KB ({r['bytes_max'] / 1024:.1f} KB) | "
              f"{r['new_content_p50'] / 1024:.1f} KB | {(r['bytes_p50'] - r['new_content_p50']) / 1024:.1f} KB | "
              f"{r['write_ms_p50']:.1f} |", flush=True)
    if args.whole:
        with tempfile.TemporaryDirectory() as tmp:
            r = whole_session(args.whole, os.path.join(tmp, "packs"))
        print(f"\nwhole session: {r['events']:,} events, {r['calls']} calls: store {r['store'] / 2**20:.1f} MB, "
              f"its events {r['events_size'] / 2**20:.2f} MB as canonical messages ({r['store'] / r['events_size']:.1f}x), "
              f"{r['adk_events_size'] / 2**20:.2f} MB as ADK events ({r['store'] / r['adk_events_size']:.1f}x)\n  {r['kinds']}")
    for kind in ("tool loop", "chat") if args.replay else ():
        with tempfile.TemporaryDirectory() as tmp:
            r = replayed(kind, args.replay, Path(tmp) / "packs")
        print(f"\nrecorded {kind}, plugin from the first call: {r['events']:,} events, {r['calls']} calls: store "
              f"{r['store'] / 2**20:.2f} MB, ADK's JSON of its events {r['events_size'] / 2**20:.2f} MB "
              f"({r['store'] / r['events_size']:.2f}x)\n  {r['kinds']}", flush=True)


if __name__ == "__main__":
    main()
