"""A fixed set of generated sessions from bench/fuzz_requests.py (the benchmark runs thousands)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import fuzz_requests  # noqa: E402

SEEDS = list(range(1000, 1030))


async def test_generated_sessions_keep_request_shapes():
    summary = await fuzz_requests.run_many(SEEDS, max_turns=3)
    details = [(r.spec, r.failures[:3]) for r in summary.failing]
    assert not details, details
    assert summary.sessions == len(SEEDS) and summary.calls >= 3 * len(SEEDS)
    assert summary.thought_signed >= summary.model_turns / 3  # signatures in at least a third of model turns
    assert summary.repacked > 0 and not summary.pack_errors


def test_the_checker_sees_an_orphan_and_a_hole():
    from aether_context.content import FunctionCall, FunctionResponse, Message, ModelRequest, TextPart

    call = Message("model", (FunctionCall("f", {"a": 1}),))
    resp = Message("user", (FunctionResponse("f", {"r": 1}),))
    text = Message("user", (TextPart("[turn 1] tool result whose call is no longer in the history"),))
    assert fuzz_requests.orphans((resp,)) and fuzz_requests.orphans((call, text))
    assert not fuzz_requests.orphans((call, resp))
    u0, u1, m1 = Message("user", (TextPart("q0"),)), Message("user", (TextPart("q1"),)), Message("model", (TextPart("a"),))
    m2 = Message("model", (TextPart("b"),))
    orig = ModelRequest("m", "", (u0, m1, u1, m2, call, resp))
    holed = ModelRequest("m", "", (u0, m1, u1, call, resp))  # m2 dropped between kept messages
    problems = fuzz_requests.check_call(orig, set(), holed, set())
    assert any("dropped between kept ones" in p for p in problems), problems
    folded = ModelRequest("m", "", (u0, u1, m2, call, resp))  # the opening request pinned, m1 folded: fine
    assert fuzz_requests.check_call(orig, set(), folded, set()) == []
