"""Store bytes per call on a synthetic long tool-loop session (issue 17, item 2).

A session of N events (a user request, then tool call / tool result pairs of ~1 KB each) is
packed call after call with an 8K window, as one invocation, and every pack is saved to a real
on-disk `PackStore`. For the calls around 1,000 and 10,000 events it reports what the call added
to the store (blobs + manifest) next to its new content (the canonical JSON of its new messages).

`--whole N` also packs and saves every call of an N-event session from its first event and
compares the store's total size with the size of the session's own events.

Usage::

    .venv/bin/python bench/store_bytes.py                  # 1,000 and 10,000 events, ~1 min
    .venv/bin/python bench/store_bytes.py --events 1000    # one size
    .venv/bin/python bench/store_bytes.py --events --whole 1000   # total store size of one session
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aether_context.content import FunctionCall, FunctionResponse, Message, ModelRequest, TextPart, canonical_json  # noqa: E402
from aether_context.pipeline import PackInputs, TaskSpec, build_pack  # noqa: E402
from aether_context.pipeline.cache import PackCache  # noqa: E402
from aether_context.profile import load_profile  # noqa: E402
from aether_context.store import PackStore  # noqa: E402
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
    profile, counter, cache = load_profile("coding_agent"), TokenCounter(), PackCache()
    store = PackStore(url, background=False)
    messages = [Message("user", (TextPart("Fix the failing test in src/."),))]
    i = 0
    while len(messages) < events - 2 * calls:
        messages += tool_pair(i)
        i += 1
    previous = None
    pack = build_pack(inputs_at(messages, previous), profile, counter=counter, window=8_000, cache=cache)
    store.save(pack)  # warm: everything before the measured calls is in the store
    added, new_content, seconds = [], [], []
    for _ in range(calls):
        new = tool_pair(i)
        i += 1
        messages += new
        pack = build_pack(inputs_at(messages, pack.state), profile, counter=counter, window=8_000, cache=cache)
        before = store.stats().get("bytes", 0)
        start = time.perf_counter()
        store.save(pack)
        seconds.append(time.perf_counter() - start)
        added.append(store.stats()["bytes"] - before)
        new_content.append(sum(len(canonical_json(m.to_json()).encode()) for m in new))
    return {"events": len(messages), "bytes_p50": statistics.median(added), "bytes_max": max(added),
            "new_content_p50": statistics.median(new_content), "write_ms_p50": 1000 * statistics.median(seconds),
            "store_total": sum(f.stat().st_size for f in Path(url).rglob("*") if f.is_file()),
            "events_size": sum(len(canonical_json(m.to_json()).encode()) for m in messages)}


def whole_session(events: int, url: str) -> dict[str, float]:
    """Every call of a session packed and saved, from its first event: total store size vs its events."""
    profile, counter, cache = load_profile("coding_agent"), TokenCounter(), PackCache()
    store = PackStore(url, background=False)
    messages = [Message("user", (TextPart("Fix the failing test in src/."),))]
    pack, i = None, 0
    while len(messages) < events:
        messages += tool_pair(i)
        i += 1
        pack = build_pack(inputs_at(messages, pack.state if pack else None), profile, counter=counter, window=8_000, cache=cache)
        store.save(pack)
    total = sum(f.stat().st_size for f in Path(url).rglob("*") if f.is_file())
    size = sum(len(canonical_json(m.to_json()).encode()) for m in messages)
    return {"events": len(messages), "calls": i, "store": total, "events_size": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--calls", type=int, default=9)
    parser.add_argument("--whole", type=int, default=0, help="also save every call of a session of this many events")
    args = parser.parse_args()
    print("| session events | bytes written per call p50 (max) | the call's new content p50 | overhead p50 | "
          "write ms p50 |")
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
              f"its events {r['events_size'] / 2**20:.2f} MB ({r['store'] / r['events_size']:.1f}x)")


if __name__ == "__main__":
    main()
