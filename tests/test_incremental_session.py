"""A long session's incremental path (history converted once, checked by samples) sends what a cold
packer would convert, through a real Runner; a rewind makes the next call check every content."""

from __future__ import annotations

from google.adk.agents import LlmAgent
from google.adk.plugins.base_plugin import BasePlugin

from aether_context import ContextPackPlugin
from aether_context.adk.convert import request_from_llm
from aether_context.testing import ScriptedLlm, call

from conftest import lookup, make_runner, new_session, run_turn


class Witness(BasePlugin):
    """Placed before the pack plugin: converts each request as it comes in, with no cache (what an
    empty process sees), and checks the packer's own conversion of it once the model answered."""

    def __init__(self, plugin: ContextPackPlugin):
        super().__init__(name="witness")
        self.plugin, self.fresh, self.checked, self.grown = plugin, None, [], []

    async def before_model_callback(self, *, callback_context, llm_request):
        self.fresh = request_from_llm(llm_request).messages
        self.grown.append(self.plugin.packer.slot(callback_context).times.only_grew(callback_context.session.events)
                          if self.plugin.packer.slot(callback_context).times else False)

    async def after_model_callback(self, *, callback_context, llm_response):
        pack = self.plugin.packer.slot(callback_context).last
        self.checked.append(pack is not None and pack.inputs.request.messages == self.fresh)


def _script(rounds: int) -> list:
    turns = []
    for i in range(rounds):
        turns += [call("lookup", key=f"k{i}"), call("lookup", key=f"j{i}"), f"done {i}"]
    return turns


async def test_a_growing_session_converts_as_a_cold_packer_and_a_rewind_checks_everything(memory_store_url):
    llm = ScriptedLlm(turns=_script(12))
    plugin = ContextPackPlugin(store=memory_store_url, window_tokens=4_000)
    witness = Witness(plugin)
    runner = make_runner(LlmAgent(name="worker", model=llm, instruction="Work.", tools=[lookup]),
                         plugins=[witness, plugin])
    sid = await new_session(runner)
    invocations = []
    for i in range(6):
        events = await run_turn(runner, sid, f"Look up keys round {i}.")
        invocations.append(events[0].invocation_id)
    assert len(witness.checked) == 18 and all(witness.checked)
    assert sum(witness.grown) >= 15  # the sampled check served the calls after the first
    await runner.rewind_async(user_id="u", session_id=sid, rewind_before_invocation_id=invocations[3])
    for i in range(3):
        await run_turn(runner, sid, f"After the rewind, round {i} again with other words.")
    assert len(witness.checked) == 27 and all(witness.checked)
    assert witness.grown[18] is False  # the rewind event: every content checked


def _event(author: str, *parts) -> "Event":
    from google.adk.events.event import Event
    from google.genai import types
    return Event(author=author, invocation_id="inv", content=types.Content(role="user" if author == "user" else "model",
                                                                            parts=list(parts)))


def test_a_late_response_to_an_older_call_is_not_growth():
    """A long-running tool's late response answers a call made before the last call: ADK moves it back
    beside its call, so the history changed in the middle and the sampled check must not be trusted."""
    from google.genai import types
    from aether_context.adk.event_times import EventTimes
    from aether_context.content import ModelRequest

    def fc(i):
        return types.Part(function_call=types.FunctionCall(name="lookup", args={}, id=i))

    def fr(i):
        return types.Part(function_response=types.FunctionResponse(name="lookup", response={"ok": 1}, id=i))

    events = [_event("user", types.Part(text="start")), _event("worker", fc("a")), _event("user", fr("a"))]
    times = EventTimes()
    times.message_times(events, ModelRequest(model="m", system_instruction="", messages=()))
    grown = events + [_event("worker", fc("b")), _event("user", fr("b"))]
    assert times.only_grew(grown)  # a call and its answer, both new: growth at the end
    late = events + [_event("user", types.Part(text="later")), _event("user", fr("a"))]
    assert not times.only_grew(late)  # answers the older call "a": every content is checked
