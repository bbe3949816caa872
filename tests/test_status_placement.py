"""The closing status never changes what ADK built, and is re-sent as it was sent.

Through a real Runner, with a goal set and a status due on every call: a request that ends with a
function response keeps ADK's own function response as its first part, the status follows it as a
text part; the status rode on the user's message of the invocation's first call, and every later
call re-sends each earlier status where it was sent, so each request extends the previous one
(append-only; docs/benchmarks.md, status_placement).
"""

from __future__ import annotations

from aether_context import ContextPackPlugin, load_profile
from aether_context.adk.convert import to_message
from aether_context.adk.task import set_task

from conftest import lookup, make_runner, new_session, run_turn, scripted_agent, strip_continue
from test_request_shapes import call_part

EVERY_CALL = load_profile("default").override(recitation={"base_every_n_calls": 1, "drift_threshold": 0.9,
                                                          "on_track_threshold": 0.0})


def _is_status(part) -> bool:
    return "STATUS" in (part.text or "")


async def test_request_ending_with_a_function_response_keeps_adks_own_first(memory_store_url):
    agent, llm = scripted_agent([call_part("lookup", key="a"), call_part("lookup", key="b"), "Done."], tools=[lookup])
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=32_000, profile=EVERY_CALL)
    runner = make_runner(agent, plugins=[plugin])
    state: dict = {}
    set_task(state, goal="Find the values of a and b")
    sid = await new_session(runner, state=state)
    await run_turn(runner, sid, "What are a and b?")
    plugin.packer.store.flush()
    requests = [strip_continue(r) for r in llm.requests]
    assert len(requests) == 3
    assert not any(r.manifest.error for r in plugin.packer.recent)

    first = requests[0].contents
    assert first[-1].role == "user" and _is_status(first[-1].parts[-1])  # the status rode on the user's message
    for request in requests[1:]:
        last = request.contents[-1]
        # ADK's own last content first: the function response, then the status due on this call
        assert last.role == "user" and len(last.parts) == 2 and last.parts[0].function_response is not None
        assert last.parts[0].function_response.name == "lookup" and _is_status(last.parts[1])
    for before, after in zip(requests, requests[1:]):  # each request extends the one before (status kept as sent)
        n = len(before.contents)
        assert [to_message(c) for c in after.contents[:n]] == [to_message(c) for c in before.contents]
    assert all(r.manifest.cache_break is None for r in list(plugin.packer.recent)[1:])
